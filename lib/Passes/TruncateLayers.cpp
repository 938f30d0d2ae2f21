//===- TruncateLayers.cpp - keep a model's first N decoder layers --------===//
//
// Part of mlt. Implements mlt-truncate-layers (Passes.td).
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlt {
#define GEN_PASS_DEF_MLTTRUNCATELAYERS
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

namespace {

class MLTTruncateLayersPass
    : public mlt::impl::MLTTruncateLayersBase<MLTTruncateLayersPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto fail = [&](const Twine &message) {
      module.emitError("mlt-truncate-layers: ") << message;
      signalPassFailure();
    };
    if (layers < 1)
      return fail("layers must be at least 1, got " + Twine(int64_t(layers)));
    if (!module.getOps<ModuleOp>().empty())
      return fail("the module is split into pipeline stages already");
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward)
      return fail("no function @forward");
    SmallVector<RepeatOp> repeats(forward.getOps<RepeatOp>());
    if (repeats.size() != 1)
      return fail("@forward must run its decoder layers as one mlt.repeat");
    RepeatOp repeat = repeats.front();
    const int64_t lower = int64_t(repeat.getLower());
    const int64_t depth = int64_t(repeat.getUpper()) - lower;
    if (layers > depth)
      return fail("the model has " + Twine(depth) + " layers, fewer than " +
                  Twine(int64_t(layers)));
    Builder builder(module.getContext());
    repeat.setUpperAttr(builder.getI64IntegerAttr(lower + layers));
    for (ParamOp param : module.getOps<ParamOp>()) {
      if (!param.isPerLayer())
        continue;
      if (param.getFirstLayer())
        return fail("parameter '" + param.getSymName() +
                    "' declares a stage's share of its layers");
      param.setLayersAttr(builder.getI64IntegerAttr(layers));
    }
    if (auto config = module->getAttrOfType<LlamaConfigAttr>(
            MLTDialect::getModelAttrName()))
      module->setAttr(
          MLTDialect::getModelAttrName(),
          LlamaConfigAttr::get(
              module.getContext(), config.getVocabSize(),
              config.getHiddenSize(), config.getIntermediateSize(), layers,
              config.getNumHeads(), config.getNumKvHeads(),
              config.getHeadDim(), config.getMaxPositionEmbeddings(),
              config.getRmsNormEps(), config.getRopeTheta(),
              config.getTieWordEmbeddings(), config.getRopeScaling(),
              config.getBosTokenId(), config.getEosTokenId(),
              config.getPadTokenId()));
  }
};

} // namespace
