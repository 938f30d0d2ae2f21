//===- Driver.cpp - compile a model into a plan, in process ---------------===//
//
// Part of mlt. From a model (a `.mlir` file or an HF config) to plan bytes:
// load it, run the training pipeline (Pipeline.h, the one mlt-opt registers
// as mlt-train-pipeline), serialize.
//
//===----------------------------------------------------------------------===//

#include "mlt/Compiler/Driver.h"
#include "mlt/Analysis/PipelineSchedule.h"
#include "mlt/Compiler/Pipeline.h"

#include "mlt/Dialect/MLT/MLTDialect.h"
#include "mlt/Dialect/Runtime/RuntimeDialect.h"
#include "mlt/Import/HFLlama.h"
#include "mlt/Passes/Passes.h"
#include "mlt/Support/Threads.h"
#include "mlt/Target/PlanExport.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

namespace {

/// Keeps the first error diagnostic as one line: "file:line:col: message".
class FirstError {
public:
  explicit FirstError(MLIRContext &context)
      : handler(&context, [this](Diagnostic &diag) {
          if (diag.getSeverity() == DiagnosticSeverity::Error &&
              message.empty()) {
            llvm::raw_string_ostream os(message);
            if (auto loc = dyn_cast<FileLineColLoc>(diag.getLocation()))
              os << loc.getFilename().getValue() << ":" << loc.getLine() << ":"
                 << loc.getColumn() << ": ";
            os << diag.str();
          }
          return success();
        }) {}
  std::string message;

private:
  ScopedDiagnosticHandler handler;
};

OwningOpRef<ModuleOp> loadModel(const std::string &model, MLIRContext &context,
                                std::string &error) {
  llvm::StringRef path = model;
  if (path.ends_with(".mlir")) {
    if (!llvm::sys::fs::exists(path)) {
      error = model + ": no such file";
      return nullptr;
    }
    llvm::SourceMgr sourceMgr;
    std::string includeError;
    if (sourceMgr.AddIncludeFile(model, llvm::SMLoc(), includeError) == 0) {
      error = model + ": cannot read";
      return nullptr;
    }
    return parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  llvm::Expected<mlt::LlamaConfig> config = mlt::readHFLlamaConfig(path);
  if (!config) {
    error = llvm::toString(config.takeError());
    return nullptr;
  }
  // f32 parameters (the master weights) whatever the compute type:
  // mlt-mixed-precision gives the forward pass its bf16 copies.
  mlt::LlamaBuildOptions build;
  build.dtype = "f32";
  auto module = mlt::buildLlamaModule(context, *config, build);
  if (!module) {
    error = llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

/// The model of `path` loaded alone (no compile), for what is read off it:
/// its configuration, or a one-line error.
struct LoadedModel {
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
  OwningOpRef<ModuleOp> module;
  mlt::LlamaConfigAttr config;

  bool load(const std::string &path, std::string &error) {
    registry.insert<mlt::MLTDialect, func::FuncDialect, arith::ArithDialect>();
    context = std::make_unique<MLIRContext>(registry,
                                            MLIRContext::Threading::DISABLED);
    context->loadAllAvailableDialects();
    FirstError diagnostics(*context);
    module = loadModel(path, *context, error);
    if (!module) {
      if (error.empty())
        error = !diagnostics.message.empty()
                    ? diagnostics.message
                    : path + ": cannot parse the model";
      return false;
    }
    config = (*module)->getAttrOfType<mlt::LlamaConfigAttr>(
        mlt::MLTDialect::getModelAttrName());
    if (!config) {
      error = path + ": the model has no configuration ('mlt.model')";
      return false;
    }
    return true;
  }
};

} // namespace

bool mlt::readModelShape(const std::string &model, ModelShape &shape,
                         std::string &error) {
  LoadedModel loaded;
  if (!loaded.load(model, error))
    return false;
  shape = *modelShapeOf(*loaded.module);
  return true;
}

bool mlt::stageSplitOf(const CompileOptions &options, int64_t &numLayers,
                       std::vector<int64_t> &split, std::string &error) {
  LoadedModel loaded;
  if (!loaded.load(options.model, error))
    return false;
  const Layout &layout = options.layout;
  numLayers = loaded.config.getNumLayers();
  if (layout.pp <= 1) {
    split = {numLayers};
    return true;
  }
  split = pipelineStageSplit(loaded.config, numLayers, options.seqLen,
                             layout.ppLayers, layout.pp, layout.vp, error);
  return !split.empty();
}

bool mlt::compileToPlan(const CompileOptions &options, std::string &planBytes,
                        std::string &error, rt::Plan *plan) {
  DialectRegistry registry;
  registry.insert<mlt::MLTDialect, mlt::rt_ir::MLTRTDialect, func::FuncDialect,
                  arith::ArithDialect>();
  // (one thread where the process cannot start a pool: under a tight
  // address-space limit LLVM's pool would abort it)
  MLIRContext context(registry, options.threads && canStartThreadPool()
                                    ? MLIRContext::Threading::ENABLED
                                    : MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  FirstError diagnostics(context);

  auto fail = [&](const std::string &fallback) {
    error = !diagnostics.message.empty() ? diagnostics.message : fallback;
    return false;
  };

  OwningOpRef<ModuleOp> module = loadModel(options.model, context, error);
  if (!module)
    return fail(error.empty() ? options.model + ": cannot parse the model"
                              : error);

  // The rule book, before anything is compiled: its first refusal (the
  // pipeline's mlt-verify-layout would say the same, after a truncation).
  const Layout &layout = options.layout;
  if (options.layers == 0)
    if (std::optional<ModelShape> shape = modelShapeOf(*module)) {
      std::vector<Violation> violations =
          verify(layout, *shape, options.step());
      if (!violations.empty()) {
        error = violations.front().text();
        return false;
      }
    }
  // The schedule, kept for the predicted bubble (the rule book has
  // accepted it).
  const ScheduleKind kind = layout.scheduleKind();
  std::optional<PipelineSchedule> schedule;
  if (layout.pp > 1)
    schedule = buildStageSchedule(kind, layout.pp, layout.vp,
                                  layout.microbatches, layout.ppGroupSize);
  PassManager pm(&context);
  pm.enableVerifier(options.verifyPasses);
  buildTrainPipeline(pm, options);
  if (failed(pm.run(*module)))
    return fail(options.model + ": compilation failed");
  if (!options.target.empty())
    (*module)->setAttr("mlt_rt.target",
                       StringAttr::get(&context, options.target));
  if (failed(exportPlan(*module, planBytes, plan, options.representatives)))
    return fail(options.model + ": plan export failed");
  if (options.printStageSplit) {
    // The schedule's bubble with the split's stage times and with equal
    // stages (a backward twice a forward; zb-h1: F = B = W).
    auto costs = (*module)->getAttrOfType<DenseF64ArrayAttr>(
        MLTDialect::getStageCostsAttrName());
    if (schedule) {
      auto bubble = [&](const std::vector<double> &scale) {
        return 100.0 * (splitsWeightGradients(kind)
                            ? schedule->simulate(1.0, 1.0, 1.0, scale)
                            : schedule->simulate(1.0, 2.0, 0.0, scale))
                           .bubble();
      };
      std::vector<double> scale;
      if (costs && int64_t(costs.size()) == layout.pp * layout.vp) {
        double mean = 0.0;
        for (double cost : costs.asArrayRef())
          mean += cost / double(costs.size());
        for (double cost : costs.asArrayRef())
          scale.push_back(mean > 0 ? cost / mean : 1.0);
      }
      llvm::errs() << llvm::format(
          "predicted bubble of the %s schedule with %lld micro-batches: "
          "%.1f%% with the split's stage times, %.1f%% with equal stages "
          "(%s)\n",
          scheduleKindName(kind), (long long)layout.microbatches, bubble(scale),
          bubble({}),
          splitsWeightGradients(kind) ? "F = B = W" : "backward = 2 x forward");
    }
    // Each stage's memory: its ranks' planned arena (exact, as
    // --report-memory details it).
    std::string memory;
    for (ModuleOp stage : module->getOps<ModuleOp>()) {
      auto index =
          stage->getAttrOfType<IntegerAttr>(MLTDialect::getStageAttrName());
      auto arena = stage->getAttrOfType<IntegerAttr>("mlt_rt.arena_bytes");
      if (!index || !arena)
        continue;
      memory += llvm::formatv("{0}stage {1} {2:f1} MiB",
                              memory.empty() ? "" : ", ", index.getInt(),
                              double(arena.getInt()) / double(1 << 20))
                    .str();
    }
    if (!memory.empty())
      llvm::errs() << "planned memory per rank (its arena): " << memory << "\n";
  }
  return true;
}
