//===- RingAttention.cpp - context parallelism's ring exchange ------------===//
//
// Part of mlt. Implements mlt-ring-attention (Passes.td): each attention
// marked `mlt.cp_comm = "ring"`, whose keys and values mlt-spmdize gathered
// over its context axis, becomes G steps over one block of keys each, the
// blocks passed around the ring by mlt.collective_permute; its gradient the
// same, with the blocks' key/value gradients travelling with them.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTRINGATTENTION
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// Whether `op` is an attention or attention gradient of a per-rank program
/// marked for the ring: its sequence split by mlt-spmdize (the global
/// @forward that the programs were derived from keeps its marks as they
/// are).
bool isRingMarked(Operation *op) {
  auto exchange =
      op->getAttrOfType<StringAttr>(MLTDialect::getContextExchangeAttrName());
  return exchange && exchange.getValue() == "ring" &&
         op->hasAttr(MLTDialect::getSequenceShardAttrName());
}

/// What a ring-marked attention (or gradient) reads: its context axis and
/// the rank's own blocks of keys and values (the inputs of the gathers).
struct RingOperands {
  StringAttr axis;
  int64_t ranks = 1;
  Value key, value;
};

FailureOr<RingOperands> ringOperands(Operation *op, Value key, Value value) {
  RingOperands ring;
  ring.axis =
      op->getAttrOfType<StringAttr>(MLTDialect::getSequenceShardAttrName());
  // The mesh of the innermost module (a pipeline stage's has its own).
  MeshAttr mesh;
  for (Operation *scope = op->getParentOp(); scope && !mesh;
       scope = scope->getParentOp())
    mesh = scope->getAttrOfType<MeshAttr>(MLTDialect::getMeshAttrName());
  const int64_t size = mesh ? mesh.axisSize(ring.axis) : 0;
  if (size < 2)
    return op->emitOpError("mlt-ring-attention: '")
           << ring.axis.getValue() << "' is not a mesh axis of 2 or more ranks";
  ring.ranks = size;
  Value *blocks[] = {&ring.key, &ring.value};
  Value operands[] = {key, value};
  for (auto [i, operand] : llvm::enumerate(operands)) {
    auto gather = operand.getDefiningOp<AllGatherOp>();
    if (!gather || gather.getAxis() != ring.axis.getValue() ||
        gather.getDim() != 1)
      return op->emitOpError("mlt-ring-attention: its ")
             << (i == 0 ? "keys" : "values")
             << " are not gathered along the sequence over '"
             << ring.axis.getValue() << "' (mlt.all_gather ... dim 1)";
    *blocks[i] = gather.getInput();
  }
  return ring;
}

/// Copies `from`'s discardable attributes that say where it belongs (its
/// layer, a recomputation's mark) onto `to`; not the ones the ring's ops
/// say otherwise (the exchange, the sequence's axis, the sharding).
void copyPlacement(Operation *from, Operation *to) {
  for (NamedAttribute attr : from->getDiscardableAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name == MLTDialect::getContextExchangeAttrName() ||
        name == MLTDialect::getSequenceShardAttrName() ||
        name == MLTDialect::getShardingAttrName())
      continue;
    to->setAttr(attr.getName(), attr.getValue());
  }
}

class MLTRingAttentionPass
    : public mlt::impl::MLTRingAttentionBase<MLTRingAttentionPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<AttentionOp> forwards;
    SmallVector<AttentionGradOp> backwards;
    module.walk([&](Operation *op) {
      if (!isRingMarked(op))
        return;
      if (auto attention = dyn_cast<AttentionOp>(op))
        forwards.push_back(attention);
      else if (auto grad = dyn_cast<AttentionGradOp>(op))
        backwards.push_back(grad);
    });
    // The merged output of each rewritten attention, and its lse.
    DenseMap<Value, Value> lseOf;
    SetVector<Operation *> gathers;
    for (AttentionOp attention : forwards)
      if (failed(rewriteForward(attention, lseOf, gathers)))
        return signalPassFailure();
    for (AttentionGradOp grad : backwards)
      if (failed(rewriteBackward(grad, lseOf, gathers)))
        return signalPassFailure();
    // The gathers, read by nothing now.
    for (Operation *gather : gathers)
      if (gather->use_empty())
        gather->erase();
  }

