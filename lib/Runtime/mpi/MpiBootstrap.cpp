//===- MpiBootstrap.cpp - one process per GPU, started by mpirun ----------===//
//
// Part of mlt. The launcher's environment, and the few MPI calls a run of
// one process per GPU makes (MpiBootstrap.h): init, the node-local rank,
// the broadcast of NCCL's unique id, agreement on failures, finalize or
// abort. Every MPI call is checked; MPI_ERRORS_RETURN makes MPI return its
// errors rather than end the process.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/mpi/MpiBootstrap.h"

#include <mpi.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <thread>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// "MPI_Bcast: MPI_ERR_TRUNCATE: message truncated" for a failed call.
Status mpiStatus(int code, const char *call) {
  if (code == MPI_SUCCESS)
    return Status::ok();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return errorf(call, ": MPI error ", code);
  return errorf(call, ": ", std::string(text, size_t(length)));
}

#define MLT_MPI_RETURN_IF_ERROR(call)                                          \
  MLT_RETURN_IF_ERROR(mpiStatus((call), #call))

/// Parses a non-negative decimal int; false on anything else.
bool parseCount(const char *text, int &value) {
  if (!text || !*text)
    return false;
  errno = 0;
  char *end = nullptr;
  long parsed = std::strtol(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || parsed < 0 || parsed > INT_MAX)
    return false;
  value = int(parsed);
  return true;
}

} // namespace

StatusOr<LaunchEnvironment>
mlt::rt::detectLaunch(const std::function<const char *(const char *)> &getenv) {
  struct Launcher {
    const char *name, *sizeVariable, *rankVariable;
  };
  const Launcher launchers[] = {
      {"mpirun", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"PMI", "PMI_SIZE", "PMI_RANK"},
  };
  for (const Launcher &launcher : launchers) {
    const char *size = getenv(launcher.sizeVariable);
    if (!size)
      continue;
    LaunchEnvironment launch;
    launch.launcher = launcher.name;
    const char *rank = getenv(launcher.rankVariable);
    if (!parseCount(size, launch.worldSize) || launch.worldSize < 1)
      return errorf("the launcher's ", launcher.sizeVariable, " is '", size,
                    "', not a number of processes");
    if (!parseCount(rank, launch.rank) || launch.rank >= launch.worldSize)
      return errorf("the launcher's ", launcher.rankVariable, " is '",
                    rank ? rank : "", "', not a rank below its ",
                    launcher.sizeVariable, " ", launch.worldSize);
    return launch;
  }
  return LaunchEnvironment{};
}

StatusOr<std::unique_ptr<MpiSession>> MpiSession::init(int &argc,
                                                       char **&argv) {
  int initialized = 0;
  MLT_MPI_RETURN_IF_ERROR(MPI_Initialized(&initialized));
  if (initialized)
    return errorf("MPI is already initialized in this process");
  // MPI_THREAD_MULTIPLE: the hang watchdog's thread talks to its peers
  // (HangChannel.h) while this one may be inside a call of its own.
  int provided = MPI_THREAD_SINGLE;
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  std::unique_ptr<MpiSession> session(new MpiSession());
  session->threadMultiple_ = provided >= MPI_THREAD_MULTIPLE;
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MLT_MPI_RETURN_IF_ERROR(MPI_Comm_rank(MPI_COMM_WORLD, &session->rank_));
  MLT_MPI_RETURN_IF_ERROR(MPI_Comm_size(MPI_COMM_WORLD, &session->size_));
  MPI_Comm node = MPI_COMM_NULL;
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, session->rank_,
                          MPI_INFO_NULL, &node));
  Status status =
      mpiStatus(MPI_Comm_rank(node, &session->localRank_), "MPI_Comm_rank");
  if (status)
    status =
        mpiStatus(MPI_Comm_size(node, &session->localSize_), "MPI_Comm_size");
  (void)MPI_Comm_free(&node);
  if (!status)
    return status;
  return session;
}

MpiSession::~MpiSession() {
  if (aborted_)
    return;
  int finalized = 1;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
    (void)MPI_Finalize();
}

