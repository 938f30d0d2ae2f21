//===- AutoLayout.h - a run's layout chosen by the planner ------*- C++ -*-===//
//
// Part of mlt. --layout auto (and exhaustive): the planner
// (mlt/Planner/Planner.h) chooses the layout of a model for --gpus GPUs of
// --gpu-memory each, pricing its candidates by the calibration of the
// run's device, and compiles the chosen one for the run. The planner's
// candidates are compiled as PlanSource compiles the run's own model, into
// plans of representative ranks.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_AUTOLAYOUT_H
#define MLT_RUN_AUTOLAYOUT_H

#include "mlt/Plan/Plan.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Support/Status.h"

#include <string>

namespace mlt::run {

/// --layout auto: the planner's choice among every layout of --gpus GPUs,
/// compiled; `options` then names that layout, as if it had been passed.
/// `bytes` receives the plan file's bytes; `observer` the planner's
/// progress and ranking.
StatusOr<rt::Plan> planAutomatically(RunOptions &options, std::string &bytes,
                                     RunObserver &observer);

} // namespace mlt::run

#endif // MLT_RUN_AUTOLAYOUT_H
