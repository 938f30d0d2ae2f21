//===- Layout.h - a training step's parallel layout, as one value -*- C++
//-*-===//
//
// Part of mlt. The layout of a training step: every mesh axis and every
// choice the compiler makes for it (tensor, sequence, pipeline and data
// parallelism, virtual stages and their schedule, micro-batches, the ZeRO
// stage, recomputation, precisions, overlap switches) as one plain value.
// Every entry point holds a layout in this one form: mlt-run fills it from
// its flags, `mlt-opt --mlt-train-pipeline` from its options (both through
// LayoutOptions.h, the one table of the options' names and values), the
// planner enumerates layouts of it, and the pass pipeline
// (Compiler/Pipeline.h) turns it into the passes' options. Whether a layout
// suits a model and a step is the rule book's to say (LayoutRules.h).
//
// The mesh axes, their rank order and what each shards are one table
// (parallelAxes); the schedules and their traits another
// (Layout/Schedules.h). Plain C++: no MLIR, no runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LAYOUT_LAYOUT_H
#define MLT_LAYOUT_LAYOUT_H

#include "mlt/Layout/Schedules.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlt {

/// A compute or reduction precision.
enum class Precision : uint8_t { F32, BF16 };

/// "fp32", "bf16".
const char *precisionName(Precision precision);

/// How the FP8 products are made (mlt-fp8-products' options), when a layout
/// has `fp8`.
struct Fp8Recipe {
  /// The products made FP8, of "fprop" (x W^T), "dgrad" (dy W) and "wgrad"
  /// (dy^T x).
  std::vector<std::string> products = {"fprop", "dgrad", "wgrad"};
  /// The forward products' accumulation: "fast" (the tensor cores' FP8
  /// accumulator) or "f32".
  std::string fpropAccumulation = "fast";
  /// "hybrid" (e4m3 activations and weights, e5m2 gradients) or "e4m3".
  std::string format = "hybrid";
  /// Parameters (by a part of their names) whose products stay bf16.
  std::vector<std::string> bf16Parameters;
  /// The model's first and last decoder layers that keep bf16 products.
  int64_t bf16FirstLayers = 0, bf16LastLayers = 0;
  /// What of each weight's quantization the step's first micro-batch keeps
  /// for the later ones (mlt-keep-weight-fp8): "transposed" (the copy the
  /// backward reads, which a body holds through its peak anyway) or "both"
  /// (no weight quantized after the first micro-batch; the forward copies
  /// held through the step too).
  std::string weightCache = "transposed";

  bool operator==(const Fp8Recipe &other) const;
  bool operator!=(const Fp8Recipe &other) const { return !(*this == other); }
};

/// How context parallelism gives attention what it needs of the other
/// ranks' blocks of a sequence (Megatron's --cp-comm-type).
enum class ContextExchange : uint8_t {
  /// The keys and values of the whole sequence gathered; each rank attends
  /// from its queries.
  AllGather,
  /// All-to-all (DeepSpeed's Ulysses): the heads scattered over cp and the
  /// sequence gathered before attention, and back after it; each rank
  /// attends over the whole sequence with its heads / (tp x cp) heads.
  AllToAll,
  /// The ring (Megatron's p2p): each rank's key/value block passed around
  /// the cp ranks, one step at a time, each rank attending from its queries
  /// to the block in hand and merging the steps by log-sum-exp.
  Ring,
};

/// "allgather", "a2a", "ring".
const char *contextExchangeName(ContextExchange exchange);

/// One layout. The defaults are the one-rank layout of mlt-run without
/// flags.
struct Layout {
  //===--- Mesh axes (parallelAxes)
  //----------------------------------------===//
  /// Tensor-parallel ranks: attention heads, MLP features and the
  /// vocabulary split Megatron-style.
  int64_t tp = 1;
  /// Data-parallel ranks: each micro-batch split over them.
  int64_t dp = 1;
  /// Pipeline stages: the decoder layers split into consecutive stages.
  int64_t pp = 1;
  /// Context-parallel ranks: each sequence split over them, load balanced
  /// (cut into 2 * cp chunks, rank i holding chunks i and 2 * cp - 1 - i,
  /// so that causal attention costs every rank the same); attention takes
  /// the other ranks' blocks as `cpComm` says.
  int64_t cp = 1;

  //===--- Within the axes
  //-------------------------------------------------===//
  /// The residual stream (norms, residual adds) split along the sequence
  /// over the tp ranks.
  bool sequenceParallel = false;
  /// With cp: how attention sees the whole sequence.
  ContextExchange cpComm = ContextExchange::AllGather;
  /// Model chunks per pipeline stage: the layers split into pp * vp virtual
  /// stages, chunk c of stage s holding virtual stage c * pp + s.
  int64_t vp = 1;
  /// The layers of each (virtual) stage; empty: balanced by predicted time.
  std::vector<int64_t> ppLayers;
  /// The micro-batches a chunk runs in a row under schedules that take a
  /// group size; 0: pp.
  int64_t ppGroupSize = 0;
  /// The order of the micro-batches' passes; unset: defaultSchedule(vp).
  std::optional<ScheduleKind> schedule;

