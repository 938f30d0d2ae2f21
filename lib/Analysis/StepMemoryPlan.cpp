//===- StepMemoryPlan.cpp - arena offsets across a step's calls -----------===//
//
// Part of mlt. The naive and greedy-by-size planners of blocks live in sets
// of call spans, and the plan checker.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepMemoryPlan.h"

#include "FirstFit.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>

using namespace mlt;

using mlt::analysis::alignUp;
using mlt::analysis::firstFit;
using mlt::analysis::PlacedRanges;
using mlt::analysis::TimeSlots;

namespace {

bool needSpace(const StepBlock &a, const StepBlock &b) {
  return a.bytes && b.bytes && a.liveTogether(b);
}

/// Whether every block's spans are as normalize() leaves them: each span's
/// first call at most its last, the spans in order and apart. The checks
/// and placements by sweep and by PlacedRanges need no more, and find for
/// such blocks what liveTogether finds (which expects them).
bool normalized(const std::vector<StepBlock> &blocks) {
  for (const StepBlock &block : blocks)
    for (size_t s = 0; s < block.live.size(); ++s)
      if (block.live[s].last < block.live[s].first ||
          (s > 0 && block.live[s].first <= block.live[s - 1].last + 1))
        return false;
  return true;
}

/// Largest first; ties by first call, then index.
std::vector<size_t> greedyOrder(const std::vector<StepBlock> &blocks) {
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), 0);
  auto firstCall = [&](size_t i) {
    return blocks[i].live.empty() ? INT64_MAX : blocks[i].live.front().first;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes)
      return blocks[a].bytes > blocks[b].bytes;
    return firstCall(a) < firstCall(b);
  });
  return order;
}

/// Whether `plan` passes every check of StepMemoryPlan::verifyAllPairs, in
/// O(s log s) for s spans (of normalized blocks, one offset per block): by
/// first call, each span meets the spans still live, all live in a common
/// call; those checked so far are apart in memory, so only the nearest
/// below and above its offset can overlap it.
bool validBySweep(const StepMemoryPlan &plan,
                  const std::vector<StepBlock> &blocks, uint64_t alignment) {
  const std::vector<uint64_t> &offsets = plan.offsets;
  struct Span {
    int64_t first, last;
    size_t block;
  };
  std::vector<Span> spans;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (offsets[i] % alignment != 0 ||
        offsets[i] + blocks[i].bytes > plan.peakBytes)
      return false;
    if (blocks[i].bytes)
      for (const CallSpan &span : blocks[i].live)
        spans.push_back({span.first, span.last, i});
  }
  std::stable_sort(
      spans.begin(), spans.end(),
      [](const Span &a, const Span &b) { return a.first < b.first; });
  std::map<uint64_t, uint64_t> live;         // offset -> end
  using Ending = std::pair<int64_t, size_t>; // (last call, block)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> ends;
  for (const Span &span : spans) {
    while (!ends.empty() && ends.top().first < span.first) {
      live.erase(offsets[ends.top().second]);
      ends.pop();
    }
    const uint64_t begin = offsets[span.block],
                   end = begin + blocks[span.block].bytes;
    auto above = live.lower_bound(begin);
    if (above != live.end() && above->first < end)
      return false;
    if (above != live.begin() && std::prev(above)->second > begin)
      return false;
    live.emplace(begin, end);
    ends.push({span.last, span.block});
  }
  return true;
}

} // namespace

void StepBlock::normalize() {
  std::sort(live.begin(), live.end(), [](const CallSpan &a, const CallSpan &b) {
    return a.first < b.first || (a.first == b.first && a.last < b.last);
  });
  std::vector<CallSpan> merged;
  for (const CallSpan &span : live) {
    if (!merged.empty() && span.first <= merged.back().last + 1)
      merged.back().last = std::max(merged.back().last, span.last);
    else
      merged.push_back(span);
  }
  live = std::move(merged);
}

