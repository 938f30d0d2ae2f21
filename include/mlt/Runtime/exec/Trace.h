//===- Trace.h - a step's measured timeline as a Perfetto trace -*- C++ -*-===//
//
// Part of mlt. The file `mlt-run --trace FILE` writes: the launches of one
// profiled step (Executor::beginProfile / endProfile), every rank a process
// of its own and every stream a thread of it, in the Chrome trace event
// format that Perfetto (ui.perfetto.dev) and chrome://tracing open. Each
// launch is a complete event named by its kernel, in the category
// "compute", "collective" or "transfer" (a send or receive: those of one
// transfer group share its time), with its program, its instruction index,
// its ints and the rate it reached (Profile.h) as arguments; times are
// microseconds from the rank's first launch of the step (ranks in other
// processes have clocks of their own: their tracks line up at the step's start,
// not to the microsecond).
//
// Where a calibration prices the plan's launches, the predicted step is
// drawn beside the measured one (predictedTraceEvents): a process "predicted
// rank R" per rank, its launches at the cost model's times, so a user sees
// where the prediction and the machine disagree.
//
// A process makes the events of its ranks (traceEvents), rank 0's process
// gathers them and writes one file (formatTrace).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRACE_H
#define MLT_RUNTIME_TRACE_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Support/Status.h"

#include <string>
#include <vector>

namespace mlt::rt {

/// The trace events of `rank`'s profiled `launches` (a JSON array, as
/// text): a process named "rank R", a thread per stream, a complete event
/// per launch, its time from the rank's first launch.
std::string traceEvents(const RankPlan &rank,
                        const std::vector<Executor::LaunchTime> &launches);

/// The trace events of `rank`'s predicted `launches` (the cost model's,
/// mlt/Analysis/Timeline.h), times from the step's start: a process named
/// "predicted rank R", numbered after every measured rank (`worldSize` +
/// R), so that Perfetto lists the prediction below the measurement.
std::string predictedTraceEvents(
    const RankPlan &rank, const std::vector<Executor::LaunchTime> &launches,
    uint32_t worldSize);

/// The trace file of every rank's events (traceEvents' arrays): one JSON
/// object with their events in one "traceEvents" list. Fails on text that is
/// not an array of events (a gathered message cut short).
StatusOr<std::string> formatTrace(const std::vector<std::string> &rankEvents);

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRACE_H
