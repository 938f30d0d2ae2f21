//===- MpiBootstrap.h - one process per GPU, started by mpirun --*- C++ -*-===//
//
// Part of mlt. A plan of N ranks runs on GPUs as N processes, one per GPU,
// started by an MPI launcher (`mpirun -np N mlt-run PLAN --device cuda`).
// MPI serves only the start and the end of such a run, never training,
// which goes through NCCL (NcclCommunicator.h):
//
// - detectLaunch reads, without calling MPI, whether a launcher started
//   this process and how many processes it started (a run of one process
//   needs no MPI at all, and never initializes it);
// - an MpiSession initializes MPI, knows the rank, the world size and the
//   rank's place on its node (the node-local rank picks the GPU), and
//   broadcasts NCCL's unique id from rank 0;
// - `agree` is how the processes stay in step outside the collectives:
//   before NCCL starts (and after each phase that does no collective), each
//   process passes its own Status and all learn whether any failed, so that
//   a rank-specific failure (a file one rank cannot read, a GPU it cannot
//   use) stops every rank cleanly instead of leaving the others waiting in
//   NCCL init; `conclude` does the same at exit and elects the one rank
//   that reports the failure (one line, not N);
// - `abort` is the last resort once collectives run: a rank that fails
//   mid-step cannot tell its peers, which wait inside NCCL kernels, so it
//   aborts its NCCL communicators and calls MPI_Abort, and mpirun ends the
//   whole job with a non-zero status.
//
// MPI is process-global state; the session is the one object that owns
// it (the runtime has no globals): create it once in main, before anything
// else, and let it finalize MPI when it is destroyed. Its calls come from
// the thread that created it. It asks for MPI_THREAD_MULTIPLE, so that the
// hang watchdog's thread can reach the other processes (HangChannel.h)
// while this thread is inside a call: Open MPI (4.x, 5.x) provides it;
// an MPI that does not leaves a run without the watchdog's report.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_MPIBOOTSTRAP_H
#define MLT_RUNTIME_MPIBOOTSTRAP_H

#include "mlt/Support/Status.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mlt::rt {

/// How this process was started, as its environment tells.
struct LaunchEnvironment {
  /// The processes the launcher started, and this one's rank among them; 1
  /// and 0 without a launcher.
  int worldSize = 1;
  int rank = 0;
  /// "mpirun" (Open MPI: OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK),
  /// "PMI" (MPICH's Hydra, Slurm's srun: PMI_SIZE, PMI_RANK), or "" when
  /// none started it.
  std::string launcher;

  bool launched() const { return !launcher.empty(); }
};

/// Reads the launcher's variables through `getenv` (std::getenv in the
/// tool; a map in tests). Fails on values that are not a size >= 1 and a
/// rank inside it.
StatusOr<LaunchEnvironment>
detectLaunch(const std::function<const char *(const char *)> &getenv);

/// One process's MPI, from MPI_Init to MPI_Finalize.
class MpiSession {
public:
  /// Initializes MPI (errors returned, not fatal: MPI_ERRORS_RETURN),
  /// asking for MPI_THREAD_MULTIPLE, and reads the rank, the world size and
  /// the node-local rank and size (MPI_Comm_split_type, shared memory). At
  /// most one per process.
  static StatusOr<std::unique_ptr<MpiSession>> init(int &argc, char **&argv);

  /// Finalizes MPI, unless the session aborted.
  ~MpiSession();
  MpiSession(const MpiSession &) = delete;
  MpiSession &operator=(const MpiSession &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// This rank's place among the ranks on its node, and their count: the
  /// GPU it takes, and how many GPUs the node needs.
  int localRank() const { return localRank_; }
  int localSize() const { return localSize_; }
  /// Whether MPI provides MPI_THREAD_MULTIPLE (any thread may call it).
  bool threadMultiple() const { return threadMultiple_; }

  /// Copies `bytes` at `data` on rank `root` into `data` on every rank.
  Status broadcast(void *data, size_t bytes, int root);

  /// The largest of every rank's `local`, on every rank (whether any rank
  /// was asked to stop, and by which signal). Collective.
  StatusOr<int> maxOf(int local);

  /// Every rank's `local` bytes, in rank order, on rank `root`; an empty
  /// list on the others. Collective: every rank must call it.
  StatusOr<std::vector<std::string>> gather(const std::string &local,
                                            int root);

  /// Every rank passes its own status; each learns whether all succeeded.
  /// Returns ok when every rank's status was ok, the rank's own failure
  /// when it failed, and otherwise "stopped: rank R failed" (R the lowest
  /// failing rank), marking the session as stopped for a peer, so that
  /// `conclude` leaves the report to the rank that failed. Collective: every
  /// rank must call it. With a nonzero `timeout`, a rank whose peers have not
  /// all arrived by then gives up, returning its own failure (or, if it did
  /// not fail, "the other ranks did not arrive within N s") and marking
  /// `timedOut`: the peers are stuck (in a collective another rank left),
  /// and only `abort` ends them.
  Status
  agree(const Status &local,
        std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  bool timedOut() const { return timedOut_; }

  /// How a run ended: whether any rank failed, and whether this rank is the
  /// one that reports it (the lowest rank whose own failure it is, not a
  /// stop for a peer), with the line to report: the message, prefixed
  /// "rank R: " unless every rank failed on its own (the same failure
  /// everywhere, as a bad option or a missing GPU).
  struct Outcome {
    bool failed = false;
    bool reportHere = false;
    std::string message;
  };
  /// Collective, at the end of the run, on every rank (which must not be
  /// stuck in a collective: once they may be, use `abort`). `local` is the
  /// rank's result: its own failure, or the stop that the last `agree`
  /// returned.
  StatusOr<Outcome> conclude(const Status &local);

  /// Ends every process of the job (MPI_Abort with `exitCode`; mpirun then
  /// reports the abort and exits non-zero). Never returns.
  [[noreturn]] void abort(int exitCode);

private:
  MpiSession() = default;

  int rank_ = 0, size_ = 1, localRank_ = 0, localSize_ = 1;
  bool threadMultiple_ = false;
  bool timedOut_ = false;
  bool stoppedForPeer_ = false;
  bool aborted_ = false;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_MPIBOOTSTRAP_H
