//===- TrainingRun.h - a plan trained ---------------------------*- C++ -*-===//
//
// Part of mlt. Trains a plan: opens the data (every token id checked),
// checks the host's memory, creates the ranks on the run's backend (every
// rank as a thread of this process, or this process's one rank of several
// over NCCL), initializes the weights or loads them (--init-from, --resume
// with the optimizer's moments), runs --steps optimizer steps and writes
// what the options ask for: the JSON log, training checkpoints (every N
// steps, at the end, and where a signal stops the run), HF checkpoints,
// the gradients of step 1, a profile, a trace and a calibration of the
// device. With one process per GPU, the processes agree on every phase up
// to training (a failure on one stops all of them), rank 0's process
// reports and writes, and a failure once collectives run ends the job.
// What happens is told to a RunObserver.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_TRAININGRUN_H
#define MLT_RUN_TRAININGRUN_H

#include "mlt/Plan/Plan.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Support/Status.h"

namespace mlt::run {

/// One process of a run of one process per GPU (lib/Run/Distributed.h).
struct Distributed;

/// Trains `plan` as `options` ask (see the top of this file): every rank
/// in this process, or, with `process`, its one rank. `options.steps` is
/// set. A signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1) ends the current step,
/// writes a checkpoint (with --save-checkpoint) and stops the run, which
/// then succeeds.
Status train(const RunOptions &options, const rt::Plan &plan,
             RunObserver &observer, Distributed *process = nullptr);

} // namespace mlt::run

#endif // MLT_RUN_TRAININGRUN_H
