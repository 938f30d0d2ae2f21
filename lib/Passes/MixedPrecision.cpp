//===- MixedPrecision.cpp - bf16 compute on f32 master weights -------------===//
//
// Part of mlt. Implements mlt-mixed-precision: the loads of f32 parameters
// read their compute copies (bf16 or f16), and every type below them is
// re-derived, so that the forward pass computes in the compute type. See the
// pass description in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace mlt {
#define GEN_PASS_DEF_MLTMIXEDPRECISION
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// `type` with element type `element` when it is a float tensor; else null.
Type withFloatElement(Type type, Type element) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !isa<FloatType>(tensor.getElementType()))
    return Type();
  return tensor.clone(element);
}

/// Re-derives the result types of `op` from its operands, whose types are
/// final (a pre-order walk reaches an op after the ops defining its operands,
/// and a repeat before its body).
LogicalResult refineElementTypes(Operation *op, Type compute) {
  if (auto load = dyn_cast<LoadOp>(op)) {
    RankedTensorType type = load.getType();
    if (type.getElementType().isF32())
      load.getResult().setType(type.clone(compute));
    return success();
  }
  if (auto repeat = dyn_cast<RepeatOp>(op)) {
    for (auto [init, arg, result] : llvm::zip(
             repeat.getInits(), repeat.getIterArgs(), repeat.getResults())) {
      arg.setType(init.getType());
      result.setType(init.getType());
    }
    return success();
  }
  // An explicit conversion says what its user wants.
  if (isa<CastOp>(op))
    return success();
  if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
    SmallVector<Type> types;
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
            op->getRegions(), types)))
      return failure();
    for (auto [result, type] : llvm::zip(op->getResults(), types))
      result.setType(type);
    return success();
  }
  // Ops that write their result type out and keep their operand's element
  // type (reshape, sharding constraints).
  if (isa<ReshapeOp, ShardOp>(op)) {
    Value input = op->getOperand(0);
    auto element = cast<RankedTensorType>(input.getType()).getElementType();
    if (Type type = withFloatElement(op->getResult(0).getType(), element))
      op->getResult(0).setType(type);
    return success();
  }
  return success();
}

class MLTMixedPrecisionPass
    : public mlt::impl::MLTMixedPrecisionBase<MLTMixedPrecisionPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(&getContext());
    Type compute = llvm::StringSwitch<Type>(computeType)
                       .Case("bf16", b.getBF16Type())
                       .Case("f16", b.getF16Type())
                       .Case("f32", b.getF32Type())
                       .Default(Type());
    if (!compute) {
      module.emitError("mlt-mixed-precision: unknown compute-type '")
          << computeType << "' (expected bf16, f16 or f32)";
      return signalPassFailure();
    }
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func) {
      module.emitError("mlt-mixed-precision: no function @") << function;
      return signalPassFailure();
    }
    if (compute.isF32())
      return markAllAnalysesPreserved(); // nothing to change

    WalkResult result = func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op == func)
        return WalkResult::advance();
      return failed(refineElementTypes(op, compute)) ? WalkResult::interrupt()
                                                     : WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();

    Block &entry = func.getBody().front();
    func.setType(FunctionType::get(&getContext(), entry.getArgumentTypes(),
                                   entry.getTerminator()->getOperandTypes()));
  }
};

} // namespace
