//===- Driver.h - compile a model into a plan, in process ------*- C++ -*-===//
//
// Part of mlt. The one entry point through which a tool that links the
// compiler (mlt-run built with MLT_ENABLE_COMPILER) turns a model into plan
// bytes: a `.mlir` model file, or an HF model directory / config.json, goes
// through the same pass pipeline as `mlt-opt` and the plan exporter. The
// header has no MLIR types so the runtime-side tool can include it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_COMPILER_DRIVER_H
#define MLT_COMPILER_DRIVER_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlt {
namespace rt {
struct Plan;
} // namespace rt

/// How a training program is compiled: the one set of options of the pass
/// pipeline (buildTrainPipeline in Pipeline.h), which `mlt-run` fills from
/// its flags and `mlt-opt --mlt-train-pipeline="..."` from its pipeline
/// options. Plain values, so that the runtime-side tool can include it.
struct TrainOptions {
  /// Compile the model's first `layers` decoder layers (mlt-truncate-layers;
  /// 0: all of them): the planner's shallow compiles.
  int64_t layers = 0;
  /// Sequences per micro-batch, tokens per sequence, micro-batches per step.
  int64_t microBatch = 0;
  int64_t seqLen = 0;
  int64_t microbatches = 1;
  /// The compute type (mlt-mixed-precision): "f32", or "bf16" for bf16
  /// activations and weight copies on f32 master weights.
  std::string dtype = "f32";
  /// With bf16: the decoder layers' products on FP8 tensor cores
  /// (mlt-fp8-products), as `fp8Recipe` says.
  bool fp8 = false;
  /// mlt-fp8-products' options (Passes.td), by their mlt-run names
  /// (--fp8-...): the products made FP8, of "fprop" (x W^T), "dgrad" (dy W)
  /// and "wgrad" (dy^T x); the forward products' accumulation, "fast" (the
  /// tensor cores' FP8 accumulator) or "f32"; how many of the first and last
  /// decoder layers keep bf16 products; the format; parameters kept bf16.
  struct Fp8Recipe {
    std::vector<std::string> products = {"fprop", "dgrad", "wgrad"};
    std::string fpropAccumulation = "fast";
    /// "hybrid" (e5m2 gradients) or "e4m3" (everything e4m3).
    std::string format = "hybrid";
    /// Parameters (by a part of their names) whose products stay bf16.
    std::vector<std::string> bf16Parameters;
    int64_t bf16FirstLayers = 0, bf16LastLayers = 0;
  } fp8Recipe;
  /// The layout (mlt-annotate-layout): tensor-parallel and data-parallel
  /// ranks, and whether the residual stream is split along the sequence
  /// over the tensor-parallel ranks. The plan has tp * dp ranks; microBatch
  /// is the global micro-batch, which the data-parallel ranks share.
  int64_t tp = 1, dp = 1;
  bool sequenceParallel = false;
  /// Pipeline stages (mlt-partition-pipeline): the plan has pp * dp * tp
  /// ranks, stage s on the ranks whose coordinate on `pp` is s. ppLayers:
  /// the layers of each stage; empty: balanced by predicted time.
  int64_t pp = 1;
  std::vector<int64_t> ppLayers;
  /// Model chunks per pipeline stage (interleaved schedules): the layers
  /// split into pp * vp virtual stages, chunk c of stage s holding virtual
  /// stage c * pp + s (ppLayers then gives one count per virtual stage).
  /// ppGroupSize: the micro-batches a chunk runs in a row (Megatron's
  /// microbatch_group_size_per_vp_stage); 0: pp.
  int64_t vp = 1;
  int64_t ppGroupSize = 0;
  /// Print the stage split with each stage's predicted share (stderr).
  bool printStageSplit = false;
  /// The order of the micro-batches' passes in the step
  /// (mlt-schedule-pipeline): "1f1b", "gpipe", "zb-h1" or, with vp > 1,
  /// "interleaved".
  std::string schedule = "1f1b";
  /// Forward op kinds recomputed in the backward pass instead of kept
  /// (mlt-recompute-activations), by full name ("mlt.swiglu"); none when
  /// empty.
  std::vector<std::string> recompute;
  /// mlt-schedule-overlap: reduce the data-parallel gradients under the last
  /// micro-batch's backward pass, in buckets of at least gradBucketBytes (0:
  /// one per gradient), rather than after it in the optimizer step.
  bool overlapGradReduce = true;
  int64_t gradBucketBytes = int64_t(32) << 20;
  /// mlt-partition-optimizer: the ZeRO stage, 0 (every data-parallel rank
  /// keeps the whole optimizer state) or 1 (each keeps its slice of flat
  /// buckets of gradBucketBytes).
  int64_t zero = 0;
  /// mlt-schedule-overlap, with zero > 0: all-gather the updated parameter
  /// buckets under the next step's first forward pass rather than at the
  /// end of the optimizer step.
  bool overlapParamGather = true;
  /// mlt-partition-optimizer, with zero == 2: the type gradients are
  /// reduce-scattered in, "f32" or "bf16" (the matrix products' gradients
  /// computed in bf16 and reduced in bf16).
  std::string gradReduceDtype = "f32";
};

/// What a training plan is compiled from and for.
struct CompileOptions : TrainOptions {
  /// A `.mlir` model, an HF `config.json`, or a directory holding one.
  std::string model;
  /// The GPU architecture the plan is for ("sm_90"), recorded in the plan
  /// so that a device of another architecture refuses it; empty: any.
  std::string target;
  /// Export one rank per pipeline stage (rt::isRepresentativePlan), from
  /// which the cost model predicts the whole step: how the planner compiles
  /// its candidates. Not a plan to run.
  bool representatives = false;
  /// Compile a pipeline's stages on the context's threads (MLIR's
  /// multithreading); off where the caller runs compiles side by side.
  bool threads = true;
  /// Verify the IR after every pass (the planner's candidates skip it: the
  /// layout it chooses is compiled again with it).
  bool verifyPasses = true;
};

/// Compiles `options.model` into a serialized plan. On failure returns false
/// and sets `error` to one line naming the problem (diagnostics of the IR
/// carry their file location). The exporter reads the plan back with the
/// runtime's checks (parsePlan); that plan goes into `plan` when given.
bool compileToPlan(const CompileOptions &options, std::string &planBytes,
                   std::string &error, rt::Plan *plan = nullptr);

/// The model's decoder layers and their split into options.pp x options.vp
/// virtual stages as compileToPlan takes it (options.ppLayers, else the
/// balanced split of mlt-partition-pipeline; one count without pp): what
/// the planner's shallow compiles keep the shape of. On failure returns
/// false and sets `error` to one line.
bool stageSplitOf(const CompileOptions &options, int64_t &numLayers,
                  std::vector<int64_t> &split, std::string &error);

} // namespace mlt

#endif // MLT_COMPILER_DRIVER_H
