//===- StepLowerBound.h - what a step cannot take less than -----*- C++ -*-===//
//
// Part of mlt. A lower bound of a plan's predicted step (Timeline.h) that
// reads each launch's cost once, schedules nothing, and holds for the same
// layout run with more micro-batches than the plan was compiled with: how
// the planner leaves out a deep pipeline (a stage of one to three layers,
// hundreds of micro-batches) from a compile of a few micro-batches, where
// compiling and predicting every one of them costs seconds (Planner.h).
//
// The bound follows from the timeline's own rules, nothing more:
//   - a segment of a rank's step (a call, or a group of transfer calls)
//     starts after the previous one has ended on every stream, and each
//     stream runs its launches one after another, each starting a launch
//     gap after the previous one (a negative gap shortens each launch, to
//     no less than half its time): a call takes at least its longest
//     stream's launches and gaps (`callSeconds`); a collective waiting for
//     its group, a compute launch slowed beside communication, and the
//     transfer groups (counted as nothing) only add;
//   - so a rank's step takes at least its calls' sum;
//   - a micro-batch's forward pass through a stage waits for its forward
//     pass through the stage before (its activations), and its backward pass
//     for the stage after's (its gradients): a rank whose first call of a
//     micro-batch is the forward pass of micro-batch 0 through its first
//     model chunk starts it no sooner than those passes through the stages
//     before have run, one after another (the pipeline's warm-up), and a rank
//     whose last is the backward pass of the last micro-batch through that
//     chunk leaves those through the stages before still to run (the drain).
//     Schedules that run a weight-gradient pass last have no drain bound.
//
// With more micro-batches, a rank runs one more of its middle micro-batches'
// calls for each, at no fewer seconds than the least of the plan's middle
// micro-batches (of any of them in a plan of fewer than 3; the first may
// write the gradients where the others add to them, and the last reduce
// them). The first and the last (what the warm-up and drain bounds read)
// are the plan's own.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_STEPLOWERBOUND_H
#define MLT_ANALYSIS_STEPLOWERBOUND_H

#include "mlt/Analysis/Timeline.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cost {

/// The least time call `c` of `rank` (the plan's r-th) takes at `costs`: its
/// longest stream's launches and their gaps; a transfer call, nothing.
double callSeconds(const rt::RankPlan &rank, const LaunchCosts &costs,
                   uint32_t r, size_t c);

/// A lower bound of the predicted step (predictStep) of `plan`'s layout run
/// with `microbatches` micro-batches a step, at least the plan's own and of
/// the same size. Fails on a plan whose micro-batches' calls cannot be read
/// (a rank with none, or micro-batches fewer than the plan's).
StatusOr<double> stepLowerBound(const rt::Plan &plan, const LaunchCosts &costs,
                                int64_t microbatches);

} // namespace mlt::cost

#endif // MLT_ANALYSIS_STEPLOWERBOUND_H
