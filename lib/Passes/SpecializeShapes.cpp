//===- SpecializeShapes.cpp - fix batch and sequence sizes ----------------===//
//
// Part of mlt. Implements mlt-specialize-shapes: gives a model function's token
// arguments static [batch, seq] types and re-derives every type below them.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Interfaces/InferTypeOpInterface.h"

namespace mlt {
#define GEN_PASS_DEF_MLTSPECIALIZESHAPES
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// `type` with its dynamic dimensions replaced, in order, by `sizes`.
FailureOr<RankedTensorType> fillDynamicDims(RankedTensorType type,
                                            ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> shape(type.getShape());
  size_t next = 0;
  for (int64_t &d : shape)
    if (ShapedType::isDynamic(d)) {
      if (next == sizes.size())
        return failure();
      d = sizes[next++];
    }
  if (next != sizes.size())
    return failure();
  return RankedTensorType::get(shape, type.getElementType());
}

/// The sizes that an operand's dynamic dimensions have taken, in order.
SmallVector<int64_t> dynamicSizesOf(RankedTensorType original,
                                    RankedTensorType specialized) {
  SmallVector<int64_t> sizes;
  for (auto [o, s] : llvm::zip(original.getShape(), specialized.getShape()))
    if (ShapedType::isDynamic(o))
      sizes.push_back(s);
  return sizes;
}

/// Re-derives the result types of `op` from its (already specialized)
/// operands.
LogicalResult refineResultTypes(Operation *op,
                                DenseMap<Value, Type> &originalTypes) {
  if (auto repeat = dyn_cast<RepeatOp>(op)) {
    for (auto [init, arg, result] :
         llvm::zip(repeat.getInits(), repeat.getIterArgs(), repeat.getResults())) {
      arg.setType(init.getType());
      result.setType(init.getType());
    }
    return success();
  }
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
  // Ops whose result type is written out (reshape, cast): their dynamic
  // dimensions follow the dynamic dimensions of their single tensor operand.
  if (op->getNumResults() == 0)
    return success();
  auto resultType = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (op->getNumResults() != 1 || !resultType || resultType.hasStaticShape())
    return success();
  if (op->getNumOperands() != 1)
    return op->emitOpError("has a dynamic result type that cannot be "
                           "specialized from its operands");
  Value operand = op->getOperand(0);
  auto original = dyn_cast_or_null<RankedTensorType>(
      originalTypes.lookup(operand));
  auto specialized = dyn_cast<RankedTensorType>(operand.getType());
  if (!original || !specialized)
    return success();
  FailureOr<RankedTensorType> refined =
      fillDynamicDims(resultType, dynamicSizesOf(original, specialized));
  if (failed(refined))
    return op->emitOpError("result type ")
           << resultType << " does not keep the dynamic dimensions of "
           << original;
  op->getResult(0).setType(*refined);
  return success();
}

class MLTSpecializeShapesPass
    : public mlt::impl::MLTSpecializeShapesBase<MLTSpecializeShapesPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>(function);
    if (!func) {
      module.emitError("mlt-specialize-shapes: no function @") << function;
      return signalPassFailure();
    }
    if (batch <= 0 || seqLen <= 0) {
      func.emitError("mlt-specialize-shapes needs positive batch and seq-len, "
                     "got batch=")
          << static_cast<int64_t>(batch)
          << " seq-len=" << static_cast<int64_t>(seqLen);
      return signalPassFailure();
    }

    // Remember every value's type before specialization: ops that copy
    // dynamic sizes need to know which dimensions were dynamic.
    DenseMap<Value, Type> originalTypes;
    func.walk([&](Operation *op) {
      for (Value v : op->getResults())
        originalTypes[v] = v.getType();
      for (Region &r : op->getRegions())
        for (BlockArgument a : r.getArguments())
          originalTypes[a] = a.getType();
    });

    Block &entry = func.getBody().front();
    for (BlockArgument arg : entry.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (!type || !isa<IntegerType>(type.getElementType()) ||
          type.getRank() != 2)
        continue;
      int64_t want[] = {batch, seqLen};
      for (int i = 0; i < 2; ++i)
        if (!ShapedType::isDynamic(type.getDimSize(i)) &&
            type.getDimSize(i) != want[i]) {
          func.emitError("argument #")
              << arg.getArgNumber() << " has static shape " << type
              << ", which contradicts batch=" << static_cast<int64_t>(batch)
              << " seq-len=" << static_cast<int64_t>(seqLen);
          return signalPassFailure();
        }
      arg.setType(RankedTensorType::get(want, type.getElementType()));
    }

    WalkResult result = func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      if (op == func)
        return WalkResult::advance();
      return failed(refineResultTypes(op, originalTypes))
                 ? WalkResult::interrupt()
                 : WalkResult::advance();
    });
    if (result.wasInterrupted())
      return signalPassFailure();

    Operation *ret = entry.getTerminator();
    func.setType(FunctionType::get(&getContext(), entry.getArgumentTypes(),
                                   ret->getOperandTypes()));
  }
};

} // namespace
