//===- RecomputeLayers.cpp - decoder layers recomputed in the backward ---===//
//
// Part of mlt. Implements mlt-recompute-layers, whole-layer activation
// recomputation (Megatron-LM's `--recompute-granularity full`, torchtitan's
// full activation checkpointing): a chosen decoder layer keeps only what
// leaves it (its output, the next layer's input), and the part of its
// forward pass that its backward pass reads runs again right before that
// backward pass, so that the layer's activations live only while its own
// backward runs.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "BackwardPass.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/MapVector.h"

namespace mlt {
#define GEN_PASS_DEF_MLTRECOMPUTELAYERS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// The decoder layer of each forward op of `body` that belongs to one: the
/// `mlt.layer` that mlt-unroll-layers gives the layer's ops, or, for an op
/// without it that computes a value without memory effects (a collective
/// mlt-spmdize inserted; not a send), the layer of the ops whose results it
/// reads, where they are all of one layer.
DenseMap<Operation *, int64_t>
layersOf(Block &body, const DenseSet<Operation *> &backward) {
  DenseMap<Operation *, int64_t> layers;
  for (Operation &op : body) {
    if (backward.contains(&op))
      continue;
    if (auto layer = op.getAttrOfType<IntegerAttr>(MLTDialect::getLayerAttrName())) {
      layers[&op] = layer.getInt();
      continue;
    }
    std::optional<int64_t> layer;
    bool oneLayer = !readsNoTensor(&op) && op.getNumResults() > 0 &&
                    isMemoryEffectFree(&op);
    for (Value operand : op.getOperands()) {
      if (!oneLayer || !isa<TensorType>(operand.getType()))
        continue;
      auto it = layers.find(operand.getDefiningOp());
      oneLayer = it != layers.end() && (!layer || *layer == it->second);
      if (oneLayer)
        layer = it->second;
    }
    if (oneLayer && layer)
      layers[&op] = *layer;
  }
  return layers;
}

/// Recomputes the layers of each program function whose index is a multiple
/// of `every`:
///
/// 1. finds the backward pass (backwardOps) and each forward op's layer
///    (layersOf);
/// 2. for each chosen layer, its members' results fall in three kinds:
///    what leaves the layer (read by a forward op of another layer or of
///    none: the layer's output) is kept; what the backward pass reads of the
///    rest is recomputed (the roots); the rest dies in the forward pass;
/// 3. the members the roots need (the roots' producers, and theirs, within
///    the layer; a kept value, a parameter or a constant is read as it is)
///    are cloned in program order right before the first backward use of a
///    root, marked `mlt.recomputed`, and every backward use of their results
///    reads the clones.
///
/// A layer is left as it is when one of those members has memory effects or
/// a forward use after that point (never in a micro-step mlt-autodiff made).
class MLTRecomputeLayersPass
    : public mlt::impl::MLTRecomputeLayersBase<MLTRecomputeLayersPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    if (every < 0) {
      getOperation().emitError("mlt-recompute-layers: every must be 0 (no "
                               "layer) or more, got ")
          << int64_t(every);
      return signalPassFailure();
    }
    if (every == 0)
      return;
    for (func::FuncOp func : programFunctions(getOperation()))
      recompute(func.getBody().front());
  }

private:
  void recompute(Block &body) {
    DenseSet<Operation *> backward = backwardOps(body);
    DenseMap<Operation *, int64_t> layers = layersOf(body, backward);
    // Each chosen layer's members, in program order.
    llvm::MapVector<int64_t, SmallVector<Operation *>> members;
    for (Operation &op : body) {
      auto it = layers.find(&op);
      if (it != layers.end() && it->second % every == 0)
        members[it->second].push_back(&op);
    }
    for (auto &[layer, ops] : members)
      recomputeLayer(ops, backward);
  }

  void recomputeLayer(ArrayRef<Operation *> ops,
                      DenseSet<Operation *> &backward) {
    DenseSet<Operation *> inLayer(ops.begin(), ops.end());
    // Step 2: what leaves the layer is kept; the roots are the rest that
    // the backward pass reads.
    auto leaves = [&](Value value) {
      return llvm::any_of(value.getUsers(), [&](Operation *user) {
        return !backward.contains(user) && !inLayer.contains(user);
      });
    };
    DenseSet<Operation *> needed;
    SmallVector<Operation *> worklist;
    Operation *point = nullptr;
    for (Operation *op : ops) {
      if (readsNoTensor(op))
        continue;
      for (Value result : op->getResults()) {
        if (leaves(result))
          continue;
        for (Operation *user : result.getUsers())
          if (backward.contains(user)) {
            if (!point || user->isBeforeInBlock(point))
              point = user;
            if (needed.insert(op).second)
              worklist.push_back(op);
          }
      }
    }
    if (!point)
      return;
    // Step 3: the members the roots need, through their operands.
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      for (Value operand : op->getOperands()) {
        Operation *producer = operand.getDefiningOp();
        if (!producer || !inLayer.contains(producer) ||
            readsNoTensor(producer) || leaves(operand))
          continue;
        if (needed.insert(producer).second)
          worklist.push_back(producer);
      }
    }
    for (Operation *op : needed) {
      if (!isMemoryEffectFree(op))
        return;
      for (Value result : op->getResults()) {
        SmallVector<Operation *> readers;
        collectReaders(result, readers);
        for (Operation *reader : readers)
          if (!backward.contains(reader) && !reader->isBeforeInBlock(point))
            return;
      }
    }

    OpBuilder builder(point);
    IRMapping clones;
    SmallVector<Operation *> cloned;
    for (Operation *op : ops) {
      if (!needed.contains(op))
        continue;
      Operation *clone = builder.clone(*op, clones);
      clone->setAttr(MLTDialect::getRecomputedAttrName(),
                     builder.getUnitAttr());
      cloned.push_back(clone);
    }
    for (Operation *op : ops) {
      if (!needed.contains(op))
        continue;
      for (Value result : op->getResults())
        result.replaceUsesWithIf(clones.lookup(result), [&](OpOperand &use) {
          return backward.contains(use.getOwner());
        });
    }
    backward.insert(cloned.begin(), cloned.end());
  }
};

} // namespace
