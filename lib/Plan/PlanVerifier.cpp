//===- PlanVerifier.cpp - semantic checks of a plan -----------------------===//
//
// Part of mlt. What FlatBuffers' verifier cannot know: that the mesh and the
// ranks agree, that buffers fit the arena and their shapes and blocks fit
// their tensors, that views lie inside their bases and segments inside
// their buffers and blocks, that persistent buffers do not overlap (but
// for a view with its base and the base's other views: one storage under
// several names), that every instruction names real buffers, has its
// kernel's arity and operands as large as its attributes say, that its
// outputs overlap no other operand except in place where the kernel allows
// it (KernelInfo.h's mayAlias), that collectives and the kernels of
// sharded programs name a mesh axis, that collectives match across the
// ranks of each group, that launches on different streams which touch the
// same bytes (one of them writing; a view and its base share bytes) are
// ordered by tokens, that sends and receives are well formed, matched and
// free of deadlock (TransferCheck.cpp); and verifyPlan, which adds the training
// contract (TrainingContract.cpp: what the training loop reads and writes,
// every parameter element held by some rank). After these checks no instruction
// can touch memory outside its operands' ranges, so the backends do not
// re-check sizes.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Collective.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Plan/TransferCheck.h"

#include "VerifierSupport.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::verifier;

namespace {

/// A block (fullShape, sliceOffset) is declared only where the runtime knows
/// what it means, has shape's rank, and lies inside its tensor.
Status verifyBlock(const BufferDesc &buffer) {
  if (buffer.fullShape.empty() && buffer.sliceOffset.empty())
    return Status::ok();
  const bool tokens =
      buffer.kind == BufferKind::Input &&
      (buffer.name == kTokensInput || buffer.name == kLabelsInput);
  if (!isPerParameter(buffer.kind) && !tokens)
    return errorf(
        "buffer '", buffer.name, "' is a block of a larger tensor, but only ",
        "parameter, gradient and optimizer-state buffers and the inputs '",
        kTokensInput, "' and '", kLabelsInput, "' may be (it is a ",
        bufferKindName(buffer.kind), " buffer)");
  const size_t rank = buffer.shape.size();
  if (buffer.fullShape.size() != rank || buffer.sliceOffset.size() != rank)
    return errorf("buffer '", buffer.name, "' of shape ",
                  formatInts(buffer.shape), " has full_shape ",
                  formatInts(buffer.fullShape), " and slice_offset ",
                  formatInts(buffer.sliceOffset),
                  "; both must have the shape's rank ", rank);
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    std::optional<int64_t> next = checkedMul(elements, buffer.fullShape[d]);
    if (!next)
      return errorf("buffer '", buffer.name, "' has a bad full_shape ",
                    formatInts(buffer.fullShape));
    elements = *next;
    if (buffer.sliceOffset[d] < 0 ||
        buffer.sliceOffset[d] > buffer.fullShape[d] - buffer.shape[d])
      return errorf("buffer '", buffer.name, "' holds the block ",
                    formatBlock(buffer), ", out of bounds in dimension ", d);
  }
  return Status::ok();
}

/// Segments (Plan.fbs) are declared only on parameter, gradient and
/// optimizer-state buffers that name no parameter and are no block; each
/// names a parameter and holds count > 0 elements inside the buffer, after
/// the previous segment, from a range of a block that lies inside its
/// tensor. (A segment of the whole tensor is checked against the tensor's
/// shape by the training contract, which knows it.)
Status verifySegments(const BufferDesc &buffer) {
  if (buffer.segments.empty())
    return Status::ok();
  if (buffer.kind != BufferKind::Parameter &&
      buffer.kind != BufferKind::Gradient &&
      buffer.kind != BufferKind::OptimizerState)
    return errorf("buffer '", buffer.name, "' (", bufferKindName(buffer.kind),
                  ") has segments; only parameter, gradient and "
                  "optimizer-state buffers may");
  if (!buffer.parameter.empty())
    return errorf("buffer '", buffer.name, "' has segments but names "
                  "parameter '", buffer.parameter,
                  "' (a buffer holds one parameter or segments of several)");
  if (!buffer.fullShape.empty() || !buffer.sliceOffset.empty())
    return errorf("buffer '", buffer.name, "' has segments but is a block of "
                  "a larger tensor (segments give their own blocks)");
  const int64_t elements = buffer.numElements();
  int64_t previousEnd = 0;
  for (size_t i = 0; i < buffer.segments.size(); ++i) {
    const SegmentDesc &segment = buffer.segments[i];
    auto fail = [&](auto &&...parts) {
      return errorf("buffer '", buffer.name, "' segment ", i, " ('",
                    segment.parameter, "') ", parts...);
    };
    if (segment.parameter.empty())
      return errorf("buffer '", buffer.name, "' segment ", i,
                    " names no parameter");
    if (segment.count <= 0)
      return fail("has count ", segment.count,
                  " (a segment holds at least one element)");
    int64_t end;
    if (segment.offset < 0 ||
        __builtin_add_overflow(segment.offset, segment.count, &end) ||
        end > elements)
      return fail("at elements [", segment.offset, ", ",
                  uint64_t(segment.offset) + uint64_t(segment.count),
                  ") lies outside the buffer's ", elements, " elements");
    if (i > 0 && segment.offset < previousEnd)
      return fail("at elements [", segment.offset, ", ", end,
                  ") starts before segment ", i - 1, " ends at ", previousEnd,
                  " (segments are in increasing offset and disjoint)");
    previousEnd = end;

    int64_t blockElements = -1; // the whole tensor: not known here
    if (hasBlock(segment)) {
      const size_t rank = segment.fullShape.size();
      if (rank == 0 || segment.sliceOffset.size() != rank ||
          segment.blockShape.size() != rank)
        return fail("has full_shape ", formatInts(segment.fullShape),
                    ", slice_offset ", formatInts(segment.sliceOffset),
                    " and block_shape ", formatInts(segment.blockShape),
                    "; the three are empty (the whole tensor) or of one "
                    "rank");
      blockElements = 1;
      int64_t tensorElements = 1;
      for (size_t d = 0; d < rank; ++d) {
        std::optional<int64_t> block =
            checkedMul(blockElements, segment.blockShape[d]);
        std::optional<int64_t> tensor =
            checkedMul(tensorElements, segment.fullShape[d]);
        if (!block || !tensor)
          return fail("has a bad block: full_shape ",
                      formatInts(segment.fullShape), ", block_shape ",
                      formatInts(segment.blockShape));
        blockElements = *block;
        tensorElements = *tensor;
        if (segment.sliceOffset[d] < 0 ||
            segment.sliceOffset[d] >
                segment.fullShape[d] - segment.blockShape[d])
          return fail("holds the block ", formatSegmentBlock(segment),
                      ", out of bounds in dimension ", d);
      }
    }
    int64_t rangeEnd;
    if (segment.begin < 0 ||
        __builtin_add_overflow(segment.begin, segment.count, &rangeEnd) ||
        (blockElements >= 0 && rangeEnd > blockElements))
      return fail("holds elements [", segment.begin, ", ",
                  uint64_t(segment.begin) + uint64_t(segment.count), ") of ",
                  formatSegmentBlock(segment),
                  blockElements >= 0
                      ? ", which has " + std::to_string(blockElements) +
                            " elements"
                      : std::string());
  }
  return Status::ok();
}

