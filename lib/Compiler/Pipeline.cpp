//===- Pipeline.cpp - the pass pipeline from a model to a plan ------------===//
//
// Part of mlt. buildTrainPipeline, and its registration as mlt-opt's
// `mlt-train-pipeline`, whose options are the step's (batch, seq-len,
// layers, eval) and the layout's, by the names of mlt/Layout/LayoutOptions.h's
// table (the names mlt-run's flags have).
//
//===----------------------------------------------------------------------===//

#include "mlt/Compiler/Pipeline.h"

#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <deque>

using namespace mlir;

/// The passes on a lowered stage (or the whole model): the step's schedule,
/// ZeRO, the overlap, grouped products, the optimizer's grouped launches,
/// memory.
static void addStepPasses(OpPassManager &pm, const mlt::TrainOptions &options) {
  using namespace mlt;
  const Layout &layout = options.layout;
  // First: the products are quantized before the schedule and the overlap
  // place the step's launches, which then treat them as any other.
  if (layout.fp8) {
    const Fp8Recipe &recipe = layout.fp8Recipe;
    MLTFp8ProductsOptions fp8;
    fp8.products.assign(recipe.products.begin(), recipe.products.end());
    fp8.fpropAccumulation = recipe.fpropAccumulation;
    fp8.format = recipe.format;
    fp8.bf16Parameters.assign(recipe.bf16Parameters.begin(),
                              recipe.bf16Parameters.end());
    fp8.bf16FirstLayers = recipe.bf16FirstLayers;
    fp8.bf16LastLayers = recipe.bf16LastLayers;
    pm.addPass(createMLTFp8Products(fp8));
  }
  MLTSchedulePipelineOptions schedule;
  schedule.schedule = scheduleKindName(layout.scheduleKind());
  schedule.groupSize = layout.ppGroupSize;
  pm.addPass(createMLTSchedulePipeline(schedule));
  if (layout.zero > 0) {
    MLTPartitionOptimizerOptions partition;
    partition.zero = layout.zero;
    partition.bucketBytes = layout.gradBucketBytes;
    partition.gradReduceDtype =
        layout.gradReduceDtype == Precision::BF16 ? "bf16" : "f32";
    pm.addPass(createMLTPartitionOptimizer(partition));
  }
  if (layout.overlapGradReduce ||
      (layout.zero > 0 && layout.overlapParamGather)) {
    MLTScheduleOverlapOptions overlap;
    overlap.bucketBytes = layout.gradBucketBytes;
    overlap.overlapGradReduce = layout.overlapGradReduce;
    overlap.overlapParamGather = layout.overlapParamGather;
    pm.addPass(createMLTScheduleOverlap(overlap));
  }
  // After the overlap scheduling: products whose gradient a collective waits
  // for carry its token and stay as they are.
  pm.addPass(createMLTGroupProducts());
  // After the products are grouped (a group of weight gradients moves as
  // one launch).
  if (layout.tp > 1 && layout.overlapTpComm)
    pm.addPass(createMLTOverlapTpComm(options.costs));
  if (layout.cp > 1 && layout.cpComm == ContextExchange::Ring)
    pm.addPass(createMLTOverlapCpComm());
  // After the overlap scheduling, which takes the gradient all-reduces out
  // of the optimizer step: its sums of squares are then consecutive.
  pm.addPass(createMLTMultiTensor());
  // The reductions placed (and the optimizer's launches grouped, which name
  // each gradient alone): a run of them as one flat buffer's.
  pm.addPass(createMLTCoalesceReductions());
  // The bodies and the step are final: a weight quantized once a step.
  if (layout.fp8) {
    MLTKeepWeightFp8Options keep;
    keep.copies = layout.fp8Recipe.weightCache;
    pm.addPass(createMLTKeepWeightFp8(keep));
    // The launches final: the activations' and gradients' amax from the
    // kernels that write them.
    pm.addPass(createMLTFuseAmax());
  }
  pm.addPass(createMLTPlanMemory());
}

