//===- Run.h - a run of mlt-run, from its options to its end ----*- C++ -*-===//
//
// Part of mlt. The run a tool asks for with a RunOptions: its options and
// paths checked (RunChecks.h), the plan obtained (a plan file, a model
// compiled in process, or the layout the planner chose: PlanSource.h,
// AutoLayout.h) and checked against the options; then either the plan's
// reports and files (--print-plan, --print-schedule, --report-memory,
// --report, --emit-plan), or, once the plan agrees with the launcher's
// processes and the device is there, training (TrainingRun.h): in this
// process, or as this process's rank of several over NCCL.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_RUN_H
#define MLT_RUN_RUN_H

#include "mlt/Run/Launch.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Support/Status.h"

namespace mlt::run {

/// Runs `options` (see the top of this file) as this process's part of the
/// run `launch` started, telling `observer` what happens. `options.model`
/// is set.
Status execute(RunOptions options, const Launch &launch, RunObserver &observer);

} // namespace mlt::run

#endif // MLT_RUN_RUN_H
