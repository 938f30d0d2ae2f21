//===- Pipeline.cpp - the pass pipeline from a model to a plan ------------===//
//
// Part of mlt. buildTrainPipeline, and its registration as mlt-opt's
// `mlt-train-pipeline`, whose options are TrainOptions' fields by their
// mlt-run names.
//
//===----------------------------------------------------------------------===//

#include "mlt/Compiler/Pipeline.h"

#include "mlt/Passes/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

/// The passes on a lowered stage (or the whole model): the step's schedule,
/// ZeRO, the overlap, grouped products, the optimizer's grouped launches,
/// memory.
static void addStepPasses(OpPassManager &pm,
                          const mlt::TrainOptions &options) {
  using namespace mlt;
  // First: the products are quantized before the schedule and the overlap
  // place the step's launches, which then treat them as any other.
  if (options.fp8) {
    MLTFp8ProductsOptions fp8;
    fp8.products.assign(options.fp8Recipe.products.begin(),
                        options.fp8Recipe.products.end());
    fp8.fpropAccumulation = options.fp8Recipe.fpropAccumulation;
    fp8.format = options.fp8Recipe.format;
    fp8.bf16Parameters.assign(options.fp8Recipe.bf16Parameters.begin(),
                              options.fp8Recipe.bf16Parameters.end());
    fp8.bf16FirstLayers = options.fp8Recipe.bf16FirstLayers;
    fp8.bf16LastLayers = options.fp8Recipe.bf16LastLayers;
    pm.addPass(createMLTFp8Products(fp8));
  }
  MLTSchedulePipelineOptions schedule;
  schedule.schedule = options.schedule;
  schedule.groupSize = options.ppGroupSize;
  pm.addPass(createMLTSchedulePipeline(schedule));
  if (options.zero > 0) {
    MLTPartitionOptimizerOptions partition;
    partition.zero = options.zero;
    partition.bucketBytes = options.gradBucketBytes;
    partition.gradReduceDtype = options.gradReduceDtype;
    pm.addPass(createMLTPartitionOptimizer(partition));
  }
  if (options.overlapGradReduce ||
      (options.zero > 0 && options.overlapParamGather)) {
    MLTScheduleOverlapOptions overlap;
    overlap.bucketBytes = options.gradBucketBytes;
    overlap.overlapGradReduce = options.overlapGradReduce;
    overlap.overlapParamGather = options.overlapParamGather;
    pm.addPass(createMLTScheduleOverlap(overlap));
  }
  // After the overlap scheduling: products whose gradient a collective waits
  // for carry its token and stay as they are.
  pm.addPass(createMLTGroupProducts());
  // After the overlap scheduling, which takes the gradient all-reduces out
  // of the optimizer step: its sums of squares are then consecutive.
  pm.addPass(createMLTMultiTensor());
  pm.addPass(createMLTPlanMemory());
}

