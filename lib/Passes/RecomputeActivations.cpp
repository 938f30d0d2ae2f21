//===- RecomputeActivations.cpp - activations recomputed in the backward -===//
//
// Part of mlt. Implements mlt-recompute-activations, Megatron-LM's selective
// activation recomputation: a forward value of a chosen op kind that the
// backward pass reads is computed again right before its first backward use,
// from operands the backward pass keeps anyway, so that the forward value
// dies after its forward uses and its memory is free in between.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTInterfaces.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "BackwardPass.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlt {
#define GEN_PASS_DEF_MLTRECOMPUTEACTIVATIONS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// Whether the memory of `value`, an operand of `recomputed`, is still held
/// at `point`, so that a clone placed there keeps no memory alive longer: it
/// is a function argument's or that of an op that reads no tensor (a
/// parameter, a constant: never a temporary), or an op other than
/// `recomputed` reads it (through views too) at or after `point`.
bool isLiveAt(Value value, Operation *point, Operation *recomputed) {
  while (value.getDefiningOp() && isView(value.getDefiningOp()))
    value = value.getDefiningOp()->getOperand(0);
  Operation *producer = value.getDefiningOp();
  if (!producer || readsNoTensor(producer))
    return true;
  SmallVector<Operation *> readers;
  collectReaders(value, readers);
  return llvm::any_of(readers, [&](Operation *reader) {
    return reader != recomputed && !reader->isBeforeInBlock(point);
  });
}

/// Clones the forward ops of the kinds named by `ops` into the backward pass:
///
/// 1. finds the backward pass of each program function (backwardOps: from
///    the loss gradient's seed, on every pipeline stage);
/// 2. from the last forward op to the first, takes those of a named kind
///    without memory effects whose results the backward pass reads, whose
///    forward uses (and every read through a view) all come before the
///    first backward use, and whose operands are live there (isLiveAt);
/// 3. clones each right before that first backward use, marked
///    `mlt.recomputed`, and gives the clone's results to every backward use,
///    the clone joining the backward pass (so that an operand of a
///    recomputed op, visited later, can be recomputed in turn).
class MLTRecomputeActivationsPass
    : public mlt::impl::MLTRecomputeActivationsBase<
          MLTRecomputeActivationsPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    DenseSet<OperationName> kinds;
    for (const std::string &name : ops) {
      std::optional<RegisteredOperationName> kind =
          RegisteredOperationName::lookup(name, &getContext());
      if (!kind) {
        module.emitError("mlt-recompute-activations: '")
            << name << "' is not an op (expected a forward op of the mlt "
            << "dialect by its full name, such as mlt.swiglu)";
        return signalPassFailure();
      }
      if (!kind->hasInterface<GradientOpInterface>()) {
        module.emitError("mlt-recompute-activations: '")
            << name << "' is not a forward op of the mlt dialect (it has no "
            << "gradient rule), so the backward pass reads none of its "
            << "results";
        return signalPassFailure();
      }
      kinds.insert(*kind);
    }
    if (kinds.empty())
      return;
    for (func::FuncOp func : programFunctions(module))
      recompute(func.getBody().front(), kinds);
  }

private:
  void recompute(Block &body, const DenseSet<OperationName> &kinds) {
    DenseSet<Operation *> backward = backwardOps(body);
    SmallVector<Operation *> candidates;
    for (Operation &op : body)
      if (kinds.contains(op.getName()) && !backward.contains(&op) &&
          isMemoryEffectFree(&op))
        candidates.push_back(&op);

    for (Operation *op : llvm::reverse(candidates)) {
      Operation *firstBackwardUse = nullptr;
      for (Operation *user : op->getUsers())
        if (backward.contains(user) &&
            (!firstBackwardUse || user->isBeforeInBlock(firstBackwardUse)))
          firstBackwardUse = user;
      if (!firstBackwardUse)
        continue;
      // Every read of the forward value that the clone does not take over
      // must come first: the forward uses, and any through a view.
      bool forwardUsesFirst = true;
      for (Operation *user : op->getUsers()) {
        SmallVector<Operation *> readers;
        if (isView(user))
          for (Value view : user->getResults())
            collectReaders(view, readers);
        else if (!backward.contains(user))
          readers.push_back(user);
        for (Operation *reader : readers)
          forwardUsesFirst &= reader->isBeforeInBlock(firstBackwardUse);
      }
      bool operandsLive = llvm::all_of(op->getOperands(), [&](Value operand) {
        return isLiveAt(operand, firstBackwardUse, op);
      });
      if (!forwardUsesFirst || !operandsLive)
        continue;

      OpBuilder builder(firstBackwardUse);
      Operation *clone = builder.clone(*op);
      clone->setAttr(MLTDialect::getRecomputedAttrName(),
                     builder.getUnitAttr());
      for (auto [forward, recomputed] :
           llvm::zip(op->getResults(), clone->getResults()))
        forward.replaceUsesWithIf(recomputed, [&](OpOperand &use) {
          return backward.contains(use.getOwner());
        });
      backward.insert(clone);
    }
  }
};

} // namespace
