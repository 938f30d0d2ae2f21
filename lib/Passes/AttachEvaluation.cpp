//===- AttachEvaluation.cpp - the forward-only body of evaluation ---------===//
//
// Part of mlt. Implements mlt-attach-evaluation: `@eval_forward`, the
// forward pass and loss of `@forward` unrolled, which the later passes
// carry beside `@micro_step` into the plan's evaluation step.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Plan/PlanFormat.h"

namespace mlt {
#define GEN_PASS_DEF_MLTATTACHEVALUATION
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

/// Algorithm:
/// 1. check `@function`: it returns the loss (a float scalar), or, as a
///    pipeline stage before the last, nothing and sends its output with
///    mlt.send; its shapes are static;
/// 2. clone it as `@eval_forward` at the end of the module and unroll its
///    `mlt.repeat`s (a program function: programFunctions lists it).
class MLTAttachEvaluationPass
    : public mlt::impl::MLTAttachEvaluationBase<MLTAttachEvaluationPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const StringRef name = rt::kEvalForwardProgram;
    auto fail = [&](Operation *at) {
      return at->emitError("mlt-attach-evaluation: ");
    };
    auto forward = module.lookupSymbol<func::FuncOp>(function);
    if (!forward || forward.isExternal()) {
      fail(module) << "no function @" << function << " to evaluate";
      return signalPassFailure();
    }
    if (module.lookupSymbol(name)) {
      fail(module) << "the module already has @" << name;
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
    const bool sends = !forward.getOps<SendOp>().empty();
    if (ret.getNumOperands() > 1 || (ret.getNumOperands() == 0 && !sends)) {
      fail(forward) << "@" << function
                    << " must return exactly the loss (or, as a pipeline "
                       "stage before the last, nothing and send its output "
                       "with mlt.send)";
      return signalPassFailure();
    }
    if (ret.getNumOperands() == 1) {
      auto loss = dyn_cast<RankedTensorType>(ret.getOperand(0).getType());
      if (!loss || loss.getRank() != 0 ||
          !isa<FloatType>(loss.getElementType())) {
        fail(forward) << "the loss must be a float scalar tensor, got "
                      << ret.getOperand(0).getType();
        return signalPassFailure();
      }
    }
    WalkResult dynamic = forward.walk([&](Operation *op) {
      for (Type type : op->getResultTypes())
        if (auto tensor = dyn_cast<RankedTensorType>(type);
            tensor && !tensor.hasStaticShape()) {
          op->emitOpError("has a dynamic result type ")
              << type << "; run mlt-specialize-shapes before "
              << "mlt-attach-evaluation";
          return WalkResult::interrupt();
        }
      return WalkResult::advance();
    });
    if (dynamic.wasInterrupted())
      return signalPassFailure();

    func::FuncOp evaluation = forward.clone();
    evaluation.setSymName(name);
    module.getBody()->push_back(evaluation);
    unrollRepeats(evaluation);
  }
};

} // namespace
