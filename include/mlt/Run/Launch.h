//===- Launch.h - how a run's process was started ---------------*- C++ -*-===//
//
// Part of mlt. A run is one process, or, on GPUs, one process per rank
// started by an MPI launcher (mpirun -np N, N > 1). runProcess takes a
// process through its part: it reads how the process was started
// (detectLaunch, MpiBootstrap.h), and for one of several processes starts
// MPI, checks that MPI sees the launcher's processes, runs the work, and
// has the processes agree on the outcome so that one of them reports a
// failure (MpiSession::conclude). A build without the CUDA backend runs no
// process of several: it says so once, from the first. The tool prints
// the failures and decides how the process ends.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_LAUNCH_H
#define MLT_RUN_LAUNCH_H

#include "mlt/Runtime/mpi/MpiBootstrap.h"
#include "mlt/Support/Status.h"

#include <functional>
#include <string>

namespace mlt::run {

/// How this process was started: alone, or as one of the processes of a
/// launcher (mpirun), with its MPI session when there are several.
struct Launch {
  /// The launcher's processes and this one's rank (one, and rank 0, in a
  /// build without the CUDA backend).
  rt::LaunchEnvironment environment;
  /// MPI, when the launcher started several processes; null otherwise.
  rt::MpiSession *session = nullptr;

  int worldSize() const { return environment.worldSize; }
  bool launched() const { return environment.launched(); }
  int rank() const { return environment.rank; }
};

/// How a process's part of a run ended.
struct ProcessOutcome {
  int exitStatus = 0;
  /// A process that ran alone and failed (its failure reported): whatever
  /// the run wrote is complete or removed by now, and it may end at once,
  /// without its exit handlers (OpenBLAS's joins its threads, and one that
  /// could not allocate its buffer, memory being short, retries for ever).
  bool endAtOnce = false;
};

/// The work of one process: `argc` and `argv` as MPI left them.
using ProcessWork =
    std::function<Status(int argc, char **argv, const Launch &launch)>;

/// Runs `work` as this process's part of the run (see the top of this
/// file), passing each failure to report to `reportError` (once for the
/// run, from one of its processes). A process of several that fails after
/// collectives run ends the job (rt::DistributedProcess::abort) instead.
ProcessOutcome
runProcess(int argc, char **argv, const ProcessWork &work,
           const std::function<void(const std::string &)> &reportError);

} // namespace mlt::run

#endif // MLT_RUN_LAUNCH_H
