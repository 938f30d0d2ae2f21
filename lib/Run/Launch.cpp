//===- Launch.cpp - how a run's process was started -----------------------===//
//
// Part of mlt. See Launch.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/Launch.h"

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/mpi/Distributed.h"
#endif

#include <cstdlib>
#include <memory>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

#ifdef MLT_HAVE_CUDA
/// mpirun -np N with N > 1: MPI for the start and the end, and the run in
/// between; the processes agree on the outcome, and one reports a failure.
ProcessOutcome
runUnderLauncher(int argc, char **argv, const LaunchEnvironment &env,
                 const ProcessWork &work,
                 const std::function<void(const std::string &)> &reportError) {
  StatusOr<std::unique_ptr<MpiSession>> session = startMpi(argc, argv);
  if (!session) {
    reportError("rank " + std::to_string(env.rank) +
                ": MPI init: " + session.status().message());
    return {1, false};
  }
  Launch launch;
  launch.environment = env;
  launch.session = session->get();
  Status status = checkMpiWorld(**session, env);
  if (status)
    status = work(argc, argv, launch);
  StatusOr<MpiSession::Outcome> outcome = (*session)->conclude(status);
  if (!outcome) {
    reportError("rank " + std::to_string((*session)->rank()) + ": " +
                outcome.status().message());
    (*session)->abort(1);
  }
  if (outcome->reportHere)
    reportError(outcome->message);
  return {outcome->failed ? 1 : 0, false};
}
#endif

} // namespace

ProcessOutcome mlt::run::runProcess(
    int argc, char **argv, const ProcessWork &work,
    const std::function<void(const std::string &)> &reportError) {
  Launch launch;
#ifdef MLT_HAVE_CUDA
  // A process that a launcher started as one of several runs one rank of a
  // plan on its GPU; one process (with or without a launcher) never touches
  // MPI.
  StatusOr<LaunchEnvironment> environment =
      detectLaunch([](const char *name) { return std::getenv(name); });
  if (!environment) {
    reportError(environment.status().message());
    return {1, false};
  }
  if (environment->worldSize > 1)
    return runUnderLauncher(argc, argv, *environment, work, reportError);
  launch.environment = *environment;
#else
  // Without the CUDA backend there is nothing to run per process: say so
  // once.
  if (const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
      size && std::atoi(size) > 1) {
    const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!rank || std::atoi(rank) == 0)
      reportError("mpirun started several processes, but this mlt-run has no "
                  "CUDA backend (one process per GPU); run it without mpirun");
    return {1, false};
  }
#endif
  Status status = work(argc, argv, launch);
  if (!status) {
    reportError(status.message());
    return {1, true};
  }
  return {0, false};
}
