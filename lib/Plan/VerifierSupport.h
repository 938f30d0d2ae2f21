//===- VerifierSupport.h - what the plan's checks share ---------*- C++ -*-===//
//
// Part of mlt. Small helpers of PlanVerifier.cpp (the structure of a plan),
// TransferCheck.cpp (its sends and receives) and TrainingContract.cpp (what
// the training loop needs of it): checked arithmetic, buffer kinds, mesh
// coordinates, collectives as their groups agree on them, and the forms
// messages print shapes and blocks in. Private to the plan library.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_VERIFIERSUPPORT_H
#define MLT_PLAN_VERIFIERSUPPORT_H

#include "mlt/Plan/Collective.h"
#include "mlt/Plan/Plan.h"

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace mlt::rt::verifier {

/// a * b, or nothing on overflow (or a negative factor).
inline std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t result;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

inline bool isPersistent(BufferKind kind) { return kind != BufferKind::Temporary; }

inline bool isPerParameter(BufferKind kind) {
  return kind == BufferKind::Parameter || kind == BufferKind::Gradient ||
         kind == BufferKind::OptimizerState ||
         kind == BufferKind::ParameterCopy;
}

/// The stride of mesh axis `axis` in world ranks (Mesh.h's row-major
/// order): the product of the sizes of the axes after it.
inline int64_t meshStride(const std::vector<MeshAxis> &mesh, size_t axis) {
  int64_t stride = 1;
  for (size_t a = mesh.size(); a-- > axis + 1;)
    stride *= mesh[a].size;
  return stride;
}

/// The coordinate of `rank` on mesh axis `axis`: its index in the axis's
/// groups.
inline int64_t meshCoordinate(const std::vector<MeshAxis> &mesh, uint32_t rank,
                              size_t axis) {
  return (int64_t(rank) / meshStride(mesh, axis)) % mesh[axis].size;
}

/// The training contract's checks of positions (SequenceCheck.cpp): the
/// order the tokens are fed in against what each rope and attention launch
/// counts; and that each ring step attends over the key/value block its
/// ring_step names, as the collective permutes that brought it say.
Status verifySequenceOrder(const Plan &plan);
Status verifyRingSteps(const Plan &plan);

/// One collective launch as the members of its group must agree on it.
inline CollectiveCall collectiveCall(const RankPlan &rank,
                                     const InstructionDesc &inst) {
  return collectiveCall(inst, rank.buffers[inst.inputs[0]].dtype);
}

/// "[0:8, 16:32] of [16, 32]": the block of a buffer, for messages.
inline std::string formatBlock(const BufferDesc &buffer) {
  std::ostringstream os;
  std::vector<int64_t> offset = buffer.blockOffset();
  os << '[';
  for (size_t d = 0; d < buffer.shape.size(); ++d)
    os << (d ? ", " : "") << offset[d] << ':' << offset[d] + buffer.shape[d];
  os << "] of " << formatInts(buffer.tensorShape());
  return os.str();
}


/// Whether a segment declares its block (else it is of the whole tensor).
inline bool hasBlock(const SegmentDesc &segment) {
  return !segment.fullShape.empty() || !segment.sliceOffset.empty() ||
         !segment.blockShape.empty();
}

/// "[0:6, 0:8] of [12, 8]", or "the whole tensor": a segment's block, for
/// messages.
inline std::string formatSegmentBlock(const SegmentDesc &segment) {
  if (!hasBlock(segment))
    return "the whole tensor";
  std::ostringstream os;
  os << '[';
  for (size_t d = 0;
       d < segment.blockShape.size() && d < segment.sliceOffset.size(); ++d)
    os << (d ? ", " : "") << segment.sliceOffset[d] << ':'
       << segment.sliceOffset[d] + segment.blockShape[d];
  os << "] of " << formatInts(segment.fullShape);
  return os.str();
}

} // namespace mlt::rt::verifier

#endif // MLT_PLAN_VERIFIERSUPPORT_H