void mlt::buildTrainPipeline(OpPassManager &top, const TrainOptions &options) {
  if (options.layers > 0) {
    MLTTruncateLayersOptions truncate;
    truncate.layers = options.layers;
    top.addPass(createMLTTruncateLayers(truncate));
  }
  if (options.pp * options.tp * options.dp > 1 || options.sequenceParallel) {
    MLTAnnotateLayoutOptions layout;
    layout.pp = options.pp;
    layout.tp = options.tp;
    layout.dp = options.dp;
    layout.sequenceParallel = options.sequenceParallel;
    top.addPass(createMLTAnnotateLayout(layout));
  }
  // The global micro-batch: mlt-spmdize gives each rank its share.
  MLTSpecializeShapesOptions shapes;
  shapes.batch = options.microBatch;
  shapes.seqLen = options.seqLen;
  top.addPass(createMLTSpecializeShapes(shapes));
  MLTMixedPrecisionOptions precision;
  precision.computeType = options.dtype;
  top.addPass(createMLTMixedPrecision(precision));
  // Pipeline stages: the rest runs on each stage's module.
  OpPassManager *stagePm = &top;
  if (options.pp > 1) {
    MLTPartitionPipelineOptions partition;
    partition.layers.assign(options.ppLayers.begin(), options.ppLayers.end());
    partition.print = options.printStageSplit;
    partition.chunks = options.vp;
    top.addPass(createMLTPartitionPipeline(partition));
    stagePm = &top.nest<ModuleOp>();
  }
  OpPassManager &pm = *stagePm;
  MLTAutodiffOptions autodiff;
  autodiff.microbatches = options.microbatches;
  pm.addPass(createMLTAutodiff(autodiff));
  pm.addPass(createMLTAttachOptimizer());
  pm.addPass(createCSEPass());
  // Without a mesh (one rank) both leave the program as it is.
  pm.addPass(createMLTPropagateShardings());
  pm.addPass(createMLTSpmdize());
  // On the per-rank program, after the last CSE (which would merge each
  // clone back into its forward op).
  if (!options.recompute.empty()) {
    MLTRecomputeActivationsOptions recompute;
    recompute.ops.assign(options.recompute.begin(), options.recompute.end());
    pm.addPass(createMLTRecomputeActivations(recompute));
  }
  pm.addPass(createMLTLowerToRuntime());
  // Interleaved: each stage's model chunks, compiled apart so far, become
  // one module per stage; the rest runs on those.
  if (options.pp > 1 && options.vp > 1) {
    top.addPass(createMLTMergeChunks());
    addStepPasses(top.nest<ModuleOp>(), options);
    return;
  }
  addStepPasses(pm, options);
}