void mlt::buildTrainPipeline(OpPassManager &top, const TrainOptions &options) {
  const Layout &layout = options.layout;
  if (options.layers > 0) {
    MLTTruncateLayersOptions truncate;
    truncate.layers = options.layers;
    top.addPass(createMLTTruncateLayers(truncate));
  }
  // The rule book, on the model (truncated) as compiled.
  MLTVerifyLayoutOptions verify;
  verify.layout = layoutOptionText(layout);
  verify.batch = options.batch;
  verify.seqLen = options.seqLen;
  top.addPass(createMLTVerifyLayout(verify));
  if (layout.ranks() > 1 || layout.sequenceParallel) {
    MLTAnnotateLayoutOptions annotate;
    annotate.pp = layout.pp;
    annotate.tp = layout.tp;
    annotate.dp = layout.dp;
    annotate.cp = layout.cp;
    annotate.sequenceParallel = layout.sequenceParallel;
    annotate.cpComm = contextExchangeName(layout.cpComm);
    top.addPass(createMLTAnnotateLayout(annotate));
  }
  // The global micro-batch: mlt-spmdize gives each rank its share.
  MLTSpecializeShapesOptions shapes;
  shapes.batch = options.microBatch();
  shapes.seqLen = options.seqLen;
  top.addPass(createMLTSpecializeShapes(shapes));
  MLTMixedPrecisionOptions precision;
  precision.computeType = layout.dtype == Precision::BF16 ? "bf16" : "f32";
  top.addPass(createMLTMixedPrecision(precision));
  // Pipeline stages: the rest runs on each stage's module.
  OpPassManager *stagePm = &top;
  if (layout.pp > 1) {
    MLTPartitionPipelineOptions partition;
    partition.layers.assign(layout.ppLayers.begin(), layout.ppLayers.end());
    partition.print = options.printStageSplit;
    partition.chunks = layout.vp;
    top.addPass(createMLTPartitionPipeline(partition));
    stagePm = &top.nest<ModuleOp>();
  }
  OpPassManager &pm = *stagePm;
  // The evaluation body: a clone of each stage's forward pass, before
  // autodiff makes the training one, which every later pass carries along.
  if (options.evaluation)
    pm.addPass(createMLTAttachEvaluation());
  MLTAutodiffOptions autodiff;
  autodiff.microbatches = layout.microbatches;
  pm.addPass(createMLTAutodiff(autodiff));
  pm.addPass(createMLTAttachOptimizer());
  pm.addPass(createCSEPass());
  // Without a mesh (one rank) both leave the program as it is.
  pm.addPass(createMLTPropagateShardings());
  pm.addPass(createMLTSpmdize());
  // On the per-rank program, after the last CSE (which would merge each
  // clone back into its forward op).
  // Whole layers first: mlt-recompute-activations then leaves their clones
  // (the backward pass's) alone.
  if (layout.recomputeLayers > 0) {
    MLTRecomputeLayersOptions layers;
    layers.every = layout.recomputeLayers;
    pm.addPass(createMLTRecomputeLayers(layers));
  }
  if (!layout.recompute.empty()) {
    MLTRecomputeActivationsOptions recompute;
    recompute.ops.assign(layout.recompute.begin(), layout.recompute.end());
    pm.addPass(createMLTRecomputeActivations(recompute));
  }
  // After the recomputation passes, so that a recomputed attention (a
  // clone of the gathered one) becomes ring steps too.
  if (layout.cp > 1 && layout.cpComm == ContextExchange::Ring)
    pm.addPass(createMLTRingAttention());
  pm.addPass(createMLTLowerToRuntime());
  // Interleaved: each stage's model chunks, compiled apart so far, become
  // one module per stage; the rest runs on those.
  if (layout.pp > 1 && layout.vp > 1) {
    top.addPass(createMLTMergeChunks());
    addStepPasses(top.nest<ModuleOp>(), options);
    return;
  }
  addStepPasses(pm, options);
}

namespace {

/// mlt-train-pipeline's options: the step's, then the layout's from its
/// table (a switch as a bool option, given alone or `=true|false`; every
/// other as text for the layout's own parser, so a value is read and
/// refused as mlt-run reads and refuses it).
struct TrainPipelineOptions : PassPipelineOptions<TrainPipelineOptions> {
  Option<int64_t> layers{
      *this, "layers",
      llvm::cl::desc("compile the model's first N decoder layers (0: all)"),
      llvm::cl::init(0)};
  Option<int64_t> batch{
      *this, "batch",
      llvm::cl::desc("sequences per step, over every micro-batch and "
                     "data-parallel rank (mlt-run's --batch)"),
      llvm::cl::init(0)};
  Option<int64_t> seqLen{*this, "seq-len",
                         llvm::cl::desc("tokens per sequence"),
                         llvm::cl::init(0)};
  Option<bool> evaluation{
      *this, "eval",
      llvm::cl::desc("also compile the evaluation body (eval_forward) and "
                     "step that mlt-run --eval-data and --split run"),
      llvm::cl::init(false)};
  std::deque<Option<std::string>> values;
  std::deque<Option<bool>> switches;

  TrainPipelineOptions() {
    for (const mlt::LayoutOption &option : mlt::layoutOptions()) {
      if (option.isSwitch())
        switches.emplace_back(*this, option.name, llvm::cl::desc(option.help),
                              llvm::cl::init(false));
      else
        values.emplace_back(*this, option.name, llvm::cl::desc(option.help),
                            llvm::cl::value_desc(option.value));
    }
  }

  /// The options as a TrainOptions; fails on a layout value its parser
  /// refuses.
  mlt::StatusOr<mlt::TrainOptions> toTrainOptions() const {
    mlt::TrainOptions options;
    options.layers = layers;
    options.batch = batch;
    options.seqLen = seqLen;
    options.evaluation = evaluation;
    auto value = values.begin();
    auto flag = switches.begin();
    for (const mlt::LayoutOption &option : mlt::layoutOptions()) {
      std::optional<std::string> text;
      if (option.isSwitch()) {
        if (flag->hasValue())
          text = bool(*flag) ? "on" : "off";
        ++flag;
      } else {
        if (value->hasValue())
          text = std::string(*value);
        ++value;
      }
      if (text)
        MLT_RETURN_IF_ERROR(
            mlt::setLayoutOption(options.layout, option, *text, option.name));
    }
    return options;
  }
};

} // namespace

void mlt::registerTrainPipeline() {
  registerPassPipeline(
      "mlt-train-pipeline",
      "compiles a model (forward pass and loss) into a lowered, scheduled, "
      "memory-planned plan module, as mlt-run does",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        TrainPipelineOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        StatusOr<TrainOptions> train = options.toTrainOptions();
        if (!train)
          return errorHandler("mlt-train-pipeline: " +
                              train.status().message());
        buildTrainPipeline(pm, *train);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> handler) {
        handler(TrainPipelineOptions());
      });
}
