//===- MultiTensor.cpp - multi-tensor optimizer launches ------------------===//
//
// Part of mlt. Implements mlt-multi-tensor (Passes.td): runs of adamw
// launches with the same scalars become one adamw_multi launch, runs of
// sum_squares launches over one element type (f32 and bf16 gradients
// counted as one) one sum_squares_multi launch; a lone launch that reads a
// bf16 gradient becomes a multi-tensor launch of one, since only those
// read bf16 gradients.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/KernelInfo.h"

#include "mlir/IR/SymbolTable.h"

namespace mlt {
#define GEN_PASS_DEF_MLTMULTITENSOR
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

// A multi-tensor launch's ints are its members' lists, one after another
// (Kernels.def's MLT_PER_TENSOR).
static_assert(rt::kernelSignature(rt::Kernel::AdamWMulti).intNames ==
              rt::kernelSignature(rt::Kernel::AdamW).intNames);
static_assert(rt::kernelSignature(rt::Kernel::SumSquaresMulti).intNames ==
              rt::kernelSignature(rt::Kernel::SumSquares).intNames);

/// Whether `launch` can join a group led by `first`: both plain adamw
/// launches on the compute stream, no tokens, the same scalar operands and
/// the same number of outputs (a compute copy or none).
bool groupable(rtir::LaunchOp launch, rtir::LaunchOp first) {
  if (launch.getKernel() != "adamw" || !launch.isPlain() ||
      launch.getInputs().size() != 1 + rt::kAdamWScalarInputs)
    return false;
  return !first ||
         (launch.getOutputs().size() == first.getOutputs().size() &&
          launch.getInputs().getValue().drop_front() ==
              first.getInputs().getValue().drop_front());
}

/// The element type of the buffer `ref` names (null if it names none), from
/// the module's symbol table (built once: a lookup from the launch would
/// scan the module's ops, for every sum_squares of every layer).
Type elementTypeOf(const SymbolTable &buffers, Attribute ref) {
  auto buffer =
      buffers.lookup<rtir::BufferOp>(cast<FlatSymbolRefAttr>(ref).getAttr());
  return buffer ? buffer.getTensorType().getElementType() : Type();
}

/// Whether `launch` (adamw or sum_squares) reads a bf16 gradient, which only
/// the multi-tensor kernels take.
bool readsHalfGradient(const SymbolTable &buffers, rtir::LaunchOp launch) {
  Type type = elementTypeOf(buffers, launch.getInputs()[0]);
  return type && type.isBF16();
}

/// Whether `launch` can join a group of sum_squares led by `first`: both on
/// the compute stream with no tokens, their inputs of one element type (a
/// launch computes in one).
bool groupableSumSquares(const SymbolTable &buffers, rtir::LaunchOp launch,
                         rtir::LaunchOp first) {
  if (launch.getKernel() != "sum_squares" || !launch.isPlain())
    return false;
  if (!first)
    return true;
  // f32 and bf16 gradients (reduced in bf16) mix: the launch computes in
  // f32 and widens the bf16 ones (Kernels.def).
  auto optimizerType = [&](rtir::LaunchOp x) {
    Type type = elementTypeOf(buffers, x.getInputs()[0]);
    return readsHalfGradient(buffers, x) ? Float32Type::get(type.getContext())
                                         : type;
  };
  return optimizerType(launch) == optimizerType(first);
}

/// Whether `launch` can join the group led by `first` (any group when
/// `first` is null: whether it can start one).
bool groupableAny(const SymbolTable &buffers, rtir::LaunchOp launch,
                  rtir::LaunchOp first) {
  if (first && first.getKernel() != launch.getKernel())
    return false;
  return groupable(launch, first) ||
         groupableSumSquares(buffers, launch, first);
}

/// One launch of `kernel` in place of the launches of `group`, at the first.
void replaceWith(MutableArrayRef<rtir::LaunchOp> group, StringRef kernel,
                 ArrayRef<Attribute> inputs, ArrayRef<Attribute> outputs,
                 ArrayRef<int64_t> ints) {
  OpBuilder b(group.front());
  rtir::LaunchOp::create(b, group.front().getLoc(), kernel, inputs, outputs,
                         ints);
  for (rtir::LaunchOp member : group)
    member.erase();
}

/// One sum_squares_multi launch in place of `group` (at least two
/// launches, or one that reads a bf16 gradient): their inputs, outputs and
/// sizes in order.
void replaceSumSquaresGroup(MutableArrayRef<rtir::LaunchOp> group) {
  SmallVector<Attribute> inputs, outputs;
  SmallVector<int64_t> ints;
  for (rtir::LaunchOp launch : group) {
    llvm::append_range(inputs, launch.getInputs());
    llvm::append_range(outputs, launch.getOutputs());
    llvm::append_range(ints, launch.getInts());
  }
  replaceWith(group, "sum_squares_multi", inputs, outputs, ints);
}

/// One adamw_multi launch in place of `group` (at least two launches, or
/// one that reads a bf16 gradient).
void replaceGroup(MutableArrayRef<rtir::LaunchOp> group) {
  rtir::LaunchOp first = group.front();
  const size_t perTensor = first.getOutputs().size();
  SmallVector<Attribute> inputs, outputs(perTensor * group.size());
  SmallVector<int64_t> ints;
  for (auto [t, member] : llvm::enumerate(group)) {
    rtir::LaunchOp launch = member;
    inputs.push_back(launch.getInputs()[0]);
    // Outputs grouped by kind: every param, every m, every v, every copy.
    for (size_t o = 0; o < perTensor; ++o)
      outputs[o * group.size() + t] = launch.getOutputs()[o];
    llvm::append_range(ints, launch.getInts());
  }
  llvm::append_range(inputs, first.getInputs().getValue().drop_front());
  replaceWith(group, "adamw_multi", inputs, outputs, ints);
}

class MLTMultiTensorPass
    : public mlt::impl::MLTMultiTensorBase<MLTMultiTensorPass> {
public:
  void runOnOperation() override {
    // The pass adds and erases launches only: the buffers stay as they are.
    SymbolTable buffers(getOperation());
    bool changed = false;
    for (rtir::ProgramOp program :
         getOperation().getOps<rtir::ProgramOp>()) {
      SmallVector<SmallVector<rtir::LaunchOp>> groups(1);
      for (auto launch : program.getBody().getOps<rtir::LaunchOp>()) {
        SmallVector<rtir::LaunchOp> &group = groups.back();
        if (groupableAny(buffers, launch,
                         group.empty() ? nullptr : group.front())) {
          group.push_back(launch);
          continue;
        }
        if (!group.empty())
          groups.emplace_back();
        if (groupableAny(buffers, launch, nullptr))
          groups.back().push_back(launch);
      }
      for (MutableArrayRef<rtir::LaunchOp> group : groups) {
        if (group.empty() ||
            (group.size() < 2 && !readsHalfGradient(buffers, group[0])))
          continue;
        changed = true;
        if (group.front().getKernel() == "sum_squares")
          replaceSumSquaresGroup(group);
        else
          replaceGroup(group);
      }
    }
    // Nothing grouped: the pass manager need not verify the module again.
    if (!changed)
      markAllAnalysesPreserved();
  }
};

} // namespace