namespace {

/// TrainOptions as pipeline options, named as mlt-run's flags.
struct TrainPipelineOptions : PassPipelineOptions<TrainPipelineOptions> {
  Option<int64_t> layers{
      *this, "layers",
      llvm::cl::desc("compile the model's first N decoder layers (0: all)"),
      llvm::cl::init(0)};
  Option<int64_t> batch{*this, "batch",
                        llvm::cl::desc("sequences per micro-batch (global)"),
                        llvm::cl::init(0)};
  Option<int64_t> seqLen{*this, "seq-len",
                         llvm::cl::desc("tokens per sequence"),
                         llvm::cl::init(0)};
  Option<int64_t> microbatches{*this, "microbatches",
                               llvm::cl::desc("micro-batches per step"),
                               llvm::cl::init(1)};
  Option<std::string> dtype{*this, "dtype",
                            llvm::cl::desc("compute type: f32 or bf16"),
                            llvm::cl::init("f32")};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("tensor-parallel ranks"),
                     llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("data-parallel ranks"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("pipeline stages"),
                     llvm::cl::init(1)};
  ListOption<int64_t> ppLayers{
      *this, "pp-layers",
      llvm::cl::desc("the layers of each pipeline stage (default: balanced)")};
  Option<int64_t> vp{*this, "vp",
                     llvm::cl::desc("model chunks per pipeline stage "
                                    "(interleaved schedule)"),
                     llvm::cl::init(1)};
  Option<int64_t> ppGroupSize{
      *this, "pp-group-size",
      llvm::cl::desc("interleaved: micro-batches a chunk runs in a row "
                     "(0: pp)"),
      llvm::cl::init(0)};
  Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("split the residual stream along the sequence over tp"),
      llvm::cl::init(false)};
  Option<bool> fp8{
      *this, "fp8",
      llvm::cl::desc("with dtype=bf16: the decoder layers' products in FP8"),
      llvm::cl::init(false)};
  ListOption<std::string> fp8Products{
      *this, "fp8-products",
      llvm::cl::desc("with fp8: the products made FP8, of fprop, dgrad and "
                     "wgrad (default: all three)")};
  Option<std::string> fp8FpropAccumulation{
      *this, "fp8-fprop-accumulation",
      llvm::cl::desc("with fp8: the forward products' accumulation, fast or "
                     "f32"),
      llvm::cl::init("fast")};
  Option<std::string> fp8Format{
      *this, "fp8-format",
      llvm::cl::desc("with fp8: hybrid (e5m2 gradients) or e4m3"),
      llvm::cl::init("hybrid")};
  ListOption<std::string> fp8Bf16Parameters{
      *this, "fp8-bf16-parameters",
      llvm::cl::desc("with fp8: parameters (a part of their names) whose "
                     "products stay bf16")};
  Option<int64_t> fp8Bf16FirstLayers{
      *this, "fp8-bf16-first-layers",
      llvm::cl::desc("with fp8: the first N decoder layers keep bf16 "
                     "products"),
      llvm::cl::init(0)};
  Option<int64_t> fp8Bf16LastLayers{
      *this, "fp8-bf16-last-layers",
      llvm::cl::desc("with fp8: the last N decoder layers keep bf16 "
                     "products"),
      llvm::cl::init(0)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("1f1b, gpipe, zb-h1 or interleaved (default: 1f1b, "
                     "interleaved with vp > 1)"),
      llvm::cl::init("")};
  ListOption<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("forward ops recomputed in the backward pass "
                     "(mlt.swiglu, ...)")};
  Option<bool> overlapGradReduce{
      *this, "overlap-grad-reduce",
      llvm::cl::desc("reduce data-parallel gradients under the backward"),
      llvm::cl::init(true)};
  Option<int64_t> gradBucketBytes{
      *this, "grad-bucket-bytes",
      llvm::cl::desc("bytes of gradients per reduction bucket"),
      llvm::cl::init(int64_t(32) << 20)};
  Option<bool> overlapParamGather{
      *this, "overlap-param-gather",
      llvm::cl::desc("with zero=1, all-gather parameters under the next "
                     "step's forward"),
      llvm::cl::init(true)};
  Option<int64_t> zero{
      *this, "zero",
      llvm::cl::desc("ZeRO stage: 0, 1 (optimizer state partitioned over "
                     "dp) or 2 (gradients too)"),
      llvm::cl::init(0)};
  Option<std::string> gradReduceDtype{
      *this, "grad-reduce-dtype",
      llvm::cl::desc("with zero=2: reduce-scatter gradients in f32 or bf16"),
      llvm::cl::init("f32")};

  mlt::TrainOptions toTrainOptions() const {
    mlt::TrainOptions options;
    options.layers = layers;
    options.microBatch = batch;
    options.seqLen = seqLen;
    options.microbatches = microbatches;
    options.dtype = dtype;
    options.tp = tp;
    options.dp = dp;
    options.sequenceParallel = sequenceParallel;
    options.fp8 = fp8;
    if (!fp8Products.empty())
      options.fp8Recipe.products.assign(fp8Products.begin(), fp8Products.end());
    options.fp8Recipe.fpropAccumulation = fp8FpropAccumulation;
    options.fp8Recipe.format = fp8Format;
    options.fp8Recipe.bf16Parameters.assign(fp8Bf16Parameters.begin(),
                                            fp8Bf16Parameters.end());
    options.fp8Recipe.bf16FirstLayers = fp8Bf16FirstLayers;
    options.fp8Recipe.bf16LastLayers = fp8Bf16LastLayers;
    options.pp = pp;
    options.ppLayers.assign(ppLayers.begin(), ppLayers.end());
    options.vp = vp;
    options.ppGroupSize = ppGroupSize;
    options.schedule = !schedule.empty() ? std::string(schedule)
                       : vp > 1              ? "interleaved"
                                             : "1f1b";
    options.recompute.assign(recompute.begin(), recompute.end());
    options.overlapGradReduce = overlapGradReduce;
    options.gradBucketBytes = gradBucketBytes;
    options.zero = zero;
    options.overlapParamGather = overlapParamGather;
    options.gradReduceDtype = gradReduceDtype;
    return options;
  }
};

} // namespace

void mlt::registerTrainPipeline() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "mlt-train-pipeline",
      "compiles a model (forward pass and loss) into a lowered, scheduled, "
      "memory-planned plan module, as mlt-run does",
      [](OpPassManager &pm, const TrainPipelineOptions &options) {
        buildTrainPipeline(pm, options.toTrainOptions());
      });
}
