//===- MemoryPlan.cpp - static arena offsets from buffer lifetimes --------===//
//
// Part of mlt. The naive and greedy-by-size arena planners and the plan
// checker.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

using namespace mlt;

namespace {
uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}
} // namespace

bool MemoryPlan::verify(const std::vector<BufferLifetime> &lifetimes,
                        uint64_t alignment, std::string *why) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  if (offsets.size() != lifetimes.size())
    return fail("plan has " + std::to_string(offsets.size()) +
                " offsets for " + std::to_string(lifetimes.size()) +
                " buffers");
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    if (offsets[i] % alignment != 0)
      return fail("buffer " + std::to_string(i) + " is not aligned");
    if (offsets[i] + lifetimes[i].bytes > peakBytes)
      return fail("buffer " + std::to_string(i) + " ends past the peak");
    for (size_t j = 0; j < i; ++j) {
      if (!lifetimes[i].overlaps(lifetimes[j]) || !lifetimes[i].bytes ||
          !lifetimes[j].bytes)
        continue;
      bool apart = offsets[i] + lifetimes[i].bytes <= offsets[j] ||
                   offsets[j] + lifetimes[j].bytes <= offsets[i];
      if (!apart) {
        std::ostringstream os;
        os << "buffers " << j << " and " << i
           << " are live together and overlap in memory";
        return fail(os.str());
      }
    }
  }
  return true;
}

MemoryPlan mlt::planMemoryNaive(const std::vector<BufferLifetime> &lifetimes,
                                uint64_t alignment) {
  MemoryPlan plan;
  uint64_t next = 0;
  for (const BufferLifetime &b : lifetimes) {
    plan.offsets.push_back(next);
    next = alignUp(next + b.bytes, alignment);
  }
  plan.peakBytes = next;
  return plan;
}

MemoryPlan mlt::planMemory(const std::vector<BufferLifetime> &lifetimes,
                           uint64_t alignment) {
  std::vector<size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by first use, then index, so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (lifetimes[a].bytes != lifetimes[b].bytes)
      return lifetimes[a].bytes > lifetimes[b].bytes;
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });

  MemoryPlan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
    const BufferLifetime &buffer = lifetimes[i];
    // The ranges of placed buffers that are live at the same time, by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j : placed)
      if (lifetimes[j].overlaps(buffer) && lifetimes[j].bytes)
        busy.push_back({plan.offsets[j], plan.offsets[j] + lifetimes[j].bytes});
    std::sort(busy.begin(), busy.end());
    uint64_t candidate = 0;
    for (auto [begin, end] : busy) {
      if (candidate + buffer.bytes <= begin)
        break;
      candidate = std::max(candidate, alignUp(end, alignment));
    }
    plan.offsets[i] = candidate;
    plan.peakBytes =
        std::max(plan.peakBytes, alignUp(candidate + buffer.bytes, alignment));
    placed.push_back(i);
  }
  return plan;
}
