//===- CoalesceReductions.cpp - a run of gradient all-reduces as one -----===//
//
// Part of mlt. Implements mlt-coalesce-reductions (Passes.td): in-place
// all-reduces of gradients that a program runs one after another, on one
// stream and one mesh axis, become one all-reduce of a flat buffer that
// holds those gradients side by side (each gradient a view of it), as
// Megatron's contiguous gradient buffers are reduced a bucket at a time.
//
//===----------------------------------------------------------------------===//

#include "BufferIds.h"

#include "mlt/Analysis/FlatBuckets.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTCOALESCEREDUCTIONS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;
namespace rtir = mlt::rt_ir;

namespace {

/// Every gradient starts at a multiple of this many elements of its flat
/// buffer, as in mlt-partition-optimizer's buckets.
constexpr int64_t kAlignment = int64_t(kFlatBufferAlignment);

class MLTCoalesceReductionsPass
    : public mlt::impl::MLTCoalesceReductionsBase<
          MLTCoalesceReductionsPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    BufferIds ids(module);
    buffers = &ids;
    unsigned made = 0;
    for (auto program : module.getOps<rtir::ProgramOp>()) {
      SmallVector<rtir::LaunchOp> launches(
          program.getBody().getOps<rtir::LaunchOp>());
      for (size_t i = 0; i < launches.size();) {
        size_t end = i + 1;
        if (rtir::BufferOp head = reduced(launches[i])) {
          llvm::SmallPtrSet<Operation *, 16> inRun = {head.getOperation()};
          while (end < launches.size() &&
                 continues(launches[end - 1], launches[end]) &&
                 inRun.insert(reduced(launches[end]).getOperation()).second)
            ++end;
        }
        if (end - i >= 2)
          coalesce(ArrayRef(launches).slice(i, end - i), made++);
        i = end;
      }
    }
  }

private:
  /// The gradient `launch` all-reduces in place, if it does: a gradient
  /// that is no view, no bucket, of one copy, not taken by an earlier run.
  rtir::BufferOp reduced(rtir::LaunchOp launch) {
    if (launch.getKernel() != "all_reduce_sum" ||
        launch.getInputs().size() != 1 || launch.getOutputs().size() != 1 ||
        launch.getInputs()[0] != launch.getOutputs()[0])
      return {};
    rtir::BufferOp buffer = buffers->bufferOf(launch.getInputs()[0]);
    if (!buffer || buffer.getKind() != rtir::BufferKind::gradient ||
        buffer.getView() || buffer.getBucket() || buffer.getShardAttr() ||
        buffer.getCopies() != 1 || taken.contains(buffer.getOperation()))
      return {};
    return buffer;
  }

  /// Whether `next` joins the run that `last` ends: a gradient's all-reduce
  /// on the same stream and axis, of the same element type, waiting for
  /// nothing (the run's first launch waits for all of it) after a launch
  /// that no one waits for (the run's last may be waited for).
  bool continues(rtir::LaunchOp last, rtir::LaunchOp next) {
    rtir::BufferOp a = reduced(last), b = reduced(next);
    return a && b && !last.getToken() && next.getWaits().empty() &&
           next.getStreamIndex() == last.getStreamIndex() &&
           next.getInts()[1] == last.getInts()[1] &&
           a.getTensorType().getElementType() ==
               b.getTensorType().getElementType();
  }

  /// The run's gradients laid out in one flat buffer, in the run's order,
  /// each at a multiple of kAlignment elements, and reduced by one launch
  /// (the first's waits, the last's token).
  void coalesce(ArrayRef<rtir::LaunchOp> launches, unsigned index) {
    SmallVector<rtir::BufferOp> members;
    for (rtir::LaunchOp launch : launches)
      members.push_back(reduced(launch));
    int64_t elements = 0;
    SmallVector<int64_t> offsets;
    for (rtir::BufferOp member : members) {
      offsets.push_back(elements);
      elements += llvm::alignTo(member.getTensorType().getNumElements(),
                                kAlignment);
    }
    Type element = members.front().getTensorType().getElementType();
    rtir::BufferOp first = members.front();
    for (rtir::BufferOp member : members)
      if (member->isBeforeInBlock(first))
        first = member;
    OpBuilder b(first);
    std::string name = ("grad_flat." + Twine(index)).str();
    OperationState state(first.getLoc(), rtir::BufferOp::getOperationName());
    auto &props = state.getOrAddProperties<rtir::BufferOp::Properties>();
    props.sym_name = b.getStringAttr(name);
    props.kind = rtir::BufferKindAttr::get(b.getContext(),
                                           rtir::BufferKind::gradient);
    props.type = TypeAttr::get(RankedTensorType::get({elements}, element));
    props.bucket = b.getUnitAttr();
    auto flat = cast<rtir::BufferOp>(b.create(state));
    // (renamed if the module has the name already)
    buffers->table().insert(flat);
    for (auto [member, offset] : llvm::zip(members, offsets)) {
      member.setViewAttr(FlatSymbolRefAttr::get(flat.getSymNameAttr()));
      member.setViewOffsetAttr(b.getI64IntegerAttr(offset));
      taken.insert(member.getOperation());
    }
    rtir::LaunchOp head = launches.front(), tail = launches.back();
    SmallVector<int64_t> ints(head.getInts());
    ints[0] = elements;
    head.setInts(ints);
    auto ref = FlatSymbolRefAttr::get(flat.getSymNameAttr());
    head.setInputsAttr(b.getArrayAttr({ref}));
    head.setOutputsAttr(b.getArrayAttr({ref}));
    if (tail != head)
      head.setTokenAttr(tail.getTokenAttr());
    for (rtir::LaunchOp launch : launches.drop_front())
      launch.erase();
  }

  /// The module's buffers by symbol (the flat buffers join them).
  BufferIds *buffers = nullptr;
  /// The gradients already laid out in a flat buffer.
  llvm::DenseSet<Operation *> taken;
};

} // namespace
