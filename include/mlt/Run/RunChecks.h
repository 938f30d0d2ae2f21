//===- RunChecks.h - a run's options checked before it starts ---*- C++ -*-===//
//
// Part of mlt. The checks of a run that need no plan, in the order a run
// takes them: the options' values and how they combine (validate), the
// paths it reads and writes (checkPaths); and, once the plan is known, the
// plan against the processes the launcher started (checkWorld) and the
// device (checkDevice). Each failure is one line naming the option.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_RUNCHECKS_H
#define MLT_RUN_RUNCHECKS_H

#include "mlt/Plan/Plan.h"
#include "mlt/Run/Launch.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Support/Status.h"

namespace mlt::run {

/// Range checks of the options that do not depend on the plan, and of the
/// options that only mean something with another.
Status validate(const RunOptions &options);

/// The evaluation's options (part of validate): --eval-data or --split,
/// not both; --eval-every and --eval-iters (at least 1) only with one of
/// them; --steps 0 (an evaluation of the weights a run starts from) only
/// with one of them, and without the options that need a step.
Status validateEvaluation(const RunOptions &options);

/// The paths, before anything is compiled or trained: the inputs (the
/// model, --data, --eval-data, --init-from) are files (a FIFO would block, a device
/// would be read forever), the outputs (--log-json, --dump-grads,
/// --emit-plan, --trace, and --save-hf's directory) have their directory
/// and nothing in their place that writing them would replace (a device
/// node, a symbolic link), and no output is an input or another output.
Status checkPaths(const RunOptions &options);

/// On GPUs, a plan of N ranks is N processes: the plan and the launcher
/// must agree.
Status checkWorld(const RunOptions &options, const rt::Plan &plan,
                  const Launch &launch);

/// Device and precision checks, for runs that train.
Status checkDevice(const RunOptions &options);

} // namespace mlt::run

#endif // MLT_RUN_RUNCHECKS_H
