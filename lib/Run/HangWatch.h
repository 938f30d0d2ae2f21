//===- HangWatch.h - --collective-timeout in a training run -----*- C++ -*-===//
//
// Part of mlt. Private to lib/Run. A run's hang watchdog (HangWatchdog.h)
// over the ranks of its process, from its first step to its last, and what
// happens when it trips:
//
// - every rank in this process (the CPU): the positions of all ranks are
//   read at once and described (HangReport.h), a rank held by
//   MLT_FAULT_STALL is let go, and the world is aborted, so that the ranks
//   waiting in collectives return; the run then fails with the summary,
//   after the observer has been told every rank's line (failure());
// - one rank per process (CUDA, mpirun): the process that trips first
//   raises the alarm for the others (HangChannel.h, over MPI), every
//   process sends its position to rank 0, which tells the observer (the
//   lines and the summary), then every process aborts its NCCL
//   communicators (ncclCommAbort, given 10 s) and rank 0 aborts the job
//   (MPI_Abort), which mpirun ends with a non-zero status. A rank that
//   hears nothing from rank 0 for 30 s reports its own line and aborts the
//   job itself. The rank's own thread, released by the abort, waits for
//   this (awaitEnd) rather than report a failure of its own.
//
// MLT_FAULT_STALL=RANK:STEP:LAUNCH, for tests (CONTRIBUTING.md): holds
// rank RANK's host before launch LAUNCH of step STEP (Executor::stallAt),
// as a rank stuck there would be, until the hang is reported.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUN_HANGWATCH_H
#define MLT_LIB_RUN_HANGWATCH_H

#include "Distributed.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Runtime/exec/HangReport.h"
#include "mlt/Runtime/exec/HangWatchdog.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Support/Status.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/mpi/HangChannel.h"
#endif

namespace mlt::run {

/// MLT_FAULT_STALL's value: rank RANK held before launch LAUNCH of step
/// STEP.
struct FaultStall {
  uint32_t rank = 0;
  int64_t step = 0;
  uint64_t launch = 0;
  /// RANK:STEP:LAUNCH:eval: a launch of the evaluation after step STEP.
  bool evaluation = false;
};

/// `text` (MLT_FAULT_STALL's value), checked against `plan` and the steps
/// the run takes (`firstStep` to `lastStep`), and for an evaluation's launch
/// against `evaluatesAfter` (whether an evaluation follows a step);
/// `watched`: whether the run has a hang watchdog, without which the rank
/// would wait for ever.
StatusOr<FaultStall>
parseFaultStall(const std::string &text, const rt::Plan &plan,
                int64_t firstStep, int64_t lastStep, bool watched,
                const std::function<bool(int64_t)> &evaluatesAfter);

class HangWatch {
public:
  /// Watches `ranks`, this process's ranks of `plan`, for `timeout` without
  /// progress (their devices' positions too). With `dist` (one process per
  /// GPU) collective over the processes: it opens the watchdogs' channel.
  static StatusOr<std::unique_ptr<HangWatch>>
  start(const rt::Plan &plan, rt::RankGroup &ranks,
        std::chrono::milliseconds timeout, RunObserver &observer,
        Distributed *dist);

  /// Stops watching (with `dist`, collective again: it closes the channel).
  ~HangWatch();
  HangWatch(const HangWatch &) = delete;
  HangWatch &operator=(const HangWatch &) = delete;

  /// Whether the watchdog tripped.
  bool tripped() const { return watchdog_ && watchdog_->tripped(); }

  /// Every rank in this process, after a trip, once the ranks have returned:
  /// tells the observer each rank's line and returns the summary as the
  /// run's failure.
  Status failure();

  /// One process per GPU, after a trip: the watchdog's thread ends the job;
  /// the calling thread waits for it.
  [[noreturn]] void awaitEnd();

private:
  HangWatch(const rt::Plan &plan, rt::RankGroup &ranks,
            std::chrono::milliseconds timeout, RunObserver &observer,
            Distributed *dist)
      : plan_(plan), ranks_(ranks), timeout_(timeout), observer_(observer),
        dist_(dist) {}

  /// What tripping does, on the watchdog's thread (see the top of this
  /// file).
  void onTrip(rt::HangWatchdog::Trigger trigger);
  void reportInProcess();
  [[noreturn]] void reportAcrossProcesses(rt::HangWatchdog::Trigger trigger);
  /// Aborts this process's NCCL communicators, giving up after 10 s.
  void abortCommunicators(const std::string &message);

  const rt::Plan &plan_;
  rt::RankGroup &ranks_;
  std::chrono::milliseconds timeout_;
  RunObserver &observer_;
  Distributed *dist_;
#ifdef MLT_HAVE_CUDA
  /// The watchdogs' line to the other processes (with `dist_`).
  std::unique_ptr<rt::HangChannel> channel_;
#endif
  std::unique_ptr<rt::HangWatchdog> watchdog_;
  /// The in-process report, and whether failure() has taken it.
  std::mutex mutex_;
  std::condition_variable reported_;
  std::optional<rt::HangReport> report_;
  bool taken_ = false;
};

} // namespace mlt::run

#endif // MLT_LIB_RUN_HANGWATCH_H
