//===- HangWatch.cpp - --collective-timeout in a training run -------------===//
//
// Part of mlt. See HangWatch.h.
//
//===----------------------------------------------------------------------===//

#include "HangWatch.h"

#include "mlt/Runtime/exec/Position.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

/// How long rank 0 waits for the other processes' positions, how long the
/// NCCL abort may take, and how long a process waits to be ended by rank 0
/// (or, with every rank here, for its ranks to return) before it ends
/// itself.
constexpr std::chrono::seconds kGatherWait(10);
constexpr std::chrono::seconds kAbortWait(10);
constexpr std::chrono::seconds kEndWait(30);

/// A non-negative decimal integer, wholly; false otherwise.
bool parseCount(const std::string &text, uint64_t &value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  errno = 0;
  char *end = nullptr;
  const unsigned long long parsed = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0' || parsed > uint64_t(INT64_MAX))
    return false;
  value = parsed;
  return true;
}

} // namespace

StatusOr<FaultStall> mlt::run::parseFaultStall(
    const std::string &text, const Plan &plan, int64_t firstStep,
    int64_t lastStep, bool watched,
    const std::function<bool(int64_t)> &evaluatesAfter) {
  // (RANK:STEP:LAUNCH, or with ":eval" a launch of the evaluation after
  // STEP)
  std::string value = text;
  const std::string evalSuffix = ":eval";
  const bool evaluation =
      value.size() > evalSuffix.size() &&
      value.compare(value.size() - evalSuffix.size(), evalSuffix.size(),
                    evalSuffix) == 0;
  if (evaluation)
    value.resize(value.size() - evalSuffix.size());
  const size_t first = value.find(':');
  const size_t second =
      first == std::string::npos ? first : value.find(':', first + 1);
  uint64_t rank = 0, step = 0, launch = 0;
  if (second == std::string::npos ||
      !parseCount(value.substr(0, first), rank) ||
      !parseCount(value.substr(first + 1, second - first - 1), step) ||
      !parseCount(value.substr(second + 1), launch))
    return errorf("MLT_FAULT_STALL: expected RANK:STEP:LAUNCH (three "
                  "non-negative integers), or RANK:STEP:LAUNCH:eval for the "
                  "evaluation after step STEP, got '",
                  text, "'");
  if (!watched)
    return errorf("MLT_FAULT_STALL holds a rank until the hang watchdog "
                  "reports it: it needs a plan of several ranks and a "
                  "--collective-timeout other than 0");
  if (rank >= plan.ranks.size())
    return errorf("MLT_FAULT_STALL: the plan has no rank ", rank, " (it has ",
                  plan.ranks.size(), ")");
  // (an evaluation may follow the step a run starts after: --steps 0)
  if (int64_t(step) < firstStep - (evaluation ? 1 : 0) ||
      int64_t(step) > lastStep)
    return errorf("MLT_FAULT_STALL: step ", step, " is not one this run takes (",
                  firstStep, " to ", lastStep, ")");
  if (evaluation && !evaluatesAfter(int64_t(step)))
    return errorf("MLT_FAULT_STALL: no evaluation follows step ", step,
                  " in this run (--eval-every, the last step)");
  const uint64_t launches =
      stepLaunchOffsets(plan.ranks[rank], evaluation ? StepKind::Evaluation
                                                     : StepKind::Training)
          .back();
  if (launch >= launches)
    return errorf("MLT_FAULT_STALL: rank ", rank, "'s ",
                  evaluation ? "evaluation step" : "step", " has ", launches,
                  " launches (0 to ", launches - 1, "), not ", launch);
  return FaultStall{uint32_t(rank), int64_t(step), launch, evaluation};
}

StatusOr<std::unique_ptr<HangWatch>>
HangWatch::start(const Plan &plan, RankGroup &ranks,
                 std::chrono::milliseconds timeout, RunObserver &observer,
                 Distributed *dist) {
  std::unique_ptr<HangWatch> watch(
      new HangWatch(plan, ranks, timeout, observer, dist));
  std::vector<const RankPosition *> positions;
  for (uint32_t i = 0; i < ranks.size(); ++i) {
    MLT_RETURN_IF_ERROR(ranks.executor(i).watchDevicePosition().withContext(
        "--collective-timeout"));
    positions.push_back(&ranks.executor(i).position());
  }
  HangWatchdog::Options options;
  options.timeout = timeout;
  HangWatch *self = watch.get();
  options.onTrip = [self](HangWatchdog::Trigger trigger, double) {
    self->onTrip(trigger);
  };
#ifdef MLT_HAVE_CUDA
  if (dist) {
    StatusOr<std::unique_ptr<HangChannel>> channel =
        HangChannel::open(dist->session);
    if (!channel)
      return channel.takeStatus().withContext(
          "--collective-timeout (0 runs without the hang watchdog)");
    watch->channel_ = std::move(*channel);
    options.alarmed = [self] { return self->channel_->alarmed(); };
  }
#endif
  StatusOr<std::unique_ptr<HangWatchdog>> watchdog =
      HangWatchdog::start(std::move(positions), std::move(options));
  if (!watchdog)
    return errorf(watchdog.status().message(),
                  " (--collective-timeout 0 runs without it)");
  watch->watchdog_ = std::move(*watchdog);
  return watch;
}

