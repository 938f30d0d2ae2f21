//===- Autodiff.cpp - reverse-mode differentiation of the loss ------------===//
//
// Part of mlt. Implements mlt-autodiff: from `@forward` (forward pass and
// loss) it builds `@micro_step`, the same computation followed by its
// backward pass, from the ops' gradient rules (GradientOpInterface).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTInterfaces.h"
#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

namespace mlt {
#define GEN_PASS_DEF_MLTAUTODIFF
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringLiteral kMicroStep = "micro_step";

bool isDifferentiable(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// Reverse-mode differentiation of the straight-line body of `func`, whose
/// only result is the scalar loss, or (a pipeline stage before the last)
/// which returns nothing and sends its output on (`mlt.send`). The backward
/// ops go before the return. Its roots are the loss, seeded with
/// `seedValue`, and the ops without results that have a gradient rule (a
/// send, whose rule receives the sent value's gradient).
LogicalResult differentiate(func::FuncOp func, StringRef sourceName,
                            double seedValue) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  bool sends = !func.getOps<SendOp>().empty();
  if (ret.getNumOperands() > 1 || (ret.getNumOperands() == 0 && !sends))
    return func.emitError("mlt-autodiff: @")
           << sourceName
           << " must return exactly the loss (or, as a pipeline stage before "
              "the last, nothing and send its output with mlt.send)";
  Value loss = ret.getNumOperands() ? ret.getOperand(0) : Value();
  auto lossType = loss ? dyn_cast<RankedTensorType>(loss.getType())
                       : RankedTensorType();
  if (loss && (!lossType || lossType.getRank() != 0 ||
               !isa<FloatType>(lossType.getElementType())))
    return func.emitError("mlt-autodiff: the loss must be a float scalar "
                          "tensor, got ")
           << loss.getType();

  // Static shapes are what the backward ops and memory planning need.
  WalkResult dynamic = func.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(t);
          tensor && !tensor.hasStaticShape()) {
        op->emitOpError("has a dynamic result type ")
            << t << "; run mlt-specialize-shapes before mlt-autodiff";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (dynamic.wasInterrupted())
    return failure();

  SmallVector<Operation *> forward;
  for (Operation &op : body.without_terminator())
    forward.push_back(&op);

  OpBuilder b(ret);
  DenseMap<Value, Value> adjoint;
  if (loss) {
    auto seed = arith::ConstantOp::create(
        b, loss.getLoc(),
        DenseElementsAttr::get(
            lossType, b.getFloatAttr(lossType.getElementType(), seedValue)));
    // The backward pass starts where the seed is first used (a received
    // gradient's receive is marked so by its rule).
    seed->setAttr(MLTDialect::getLossSeedAttrName(), b.getUnitAttr());
    adjoint[loss] = seed;
  }

  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    bool reachesLoss =
        op->getNumResults() == 0 && isa<GradientOpInterface>(op);
    for (Value r : op->getResults()) {
      resultGrads.push_back(adjoint.lookup(r));
      reachesLoss |= resultGrads.back() != nullptr;
    }
    if (!reachesLoss)
      continue;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError("has no gradient rule (GradientOpInterface), but "
                             "the loss depends on its result");
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradients(b, resultGrads, operandGrads)))
      return failure();
    assert(operandGrads.size() == op->getNumOperands() &&
           "a gradient rule must give one entry per operand");
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      if (!grad || !isDifferentiable(operand))
        continue;
      Value &slot = adjoint[operand];
      slot = slot ? AddOp::create(b, op->getLoc(), slot, grad).getResult()
                  : grad;
    }
  }
  return success();
}

class MLTAutodiffPass : public mlt::impl::MLTAutodiffBase<MLTAutodiffPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(function);
    if (!forward) {
      module.emitError("mlt-autodiff: no function @")
          << function << " to differentiate";
      return signalPassFailure();
    }
    if (module.lookupSymbol(kMicroStep)) {
      module.emitError("mlt-autodiff: the module already has @") << kMicroStep;
      return signalPassFailure();
    }
    if (microbatches <= 0) {
      module.emitError("mlt-autodiff: microbatches must be positive, got ")
          << static_cast<int64_t>(microbatches);
      return signalPassFailure();
    }

    func::FuncOp step = forward.clone();
    step.setSymName(kMicroStep);
    module.getBody()->push_back(step);
    unrollRepeats(step);
    if (failed(differentiate(step, function, 1.0 / static_cast<double>(microbatches))))
      return signalPassFailure();
    step->setAttr(MLTDialect::getMicrobatchesAttrName(),
                  Builder(&getContext()).getI64IntegerAttr(microbatches));
  }
};

} // namespace
