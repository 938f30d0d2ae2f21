//===- LayoutSpace.h - the layouts a planner chooses among ------*- C++ -*-===//
//
// Part of mlt. The parallel layouts of a training step on a number of GPUs
// for a global batch, as `mlt-run --layout auto` enumerates them: tensor
// parallelism tp, pipeline stages pp (with vp virtual stages each under
// the interleaved schedule), data parallelism dp = gpus / (tp * pp), the
// ZeRO stage, and the micro-batches a step is cut into. Sequence
// parallelism, recomputed SwiGLU activations and norms, and recomputed whole
// layers (every other one, or all) save memory at some time, so they are
// tried only where a layout does not fit without them
// (memorySavingVariants).
//
// Whether a layout suits the model (heads divisible by tp, layers enough
// for pp x vp stages, ZeRO-2 under the schedule) is the layout rule book's
// to say (mlt/Layout/LayoutRules.h): the planner verifies each candidate
// and compiles only those it accepts. What the enumeration fixes is only
// the search space.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_LAYOUTSPACE_H
#define MLT_ANALYSIS_LAYOUTSPACE_H

#include "mlt/Analysis/Timeline.h"
#include "mlt/Layout/Layout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlt::cost {

/// What to enumerate for.
struct LayoutRequest {
  int64_t gpus = 1;
  /// Sequences per optimizer step, over all data-parallel ranks.
  int64_t globalBatch = 1;
  /// Tokens per sequence (0: not known; no context parallelism then).
  int64_t seqLen = 0;
  /// The layout's options the user chose (precision, overlap, ...): every
  /// candidate has them; the planner chooses the others (LayoutOption's
  /// plannerChooses), which must be at their defaults here.
  Layout base;
};

/// The fewest tokens a context-parallel chunk holds in the planner's
/// layouts: shorter chunks make the attention kernels' launches small and the
/// gathers of keys and values a large share of a rank's attention, and a
/// sequence that short fits a GPU without cp.
inline constexpr int64_t kContextChunkTokens = 1024;

/// Every layout of `request`'s GPUs, `request.base` with: tp, cp, pp and dp
/// whose product is the number of GPUs, cp > 1 only where the sequence cuts
/// into 2 * cp chunks of at least kContextChunkTokens; vp 1, and 2 (under the default
/// schedule, interleaved) where pp > 1; ZeRO 0, 1 and 2 where dp or cp > 1 (zeroAxes); every
/// number of micro-batches that divides the global batch into micro-batches
/// divisible by dp, at least pp of them where pp > 1 (fewer leave stages
/// idle for most of the step); where cp > 1, both of its exchanges
/// (cp-comm allgather and a2a). Sequence parallelism and recomputation off;
/// with FP8, several micro-batches and no pipeline, each layout twice:
/// keeping the transposed FP8 copy of each weight through the step (the
/// default), then both copies (`fp8-weight-cache both`: faster, a byte a
/// weight more memory).
/// In a fixed order: by tp, cp, pp, vp, dp, ZeRO stage, micro-batches,
/// exchange, FP8 weight cache. Whether
/// each suits the model is the rule book's to say (LayoutRules.h): the
/// planner verifies them.
std::vector<Layout> enumerateLayouts(const LayoutRequest &request);

/// The variants of `layout` that save memory, least costly first (each
/// keeping the layout's FP8 weight cache: keeping less is another layout of
/// enumerateLayouts'): with sequence parallelism (tp > 1), with SwiGLU
/// recomputed, with both; with
/// every other decoder layer recomputed whole and the others' SwiGLU and
/// norms, alone and with sequence parallelism (tp > 1); then with every
/// layer recomputed whole, alone and with sequence parallelism (tp > 1).
std::vector<Layout> memorySavingVariants(const Layout &layout);

/// What bounds a predicted step on its slowest rank, and that share of the
/// step: "matrix products" (matmul and attention kernels), "memory-bound
/// kernels" (the others), "communication" (collectives and transfers beside
/// no compute) or "idle" (waits for other ranks, a pipeline's bubble).
struct StepBound {
  std::string what;
  double share = 0.0;
};
StepBound stepBound(const rt::Plan &plan, const StepTimeline &timeline);

/// What the planner weighs a compiled layout by: each representative
/// rank's memory on the device, its arena and its kernels' scratch beside
/// it (one per pipeline stage, in stage order), and the bytes of it that
/// parameters, their copies, gradients and optimizer state take
/// (which no memory-saving variant changes), and the predicted step.
struct LayoutFigures {
  std::vector<uint64_t> arenas, persistent;
  double step = 0.0;
  /// The largest arena, and persistent bytes.
  uint64_t arena() const;
  uint64_t mostPersistent() const;
};

/// The figures of a model `steps` layers per virtual stage deeper than
/// `b`, extrapolated along the line from `a`, the same layout one layer
/// per virtual stage shallower than `b`: b + steps * (b - a), stage by
/// stage (arenas and persistent bytes). A stage's arena and the step grow by
/// the same amount with each layer a virtual stage holds (its weights,
/// gradients, optimizer state, and the activations each micro-batch in flight
/// keeps), which holds to the byte from two layers per virtual stage on, but
/// for the alignment of buffers; the step's rounds of overlap slowdown bend the
/// line slightly. Bytes that shrink along the line (which no plan's do) are
/// kept at b's.
///
/// With `period` k > 1, `a` is k layers per virtual stage shallower than
/// `b` and the model `steps` layers deeper than `b` (b + steps / k * (b -
/// a)): a layout that recomputes every k-th layer whole repeats its layers'
/// memory and time every k layers, so a line through one layer more would
/// take an odd layer's cost for every layer's.
LayoutFigures extrapolateDepth(const LayoutFigures &a, const LayoutFigures &b,
                               int64_t steps, int64_t period = 1);

/// The figures of a layout run with `microbatches` micro-batches a step,
/// extrapolated along the line through `a` and `b`, the same layout (and
/// micro-batch size) run with `fewer` and `few` micro-batches. Once every
/// stage of a pipeline is busy and keeps as many micro-batches in flight as
/// it ever will (1F1B: pp; the interleaved schedule: up to (vp + 1) x pp
/// (micro-batch, chunk) pairs), each further micro-batch adds one forward
/// and backward pass a stage, in the steady state between the same warm-up
/// and drain, and the optimizer's step and the gradients' reduction do not
/// change: the step grows along a line, and the arena by the little more
/// data a step reads. The line holds to 0.001% for LLaMA-2-70B's 1F1B and
/// interleaved pipelines (bench/RESULTS.md). Bytes that shrink are kept at
/// b's.
LayoutFigures extrapolateMicrobatches(const LayoutFigures &a,
                                      const LayoutFigures &b, int64_t fewer,
                                      int64_t few, int64_t microbatches);

} // namespace mlt::cost

#endif // MLT_ANALYSIS_LAYOUTSPACE_H