HangWatch::~HangWatch() {
  // A trip that raced with the end of the steps ends with them, not with
  // the process (reportInProcess).
  {
    std::lock_guard<std::mutex> lock(mutex_);
    taken_ = true;
  }
  reported_.notify_all();
  // The watchdog first: it uses the channel.
  watchdog_.reset();
#ifdef MLT_HAVE_CUDA
  channel_.reset();
#endif
}

void HangWatch::onTrip(HangWatchdog::Trigger trigger) {
  if (dist_)
    reportAcrossProcesses(trigger);
  reportInProcess();
}

void HangWatch::reportInProcess() {
  std::vector<std::optional<PositionSnapshot>> positions(plan_.ranks.size());
  for (uint32_t i = 0; i < ranks_.size(); ++i) {
    const PositionSnapshot snapshot = ranks_.executor(i).position().snapshot();
    if (size_t(snapshot.rank) < positions.size())
      positions[size_t(snapshot.rank)] = snapshot;
  }
  HangReport report = describeHang(
      plan_, positions, std::chrono::duration<double>(timeout_).count());
  const std::string summary = report.summary;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    report_ = std::move(report);
  }
  // Let go of a rank held by MLT_FAULT_STALL, and of those waiting in
  // collectives: every rank returns.
  for (uint32_t i = 0; i < ranks_.size(); ++i)
    ranks_.executor(i).position().abandon();
  ranks_.abort(summary);
  // A rank stuck elsewhere (in a kernel) never returns: the report is made
  // here, and the process ends.
  std::unique_lock<std::mutex> lock(mutex_);
  if (reported_.wait_for(lock, kEndWait, [&] { return taken_; }))
    return;
  observer_.hangReported(*report_, /*endsRun=*/true);
  std::fflush(nullptr);
  std::_Exit(1);
}

Status HangWatch::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  taken_ = true;
  reported_.notify_all();
  if (!report_)
    return errorf("the hang watchdog tripped but made no report");
  observer_.hangReported(*report_, /*endsRun=*/false);
  return Status::error(report_->summary);
}

void HangWatch::awaitEnd() {
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

void HangWatch::abortCommunicators(const std::string &message) {
#ifdef MLT_HAVE_CUDA
  if (!dist_ || !dist_->communicator)
    return;
  // On a thread of its own: ncclCommAbort waits for a NCCL call of the
  // rank's thread, which a broken network may hold for ever.
  struct Done {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  auto done = std::make_shared<Done>();
  CudaCommunicator *communicator = dist_->communicator.get();
  try {
    std::thread([done, communicator, message] {
      communicator->abort(message);
      std::lock_guard<std::mutex> lock(done->mutex);
      done->done = true;
      done->cv.notify_all();
    }).detach();
  } catch (const std::system_error &) {
    return;
  }
  std::unique_lock<std::mutex> lock(done->mutex);
  done->cv.wait_for(lock, kAbortWait, [&] { return done->done; });
#else
  (void)message;
#endif
}

void HangWatch::reportAcrossProcesses(HangWatchdog::Trigger trigger) {
#ifdef MLT_HAVE_CUDA
  // The first to trip tells the others; each sends its position to rank 0.
  if (trigger == HangWatchdog::Trigger::NoProgress)
    channel_->raise();
  RankPosition &position = ranks_.executor(0).position();
  const PositionSnapshot mine = position.snapshot();
  std::vector<std::optional<PositionSnapshot>> positions =
      channel_->gather(mine, std::chrono::steady_clock::now() + kGatherWait);
  // (MLT_FAULT_STALL lets go of this rank; its thread then waits in
  // awaitEnd)
  position.abandon();
  const double seconds = std::chrono::duration<double>(timeout_).count();
  if (dist_->reports()) {
    const HangReport report = describeHang(plan_, positions, seconds);
    observer_.hangReported(report, /*endsRun=*/true);
    std::fflush(nullptr);
    abortCommunicators(report.summary);
    dist_->session.abort(1);
  }
  abortCommunicators("no progress for " + formatSeconds(seconds) +
                     "; rank 0 reports the hang");
  // Rank 0 ends the job; if it does not, this rank says where it is and
  // ends it.
  std::this_thread::sleep_for(kEndWait);
  std::vector<std::optional<PositionSnapshot>> alone(plan_.ranks.size());
  if (size_t(mine.rank) < alone.size())
    alone[size_t(mine.rank)] = mine;
  const std::string line = describeHang(plan_, alone, seconds)
                               .ranks[size_t(dist_->rank())];
  observer_.aborting(dist_->rank(),
                     "no progress for " + formatSeconds(seconds) +
                         " and no word from rank 0; " + line);
  std::fflush(nullptr);
  dist_->session.abort(1);
#else
  (void)trigger;
  std::abort();
#endif
}