  //===--- The step
  //--------------------------------------------------------===//
  /// Micro-batches per step, their gradients accumulated.
  int64_t microbatches = 1;

  //===--- Memory
  //----------------------------------------------------------===//
  /// The ZeRO stage over dp: 0 (every rank keeps the whole optimizer
  /// state), 1 (each keeps its slice of it; Megatron's distributed
  /// optimizer), 2 (and of the gradients, reduce-scattered as each
  /// micro-batch's backward pass completes them).
  int64_t zero = 0;
  /// Forward op kinds recomputed in the backward pass instead of kept, by
  /// full name ("mlt.swiglu").
  std::vector<std::string> recompute;
  /// Decoder layers recomputed whole in the backward pass, keeping only
  /// their inputs: those whose index is a multiple of this (1: every layer;
  /// 0: none).
  int64_t recomputeLayers = 0;

  //===--- Precision
  //-------------------------------------------------------===//
  /// The compute type: f32, or bf16 activations and weight copies on f32
  /// master weights.
  Precision dtype = Precision::F32;
  /// With bf16: the decoder layers' products on FP8 tensor cores.
  bool fp8 = false;
  Fp8Recipe fp8Recipe;
  /// The type ZeRO-2 reduce-scatters the products' weight gradients in.
  Precision gradReduceDtype = Precision::F32;

  //===--- Overlap
  //---------------------------------------------------------===//
  /// Reduce the data-parallel gradients under the backward pass, in buckets
  /// of at least gradBucketBytes (0: one per gradient).
  bool overlapGradReduce = true;
  int64_t gradBucketBytes = int64_t(32) << 20;
  /// With ZeRO: all-gather the updated parameters under the next step's
  /// forward pass.
  bool overlapParamGather = true;
  /// With tp: the backward pass's all-reduces of input gradients on a
  /// stream of their own, under the weight-gradient products
  /// (mlt-overlap-tp-comm).
  bool overlapTpComm = true;

  /// The schedule the layout runs: `schedule`, or the default for vp.
  ScheduleKind scheduleKind() const;
  /// pp * dp * cp * tp.
  int64_t ranks() const;

  bool operator==(const Layout &other) const;
  bool operator!=(const Layout &other) const { return !(*this == other); }
};

/// The mesh axes a layout can have.
enum class ParallelAxis : uint8_t { Pipeline, Data, Context, Tensor };

/// "pp", "dp", "cp", "tp": an axis's name in the IR's mesh, plans, options and
/// messages (the one place they are spelled; constexpr so that passes and
/// the dialect can hold them as constants).
constexpr const char *axisName(ParallelAxis axis) {
  switch (axis) {
  case ParallelAxis::Pipeline:
    return "pp";
  case ParallelAxis::Data:
    return "dp";
  case ParallelAxis::Context:
    return "cp";
  case ParallelAxis::Tensor:
    return "tp";
  }
  return "?";
}

/// The axes ZeRO partitions the optimizer state over, given the sizes of dp
/// and cp, major first: the ranks that hold the same parameters and sum
/// their gradients (a context-parallel rank holds every parameter whole, as
/// a data-parallel one does), dp then cp, each where it is 2 or more; empty
/// where neither is (Megatron's distributed optimizer over its "dp-cp"
/// group). A rank's slice of a bucket is block coordinate(dp) x cp +
/// coordinate(cp): reduce-scattered over dp, then over cp within that.
std::vector<ParallelAxis> zeroAxes(int64_t dp, int64_t cp);

/// One mesh axis: its name (in the IR's mesh, plans, options and
/// messages), what it shards, and its size in a layout.
struct ParallelAxisInfo {
  ParallelAxis axis;
  const char *name;
  const char *shards;
  int64_t Layout::*size;
};

/// The mesh axes in rank order, outermost first: a rank's coordinates are
/// row-major over them, so the last (tp) has adjacent ranks and the first
/// (pp) contiguous blocks of ranks, as Megatron orders them (tp innermost,
/// then cp, then dp, pp outermost: the ranks that exchange activations
/// every layer, tp's and then cp's, are the nearest). A layout's mesh holds its axes of size > 1 in
/// this order.
const std::vector<ParallelAxisInfo> &parallelAxes();

/// The shape of a model as the rule book needs it (an HF config's fields).
struct ModelShape {
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  /// The decoder layers compiled (the model's, or the first N of them).
  int64_t layers = 0;
  int64_t maxPositions = 0;
  bool tiedEmbeddings = false;
  /// The forward op kinds the backward pass can recompute (full names);
  /// empty: not known, `recompute` unchecked.
  std::vector<std::string> recomputable;
};

/// The step a layout runs: sequences per optimizer step (over every
/// data-parallel rank and micro-batch) and tokens per sequence; 0: not
/// known (the rules on it are not checked).
struct StepShape {
  int64_t batch = 0;
  int64_t seqLen = 0;
};

} // namespace mlt

#endif // MLT_LAYOUT_LAYOUT_H
