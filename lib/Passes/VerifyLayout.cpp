//===- VerifyLayout.cpp - the layout rule book on a model -----------------===//
//
// Part of mlt. Implements mlt-verify-layout (Passes.td): the rule book of
// mlt/Layout/LayoutRules.h held to the module's model, as the first pass of
// mlt-train-pipeline; and modelShapeOf, the model's shape as the rule book
// reads it, which mlt-run's compile driver uses too.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTOps.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Passes/Passes.h"

namespace mlt {
#define GEN_PASS_DEF_MLTVERIFYLAYOUT
#include "mlt/Passes/Passes.h.inc"
} // namespace mlt

using namespace mlir;
using namespace mlt;

std::optional<ModelShape> mlt::modelShapeOf(ModuleOp module) {
  auto config =
      module->getAttrOfType<LlamaConfigAttr>(MLTDialect::getModelAttrName());
  if (!config)
    return std::nullopt;
  ModelShape shape;
  shape.vocab = config.getVocabSize();
  shape.hidden = config.getHiddenSize();
  shape.intermediate = config.getIntermediateSize();
  shape.heads = config.getNumHeads();
  shape.kvHeads = config.getNumKvHeads();
  shape.headDim = config.getHeadDim();
  shape.layers = config.getNumLayers();
  shape.maxPositions = config.getMaxPositionEmbeddings();
  shape.tiedEmbeddings =
      config.getTieWordEmbeddings() && config.getTieWordEmbeddings().getValue();
  // The forward ops the backward pass reads activations of: those of the
  // mlt dialect with a gradient rule.
  for (RegisteredOperationName name :
       module.getContext()->getRegisteredOperations())
    if (name.getDialectNamespace() == MLTDialect::getDialectNamespace() &&
        name.hasInterface<GradientOpInterface>())
      shape.recomputable.push_back(name.getStringRef().str());
  return shape;
}

namespace {

class MLTVerifyLayoutPass
    : public mlt::impl::MLTVerifyLayoutBase<MLTVerifyLayoutPass> {
public:
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    StatusOr<Layout> parsed = parseLayoutOptionText(layout);
    if (!parsed) {
      module.emitError("mlt-verify-layout: ") << parsed.status().message();
      return signalPassFailure();
    }
    std::optional<ModelShape> model = modelShapeOf(module);
    if (!model) {
      module.emitError("mlt-verify-layout: the module has no model "
                       "configuration ('")
          << MLTDialect::getModelAttrName() << "')";
      return signalPassFailure();
    }
    const std::vector<Violation> violations =
        verify(*parsed, *model, StepShape{batch, seqLen});
    // (at the module's location, without the module printed after each)
    for (const Violation &violation : violations)
      mlir::emitError(module.getLoc()) << violation.text();
    if (!violations.empty())
      signalPassFailure();
  }
};

} // namespace
