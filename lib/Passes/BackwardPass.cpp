//===- BackwardPass.cpp - the backward pass of a micro-step ---------------===//
//
// Part of mlt. See BackwardPass.h.
//
//===----------------------------------------------------------------------===//

#include "BackwardPass.h"

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/MLT/MLTOps.h"

using namespace mlir;

DenseSet<Operation *> mlt::backwardOps(Block &body) {
  DenseSet<Operation *> backward;
  for (Operation &op : body) {
    bool inBackward =
        isa<CrossEntropyGradOp>(op) ||
        op.hasAttr(MLTDialect::getLossSeedAttrName()) ||
        op.hasAttr(MLTDialect::getRecomputedAttrName()) ||
        llvm::any_of(op.getOperands(), [&](Value operand) {
          return backward.contains(operand.getDefiningOp());
        });
    if (inBackward)
      backward.insert(&op);
  }
  return backward;
}

bool mlt::readsNoTensor(Operation *op) {
  return llvm::none_of(op->getOperandTypes(), llvm::IsaPred<TensorType>);
}

bool mlt::isView(Operation *op) { return isa<ReshapeOp, ShardOp>(op); }

void mlt::collectReaders(Value value, SmallVectorImpl<Operation *> &readers) {
  for (Operation *user : value.getUsers()) {
    if (!isView(user)) {
      readers.push_back(user);
      continue;
    }
    for (Value view : user->getResults())
      collectReaders(view, readers);
  }
}
