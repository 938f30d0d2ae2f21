//===- MLTGradients.cpp - gradient rules of the mlt ops -------------------===//
//
// Part of mlt. The GradientOpInterface implementation of every differentiable
// op: each builds the vector-Jacobian product of one op out of mlt ops, the
// backward ops of MLTTrainingOps.td where no forward op serves. Shapes are
// static here (mlt-autodiff runs after mlt-specialize-shapes).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlt;

namespace {

Value reshapeLike(OpBuilder &b, Location loc, Value value, Value like) {
  if (value.getType() == like.getType())
    return value;
  return ReshapeOp::create(b, loc, like.getType(), value);
}

Value matmul(OpBuilder &b, Location loc, Value lhs, Value rhs, bool tl,
             bool tr) {
  return MatmulOp::create(b, loc, lhs, rhs, tl ? b.getUnitAttr() : nullptr,
                            tr ? b.getUnitAttr() : nullptr);
}

} // namespace

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

LogicalResult LoadOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  AccumulateGradOp::create(b, getLoc(), getNameAttr(), getLayer(),
                             resultGrads[0]);
  if (getLayer())
    operandGrads.push_back(nullptr);
  return success();
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(nullptr); // token ids
  operandGrads.push_back(EmbeddingGradOp::create(b, 
      getLoc(), getTable().getType(), getIds(), resultGrads[0]));
  return success();
}

// For C = op(A) op(B) with op a transpose where asked:
//   d op(A) = dC op(B)^T      d op(B) = op(A)^T dC
// then undo the transpose of the operand itself. A weight shared by every
// batch entry (B of rank 2) sums its gradient over the batch, which the
// product of the collapsed [batch * m, k] matrices does in one matmul.
LogicalResult MatmulOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Value dc = resultGrads[0];
  Value a = getLhs(), bMat = getRhs();
  bool tl = getTransposeLhs(), tr = getTransposeRhs();
  auto aType = cast<RankedTensorType>(a.getType());
  auto bType = cast<RankedTensorType>(bMat.getType());

  bool sharedRhs = bType.getRank() == 2 && aType.getRank() > 2;
  if (tl && sharedRhs)
    return emitOpError("has no gradient rule for a transposed batched lhs "
                       "against a shared rhs");

  // dA: (tl ? op(B) dC^T : dC op(B)^T), batched like A.
  Value da = tl ? matmul(b, loc, bMat, dc, tr, /*tr=*/true)
                : matmul(b, loc, dc, bMat, /*tl=*/false, !tr);
  operandGrads.push_back(da);

  Value db;
  if (sharedRhs) {
    // Summed over the batch dimensions: one matmul over all rows.
    auto contract = [&](Value lhs, Value rhs) -> Value {
      return MatmulOp::create(b, loc, lhs, rhs, b.getUnitAttr(), nullptr,
                              b.getUnitAttr());
    };
    db = tr ? contract(dc, a) : contract(a, dc);
  } else {
    // dB: (tr ? dC^T op(A) : op(A)^T dC), batched like B.
    db = tr ? matmul(b, loc, dc, a, /*tl=*/true, tl)
            : matmul(b, loc, a, dc, !tl, /*tr=*/false);
  }
  operandGrads.push_back(db);
  return success();
}

LogicalResult RMSNormOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  auto grad = RMSNormGradOp::create(b, getLoc(), resultGrads[0], getInput(),
                                      getWeight(), getEpsilonAttr());
  operandGrads.push_back(grad.getInputGrad());
  operandGrads.push_back(grad.getWeightGrad());
  return success();
}

// A rotation is orthogonal: its adjoint rotates by the opposite angle.
LogicalResult RopeOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(RopeOp::create(
      b, getLoc(), resultGrads[0], getThetaAttr(), getScalingAttr(),
      getInverse() ? nullptr : b.getUnitAttr()));
  return success();
}

LogicalResult AttentionOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  auto grad = AttentionGradOp::create(b, 
      getLoc(), resultGrads[0], getQuery(), getKey(), getValue(), getResult(),
      getCausalAttr(), getScaleAttr());
  // The gradient exchanges its operands as the attention does.
  if (Attribute exchange =
          (*this)->getAttr(MLTDialect::getContextExchangeAttrName()))
    grad->setAttr(MLTDialect::getContextExchangeAttrName(), exchange);
  operandGrads.push_back(grad.getQueryGrad());
  operandGrads.push_back(grad.getKeyGrad());
  operandGrads.push_back(grad.getValueGrad());
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult SwiGLUOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  auto grad =
      SwiGLUGradOp::create(b, getLoc(), getType(), getType(), resultGrads[0],
                             getGate(), getUp());
  operandGrads.push_back(grad.getGateGrad());
  operandGrads.push_back(grad.getUpGrad());
  return success();
}

LogicalResult SiLUOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      SiLUGradOp::create(b, getLoc(), getType(), resultGrads[0], getInput()));
  return success();
}

LogicalResult AddOp::buildGradients(OpBuilder &, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(resultGrads[0]);
  operandGrads.push_back(resultGrads[0]);
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      MulOp::create(b, getLoc(), getType(), resultGrads[0], getRhs()));
  operandGrads.push_back(
      MulOp::create(b, getLoc(), getType(), resultGrads[0], getLhs()));
  return success();
}

//===----------------------------------------------------------------------===//
// Shapes and types
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(reshapeLike(b, getLoc(), resultGrads[0], getInput()));
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                          SmallVectorImpl<Value> &operandGrads) {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  operandGrads.push_back(TransposeOp::create(b, getLoc(), resultGrads[0],
                                               b.getDenseI64ArrayAttr(inverse)));
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &b, ValueRange resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      CastOp::create(b, getLoc(), getInput().getType(), resultGrads[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::buildGradients(OpBuilder &b,
                                             ValueRange resultGrads,
                                             SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(CrossEntropyGradOp::create(b, 
      getLoc(), resultGrads[0], getLogits(), getLabels()));
  operandGrads.push_back(nullptr); // labels
  return success();
}