/// Views (Plan.fbs): each inside a base that is another buffer, not itself
/// a view, of the same element type, both with one copy; a persistent view
/// has a persistent base (a temporary's range is reused once it is dead).
Status verifyViews(const RankPlan &rank) {
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &view = rank.buffers[i];
    if (view.viewOf == -1)
      continue;
    if (view.viewOf < 0 || size_t(view.viewOf) >= rank.buffers.size())
      return errorf("buffer '", view.name, "' is a view of buffer index ",
                    view.viewOf, ", but the rank has ", rank.buffers.size(),
                    " buffers");
    if (size_t(view.viewOf) == i)
      return errorf("buffer '", view.name, "' is a view of itself");
    const BufferDesc &base = rank.buffers[size_t(view.viewOf)];
    if (base.viewOf != -1)
      return errorf("buffer '", view.name, "' is a view of '", base.name,
                    "', which is itself a view (a view's base is not)");
    if (view.copies != 1 || base.copies != 1)
      return errorf("view '", view.name, "' has ", view.copies,
                    " copies and its base '", base.name, "' ", base.copies,
                    "; both must have one");
    if (view.dtype != base.dtype)
      return errorf("view '", view.name, "' is ",
                    elementTypeName(view.dtype), " but its base '", base.name,
                    "' is ", elementTypeName(base.dtype),
                    " (a view has its base's element type)");
    if (view.offset < base.offset ||
        view.offset + view.bytes > base.offset + base.bytes)
      return errorf("view '", view.name, "' at [", view.offset, ", ",
                    view.offset + view.bytes, ") is not inside its base '",
                    base.name, "' at [", base.offset, ", ",
                    base.offset + base.bytes, ")");
    if (isPersistent(view.kind) && !isPersistent(base.kind))
      return errorf("view '", view.name, "' (", bufferKindName(view.kind),
                    ") is persistent, but its base '", base.name,
                    "' is a temporary");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

Status verifyBuffers(const RankPlan &rank) {
  std::unordered_map<std::string, size_t> names;
  for (const BufferDesc &buffer : rank.buffers) {
    if (buffer.name.empty())
      return errorf("a buffer has an empty name");
    if (!names.emplace(buffer.name, 0).second)
      return errorf("two buffers are named '", buffer.name, "'");

    int64_t elements = 1;
    for (int64_t dim : buffer.shape) {
      std::optional<int64_t> next = checkedMul(elements, dim);
      if (!next)
        return errorf("buffer '", buffer.name, "' has a bad shape ",
                      formatInts(buffer.shape));
      elements = *next;
    }
    std::optional<int64_t> bytes =
        checkedMul(elements, int64_t(elementSize(buffer.dtype)));
    if (!bytes || uint64_t(*bytes) != buffer.bytes)
      return errorf("buffer '", buffer.name, "' has ", buffer.bytes,
                    " bytes, but its shape ", formatInts(buffer.shape), " of ",
                    elementTypeName(buffer.dtype), " needs ",
                    bytes ? std::to_string(*bytes) : std::string("more"));
    if (buffer.offset % kPlanBufferAlignment != 0)
      return errorf("buffer '", buffer.name, "' at offset ", buffer.offset,
                    " is not aligned to ", kPlanBufferAlignment, " bytes");
    if (buffer.copies == 0)
      return errorf("buffer '", buffer.name, "' has 0 copies");
    if (buffer.copies > 1 && buffer.copyIndex == CopyIndex::MicroBatch &&
        buffer.kind != BufferKind::Input && buffer.kind != BufferKind::Output)
      return errorf("buffer '", buffer.name, "' (",
                    bufferKindName(buffer.kind), ") has ", buffer.copies,
                    " copies per micro-batch; only inputs and outputs have "
                    "them");
    if (buffer.copies > 1 && buffer.copyIndex == CopyIndex::Slot &&
        buffer.kind != BufferKind::Temporary)
      return errorf("buffer '", buffer.name, "' (",
                    bufferKindName(buffer.kind), ") has ", buffer.copies,
                    " copies per slot; only temporaries have them");
    uint64_t extent, end;
    if (__builtin_mul_overflow(buffer.copyStride(), uint64_t(buffer.copies),
                               &extent) ||
        __builtin_add_overflow(buffer.offset, buffer.extentBytes(), &end) ||
        end > rank.arenaBytes)
      return errorf("buffer '", buffer.name, "' ends at byte ",
                    buffer.offset + buffer.extentBytes(),
                    ", past the arena of ", rank.arenaBytes, " bytes");
    MLT_RETURN_IF_ERROR(verifyBlock(buffer));
    MLT_RETURN_IF_ERROR(verifySegments(buffer));
  }
  MLT_RETURN_IF_ERROR(verifyViews(rank));

  // Persistent buffers live for the whole run: none may share bytes with
  // another buffer, except a view with its base and with the base's other
  // views (one storage under several names; each view lies inside its base,
  // so checking the bases, the persistent buffers that are no views, covers
  // them). Temporaries may share with each other (the memory planner reuses
  // dead ranges) and may alias a persistent buffer only exactly (a view
  // with another shape), unless they are declared views themselves.
  std::vector<const BufferDesc *> persistent; // the bases and lone buffers
  std::unordered_map<const BufferDesc *, std::vector<const BufferDesc *>>
      viewsOf;
  for (const BufferDesc &buffer : rank.buffers) {
    if (!isPersistent(buffer.kind) || buffer.bytes == 0)
      continue;
    if (buffer.viewOf == -1)
      persistent.push_back(&buffer);
    else
      viewsOf[&rank.buffers[size_t(buffer.viewOf)]].push_back(&buffer);
  }
  std::sort(persistent.begin(), persistent.end(),
            [](const BufferDesc *a, const BufferDesc *b) {
              return a->offset < b->offset;
            });
  for (size_t i = 1; i < persistent.size(); ++i) {
    const BufferDesc &prev = *persistent[i - 1];
    const BufferDesc &cur = *persistent[i];
    if (cur.offset < prev.offset + prev.extentBytes())
      return errorf("buffers '", prev.name, "' and '", cur.name,
                    "' overlap in the arena (", bufferKindName(prev.kind),
                    " at [", prev.offset, ", ",
                    prev.offset + prev.extentBytes(), "), ",
                    bufferKindName(cur.kind), " at [", cur.offset, ", ",
                    cur.offset + cur.extentBytes(), "))");
  }
  for (const BufferDesc &buffer : rank.buffers) {
    if (isPersistent(buffer.kind) || buffer.bytes == 0 || buffer.viewOf != -1)
      continue;
    uint64_t end = buffer.offset + buffer.bytes;
    // The first persistent buffer that ends after this one starts.
    auto it =
        std::upper_bound(persistent.begin(), persistent.end(), buffer.offset,
                         [](uint64_t offset, const BufferDesc *p) {
                           return offset < p->offset + p->extentBytes();
                         });
    if (it == persistent.end() || (*it)->offset >= end)
      continue;
    const BufferDesc &other = **it;
    // Exactly over it or over one of its views (which lie inside it, so
    // the temporary then overlaps no other persistent buffer).
    auto exactly = [&](const BufferDesc &p) {
      return p.offset == buffer.offset && p.bytes == buffer.bytes &&
             p.copies == 1;
    };
    if (exactly(other))
      continue;
    auto views = viewsOf.find(&other);
    if (views != viewsOf.end() &&
        std::any_of(views->second.begin(), views->second.end(),
                    [&](const BufferDesc *view) { return exactly(*view); }))
      continue;
    return errorf("temporary '", buffer.name, "' at [", buffer.offset, ", ",
                  end, ") overlaps ", bufferKindName(other.kind), " '",
                  other.name, "' at [", other.offset, ", ",
                  other.offset + other.bytes, ")");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

/// What an instruction's operands must look like, from its attributes.
struct OperandSpec {
  std::vector<int64_t> inputs;
  std::vector<int64_t> outputs;
  /// Operand positions (inputs first, then outputs) that hold i32 ids.
  std::vector<size_t> int32Operands;
  /// When set, every operand may have any dtype but all must match (moves).
  bool anyMatchingDType = false;
  /// When set, dtypes may differ between input and output (cast).
  bool anyFloatDTypes = false;
};

/// The size of mesh axis `axis` of the plan's mesh, which a kernel's `axis`
/// attribute must index; 1 for axis -1 where the kernel allows no axis.
StatusOr<int64_t> meshAxisSize(Kernel kernel, int64_t axis,
                               const std::vector<MeshAxis> &mesh) {
  if (axis == -1 && allowsNoMeshAxis(kernel))
    return int64_t(1);
  if (axis >= 0 && size_t(axis) < mesh.size())
    return int64_t(mesh[axis].size);
  const bool orNone = allowsNoMeshAxis(kernel);
  if (mesh.empty())
    return errorf("axis ", axis,
                  " is not an axis of the plan's mesh: the plan has no mesh",
                  orNone ? " (-1: no axis)" : "");
  std::ostringstream names;
  for (size_t i = 0; i < mesh.size(); ++i)
    names << (i ? "," : "") << mesh[i].name << '=' << mesh[i].size;
  return errorf("axis ", axis, " is not an axis of the plan's mesh ",
                names.str(), " (axes 0..", mesh.size() - 1,
                orNone ? ", or -1 for none)" : ")");
}

/// Fills `spec` from the instruction's ints (whose count is already checked):
/// the element counts its kernel's rule gives (KernelInfo.cpp), and the
/// element types the kernel takes.
Status operandSpec(const InstructionDesc &inst,
                   const std::vector<MeshAxis> &mesh, OperandSpec &spec) {
  const std::vector<int64_t> &a = inst.ints;
  // Every attribute is a size, count or flag, except `axis`, which indexes
  // the mesh (or is -1 where the kernel allows no axis), and a transfer's
  // `shift`, a signed step along it.
  const int axisAttribute = meshAxisAttribute(inst.kernel);
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] < 0 && !isSignedAttribute(inst.kernel, i))
      return errorf("integer attributes must not be negative, got ",
                    formatInts(a));
  int64_t groupSize = 1;
  if (axisAttribute >= 0) {
    StatusOr<int64_t> size = meshAxisSize(inst.kernel, a[axisAttribute], mesh);
    if (!size)
      return size.takeStatus();
    groupSize = *size;
  }
  StatusOr<OperandCounts> counts = operandCounts(inst, groupSize);
  if (!counts)
    return counts.takeStatus();
  spec.inputs = std::move(counts->inputs);
  spec.outputs = std::move(counts->outputs);
  for (size_t i = 0; i < spec.inputs.size() + spec.outputs.size(); ++i)
    if (isIdOperand(inst.kernel, i))
      spec.int32Operands.push_back(i);
  spec.anyMatchingDType =
      inst.kernel == Kernel::Transpose || inst.kernel == Kernel::ShardSlice ||
      inst.kernel == Kernel::ReorderSequence ||
      isCollectiveKernel(inst.kernel) || isTransferKernel(inst.kernel);
  spec.anyFloatDTypes =
      inst.kernel == Kernel::Cast || inst.kernel == Kernel::Fill;

  for (int64_t count : spec.inputs)
    if (count < 0)
      return errorf("integer attributes ", formatInts(a), " overflow");
  for (int64_t count : spec.outputs)
    if (count < 0)
      return errorf("integer attributes ", formatInts(a), " overflow");
  return Status::ok();
}

/// A collective's types and the overlap of its input and output (the
/// in-place forms of Kernels.def, for this rank's index in its group).
Status verifyCollective(const RankPlan &rank, const InstructionDesc &inst,
                        const std::vector<MeshAxis> &mesh) {
  const BufferDesc &in = rank.buffers[inst.inputs[0]];
  const BufferDesc &out = rank.buffers[inst.outputs[0]];
  if (inst.kernel != Kernel::AllGather && inst.kernel != Kernel::AllToAll &&
      in.dtype != ElementType::F32 &&
      in.dtype != ElementType::F64 && in.dtype != ElementType::BF16)
    return errorf("input '", in.name, "' is ", elementTypeName(in.dtype),
                  ", but sums take f32, f64 and bf16");
  if (in.bytes == 0 || out.bytes == 0 || in.offset >= out.offset + out.bytes ||
      out.offset >= in.offset + in.bytes)
    return Status::ok();
  const CollectiveAttrs collective = collectiveAttrs(inst);
  const uint64_t chunkBytes =
      uint64_t(collective.count) * elementSize(in.dtype);
  const uint64_t index = meshCoordinate(mesh, rank.rank, collective.axis);
  bool inPlace = false;
  switch (inst.kernel) {
  case Kernel::AllReduceSum:
    inPlace = in.offset == out.offset;
    break;
  case Kernel::ReduceScatterSum:
    inPlace = out.offset == in.offset + index * chunkBytes;
    break;
  case Kernel::AllGather:
    inPlace = in.offset == out.offset + index * chunkBytes;
    break;
  default:
    break;
  }
  if (inPlace)
    return Status::ok();
  return errorf("input '", in.name, "' at [", in.offset, ", ",
                in.offset + in.bytes, ") and output '", out.name, "' at [",
                out.offset, ", ", out.offset + out.bytes,
                ") overlap without being in place (rank ", rank.rank,
                " is index ", index, " of its group)");
}

/// Whether the operands of `inst` overlap only as verifyOperandOverlaps
/// allows, in O(k log k) for k operands where its pairs are O(k^2) (a
/// multi-tensor launch of a deep model has tens of thousands): the outputs,
/// by offset, lie apart, and an output meets only inputs at its very
/// offset, of its size and element type, that the kernel may overwrite.
/// (Outputs lie apart, so each input is looked at for one output at most.)
bool overlapsOnlyInPlace(const RankPlan &rank, const InstructionDesc &inst) {
  struct Operand {
    uint64_t begin, end;
    size_t index; // among the inputs or among the outputs
  };
  auto ranges = [&](const std::vector<uint32_t> &list) {
    std::vector<Operand> operands;
    for (size_t i = 0; i < list.size(); ++i) {
      const BufferDesc &buffer = rank.buffers[list[i]];
      if (buffer.bytes)
        operands.push_back({buffer.offset, buffer.offset + buffer.bytes, i});
    }
    std::sort(
        operands.begin(), operands.end(),
        [](const Operand &a, const Operand &b) { return a.begin < b.begin; });
    return operands;
  };
  const std::vector<Operand> outputs = ranges(inst.outputs);
  const std::vector<Operand> inputs = ranges(inst.inputs);
  for (size_t k = 1; k < outputs.size(); ++k)
    if (outputs[k].begin < outputs[k - 1].end)
      return false;
  // The furthest end of the inputs up to each (by offset).
  std::vector<uint64_t> reach(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k)
    reach[k] = std::max(k ? reach[k - 1] : 0, inputs[k].end);
  for (const Operand &output : outputs) {
    const BufferDesc &out = rank.buffers[inst.outputs[output.index]];
    size_t k =
        size_t(std::lower_bound(inputs.begin(), inputs.end(), output.begin,
                                [](const Operand &input, uint64_t offset) {
                                  return input.begin < offset;
                                }) -
               inputs.begin());
    if (k > 0 && reach[k - 1] > output.begin)
      return false; // an input from below reaches into it
    for (; k < inputs.size() && inputs[k].begin < output.end; ++k) {
      const BufferDesc &in = rank.buffers[inst.inputs[inputs[k].index]];
      if (in.offset != out.offset || in.bytes != out.bytes ||
          in.dtype != out.dtype ||
          !mayAlias(inst.kernel, inst.outputs.size(), output.index,
                    inputs[k].index))
        return false;
    }
  }
  return true;
}

/// An instruction's outputs share no byte with its other operands, except
/// an output exactly over an input that the kernel may overwrite in place
/// (mayAlias: the same offset, size and element type). Collectives have
/// their own in-place forms (verifyCollective).
Status verifyOperandOverlaps(const RankPlan &rank,
                             const InstructionDesc &inst) {
  const size_t numInputs = inst.inputs.size();
  // The pairs below name the first offending one; for the many operands
  // of a multi-tensor launch, they are only compared when there is one.
  if ((numInputs + inst.outputs.size()) * inst.outputs.size() > 64 &&
      overlapsOnlyInPlace(rank, inst))
    return Status::ok();
  auto describe = [&](size_t operand) {
    const bool output = operand >= numInputs;
    const size_t index = output ? operand - numInputs : operand;
    const BufferDesc &buffer =
        rank.buffers[output ? inst.outputs[index] : inst.inputs[index]];
    std::ostringstream os;
    os << (output ? "output " : "input ") << index << " '" << buffer.name
       << "' at [" << buffer.offset << ", " << buffer.offset + buffer.bytes
       << ")";
    return os.str();
  };
  for (size_t o = 0; o < inst.outputs.size(); ++o) {
    const BufferDesc &out = rank.buffers[inst.outputs[o]];
    // Every input, then the outputs before this one.
    for (size_t operand = 0; operand < numInputs + o; ++operand) {
      const bool isInput = operand < numInputs;
      const BufferDesc &other =
          rank.buffers[isInput ? inst.inputs[operand]
                               : inst.outputs[operand - numInputs]];
      if (out.bytes == 0 || other.bytes == 0 ||
          out.offset >= other.offset + other.bytes ||
          other.offset >= out.offset + out.bytes)
        continue;
      const bool exact = out.offset == other.offset &&
                         out.bytes == other.bytes && out.dtype == other.dtype;
      if (isInput && exact && mayAlias(inst.kernel, inst.outputs.size(), o, operand))
        continue;
      const char *why =
          !isInput ? "; outputs never share memory"
          : mayAlias(inst.kernel, inst.outputs.size(), o, operand)
              ? ", but not exactly (in place needs the same offset, size "
                "and element type)"
              : ", which the kernel may not overwrite in place";
      return errorf(describe(numInputs + o), " overlaps ", describe(operand),
                    why);
    }
  }
  return Status::ok();
}

Status verifyInstruction(const RankPlan &rank, const InstructionDesc &inst,
                         const std::vector<MeshAxis> &mesh) {
  const KernelSignature &signature = kernelSignature(inst.kernel);
  // Attribute counts name the attributes (Kernels.def's names).
  auto arity = [](const char *what, int expected, size_t actual,
                  const AttributeNames *names = nullptr) -> Status {
    if (expected < 0 || size_t(expected) == actual)
      return Status::ok();
    const std::string listed =
        names && !names->empty() ? " (" + names->str() + ")" : "";
    return errorf("expects ", expected, " ", what, listed, ", has ", actual);
  };
  MLT_RETURN_IF_ERROR(arity("inputs", signature.inputs, inst.inputs.size()));
  MLT_RETURN_IF_ERROR(arity("outputs", signature.outputs, inst.outputs.size()));
  MLT_RETURN_IF_ERROR(arity("integer attributes", signature.ints,
                            inst.ints.size(), &signature.intNames));
  MLT_RETURN_IF_ERROR(arity("float attributes", signature.floats,
                            inst.floats.size(), &signature.floatNames));
  if (inst.kernel == Kernel::GlobalNorm && inst.inputs.empty())
    return errorf("expects at least 1 input, has 0");
  if (inst.kernel == Kernel::SumSquaresMulti &&
      (inst.inputs.empty() || inst.outputs.size() != inst.inputs.size() ||
       inst.ints.size() != inst.inputs.size()))
    return errorf("expects N >= 1 inputs, N outputs and N integer attributes, "
                  "has ",
                  inst.inputs.size(), ", ", inst.outputs.size(), " and ",
                  inst.ints.size());
  if (inst.kernel == Kernel::AdamW && inst.outputs.size() != 3 &&
      inst.outputs.size() != 4)
    return errorf("expects 3 outputs (param, m, v) or 4 (and the compute "
                  "copy), has ",
                  inst.outputs.size());
  if (inst.kernel == Kernel::AdamWMulti) {
    if (inst.inputs.size() <= kAdamWScalarInputs)
      return errorf("expects K gradients and ", kAdamWScalarInputs,
                    " scalars (K >= 1), has ", inst.inputs.size(), " inputs");
    const size_t k = inst.inputs.size() - kAdamWScalarInputs;
    if (inst.outputs.size() != 3 * k && inst.outputs.size() != 4 * k)
      return errorf("expects ", 3 * k, " outputs (the parameters, m and v of ",
                    k, " tensors) or ", 4 * k, " (and their compute copies), has ",
                    inst.outputs.size());
    if (inst.ints.size() != 2 * k)
      return errorf("expects ", 2 * k, " integer attributes (n and decay of ", k,
                    " tensors), has ", inst.ints.size());
  }
  if (inst.kernel == Kernel::Transpose && inst.ints.empty())
    return errorf("expects the rank as its first integer attribute");

  const size_t numOperands = inst.inputs.size() + inst.outputs.size();
  auto operand = [&](size_t i) {
    return i < inst.inputs.size() ? inst.inputs[i]
                                  : inst.outputs[i - inst.inputs.size()];
  };
  auto operandName = [&](size_t i) {
    std::ostringstream os;
    if (i < inst.inputs.size())
      os << "input " << i;
    else
      os << "output " << i - inst.inputs.size();
    return os.str();
  };
  for (size_t i = 0; i < numOperands; ++i)
    if (operand(i) >= rank.buffers.size())
      return errorf(operandName(i), " is buffer index ", operand(i),
                    ", but the rank has ", rank.buffers.size(), " buffers");

  OperandSpec spec;
  MLT_RETURN_IF_ERROR(operandSpec(inst, mesh, spec));
  for (size_t i = 0; i < numOperands; ++i) {
    const BufferDesc &buffer = rank.buffers[operand(i)];
    int64_t expected = i < inst.inputs.size()
                           ? spec.inputs[i]
                           : spec.outputs[i - inst.inputs.size()];
    if (buffer.numElements() != expected)
      return errorf(operandName(i), " '", buffer.name, "' has ",
                    buffer.numElements(), " elements, but the kernel's ints ",
                    formatInts(inst.ints), " need ", expected);
    bool wantsInt32 =
        std::find(spec.int32Operands.begin(), spec.int32Operands.end(), i) !=
        spec.int32Operands.end();
    if (isFp8Operand(inst.kernel, inst.inputs.size(), i)) {
      if (!isFp8ElementType(buffer.dtype))
        return errorf(operandName(i), " '", buffer.name, "' is ",
                      elementTypeName(buffer.dtype),
                      ", but it holds FP8 values (f8e4m3 or f8e5m2)");
    } else if (spec.anyMatchingDType) {
      if (buffer.dtype != rank.buffers[operand(0)].dtype)
        return errorf(operandName(i), " '", buffer.name, "' is ",
                      elementTypeName(buffer.dtype), ", but input 0 is ",
                      elementTypeName(rank.buffers[operand(0)].dtype));
    } else if (wantsInt32) {
      if (buffer.dtype != ElementType::I32)
        return errorf(operandName(i), " '", buffer.name, "' is ",
                      elementTypeName(buffer.dtype),
                      ", but token ids and "
                      "labels are i32");
    } else if (!isFloatElementType(buffer.dtype)) {
      return errorf(operandName(i), " '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype),
                    ", but the kernel computes on floats");
    }
  }
  if (isCollectiveKernel(inst.kernel))
    return verifyCollective(rank, inst, mesh);
  if (inst.kernel == Kernel::MatmulFp8 &&
      rank.buffers[inst.inputs[0]].dtype == ElementType::F8E5M2 &&
      rank.buffers[inst.inputs[2]].dtype == ElementType::F8E5M2)
    return errorf("a and b are both f8e5m2 (one must be f8e4m3: no FP8 "
                  "product takes two)");
  return verifyOperandOverlaps(rank, inst);
}

/// For each byte range of the arena, the latest instruction of one stream
/// (by its number there, from 1) that touched a byte of it: a segment tree
/// over the offsets where operands begin and end. Numbers only grow, so
/// touching a range takes the maximum.
class LatestTouch {
public:
  /// `points`: every offset at which a range touched or asked about begins
  /// or ends, sorted and distinct.
  explicit LatestTouch(const std::vector<uint64_t> &points)
      : points(points), segments(std::max<size_t>(points.size(), 2) - 1),
        latest(4 * segments, 0), whole(4 * segments, 0) {}

  void touch(uint64_t begin, uint64_t end, uint32_t number) {
    update(1, 0, segments, slot(begin), slot(end), number);
  }
  /// The latest number that touched a byte of [begin, end); 0: none.
  uint32_t latestIn(uint64_t begin, uint64_t end) const {
    return query(1, 0, segments, slot(begin), slot(end));
  }

private:
  size_t slot(uint64_t offset) const {
    return size_t(std::lower_bound(points.begin(), points.end(), offset) -
                  points.begin());
  }
  void update(size_t node, size_t lo, size_t hi, size_t begin, size_t end,
              uint32_t number) {
    if (end <= lo || hi <= begin)
      return;
    latest[node] = std::max(latest[node], number);
    if (begin <= lo && hi <= end) {
      whole[node] = std::max(whole[node], number);
      return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    update(2 * node, lo, mid, begin, end, number);
    update(2 * node + 1, mid, hi, begin, end, number);
  }
  uint32_t query(size_t node, size_t lo, size_t hi, size_t begin,
                 size_t end) const {
    if (end <= lo || hi <= begin)
      return 0;
    if (begin <= lo && hi <= end)
      return latest[node];
    const size_t mid = lo + (hi - lo) / 2;
    return std::max({whole[node], query(2 * node, lo, mid, begin, end),
                     query(2 * node + 1, mid, hi, begin, end)});
  }

  const std::vector<uint64_t> &points;
  size_t segments;
  /// The latest number over some byte of a node's range, and over all of it.
  std::vector<uint32_t> latest, whole;
};

/// A program's streams and tokens: every stream below kPlanMaxStreams, every
/// token signalled once and before any instruction waits for it, and no race:
/// two instructions on different streams that touch a common byte, one of
/// them writing it, must be ordered by the tokens (one happens before the
/// other). Program order within a stream, and the waits, give the order; it
/// is tracked with a vector clock per instruction.
///
/// An instruction is ordered after the first c instructions of another
/// stream (c its clock's entry for it) and after none of the rest that come
/// before it: so it races with an earlier one of that stream exactly when
/// the latest earlier one there that touches its bytes (writes them, if it
/// only reads) is numbered above c. Asked of LatestTouch trees in program
/// order, that is O(n log n); the pairs are compared one by one (O(n^2) for
/// a program with a reduction per gradient on a side stream) only to name
/// a race there is.
Status verifyStreams(const RankPlan &rank, const ProgramDesc &program) {
  using Clock = std::array<uint32_t, kPlanMaxStreams>;
  const std::vector<InstructionDesc> &insts = program.instructions;
  std::vector<Clock> clocks(insts.size());
  std::array<Clock, kPlanMaxStreams> streamClock{};
  std::unordered_map<uint32_t, size_t> signaller; // token -> instruction
  bool sideStreams = false;
  for (size_t i = 0; i < insts.size(); ++i) {
    const InstructionDesc &inst = insts[i];
    auto fail = [&](auto &&...args) {
      return errorf("program '", program.name, "' instruction ", i, " (",
                    kernelName(inst.kernel), ") ", args...);
    };
    if (inst.stream >= kPlanMaxStreams)
      return fail("runs on stream ", unsigned(inst.stream), "; streams are 0..",
                  kPlanMaxStreams - 1);
    sideStreams |= inst.stream != 0;
    Clock clock = streamClock[inst.stream];
    for (uint32_t token : inst.waits) {
      auto it = signaller.find(token);
      if (it == signaller.end())
        return fail("waits for token ", token,
                    ", which no earlier instruction signals");
      for (unsigned s = 0; s < kPlanMaxStreams; ++s)
        clock[s] = std::max(clock[s], clocks[it->second][s]);
    }
    ++clock[inst.stream];
    clocks[i] = clock;
    streamClock[inst.stream] = clock;
    if (inst.token >= 0) {
      if (uint32_t(inst.token) >= kPlanMaxTokens)
        return fail("signals token ", inst.token, "; tokens are 0..",
                    kPlanMaxTokens - 1);
      if (!signaller.emplace(uint32_t(inst.token), i).second)
        return fail("signals token ", inst.token, ", which instruction ",
                    signaller[uint32_t(inst.token)], " signals already");
    } else if (inst.token != -1) {
      return fail("signals token ", inst.token, " (-1 is none)");
    }
  }
  if (!sideStreams)
    return Status::ok();

  auto before = [&](size_t a, size_t b) {
    const unsigned stream = insts[a].stream;
    return clocks[b][stream] >= clocks[a][stream];
  };
  struct Range {
    uint64_t begin, end;
    bool written;
    uint32_t buffer;
  };
  auto rangesOf = [&](const InstructionDesc &inst) {
    std::vector<Range> ranges;
    for (bool written : {false, true})
      for (uint32_t index : written ? inst.outputs : inst.inputs) {
        const BufferDesc &b = rank.buffers[index];
        if (b.bytes)
          ranges.push_back({b.offset, b.offset + b.bytes, written, index});
      }
    return ranges;
  };
  std::vector<std::vector<Range>> ranges;
  ranges.reserve(insts.size());
  for (const InstructionDesc &inst : insts)
    ranges.push_back(rangesOf(inst));
  std::vector<uint64_t> points;
  for (const std::vector<Range> &list : ranges)
    for (const Range &range : list)
      points.insert(points.end(), {range.begin, range.end});
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  // Per stream, the latest of its instructions so far to touch each byte,
  // and to write it (made for the streams in use).
  std::array<std::optional<LatestTouch>, kPlanMaxStreams> touched, written;
  std::array<uint32_t, kPlanMaxStreams> count{};
  bool race = false;
  for (size_t i = 0; i < insts.size() && !race; ++i) {
    const unsigned stream = insts[i].stream;
    for (unsigned other = 0; other < kPlanMaxStreams && !race; ++other) {
      if (other == stream || count[other] <= clocks[i][other])
        continue; // every earlier instruction there is ordered before it
      for (const Range &range : ranges[i]) {
        const LatestTouch &earlier =
            range.written ? *touched[other] : *written[other];
        if (earlier.latestIn(range.begin, range.end) > clocks[i][other]) {
          race = true;
          break;
        }
      }
    }
    if (!touched[stream]) {
      touched[stream].emplace(points);
      written[stream].emplace(points);
    }
    ++count[stream];
    for (const Range &range : ranges[i]) {
      touched[stream]->touch(range.begin, range.end, count[stream]);
      if (range.written)
        written[stream]->touch(range.begin, range.end, count[stream]);
    }
  }
  if (!race)
    return Status::ok();
  // Each pair with a side-stream instruction in it, once: the first race
  // named.
  for (size_t j = 0; j < insts.size(); ++j) {
    if (insts[j].stream == 0)
      continue;
    for (size_t i = 0; i < insts.size(); ++i) {
      if (insts[i].stream == insts[j].stream || (insts[i].stream != 0 && i > j))
        continue;
      const size_t first = std::min(i, j), second = std::max(i, j);
      if (before(first, second))
        continue;
      for (const Range &x : ranges[i])
        for (const Range &y : ranges[j]) {
          if (!(x.written || y.written) || x.begin >= y.end ||
              y.begin >= x.end)
            continue;
          return errorf(
              "program '", program.name, "': instruction ", first, " (",
              kernelName(insts[first].kernel), ", stream ",
              unsigned(insts[first].stream), ") and instruction ", second,
              " (", kernelName(insts[second].kernel), ", stream ",
              unsigned(insts[second].stream), ") touch the same bytes ('",
              rank.buffers[first == i ? x.buffer : y.buffer].name, "' and '",
              rank.buffers[first == i ? y.buffer : x.buffer].name,
              "'), one writing them, but no token orders them");
        }
    }
  }
  return Status::ok();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

namespace {

/// The copies each program's launches need of a call: the fewest copies of
/// the buffers with a copy per micro-batch that it touches, and of those
/// with a copy per slot (0: it touches none).
struct CopiesNeeded {
  uint32_t microbatch = 0, slot = 0;
};
std::vector<CopiesNeeded> copiesNeeded(const RankPlan &rank) {
  std::vector<CopiesNeeded> needed(rank.programs.size());
  for (size_t p = 0; p < rank.programs.size(); ++p)
    for (const InstructionDesc &inst : rank.programs[p].instructions)
      for (const std::vector<uint32_t> *list : {&inst.inputs, &inst.outputs})
        for (uint32_t index : *list) {
          const BufferDesc &buffer = rank.buffers[index];
          if (buffer.copies == 1)
            continue;
          uint32_t &fewest = buffer.copyIndex == CopyIndex::Slot
                                 ? needed[p].slot
                                 : needed[p].microbatch;
          fewest = fewest ? std::min(fewest, buffer.copies) : buffer.copies;
        }
  return needed;
}

/// The calls of the step of `kind`: programs in range, and a call's
/// micro-batch below the copies of every buffer its program touches (a call without one touches
/// none with copies), so that no copy outside a buffer is ever resolved.
/// Each call is held to its program's fewest copies (copiesNeeded); one
/// that fails is looked at launch by launch, to name the buffer.
Status verifyStep(const RankPlan &rank, StepKind kind,
                  const std::vector<CopiesNeeded> &needed) {
  const std::vector<CallDesc> &step = rank.calls(kind);
  for (size_t c = 0; c < step.size(); ++c) {
    const CallDesc &call = step[c];
    auto fail = [&](auto &&...parts) {
      return errorf(stepKindName(kind), " call ", c, ": ", parts...);
    };
    if (call.program >= rank.programs.size())
      return fail("program index ", call.program, " out of range (",
                  rank.programs.size(), " programs)");
    const ProgramDesc &program = rank.programs[call.program];
    if (call.microbatch < -1)
      return fail("micro-batch ", call.microbatch);
    if (call.slot < -1)
      return fail("slot ", call.slot);
    for (const WorkItem &item : call.work)
      if (call.microbatch < 0 || item.microbatch != uint32_t(call.microbatch))
        return fail("does ", item.str(),
                    ", which is not work of the call's micro-batch");
    auto within = [](uint32_t fewest, int32_t copy) {
      return fewest == 0 || (copy >= 0 && uint32_t(copy) < fewest);
    };
    if (within(needed[call.program].microbatch, call.microbatch) &&
        within(needed[call.program].slot, call.slot))
      continue;
    for (const InstructionDesc &inst : program.instructions)
      for (const std::vector<uint32_t> *list : {&inst.inputs, &inst.outputs})
        for (uint32_t index : *list) {
          const BufferDesc &buffer = rank.buffers[index];
          if (buffer.copies == 1)
            continue;
          const bool bySlot = buffer.copyIndex == CopyIndex::Slot;
          const char *what = bySlot ? "slot" : "micro-batch";
          const int32_t copy = bySlot ? call.slot : call.microbatch;
          if (copy < 0)
            return fail("program '", program.name, "' touches buffer '",
                        buffer.name, "', which has a copy per ", what,
                        ", but the call has no ", what);
          if (uint32_t(copy) >= buffer.copies)
            return fail(what, " ", copy, " of buffer '", buffer.name,
                        "', which has ", buffer.copies, " copies");
        }
  }
  return Status::ok();
}

} // namespace

Status mlt::rt::verifyRank(const RankPlan &rank,
                           const std::vector<MeshAxis> &mesh) {
  // The collectives' checks divide by the axis sizes.
  if (!mesh.empty())
    if (StatusOr<Mesh> valid = Mesh::create(mesh); !valid)
      return valid.takeStatus().withContext("the plan's mesh");
  MLT_RETURN_IF_ERROR(verifyBuffers(rank));
  std::set<std::string> programNames;
  for (const ProgramDesc &program : rank.programs) {
    if (!programNames.insert(program.name).second)
      return errorf("two programs are named '", program.name, "'");
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const InstructionDesc &inst = program.instructions[i];
      Status status = verifyInstruction(rank, inst, mesh);
      if (!status) {
        std::ostringstream context;
        context << "program '" << program.name << "' instruction " << i << " ("
                << kernelName(inst.kernel) << ")";
        return std::move(status).withContext(context.str());
      }
    }
    MLT_RETURN_IF_ERROR(verifyStreams(rank, program));
  }
  const std::vector<CopiesNeeded> needed = copiesNeeded(rank);
  MLT_RETURN_IF_ERROR(verifyStep(rank, StepKind::Training, needed));
  MLT_RETURN_IF_ERROR(verifyStep(rank, StepKind::Evaluation, needed));
  return verifyRankTransfers(rank, mesh);
}

namespace {

/// What the runtime runs as a whole: a program named `program`, or (null)
/// the step of `step`: every call's program, in order.
struct Unit {
  const std::string *program = nullptr;
  StepKind step = StepKind::Training;
};

/// The collectives that `rank` launches on `axis` when it runs `unit`.
std::vector<CollectiveCall> collectivesOn(const RankPlan &rank,
                                          const Unit &unit, size_t axis) {
  std::vector<CollectiveCall> calls;
  auto add = [&](const ProgramDesc &program) {
    for (const InstructionDesc &inst : program.instructions)
      if (isCollectiveKernel(inst.kernel) &&
          size_t(collectiveAttrs(inst).axis) == axis)
        calls.push_back(collectiveCall(rank, inst));
  };
  if (!unit.program) {
    for (const CallDesc &call : rank.calls(unit.step))
      add(rank.programs[call.program]);
  } else if (const ProgramDesc *program = rank.findProgram(*unit.program)) {
    add(*program);
  }
  return calls;
}

/// In every program (which the runtime may run alone) and in each step,
/// the members of each group launch the same collectives on its axis in the
/// same order, so that none waits for a call that never comes or meets a
/// different one (the communicator would fail both at run time; this names
/// them before anything runs).
Status verifyCollectivesMatch(const Plan &plan, const Mesh &mesh) {
  std::set<std::string> programs;
  for (const RankPlan &rank : plan.ranks)
    for (const ProgramDesc &program : rank.programs)
      programs.insert(program.name);
  // The steps last: a program that differs is named first.
  std::vector<Unit> units;
  for (const std::string &program : programs)
    units.push_back({&program});
  units.push_back({nullptr, StepKind::Training});
  units.push_back({nullptr, StepKind::Evaluation});
  for (size_t axis = 0; axis < mesh.numAxes(); ++axis) {
    const std::string &axisName = mesh.axes()[axis].name;
    for (int leader = 0; leader < mesh.worldSize(); ++leader) {
      MeshGroup group = *mesh.groupOf(leader, axisName);
      if (group.index != 0 || group.size() == 1)
        continue;
      for (const Unit &unit : units) {
        std::vector<CollectiveCall> first =
            collectivesOn(plan.ranks[leader], unit, axis);
        for (int k = 1; k < group.size(); ++k) {
          int member = group.ranks[k];
          std::vector<CollectiveCall> calls =
              collectivesOn(plan.ranks[member], unit, axis);
          auto prefix = [&] {
            std::ostringstream os;
            os << (unit.program ? "program '" + *unit.program + "'"
                                : std::string("the ") +
                                      stepKindName(unit.step))
               << ": ranks " << leader << " and "
               << member << " launch different collectives on axis '"
               << axisName << "': ";
            return os.str();
          };
          for (size_t i = 0; i < std::min(first.size(), calls.size()); ++i)
            if (!first[i].matches(calls[i]))
              return errorf(prefix(), "collective #", i, " is ",
                            first[i].describe(), " on rank ", leader, ", ",
                            calls[i].describe(), " on rank ", member);
          if (first.size() != calls.size())
            return errorf(prefix(), "rank ", leader, " launches ", first.size(),
                          ", rank ", member, " launches ", calls.size());
        }
      }
    }
  }
  return Status::ok();
}

} // namespace

Status mlt::rt::verifyPlanStructure(const Plan &plan) {
  if (plan.ranks.empty())
    return errorf("the plan has no ranks");
  std::optional<Mesh> mesh;
  if (!plan.mesh.empty()) {
    StatusOr<Mesh> created = Mesh::create(plan.mesh);
    if (!created)
      return created.takeStatus().withContext("the plan's mesh");
    mesh = std::move(*created);
    if (uint64_t(mesh->worldSize()) != plan.worldSize)
      return errorf("the plan's world size is ", plan.worldSize,
                    ", but its mesh ", mesh->toString(), " has ",
                    mesh->worldSize(), " ranks");
  } else if (plan.worldSize != 1) {
    return errorf("the plan's world size is ", plan.worldSize,
                  ", but it has no mesh (a plan of several ranks needs one)");
  }
  if (plan.worldSize != plan.ranks.size())
    return errorf("the plan's world size is ", plan.worldSize, " but it has ",
                  plan.ranks.size(), " ranks");
  for (size_t i = 0; i < plan.ranks.size(); ++i) {
    const RankPlan &rank = plan.ranks[i];
    if (rank.rank != i)
      return errorf("rank entry ", i, " is numbered ", rank.rank,
                    " (ranks must be listed in order)");
    Status status = verifyRank(rank, plan.mesh);
    if (!status)
      return plan.ranks.size() == 1
                 ? status
                 : std::move(status).withContext("rank " + std::to_string(i));
  }
  if (mesh) {
    MLT_RETURN_IF_ERROR(verifyCollectivesMatch(plan, *mesh));
    MLT_RETURN_IF_ERROR(verifyTransfers(plan, *mesh));
  }
  return Status::ok();
}

Status mlt::rt::verifyPlan(const Plan &plan) {
  if (plan.formatVersion != kPlanFormatVersion)
    return errorf("plan format version ", plan.formatVersion,
                  ", this mlt-run reads version ", kPlanFormatVersion);
  MLT_RETURN_IF_ERROR(verifyPlanStructure(plan));
  return verifyTrainingContract(plan);
}