private:
  /// Step s attends to the block of the rank s before this one, which the
  /// permute of step s - 1 brought; the permute for step s + 1 comes before
  /// it, so that a stream may carry the block while it computes.
  LogicalResult rewriteForward(AttentionOp attention,
                               DenseMap<Value, Value> &lseOf,
                               SetVector<Operation *> &gathers) {
    FailureOr<RingOperands> ring =
        ringOperands(attention, attention.getKey(), attention.getValue());
    if (failed(ring))
      return failure();
    gathers.insert(attention.getKey().getDefiningOp());
    gathers.insert(attention.getValue().getDefiningOp());
    OpBuilder b(attention);
    Location loc = attention.getLoc();
    auto query = cast<RankedTensorType>(attention.getQuery().getType());
    Type statistic = query.getElementType().isF64()
                         ? query.getElementType()
                         : Type(b.getF32Type());
    auto lseType = RankedTensorType::get(
        {query.getDimSize(0), query.getDimSize(2), query.getDimSize(1)},
        statistic);
    auto placed = [&](Operation *op) {
      copyPlacement(attention, op);
      return op;
    };
    Value key = ring->key, value = ring->value, out, lse;
    for (int64_t step = 0; step < ring->ranks; ++step) {
      Value nextKey, nextValue;
      if (step + 1 < ring->ranks) {
        nextKey = placed(CollectivePermuteOp::create(b, loc, key, ring->axis,
                                                     1))
                      ->getResult(0);
        nextValue = placed(CollectivePermuteOp::create(b, loc, value,
                                                       ring->axis, 1))
                        ->getResult(0);
      }
      auto block = AttentionBlockOp::create(
          b, loc, query, lseType, attention.getQuery(), key, value,
          ring->axis, step, attention.getCausal(), attention.getScale());
      placed(block);
      if (step == 0) {
        out = block.getResult();
        lse = block.getLse();
      } else {
        auto merge = AttentionMergeOp::create(b, loc, query, lseType, out, lse,
                                              block.getResult(),
                                              block.getLse());
        placed(merge);
        out = merge.getResult();
        lse = merge.getLse();
      }
      key = nextKey;
      value = nextValue;
    }
    lseOf[out] = lse;
    attention.getResult().replaceAllUsesWith(out);
    attention.erase();
    return success();
  }

  /// The blocks go round again; each step adds its share of dq, and the
  /// block's dk and dv to the gradients that travel with it (permuted
  /// after every step, so that after the last they are home).
  LogicalResult rewriteBackward(AttentionGradOp grad,
                                const DenseMap<Value, Value> &lseOf,
                                SetVector<Operation *> &gathers) {
    FailureOr<RingOperands> ring =
        ringOperands(grad, grad.getKey(), grad.getValue());
    if (failed(ring))
      return failure();
    Value lse = lseOf.lookup(grad.getOutput());
    if (!lse)
      return grad.emitOpError("mlt-ring-attention: its output is not that of "
                              "an attention of the ring in this module");
    ReduceScatterOp scatters[2];
    Value gradients[] = {grad.getKeyGrad(), grad.getValueGrad()};
    for (auto [i, result] : llvm::enumerate(gradients)) {
      auto scatter = result.hasOneUse()
                         ? dyn_cast<ReduceScatterOp>(*result.getUsers().begin())
                         : ReduceScatterOp();
      if (!scatter || scatter.getAxis() != ring->axis.getValue() ||
          scatter.getDim() != 1)
        return grad.emitOpError("mlt-ring-attention: its ")
               << (i == 0 ? "key" : "value")
               << " gradient is not reduce-scattered along the sequence over '"
               << ring->axis.getValue() << "' and nothing else";
      scatters[i] = scatter;
    }
    gathers.insert(grad.getKey().getDefiningOp());
    gathers.insert(grad.getValue().getDefiningOp());

    OpBuilder b(grad);
    Location loc = grad.getLoc();
    auto placed = [&](Operation *op) {
      copyPlacement(grad, op);
      return op->getResult(0);
    };
    auto permute = [&](Value v) {
      return placed(CollectivePermuteOp::create(b, loc, v, ring->axis, 1));
    };
    auto add = [&](Value sum, Value part) {
      return placed(AddOp::create(b, loc, sum, part));
    };
    Value key = ring->key, value = ring->value, dq, dk, dv;
    for (int64_t step = 0; step < ring->ranks; ++step) {
      Value nextKey, nextValue;
      if (step + 1 < ring->ranks) {
        nextKey = permute(key);
        nextValue = permute(value);
      }
      auto block = AttentionBlockGradOp::create(
          b, loc, grad.getQueryGrad().getType(), key.getType(),
          value.getType(), grad.getGrad(), grad.getQuery(), key, value,
          grad.getOutput(), lse, ring->axis, step, grad.getCausal(),
          grad.getScale());
      copyPlacement(grad, block);
      if (step == 0) {
        dq = block.getQueryGrad();
        dk = block.getKeyGrad();
        dv = block.getValueGrad();
      } else {
        dq = add(dq, block.getQueryGrad());
        dk = add(dk, block.getKeyGrad());
        dv = add(dv, block.getValueGrad());
      }
      dk = permute(dk);
      dv = permute(dv);
      key = nextKey;
      value = nextValue;
    }
    grad.getQueryGrad().replaceAllUsesWith(dq);
    scatters[0].getResult().replaceAllUsesWith(dk);
    scatters[1].getResult().replaceAllUsesWith(dv);
    scatters[0].erase();
    scatters[1].erase();
    grad.erase();
    return success();
  }
};

} // namespace