bool StepBlock::liveTogether(const StepBlock &other) const {
  size_t i = 0, j = 0;
  while (i < live.size() && j < other.live.size()) {
    const CallSpan &a = live[i], &b = other.live[j];
    if (a.first <= b.last && b.first <= a.last)
      return true;
    if (a.last < b.last)
      ++i;
    else
      ++j;
  }
  return false;
}

bool StepMemoryPlan::verifyAllPairs(const std::vector<StepBlock> &blocks,
                                    uint64_t alignment,
                                    std::string *why) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  if (offsets.size() != blocks.size())
    return fail("plan has " + std::to_string(offsets.size()) +
                " offsets for " + std::to_string(blocks.size()) + " blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (offsets[i] % alignment != 0)
      return fail("block " + std::to_string(i) + " is not aligned");
    if (offsets[i] + blocks[i].bytes > peakBytes)
      return fail("block " + std::to_string(i) + " ends past the peak");
    for (size_t j = 0; j < i; ++j) {
      if (!needSpace(blocks[i], blocks[j]))
        continue;
      if (offsets[i] + blocks[i].bytes > offsets[j] &&
          offsets[j] + blocks[j].bytes > offsets[i]) {
        std::ostringstream os;
        os << "blocks " << j << " and " << i
           << " are live in a common call and overlap in memory";
        return fail(os.str());
      }
    }
  }
  return true;
}

bool StepMemoryPlan::verify(const std::vector<StepBlock> &blocks,
                            uint64_t alignment, std::string *why) const {
  if (offsets.size() != blocks.size() || !normalized(blocks) ||
      !validBySweep(*this, blocks, alignment))
    return verifyAllPairs(blocks, alignment, why);
  return true;
}

StepMemoryPlan mlt::planStepMemoryNaive(const std::vector<StepBlock> &blocks,
                                        uint64_t alignment) {
  StepMemoryPlan plan;
  uint64_t next = 0;
  for (const StepBlock &block : blocks) {
    plan.offsets.push_back(next);
    next = alignUp(next + block.bytes, alignment);
  }
  plan.peakBytes = next;
  return plan;
}

StepMemoryPlan mlt::planStepMemoryByScan(const std::vector<StepBlock> &blocks,
                                         uint64_t alignment) {
  StepMemoryPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : greedyOrder(blocks)) {
    const StepBlock &block = blocks[i];
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j : placed)
      if (needSpace(blocks[j], block))
        busy.push_back({plan.offsets[j], plan.offsets[j] + blocks[j].bytes});
    const uint64_t candidate = firstFit(busy, block.bytes, alignment);
    plan.offsets[i] = candidate;
    plan.peakBytes =
        std::max(plan.peakBytes, alignUp(candidate + block.bytes, alignment));
    placed.push_back(i);
  }
  return plan;
}

StepMemoryPlan mlt::planStepMemory(const std::vector<StepBlock> &blocks,
                                   uint64_t alignment) {
  if (!normalized(blocks))
    return planStepMemoryByScan(blocks, alignment);
  std::vector<int64_t> calls;
  for (const StepBlock &block : blocks)
    for (const CallSpan &span : block.live)
      calls.insert(calls.end(), {span.first, span.last});
  TimeSlots slot(std::move(calls));
  PlacedRanges placed(slot.size(), alignment);
  StepMemoryPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  for (size_t i : greedyOrder(blocks)) {
    const StepBlock &block = blocks[i];
    std::vector<std::pair<int64_t, int64_t>> live;
    for (const CallSpan &span : block.live)
      live.push_back({slot(span.first), slot(span.last)});
    const uint64_t candidate = placed.firstFit(live, block.bytes);
    plan.offsets[i] = candidate;
    plan.peakBytes =
        std::max(plan.peakBytes, alignUp(candidate + block.bytes, alignment));
    for (auto [first, last] : live)
      placed.add(first, last, candidate, candidate + block.bytes);
  }
  return plan;
}
