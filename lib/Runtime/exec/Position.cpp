//===- Position.cpp - where a rank is in its plan -------------------------===//
//
// Part of mlt. See Position.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Position.h"

#include <algorithm>
#include <cstring>

using namespace mlt;
using namespace mlt::rt;

bool PositionSnapshot::movedSince(const PositionSnapshot &earlier) const {
  return step != earlier.step || evaluation != earlier.evaluation ||
         host != earlier.host ||
         std::memcmp(device, earlier.device, sizeof(device)) != 0;
}

void RankPosition::enterStep(int64_t step, bool evaluation) {
  // The device finished the previous step (the trainer waited for it):
  // nothing writes the words now.
  for (uint32_t s = 0; s < deviceStreams_; ++s)
    deviceWords_[s] = 0;
  for (uint32_t s = 0; s < 2 * deviceClockStreams_; ++s)
    deviceClocks_[s] = 0;
  hostWaitNanoseconds_.store(0, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  evaluation_.store(evaluation, std::memory_order_relaxed);
  at(kStepCall, 0, RankActivity::Running);
}

PositionSnapshot RankPosition::snapshot() const {
  PositionSnapshot snapshot;
  snapshot.rank = int32_t(rank_);
  snapshot.step = step_.load(std::memory_order_relaxed);
  snapshot.evaluation = evaluation_.load(std::memory_order_relaxed);
  snapshot.host = host_.load(std::memory_order_relaxed);
  snapshot.deviceStreams = deviceStreams_;
  for (uint32_t s = 0; s < deviceStreams_ && s < kPlanMaxStreams; ++s)
    snapshot.device[s] = deviceWords_[s];
  return snapshot;
}

std::optional<double> RankPosition::waitedSeconds() const {
  if (!hostWaitMeasured_ && !deviceClocks_)
    return std::nullopt;
  // (the streams' waits may overlap in time: the longest, which the step
  // lasted at least)
  uint64_t longest = 0;
  for (uint32_t s = 0; s < deviceClockStreams_; ++s)
    longest = std::max(longest, uint64_t(deviceClocks_[2 * s + 1]));
  return double(hostWaitNanoseconds_.load(std::memory_order_relaxed) +
                longest) *
         1e-9;
}

std::vector<uint64_t> mlt::rt::stepLaunchOffsets(const RankPlan &rank,
                                                 StepKind kind) {
  const std::vector<CallDesc> &calls = rank.calls(kind);
  std::vector<uint64_t> offsets;
  offsets.reserve(calls.size() + 1);
  uint64_t launches = 0;
  for (const CallDesc &call : calls) {
    offsets.push_back(launches);
    launches += rank.programs[call.program].instructions.size();
  }
  offsets.push_back(launches);
  return offsets;
}
