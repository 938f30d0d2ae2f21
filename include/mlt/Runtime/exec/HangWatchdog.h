//===- HangWatchdog.h - a thread that notices no progress -------*- C++ -*-===//
//
// Part of mlt. mlt-run --collective-timeout: a thread of its own that reads
// the positions (Position.h) of the ranks of its process several times per
// timeout and trips when none of them has moved for the timeout while one
// is watched, or when another process raised the alarm. What tripping does
// (gathering every rank's place, reporting it, ending the run) is the
// caller's `onTrip`, run once on the watchdog's thread; the watchdog only
// decides when.
//
// What is timed. A rank is watched while it runs a training step
// (StepScope), but not while its host is in Setup (a program's first run or
// its capture on a device that queues: libraries, scratch memory and graphs
// are set up then, for as long as they take) and not Outside a step (data,
// logging, checkpoints, evaluation: host work between steps). So the timeout
// measures a lack of progress, not a step's length: a long step that moves
// from launch to launch (or, on a GPU, from collective to collective) never
// trips it, and a slow first step trips it only if a rank waits for another
// longer than the timeout.
//
// Progress. Any change of a watched rank's snapshot: its step, its host's
// place or activity, its device's words. With the ranks as threads of one
// process (the CPU) the watchdog sees all of them, and trips only when none
// moved; with one rank per process (CUDA) each process's watchdog sees its
// own, and the first to trip raises the alarm for the others.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_EXEC_HANGWATCHDOG_H
#define MLT_RUNTIME_EXEC_HANGWATCHDOG_H

#include "mlt/Runtime/exec/Position.h"
#include "mlt/Support/Status.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace mlt::rt {

class HangWatchdog {
public:
  /// Why the watchdog tripped.
  enum class Trigger {
    /// No rank of this process moved for the timeout.
    NoProgress,
    /// Another process raised the alarm (Options::alarmed).
    Alarm,
  };

  struct Options {
    /// How long no watched rank may go without moving; positive.
    std::chrono::milliseconds timeout{0};
    /// Asked at every check whether another process raised the alarm;
    /// null where none can (every rank in this process).
    std::function<bool()> alarmed;
    /// Called once, on the watchdog's thread, when it trips: why, and the
    /// seconds since a watched rank of this process last moved (0 for an
    /// alarm while none was watched).
    std::function<void(Trigger trigger, double idleSeconds)> onTrip;
  };

  /// Starts watching `positions` (the ranks of this process, which must
  /// outlive the watchdog); fails when the thread cannot start.
  static StatusOr<std::unique_ptr<HangWatchdog>>
  start(std::vector<const RankPosition *> positions, Options options);

  /// Stops watching; after a trip, waits for onTrip to return.
  ~HangWatchdog();
  HangWatchdog(const HangWatchdog &) = delete;
  HangWatchdog &operator=(const HangWatchdog &) = delete;

  /// Whether it tripped (onTrip has begun).
  bool tripped() const { return tripped_.load(); }

  /// The time between checks for `timeout`: a tenth of it, from 10 ms to
  /// 1 s.
  static std::chrono::milliseconds checkInterval(
      std::chrono::milliseconds timeout);

private:
  HangWatchdog(std::vector<const RankPosition *> positions, Options options)
      : positions_(std::move(positions)), options_(std::move(options)) {}
  void watch();

  std::vector<const RankPosition *> positions_;
  Options options_;
  std::atomic<bool> tripped_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false; // guarded by mutex_
  std::thread thread_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_EXEC_HANGWATCHDOG_H
