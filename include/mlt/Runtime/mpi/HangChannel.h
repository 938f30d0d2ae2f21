//===- HangChannel.h - the watchdogs' line between processes ----*- C++ -*-===//
//
// Part of mlt. With one process per GPU, a hang is noticed by one process's
// watchdog (HangWatchdog.h), but reported from every rank's position: the
// others must be told, and their positions brought to rank 0. NCCL cannot
// carry that (it is what hangs), so the watchdogs have a line of their own
// over MPI, which serves the start and the end of a run anyway
// (MpiBootstrap.h): a duplicate of MPI_COMM_WORLD that only the watchdog
// threads use, from the session's MPI_THREAD_MULTIPLE, while each process's
// main thread may be anywhere: in a NCCL wait, in an MPI call of its own
// (the agreement after a step), or stuck in a host call. Since the watchdog
// thread answers for its process, a rank whose host is stuck is still
// reported.
//
// Messages (all nonblocking, polled, so that no watchdog waits forever for
// a process that is gone): an alarm, one int from the process that tripped
// first to every other, for which each process keeps a receive posted from
// the start; and each process's position (a PositionSnapshot, as bytes: the
// processes run the same binary) to rank 0, which waits for them until a
// deadline and reports a silent process as such.
//
// Only in builds with MLT_ENABLE_CUDA (the library MLTRuntimeMPI).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_MPI_HANGCHANNEL_H
#define MLT_RUNTIME_MPI_HANGCHANNEL_H

#include "mlt/Runtime/exec/Position.h"
#include "mlt/Runtime/mpi/MpiBootstrap.h"
#include "mlt/Support/Status.h"

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

namespace mlt::rt {

class HangChannel {
public:
  /// Collective: every process calls it, from the session's thread, before
  /// its watchdog starts. Duplicates MPI_COMM_WORLD and posts the alarm's
  /// receive. Fails when MPI does not provide MPI_THREAD_MULTIPLE.
  static StatusOr<std::unique_ptr<HangChannel>> open(MpiSession &session);

  /// Collective again, from the session's thread, once the watchdog has
  /// stopped without tripping: cancels what is still posted and frees the
  /// communicator. (A run whose watchdog tripped is aborted, not ended.)
  ~HangChannel();
  HangChannel(const HangChannel &) = delete;
  HangChannel &operator=(const HangChannel &) = delete;

  // The watchdog's thread alone calls these.

  /// Whether another process raised the alarm; never waits.
  bool alarmed();
  /// Raises the alarm at every other process; never waits.
  void raise();
  /// Sends `mine` to rank 0 and waits, until `deadline`, for it to leave;
  /// on rank 0, takes every process's position as it arrives until all
  /// have or `deadline` passes, and returns them in rank order (its own in
  /// place; none for a process that sent nothing by then). Empty on the
  /// other ranks.
  std::vector<std::optional<PositionSnapshot>>
  gather(const PositionSnapshot &mine,
         std::chrono::steady_clock::time_point deadline);

  int rank() const { return rank_; }

private:
  HangChannel() = default;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0;
  int size_ = 1;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_MPI_HANGCHANNEL_H
