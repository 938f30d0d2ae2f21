//===- MLTPipelineOps.cpp - transfers between pipeline stages -------------===//
//
// Part of mlt. Verifiers and gradient rules of mlt.send and mlt.recv
// (MLTPipelineOps.td).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"

#include "ShapeRules.h"

#include "mlir/IR/BuiltinOps.h"

using namespace mlir;
using namespace mlt;

namespace {

template <typename OpT> FailureOr<int64_t> transferAxisSize(OpT op) {
  return mlt::detail::meshAxisSize(op, op.getAxis());
}

template <typename OpT>
LogicalResult verifyTransfer(OpT op, RankedTensorType type) {
  FailureOr<int64_t> size = transferAxisSize(op);
  if (failed(size))
    return failure();
  const int64_t shift = op.getShiftAttr().getInt();
  if (shift == 0 || std::abs(shift) >= *size)
    return op.emitOpError("shift ")
           << shift << " must be nonzero and smaller in magnitude "
           << "than the size of axis '" << op.getAxis() << "' (" << *size
           << ")";
  if (ShardingAttr layout = op.getLayoutAttr()) {
    if (layout.getRank() != type.getRank())
      return op.emitOpError("layout ")
             << layout << " does not have the rank of " << type;
    for (unsigned d = 0; d < layout.getRank(); ++d)
      if (llvm::is_contained(layout.getAxes(d), op.getAxisAttr()))
        return op.emitOpError("layout ")
               << layout << " splits a dimension over '" << op.getAxis()
               << "', the axis it moves along";
  }
  return success();
}

} // namespace

FailureOr<int64_t> SendOp::getAxisSize() { return transferAxisSize(*this); }
FailureOr<int64_t> RecvOp::getAxisSize() { return transferAxisSize(*this); }

LogicalResult SendOp::verify() {
  return verifyTransfer(*this, cast<RankedTensorType>(getInput().getType()));
}

LogicalResult RecvOp::verify() {
  return verifyTransfer(*this, cast<RankedTensorType>(getResult().getType()));
}

LogicalResult SendOp::buildGradients(OpBuilder &b, ValueRange,
                                     SmallVectorImpl<Value> &operandGrads) {
  // The receiver sends the gradient back (the same peer): it seeds this
  // stage's backward pass.
  auto recv = RecvOp::create(b, getLoc(), getInput().getType(), getAxisAttr(),
                             getShiftAttr(),
                             getLayoutAttr());
  recv->setAttr(MLTDialect::getLossSeedAttrName(), b.getUnitAttr());
  operandGrads.push_back(recv);
  return success();
}

LogicalResult RecvOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &) {
  if (resultGrads[0])
    SendOp::create(b, getLoc(), resultGrads[0], getAxisAttr(),
                   getShiftAttr(), getLayoutAttr());
  return success();
}
