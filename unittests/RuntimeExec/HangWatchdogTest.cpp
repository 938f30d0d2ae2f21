//===- HangWatchdogTest.cpp - a thread that notices no progress -----------===//
//
// Part of mlt. HangWatchdog (HangWatchdog.h) over positions moved by hand:
// it trips when no watched rank moves for the timeout, not while one moves,
// never for ranks outside a step or setting up, and on an alarm.
// Timeouts of 100-500 ms keep the suite quick; the bounds allow a loaded
// machine's scheduling (a moving rank would have to be held up for a whole
// timeout to trip it).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/HangWatchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

/// A watchdog over `positions` that records when and why it tripped.
struct Watched {
  std::atomic<int> trips{0};
  std::atomic<int> trigger{-1};
  Clock::time_point started = Clock::now();
  std::atomic<double> after{0};
  std::unique_ptr<HangWatchdog> watchdog;

  Watched(std::vector<const RankPosition *> positions,
          std::chrono::milliseconds timeout,
          std::function<bool()> alarmed = nullptr) {
    HangWatchdog::Options options;
    options.timeout = timeout;
    options.alarmed = std::move(alarmed);
    options.onTrip = [this](HangWatchdog::Trigger why, double) {
      after = std::chrono::duration<double>(Clock::now() - started).count();
      trigger = int(why);
      ++trips;
    };
    StatusOr<std::unique_ptr<HangWatchdog>> made =
        HangWatchdog::start(std::move(positions), std::move(options));
    EXPECT_TRUE(made) << made.status().message();
    if (made)
      watchdog = std::move(*made);
  }

  /// Waits up to `limit` for a trip.
  bool waitForTrip(std::chrono::milliseconds limit) {
    const Clock::time_point end = Clock::now() + limit;
    while (trips == 0 && Clock::now() < end)
      std::this_thread::sleep_for(5ms);
    return trips > 0;
  }
};

TEST(HangWatchdogTest, TripsWhenNoWatchedRankMoves) {
  RankPosition a(0), b(1);
  a.enterStep(2);
  b.enterStep(2);
  a.at(0, 7, RankActivity::Waiting);
  b.at(0, 3, RankActivity::Stalled);
  Watched w({&a, &b}, 200ms);
  ASSERT_TRUE(w.waitForTrip(5s));
  EXPECT_EQ(w.trigger, int(HangWatchdog::Trigger::NoProgress));
  EXPECT_GE(w.after, 0.2);
  EXPECT_TRUE(w.watchdog->tripped());
  // Once only.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(w.trips, 1);
}

TEST(HangWatchdogTest, QuietWhileOneRankMoves) {
  // Rank 0 waits the whole time; rank 1 moves from launch to launch for
  // three timeouts and then stops: only then does it trip.
  RankPosition waiting(0), moving(1);
  waiting.enterStep(1);
  moving.enterStep(1);
  waiting.at(1, 4, RankActivity::Waiting);
  Watched w({&waiting, &moving}, 500ms);
  for (uint32_t i = 0; i < 150; ++i) {
    moving.at(1, i, RankActivity::Running);
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(w.trips, 0);
  ASSERT_TRUE(w.waitForTrip(5s));
  EXPECT_GE(w.after, 1.5 + 0.5);
}

TEST(HangWatchdogTest, OutsideStepsAndSetupAreNotTimed) {
  // Between steps, and a first run setting up, for four timeouts each.
  RankPosition between(0), setup(1);
  between.enterStep(3);
  between.leaveStep();
  setup.enterStep(1);
  setup.at(0, 0, RankActivity::Setup);
  Watched w({&between, &setup}, 100ms);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(w.trips, 0);
  // The set-up rank goes on to wait: timed from then on, afresh.
  setup.at(0, 1, RankActivity::Waiting);
  const Clock::time_point waiting = Clock::now();
  ASSERT_TRUE(w.waitForTrip(5s));
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - waiting).count(),
            0.1);
}

TEST(HangWatchdogTest, AnAlarmTripsAtTheNextCheck) {
  // Another process's alarm, while this one is between steps: seen at the
  // next check (a second apart for a timeout of 10 s).
  RankPosition between(0);
  std::atomic<bool> raised{false};
  Watched w({&between}, 10s, [&] { return raised.load(); });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(w.trips, 0);
  raised = true;
  ASSERT_TRUE(w.waitForTrip(5s));
  EXPECT_EQ(w.trigger, int(HangWatchdog::Trigger::Alarm));
}

TEST(HangWatchdogTest, StopsWithoutTripping) {
  RankPosition waiting(0);
  waiting.enterStep(1);
  waiting.at(0, 0, RankActivity::Waiting);
  const Clock::time_point start = Clock::now();
  { Watched w({&waiting}, 10s); }
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(HangWatchdogTest, RefusesNonsense) {
  HangWatchdog::Options options;
  options.onTrip = [](HangWatchdog::Trigger, double) {};
  StatusOr<std::unique_ptr<HangWatchdog>> made =
      HangWatchdog::start({}, options);
  ASSERT_FALSE(made);
  EXPECT_EQ(made.status().message(),
            "the hang watchdog needs a positive timeout");
  EXPECT_EQ(HangWatchdog::checkInterval(600s), 1000ms);
  EXPECT_EQ(HangWatchdog::checkInterval(2s), 200ms);
  EXPECT_EQ(HangWatchdog::checkInterval(50ms), 10ms);
}

} // namespace