Status MpiSession::broadcast(void *data, size_t bytes, int root) {
  if (bytes > size_t(INT_MAX))
    return errorf("MPI_Bcast of ", bytes, " bytes: too large");
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Bcast(data, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
  return Status::ok();
}

StatusOr<int> MpiSession::maxOf(int local) {
  int largest = local;
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Allreduce(&local, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  return largest;
}

StatusOr<std::vector<std::string>>
MpiSession::gather(const std::string &local, int root) {
  if (local.size() > size_t(INT_MAX))
    return errorf("MPI_Gatherv of ", local.size(), " bytes: too large");
  const int bytes = int(local.size());
  const bool isRoot = rank_ == root;
  std::vector<int> sizes(isRoot ? size_t(size_) : 0);
  MLT_MPI_RETURN_IF_ERROR(MPI_Gather(&bytes, 1, MPI_INT, sizes.data(), 1,
                                     MPI_INT, root, MPI_COMM_WORLD));
  std::vector<int> offsets(sizes.size());
  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = int(total);
    total += size_t(sizes[i]);
    if (total > size_t(INT_MAX))
      return errorf("MPI_Gatherv of ", total, " bytes: too large");
  }
  std::string all(total, '\0');
  MLT_MPI_RETURN_IF_ERROR(MPI_Gatherv(local.data(), bytes, MPI_BYTE,
                                      all.data(), sizes.data(), offsets.data(),
                                      MPI_BYTE, root, MPI_COMM_WORLD));
  std::vector<std::string> parts;
  for (size_t i = 0; i < sizes.size(); ++i)
    parts.push_back(all.substr(size_t(offsets[i]), size_t(sizes[i])));
  return parts;
}

Status MpiSession::agree(const Status &local,
                         std::chrono::milliseconds timeout) {
  stoppedForPeer_ = false;
  int failed = local ? 0 : 1;
  std::vector<int> all(size_t(size_), 0);
  if (timeout.count() == 0) {
    MLT_MPI_RETURN_IF_ERROR(MPI_Allgather(&failed, 1, MPI_INT, all.data(), 1,
                                          MPI_INT, MPI_COMM_WORLD));
  } else {
    MPI_Request request = MPI_REQUEST_NULL;
    MLT_MPI_RETURN_IF_ERROR(MPI_Iallgather(&failed, 1, MPI_INT, all.data(), 1,
                                           MPI_INT, MPI_COMM_WORLD, &request));
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int done = 0;
      MLT_MPI_RETURN_IF_ERROR(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done)
        break;
      if (std::chrono::steady_clock::now() >= deadline) {
        // The request stays pending: the caller aborts the job.
        timedOut_ = true;
        if (!local)
          return local;
        return errorf("the other ranks did not arrive within ",
                      timeout.count() / 1000.0, " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (!local)
    return local;
  for (int rank = 0; rank < size_; ++rank)
    if (all[size_t(rank)]) {
      stoppedForPeer_ = true;
      return errorf("stopped: rank ", rank, " failed");
    }
  return Status::ok();
}

StatusOr<MpiSession::Outcome> MpiSession::conclude(const Status &local) {
  // Per rank: whether it failed, and whether the failure is its own.
  int mine[2] = {local ? 0 : 1, (!local && !stoppedForPeer_) ? 1 : 0};
  stoppedForPeer_ = false;
  std::vector<int> all(2 * size_t(size_), 0);
  MLT_MPI_RETURN_IF_ERROR(
      MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, MPI_COMM_WORLD));
  Outcome outcome;
  int reporter = -1, failures = 0, ownFailures = 0;
  for (int rank = 0; rank < size_; ++rank) {
    failures += all[2 * size_t(rank)];
    ownFailures += all[2 * size_t(rank) + 1];
    if (all[2 * size_t(rank) + 1] && reporter < 0)
      reporter = rank;
  }
  outcome.failed = failures > 0;
  if (reporter == rank_) {
    outcome.reportHere = true;
    outcome.message = ownFailures == size_ ? local.message()
                                           : "rank " + std::to_string(rank_) +
                                                 ": " + local.message();
  }
  return outcome;
}

void MpiSession::abort(int exitCode) {
  aborted_ = true;
  (void)MPI_Abort(MPI_COMM_WORLD, exitCode);
  std::_Exit(exitCode);
}
