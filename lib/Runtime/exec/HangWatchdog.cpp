//===- HangWatchdog.cpp - a thread that notices no progress ---------------===//
//
// Part of mlt. See HangWatchdog.h. The thread sleeps on a condition
// variable between checks, so that stopping it is immediate.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/HangWatchdog.h"

#include <algorithm>
#include <system_error>

using namespace mlt;
using namespace mlt::rt;

std::chrono::milliseconds
HangWatchdog::checkInterval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds(10),
                    std::chrono::milliseconds(1000));
}

StatusOr<std::unique_ptr<HangWatchdog>>
HangWatchdog::start(std::vector<const RankPosition *> positions,
                    Options options) {
  if (options.timeout.count() <= 0)
    return errorf("the hang watchdog needs a positive timeout");
  if (!options.onTrip)
    return errorf("the hang watchdog needs something to do when it trips");
  std::unique_ptr<HangWatchdog> watchdog(
      new HangWatchdog(std::move(positions), std::move(options)));
  try {
    watchdog->thread_ = std::thread([w = watchdog.get()] { w->watch(); });
  } catch (const std::system_error &e) {
    return errorf("cannot start the hang watchdog's thread: ", e.what());
  }
  return watchdog;
}

HangWatchdog::~HangWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void HangWatchdog::watch() {
  using Clock = std::chrono::steady_clock;
  const std::chrono::milliseconds interval = checkInterval(options_.timeout);
  std::vector<PositionSnapshot> last(positions_.size());
  Clock::time_point lastMove = Clock::now();
  bool watchedBefore = false;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, interval, [&] { return stopping_; });
    if (stopping_)
      return;
    const Clock::time_point now = Clock::now();
    bool watched = false, moved = false;
    for (size_t r = 0; r < positions_.size(); ++r) {
      const PositionSnapshot snapshot = positions_[r]->snapshot();
      const RankActivity activity = snapshot.activity();
      watched |= activity != RankActivity::Outside &&
                 activity != RankActivity::Setup;
      moved |= snapshot.movedSince(last[r]);
      last[r] = snapshot;
    }
    // Time only what is watched: a rank that comes back from Outside or
    // Setup starts its timeout afresh.
    if (moved || !watched || !watchedBefore)
      lastMove = now;
    watchedBefore = watched;
    const double idle =
        std::chrono::duration<double>(now - lastMove).count();
    std::optional<Trigger> trigger;
    if (watched && now - lastMove >= options_.timeout)
      trigger = Trigger::NoProgress;
    else if (options_.alarmed && options_.alarmed())
      trigger = Trigger::Alarm;
    if (!trigger)
      continue;
    tripped_.store(true);
    lock.unlock();
    options_.onTrip(*trigger, idle);
    return;
  }
}
