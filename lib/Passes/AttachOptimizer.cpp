//===- AttachOptimizer.cpp - the AdamW step of a training program ---------===//
//
// Part of mlt. Implements mlt-attach-optimizer: `@optimizer_step` computes the
// global gradient norm, the clipping coefficient, and one AdamW update per
// parameter (per layer of a per-layer family).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

namespace mlt {
#define GEN_PASS_DEF_MLTATTACHOPTIMIZER
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

constexpr llvm::StringLiteral kOptimizerStep = "optimizer_step";

/// One parameter tensor: a plain parameter, or one layer of a family.
struct ParamSlot {
  ParamOp param;
  Value layer; // null for a plain parameter
  Value grad;
};

class MLTAttachOptimizerPass
    : public mlt::impl::MLTAttachOptimizerBase<MLTAttachOptimizerPass> {
public:
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.lookupSymbol(kOptimizerStep)) {
      module.emitError("mlt-attach-optimizer: the module already has @")
          << kOptimizerStep;
      return signalPassFailure();
    }
    SmallVector<ParamOp> params(module.getOps<ParamOp>());
    if (params.empty()) {
      module.emitError("mlt-attach-optimizer: the module declares no "
                       "parameters (mlt.param)");
      return signalPassFailure();
    }

    Location loc = module.getLoc();
    OpBuilder b(&getContext());
    b.setInsertionPointToEnd(module.getBody());
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    auto func = func::FuncOp::create(b, loc, kOptimizerStep,
                                       b.getFunctionType({}, {scalar}));
    b.setInsertionPointToStart(func.addEntryBlock());

    llvm::StringMap<Value> hyper;
    for (StringRef name : HyperparameterOp::getKnownNames())
      hyper[name] = HyperparameterOp::create(b, loc, scalar, name);

    // Gradients and their squared norms, in declaration order.
    SmallVector<ParamSlot> slots;
    SmallVector<Value> sums;
    for (ParamOp param : params) {
      for (int64_t layer = param.getLayerBegin(); layer < param.getLayerEnd();
           ++layer) {
        Value index = param.isPerLayer()
                          ? arith::ConstantIndexOp::create(b, loc, layer)
                                .getResult()
                          : Value();
        Value grad = LoadGradOp::create(b, loc, param.getTensorType(),
                                          param.getSymNameAttr().getValue(),
                                          index);
        slots.push_back({param, index, grad});
        sums.push_back(SumSquaresOp::create(b, loc, grad));
      }
    }
    Value norm = GlobalNormOp::create(b, loc, scalar, sums);
    Value coef =
        ClipCoefficientOp::create(b, loc, scalar, norm, hyper["max_grad_norm"]);

    for (ParamSlot &slot : slots) {
      // PyTorch convention for LLaMA: decay matrices (embeddings included),
      // not vectors (norm weights).
      bool decay = slot.param.getTensorType().getRank() >= 2;
      AdamWOp::create(b, 
          loc,
          FlatSymbolRefAttr::get(b.getContext(), slot.param.getSymName()),
          slot.layer, slot.grad, coef, hyper["lr"], hyper["beta1"],
          hyper["beta2"], hyper["eps"], hyper["weight_decay"], hyper["step"],
          decay ? b.getUnitAttr() : nullptr);
    }
    func::ReturnOp::create(b, loc, norm);
  }
};

} // namespace
