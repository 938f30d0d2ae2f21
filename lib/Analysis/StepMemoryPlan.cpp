//===- StepMemoryPlan.cpp - arena offsets across a step's calls -----------===//
//
// Part of mlt. The naive and greedy-by-size planners of blocks live in sets
// of call spans, and the plan checker.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepMemoryPlan.h"

#include "FirstFit.h"

#include <algorithm>
#include <numeric>
#include <sstream>

using namespace mlt;

using mlt::analysis::alignUp;
using mlt::analysis::firstFit;

namespace {

bool needSpace(const StepBlock &a, const StepBlock &b) {
  return a.bytes && b.bytes && a.liveTogether(b);
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

bool StepMemoryPlan::verify(const std::vector<StepBlock> &blocks,
                            uint64_t alignment, std::string *why) const {
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

StepMemoryPlan mlt::planStepMemory(const std::vector<StepBlock> &blocks,
                                   uint64_t alignment) {
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
  StepMemoryPlan plan;
  plan.offsets.assign(blocks.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
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
