//===- Timeline.h - a plan's step, predicted launch by launch ---*- C++ -*-===//
//
// Part of mlt. The scheduling half of the cost model: given what each
// launch of a plan costs (priceLaunches, from a Calibration), when each one
// starts on each rank, and so how long the step takes and where its time
// goes. `mlt-run --report` prints the summary, `--trace` draws the
// prediction beside the measured launches, and every run on a calibrated
// device says how far its measured step is from the predicted one.
//
// The model is the runtime's own order, nothing more:
//   - a rank runs its step's calls in order, each after the previous one has
//     ended on every stream;
//   - within a call, each stream runs its launches in program order, and a
//     launch also waits for the launches whose tokens it waits on;
//   - a collective starts when every member of its group has reached it
//     (each member's k-th collective on an axis is the same collective) and
//     takes its time on all of them;
//   - a transfer group's sends and receives are posted together when the
//     group is reached; a transfer starts when both of its sides have been
//     posted, and the call after the group waits for all of them;
//   - each launch starts one launch gap after what it waits for (the
//     device's time between launches beyond the kernels' own; a negative
//     gap instead shortens each launch, to at least half its time: a
//     profiled launch, timed by events around it, overstates its kernel);
//   - a compute launch that runs beside communication on its rank (a
//     collective on a side stream) is slowed by it, taking the device's
//     overlap slowdown times the time they overlap on top of its own: the
//     collectives' kernels take SMs and memory bandwidth from it.
//
// The last rule makes a launch's time depend on the timeline, which no
// longest path can express: predictStep schedules the step, prices each
// compute launch's overlap in that timeline, and schedules again, three
// times (each round moves the overlaps less).
//
// So start(launch) = gap + max(end of what it waits for), a longest path in
// a graph of launches. scheduleStep builds that graph across all ranks and
// walks it once in topological order, O(launches + dependencies);
// predictStep builds it once and walks it once a round.
// A plan of representative ranks (rt::isRepresentativePlan: one rank per
// pipeline stage, as the planner compiles its candidates) predicts the
// step of the whole plan: a stage's ranks run one program on buffers of
// equal shapes, so a shift along any axis but `pp` maps the step onto
// itself, and every member of a collective over such an axis reaches it
// when the stage's representative does. Its collectives wait for the
// members the plan holds.
//
// scheduleStepBySweep, the reference it is tested against, plays the ranks
// out instead, sweeping over them until none can move (a rank stops at a
// collective or transfer whose peers have not reached it), as the plan
// verifier's deadlock check does; it is quadratic in the worst case.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_TIMELINE_H
#define MLT_ANALYSIS_TIMELINE_H

#include "mlt/Analysis/Calibration.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlt::cost {

/// What each launch of a plan costs.
struct LaunchCosts {
  /// seconds[r][p][i]: instruction i of program p of the plan's r-th rank
  /// (plan.ranks[r]; every index by rank below is a position in plan.ranks).
  std::vector<std::vector<std::vector<double>>> seconds;
  /// The launch gap (Calibration::launchGap).
  double gap = 0.0;
  /// The overlap slowdown (Calibration::overlapSlowdown).
  double overlapSlowdown = 0.0;
  /// Seconds added to rank r's k-th launch of its step (in step and program
  /// order; none where the list is shorter): predictStep's slowdowns of
  /// compute launches beside communication. Collectives and transfers take
  /// none.
  std::vector<std::vector<double>> extra;
  /// The classes priced without a curve of their own (fallback rates).
  std::vector<std::string> uncalibrated;
};

/// Prices every launch of `plan` by `calibration`.
StatusOr<LaunchCosts> priceLaunches(const rt::Plan &plan,
                                    const Calibration &calibration);

/// One launch of a predicted step.
struct PredictedLaunch {
  uint32_t call = 0;
  uint32_t program = 0;
  uint32_t instruction = 0;
  uint8_t stream = 0;
  /// Seconds from the step's start (every rank starts at 0).
  double start = 0.0;
  double seconds = 0.0;
};

