//===- HFConfigFuzzer.cpp - libFuzzer target: HF config.json import -------===//
//
// Part of mlt. Reads each input as an HF config.json (parseHFLlamaConfig,
// what readHFLlamaConfig and mlt-run MODEL_DIR do with the file's text).
// A config that imports must build its model (buildLlamaModule: the module
// verifies), and survive a round trip through the config.json that plans
// carry and --save-hf writes (hfConfigJson): read again, by the importer and
// by the runtime's reader of a plan's config (ModelConfig.h), it is the same
// model. Any crash, hang (a deep or long text), leak, undefined behaviour
// or allocation past -malloc_limit_mb is a bug in the importer.
//
//===----------------------------------------------------------------------===//

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Plan/ModelConfig.h"
#include "mlt/Target/PlanExport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdio>
#include <cstdlib>

using namespace mlt;

namespace {

[[noreturn]] void fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "mlt-fuzz-hf-config: %s\n%s\n", what, detail.c_str());
  std::abort();
}

bool same(const LlamaConfig &a, const LlamaConfig &b) {
  return a.vocabSize == b.vocabSize && a.hiddenSize == b.hiddenSize &&
         a.intermediateSize == b.intermediateSize &&
         a.numLayers == b.numLayers && a.numHeads == b.numHeads &&
         a.numKvHeads == b.numKvHeads && a.headDim == b.headDim &&
         a.maxPositionEmbeddings == b.maxPositionEmbeddings &&
         a.rmsNormEps == b.rmsNormEps && a.ropeTheta == b.ropeTheta &&
         a.ropeScaling == b.ropeScaling &&
         a.tieWordEmbeddings == b.tieWordEmbeddings &&
         a.bosTokenId == b.bosTokenId && a.eosTokenId == b.eosTokenId &&
         a.padTokenId == b.padTokenId;
}

/// One context for every input: types and attributes are uniqued in it for
/// good, but a context per input would be most of the time spent.
mlir::MLIRContext &context() {
  static mlir::MLIRContext *context = [] {
    auto *created = new mlir::MLIRContext();
    created->getOrLoadDialect<MLTDialect>();
    created->getOrLoadDialect<mlir::func::FuncDialect>();
    // Diagnostics are the errors under test, not output.
    created->printOpOnDiagnostic(false);
    return created;
  }();
  return *context;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<LlamaConfig> config = parseHFLlamaConfig(text, "config.json");
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  (void)config->numParameters();

  mlir::ScopedDiagnosticHandler quiet(&context(), [](mlir::Diagnostic &) {
    return mlir::success();
  });
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> module =
      buildLlamaModule(context(), *config);
  if (!module)
    fail("a config that imports does not build its model:",
         llvm::toString(module.takeError()));

  const std::string written = hfConfigJson(*config);
  llvm::Expected<LlamaConfig> reread =
      parseHFLlamaConfig(written, "written config.json");
  if (!reread)
    fail("the config.json written for an imported config does not import:",
         llvm::toString(reread.takeError()) + "\n" + written);
  if (!same(*config, *reread))
    fail("the config.json written for an imported config imports as "
         "another config:",
         written);

  // The runtime's reader of a plan's config (ModelConfig.h) reads that
  // config.json as the importer does.
  StatusOr<rt::PlanConfig> plan = rt::parsePlanConfig(written);
  if (!plan || !plan->llama)
    fail("the runtime does not read the config.json written for an "
         "imported config as a LLaMA:",
         (plan ? std::string("no whole LLaMA") : plan.status().message()) +
             "\n" + written);
  const rt::LlamaShape &l = *plan->llama;
  if (l.vocabSize != config->vocabSize || l.hiddenSize != config->hiddenSize ||
      l.intermediateSize != config->intermediateSize ||
      l.numLayers != config->numLayers || l.numHeads != config->numHeads ||
      l.numKvHeads != config->numKvHeads || l.headDim != config->headDim ||
      l.tieWordEmbeddings != config->tieWordEmbeddings ||
      l.rmsNormEps != config->rmsNormEps || l.ropeTheta != config->ropeTheta ||
      l.ropeScaling != config->ropeScaling ||
      plan->maxPositionEmbeddings != config->maxPositionEmbeddings)
    fail("the runtime reads the config.json written for an imported config "
         "as another model:",
         written);
  return 0;
}
