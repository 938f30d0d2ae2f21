//===- Position.cpp - where a rank is in its plan -------------------------===//
//
// Part of mlt. See Position.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Position.h"

#include <cstring>

using namespace mlt;
using namespace mlt::rt;

bool PositionSnapshot::movedSince(const PositionSnapshot &earlier) const {
  return step != earlier.step || host != earlier.host ||
         std::memcmp(device, earlier.device, sizeof(device)) != 0;
}

void RankPosition::enterStep(int64_t step) {
  // The device finished the previous step (the trainer waited for it):
  // nothing writes the words now.
  for (uint32_t s = 0; s < deviceStreams_; ++s)
    deviceWords_[s] = 0;
  step_.store(step, std::memory_order_relaxed);
  at(kStepCall, 0, RankActivity::Running);
}

PositionSnapshot RankPosition::snapshot() const {
  PositionSnapshot snapshot;
  snapshot.rank = int32_t(rank_);
  snapshot.step = step_.load(std::memory_order_relaxed);
  snapshot.host = host_.load(std::memory_order_relaxed);
  snapshot.deviceStreams = deviceStreams_;
  for (uint32_t s = 0; s < deviceStreams_ && s < kPlanMaxStreams; ++s)
    snapshot.device[s] = deviceWords_[s];
  return snapshot;
}

std::vector<uint64_t> mlt::rt::stepLaunchOffsets(const RankPlan &rank) {
  std::vector<uint64_t> offsets;
  offsets.reserve(rank.step.size() + 1);
  uint64_t launches = 0;
  for (const CallDesc &call : rank.step) {
    offsets.push_back(launches);
    launches += rank.programs[call.program].instructions.size();
  }
  offsets.push_back(launches);
  return offsets;
}