/// One rank's predicted step: every launch of every call, in step and
/// program order, and when its last launch ends.
struct RankTimeline {
  std::vector<PredictedLaunch> launches;
  double end = 0.0;
};

/// Every rank's predicted step, in the order of plan.ranks.
struct StepTimeline {
  std::vector<RankTimeline> ranks;
  /// The step's time: the latest end over the ranks.
  double seconds() const;
};

/// The predicted step of `plan` at `costs` (see the top of this file).
/// Fails when its launches wait on each other in a cycle (a plan that
/// could deadlock, which the plan verifier refuses).
StatusOr<StepTimeline> scheduleStep(const rt::Plan &plan,
                                    const LaunchCosts &costs);

/// The same by sweeping over the ranks (the reference).
StatusOr<StepTimeline> scheduleStepBySweep(const rt::Plan &plan,
                                           const LaunchCosts &costs);

/// The predicted step: scheduleStep with the compute launches beside
/// communication slowed by costs.overlapSlowdown (see the top of this
/// file; costs.extra is replaced).
StatusOr<StepTimeline> predictStep(const rt::Plan &plan, LaunchCosts costs);

/// predictStep's step with the launches of one rank alone: the rank that
/// ends last (the first of them), from which its breakdown and what bounds
/// the step are found (breakdown, LayoutSpace.h's stepBound). What the
/// planner weighs each candidate by: a deep pipeline's representatives
/// hold millions of launches, whose timeline it does not keep.
struct StepSummary {
  /// Every rank's end (RankTimeline::end); the launches of `slowest`'s
  /// alone.
  StepTimeline timeline;
  uint32_t slowest = 0;
};
StatusOr<StepSummary> summarizeStep(const rt::Plan &plan, LaunchCosts costs);

/// Whether a collective of `plan` runs on a side stream, beside compute:
/// what the overlap slowdown is fitted on.
bool overlapsCommunication(const rt::Plan &plan);

/// The launch gap at which `plan`'s predicted step (predictStep) at
/// `costs` (whose own gap is ignored) takes `measured` seconds, to a
/// nanosecond: how a calibrating run fits its device's gap
/// (Calibration.h). The step grows with the gap, so bisection finds it,
/// between minus the longest launch (every launch at half its time) and
/// `measured`.
StatusOr<double> fitLaunchGap(const rt::Plan &plan, LaunchCosts costs,
                              double measured);

/// The overlap slowdown at which `plan`'s predicted step takes `measured`
/// seconds (costs' own ignored), within [0, 8], by bisection: how a
/// calibrating run of overlapped communication fits it.
StatusOr<double> fitOverlapSlowdown(const rt::Plan &plan, LaunchCosts costs,
                                    double measured);

/// Where one rank's predicted step goes. compute + exposedCommunication +
/// idle = step.
struct StepBreakdown {
  uint32_t rank = 0;
  double step = 0.0;
  /// Time some compute launch runs (the union over streams).
  double compute = 0.0;
  /// Time some collective or transfer runs, and of it the time no compute
  /// launch runs beside it.
  double communication = 0.0;
  double exposedCommunication = 0.0;
  /// Time nothing runs: launch gaps, waits for peers, a pipeline's bubble.
  double idle = 0.0;
  /// Compute time by kernel (each launch's whole time), largest first.
  std::vector<std::pair<std::string, double>> byKernel;
  /// Communication beside no compute by kernel (each launch's time that no
  /// compute launch covers; collectives that run beside each other each
  /// count theirs), largest first, those of none left out.
  std::vector<std::pair<std::string, double>> exposedByKernel;
};
StepBreakdown breakdown(const rt::Plan &plan, const StepTimeline &timeline,
                        uint32_t rankIndex);

} // namespace mlt::cost

#endif // MLT_ANALYSIS_TIMELINE_H
