//===- MLTTrainingOps.cpp - backward and optimizer ops --------------------===//
//
// Part of mlt. Shape rules and verifiers of the ops in MLTTrainingOps.td: the
// backward ops take their types from the forward operands they mirror, and
// the state ops must name a declared parameter with the right type and layer.
//
//===----------------------------------------------------------------------===//

#include "ShapeRules.h"

#include "mlt/Dialect/MLT/MLTOps.h"

using namespace mlir;
using namespace mlt;
using namespace mlt::detail;

namespace {

/// Infers the forward op's result type from `operands` with the forward op's
/// shape rule, reporting a failure as an error of the backward op `GradOp`.
template <typename FwdOp, typename GradOp>
LogicalResult inferForward(MLIRContext *context, std::optional<Location> loc,
                           ValueRange operands, SmallVectorImpl<Type> &types) {
  std::string message;
  {
    ScopedDiagnosticHandler capture(context, [&](Diagnostic &diag) {
      if (message.empty())
        message = diag.str();
      return success();
    });
    if (succeeded(FwdOp::inferReturnTypes(
            context, loc, typename FwdOp::Adaptor(operands), types)))
      return success();
  }
  StringRef detail = message;
  std::string prefix = ("'" + FwdOp::getOperationName() + "' op ").str();
  detail.consume_front(prefix);
  return shapeError<GradOp>(loc, detail);
}

} // namespace

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingGradOp::verify() {
  auto ids = getIds().getType();
  auto grad = getGrad().getType();
  auto table = getResult().getType();
  if (table.getRank() != 2)
    return emitOpError("result must be a [vocab, hidden] table, got ")
           << table;
  if (grad.getRank() != ids.getRank() + 1 ||
      !llvm::all_of(llvm::zip(ids.getShape(), grad.getShape()), [](auto d) {
        return dimsFit(std::get<0>(d), std::get<1>(d));
      }))
    return emitOpError("grad must have the shape of ids plus a hidden "
                       "dimension, got ids ")
           << shapeStr(ids.getShape()) << " and grad "
           << shapeStr(grad.getShape());
  if (!dimsFit(grad.getShape().back(), table.getDimSize(1)) ||
      grad.getElementType() != table.getElementType())
    return emitOpError("grad ")
           << grad << " does not match the table's hidden size and type "
           << table;
  return success();
}

LogicalResult RMSNormGradOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  SmallVector<Type, 1> forward;
  SmallVector<Value> operands = {adaptor.getInput(), adaptor.getWeight()};
  if (failed(inferForward<RMSNormOp, RMSNormGradOp>(context, loc, operands,
                                                    forward)))
    return failure();
  auto grad = rankedOperand<RMSNormGradOp>(loc, adaptor.getGrad(), "grad");
  if (failed(grad))
    return failure();
  if (*grad != forward[0])
    return shapeError<RMSNormGradOp>(loc, "grad type ", *grad,
                                     " differs from the forward result type ",
                                     forward[0]);
  results.push_back(adaptor.getInput().getType());
  results.push_back(adaptor.getWeight().getType());
  return success();
}

LogicalResult AttentionGradOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  SmallVector<Type, 1> forward;
  SmallVector<Value> operands = {adaptor.getQuery(), adaptor.getKey(),
                                 adaptor.getValue()};
  if (failed(inferForward<AttentionOp, AttentionGradOp>(context, loc, operands,
                                                        forward)))
    return failure();
  for (auto [value, name] : {std::pair{adaptor.getGrad(), "grad"},
                             std::pair{adaptor.getOutput(), "output"}})
    if (value.getType() != forward[0])
      return shapeError<AttentionGradOp>(
          loc, name, " type ", value.getType(),
          " differs from the forward result type ", forward[0]);
  results.push_back(adaptor.getQuery().getType());
  results.push_back(adaptor.getKey().getType());
  results.push_back(adaptor.getValue().getType());
  return success();
}

LogicalResult AttentionGradOp::verify() {
  return detail::verifyAttentionSequences(*this, getQuery(), getKey());
}

LogicalResult CrossEntropyGradOp::inferReturnTypes(
    MLIRContext *context, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &results) {
  SmallVector<Type, 1> forward;
  SmallVector<Value> operands = {adaptor.getLogits(), adaptor.getLabels()};
  if (failed(inferForward<CrossEntropyOp, CrossEntropyGradOp>(
          context, loc, operands, forward)))
    return failure();
  if (adaptor.getGrad().getType() != forward[0])
    return shapeError<CrossEntropyGradOp>(
        loc, "grad type ", adaptor.getGrad().getType(),
        " differs from the loss type ", forward[0]);
  results.push_back(adaptor.getLogits().getType());
  return success();
}

//===----------------------------------------------------------------------===//
// Training state and optimizer
//===----------------------------------------------------------------------===//

LogicalResult
AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamReference(*this, symbolTable, getNameAttr(), getLayer(),
                              getValue().getType(), /*computeCopy=*/true);
}

LogicalResult LoadGradOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamReference(*this, symbolTable, getNameAttr(), getLayer(),
                              getType());
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParamReference(*this, symbolTable, getNameAttr(), getLayer(),
                              getGrad().getType());
}

ArrayRef<StringRef> HyperparameterOp::getKnownNames() {
  static const StringRef names[] = {"lr",  "beta1",        "beta2",
                                    "eps", "weight_decay", "max_grad_norm",
                                    "step"};
  return names;
}

LogicalResult HyperparameterOp::verify() {
  if (!llvm::is_contained(getKnownNames(), getHyperparameter()))
    return emitOpError("unknown hyper-parameter '")
           << getHyperparameter() << "'; expected one of "
           << llvm::join(getKnownNames(), ", ");
  return success();
}
