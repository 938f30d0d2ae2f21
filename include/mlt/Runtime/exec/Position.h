//===- Position.h - where a rank is in its plan -----------------*- C++ -*-===//
//
// Part of mlt. A RankPosition is a rank's "where am I": the step it runs
// (a training step, or the evaluation after one), the launch its host is at
// (the step's call and the instruction of that call's program) and what the
// host is doing there. The rank's executor
// updates it at every launch with one relaxed atomic store (no lock, no
// string); any other thread may read it at any time. The hang watchdog
// (HangWatchdog.h) tells progress from its changes and, when there is none
// for --collective-timeout, reports every rank's place (HangReport.h).
//
// On a device that queues its launches (CUDA) the host runs ahead of the
// device, and the host's place is not the device's: its host waits at the
// end of the step while the device may be anywhere in it. Such a device
// keeps its own place (DeviceContext::watchPosition): per plan stream, a
// word in host-mapped memory that the device itself writes as it enters and
// leaves each collective and transfer group, which the position reads
// beside the host's. The device writes the place its host recorded when it
// queued the launch, so a captured graph replays the same words.
//
// Encodings. The host's place is one 64-bit word: the activity (bits
// 60-63), the call (bits 32-59) and the instruction (bits 0-31). A call
// below the step's size is a call of the step (of the evaluation step while
// the position is in an evaluation); a program run alone (an Executor::run,
// e.g. the refresh of the compute copies) is aloneCall's, past both steps'
// calls; call kStepCall is the step itself: at instruction 0 before
// its first launch (its inputs being written), at kWholeCall replayed
// whole as one captured graph (kWholeCall is also a program run alone
// replayed so). A
// device word is 0 (nothing since the step began), (place + 1) << 1 once
// the device entered the launch at `place` (call << 32 | instruction), and
// that | 1 once it left it.
//
// Waiting. A position also keeps how long its rank waited in the step: the
// time inside collectives and transfer groups, which includes waiting for
// the peers to arrive. In a synchronous run the slowest rank is the one
// that waits least: the others wait for it. On a device that runs its
// launches to completion (the CPU) the executor times them on the host;
// a device that queues keeps clocks of its own beside its words
// (attachDeviceClocks): per plan stream, the device's time when it
// entered the collective in hand and the nanoseconds spent inside them
// since the step began, written by the same kernel that writes the word.
// Collectives on different streams may overlap each other in time (a
// gradient reduction on the communication stream while the loss's
// all-reduce waits on the compute stream): a rank's wait is its longest
// stream's, never more than the step. Under overlapped communication it
// is time in collectives, not necessarily time lost.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_EXEC_POSITION_H
#define MLT_RUNTIME_EXEC_POSITION_H

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace mlt::rt {

/// What a rank's host is doing at its place.
enum class RankActivity : uint8_t {
  /// Not in a training step: before the first, between two, after the last.
  Outside = 0,
  /// In a launch of a program's first run or of its capture, on a device
  /// that queues (libraries set up, scratch memory grown, a graph
  /// captured): host work of unbounded length, which the watchdog does not
  /// time.
  Setup = 1,
  /// In a launch: running it (CPU) or queuing it (CUDA).
  Running = 2,
  /// Waiting for others: in a collective or transfer group on a device
  /// that runs launches to completion (the CPU), or for the device to
  /// finish what the host queued (synchronize).
  Waiting = 3,
  /// Held before its launch by MLT_FAULT_STALL (tests).
  Stalled = 4,
};

/// The call that stands for the step itself, and the instruction that
/// stands for a whole call or step replayed as one captured graph.
inline constexpr uint32_t kStepCall = (uint32_t(1) << 28) - 1;
inline constexpr uint32_t kWholeCall = ~uint32_t(0);

/// call << 32 | instruction.
constexpr uint64_t launchPlace(uint32_t call, uint32_t instruction) {
  return uint64_t(call & kStepCall) << 32 | instruction;
}
constexpr uint32_t placeCall(uint64_t place) {
  return uint32_t(place >> 32) & kStepCall;
}
constexpr uint32_t placeInstruction(uint64_t place) { return uint32_t(place); }

/// A device word (see the top of this file).
constexpr uint64_t deviceEnteredWord(uint64_t place) {
  return (place + 1) << 1;
}
constexpr uint64_t deviceLeftWord(uint64_t place) {
  return deviceEnteredWord(place) | 1;
}

/// A position read at one moment: plain data, the same in every process
/// (the hang report gathers them across processes as bytes).
struct PositionSnapshot {
  /// The plan rank.
  int32_t rank = -1;
  /// The plan streams the device keeps words for (0: the host's place is
  /// the device's).
  uint32_t deviceStreams = 0;
  /// The step entered last (0: none yet), and whether it is the
  /// evaluation after that training step (0: before the first) rather
  /// than the training step.
  int64_t step = 0;
  bool evaluation = false;
  /// The host's word and the device's (see the top of this file).
  uint64_t host = 0;
  uint64_t device[kPlanMaxStreams] = {};

  RankActivity activity() const { return RankActivity(host >> 60); }
  /// The host's place (call << 32 | instruction).
  uint64_t place() const { return host & ~(uint64_t(0xF) << 60); }
  /// Whether anything differs from `earlier`: the rank moved.
  bool movedSince(const PositionSnapshot &earlier) const;
};

/// A rank's position; see the top of this file.
class RankPosition {
public:
  explicit RankPosition(uint32_t rank) : rank_(rank) {}
  RankPosition(const RankPosition &) = delete;
  RankPosition &operator=(const RankPosition &) = delete;

  /// Step `step` begins (the device words and clocks start afresh: the
  /// device has finished the previous step), or with `evaluation` the
  /// evaluation after training step `step`; or either ends.
  void enterStep(int64_t step, bool evaluation = false);
  void leaveStep() { setActivity(RankActivity::Outside); }

  /// The host is at instruction `instruction` of call `call`, doing
  /// `activity`.
  void at(uint32_t call, uint32_t instruction, RankActivity activity) {
    host_.store(uint64_t(activity) << 60 | launchPlace(call, instruction),
                std::memory_order_relaxed);
  }
  /// The host stays where it is, doing `activity`.
  void setActivity(RankActivity activity) {
    const uint64_t place =
        host_.load(std::memory_order_relaxed) & ~(uint64_t(0xF) << 60);
    host_.store(uint64_t(activity) << 60 | place, std::memory_order_relaxed);
  }
  RankActivity activity() const {
    return RankActivity(host_.load(std::memory_order_relaxed) >> 60);
  }
  /// The host's place (call << 32 | instruction).
  uint64_t place() const {
    return host_.load(std::memory_order_relaxed) & ~(uint64_t(0xF) << 60);
  }
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  bool evaluating() const {
    return evaluation_.load(std::memory_order_relaxed);
  }

  /// The device's words, one per plan stream (host-mapped memory that the
  /// device writes; the device context owns it and outlives the position's
  /// readers).
  void attachDeviceWords(volatile uint64_t *words, uint32_t streams) {
    deviceWords_ = words;
    deviceStreams_ = streams;
  }

  PositionSnapshot snapshot() const;

  /// The host times its waits in collectives and transfer groups (a device
  /// that runs launches to completion), adding each with addHostWait.
  void measureHostWait() { hostWaitMeasured_ = true; }
  void addHostWait(uint64_t nanoseconds) {
    hostWaitNanoseconds_.fetch_add(nanoseconds, std::memory_order_relaxed);
  }
  /// The device's clocks: two words per plan stream (the time it entered
  /// the collective in hand, and the nanoseconds spent inside collectives
  /// this step), host-mapped memory that the device writes and the device
  /// context owns.
  void attachDeviceClocks(volatile uint64_t *clocks, uint32_t streams) {
    deviceClocks_ = clocks;
    deviceClockStreams_ = streams;
  }
  /// Seconds this rank spent inside collectives and transfer groups since
  /// the step began (see "Waiting" above); none where nothing measures it
  /// (a queuing device whose clocks are not attached). Read once the
  /// step's work is complete.
  std::optional<double> waitedSeconds() const;

  /// The run gave up on this rank (a hang was reported): a rank held by
  /// MLT_FAULT_STALL returns.
  void abandon() { abandoned_.store(true); }
  bool abandoned() const { return abandoned_.load(); }

private:
  const uint32_t rank_;
  std::atomic<int64_t> step_{0};
  std::atomic<bool> evaluation_{false};
  std::atomic<uint64_t> host_{0};
  volatile uint64_t *deviceWords_ = nullptr;
  uint32_t deviceStreams_ = 0;
  bool hostWaitMeasured_ = false;
  std::atomic<uint64_t> hostWaitNanoseconds_{0};
  volatile uint64_t *deviceClocks_ = nullptr;
  uint32_t deviceClockStreams_ = 0;
  std::atomic<bool> abandoned_{false};
};

/// A training step of one rank (or with `evaluation`, an evaluation batch
/// after training step `step`), from its first host call to the end of its
/// wait: enters the step on construction and leaves it on destruction.
class StepScope {
public:
  StepScope(RankPosition &position, int64_t step, bool evaluation = false)
      : position_(position) {
    position_.enterStep(step, evaluation);
  }
  ~StepScope() { position_.leaveStep(); }
  StepScope(const StepScope &) = delete;
  StepScope &operator=(const StepScope &) = delete;

private:
  RankPosition &position_;
};

/// Where each call of `rank`'s step (of kind `kind`) starts in the step's
/// launches, counted over every instruction of every call (a transfer
/// counts as one): entry c is call c's first launch, and the last entry the
/// step's count.
std::vector<uint64_t> stepLaunchOffsets(const RankPlan &rank,
                                        StepKind kind = StepKind::Training);

/// The call of a place for program `program` run alone (past the calls of
/// both steps), and back: the program of a call, when it is one run alone.
inline uint32_t aloneCall(const RankPlan &rank, size_t program) {
  return uint32_t(rank.step.size() + rank.evalStep.size() + program);
}
inline std::optional<size_t> aloneProgram(const RankPlan &rank,
                                          uint32_t call) {
  const size_t base = rank.step.size() + rank.evalStep.size();
  if (call == kStepCall || call < base || call - base >= rank.programs.size())
    return std::nullopt;
  return call - base;
}

} // namespace mlt::rt

#endif // MLT_RUNTIME_EXEC_POSITION_H
