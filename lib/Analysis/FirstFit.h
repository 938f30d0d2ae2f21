//===- FirstFit.h - the placement step the arena planners share -*- C++ -*-===//
//
// Part of mlt. Both greedy planners (MemoryPlan.cpp within a program,
// StepMemoryPlan.cpp across a step's calls) place a buffer at the lowest
// aligned offset where it fits beside the ranges already placed that are
// live with it; this is that step, twice: `firstFit` over a list of the
// ranges live with the buffer (the reference planners, which scan every
// placed buffer to make that list), and `PlacedRanges`, which finds the
// same offset without looking at every placed buffer. Private to
// lib/Analysis.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_ANALYSIS_FIRSTFIT_H
#define MLT_LIB_ANALYSIS_FIRSTFIT_H

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace mlt::analysis {

inline uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// The lowest multiple of `alignment` at which `bytes` fit without
/// overlapping any of the [begin, end) ranges of `busy` (sorted here).
///
/// That is the one lowest aligned `c` with `c + bytes <= begin` or
/// `end <= c` for every range (0 when `bytes` is 0), whatever finds it:
/// PlacedRanges::firstFit returns the same offset.
inline uint64_t firstFit(std::vector<std::pair<uint64_t, uint64_t>> &busy,
                         uint64_t bytes, uint64_t alignment) {
  std::sort(busy.begin(), busy.end());
  uint64_t candidate = 0;
  for (auto [begin, end] : busy) {
    if (candidate + bytes <= begin)
      break;
    candidate = std::max(candidate, alignUp(end, alignment));
  }
  return candidate;
}

/// A union of [begin, end) ranges of bytes, kept as disjoint ranges: ranges
/// that overlap or touch are merged as they are added.
class RangeUnion {
public:
  void add(uint64_t begin, uint64_t end) {
    auto it = ranges.upper_bound(begin);
    if (it != ranges.begin() && std::prev(it)->second >= begin)
      --it;
    while (it != ranges.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges.erase(it);
    }
    ranges.emplace_hint(it, begin, end);
  }

  /// The first range that ends after `at` (disjoint ranges end in the order
  /// they begin), or null.
  const std::pair<const uint64_t, uint64_t> *
  firstEndingAfter(uint64_t at) const {
    auto it = ranges.upper_bound(at);
    if (it != ranges.begin() && std::prev(it)->second > at)
      --it;
    return it == ranges.end() ? nullptr : &*it;
  }

  bool empty() const { return ranges.empty(); }

private:
  std::map<uint64_t, uint64_t> ranges;
};

/// The ranges of the placed buffers, each busy during an interval of time
/// slots (0 .. numSlots - 1, inclusive intervals), for the query of the
/// greedy planners: the lowest aligned offset where `bytes` fit beside every
/// range busy at some slot of given intervals. The planners used to collect
/// and sort those ranges from every placed buffer for each buffer they
/// place, quadratic in the buffers (a deep model's activations are all live
/// together); here a query looks at O(log slots) unions of ranges.
///
/// A segment tree over the slots. A range busy during [first, last] is added
/// to the union `meeting` of every node whose slots meet the interval on the
/// way down to the nodes the interval covers, and to `covering` of those:
/// the ranges busy at some slot of a node are then its `meeting` union and
/// the `covering` unions of its ancestors. A query walks down to the nodes
/// its interval covers and takes their `meeting` unions and the `covering`
/// unions of the nodes on the way (which its interval meets in part), then
/// moves a candidate offset up past every range in its way until none is:
/// the lowest aligned offset that fits, as `firstFit` finds it.
///
/// A range is kept with its end rounded up to the alignment: an aligned
/// offset below that is below the end, so the same offsets are free, and the
/// ranges of small buffers stacked at aligned offsets merge into one.
class PlacedRanges {
public:
  PlacedRanges(int64_t numSlots, uint64_t alignment)
      : numSlots(std::max<int64_t>(numSlots, 1)), alignment(alignment),
        nodes(4 * size_t(this->numSlots)) {}

  /// Records [begin, end) as busy during the slots [first, last].
  void add(int64_t first, int64_t last, uint64_t begin, uint64_t end) {
    if (begin < end && first <= last)
      add(1, 0, numSlots, first, last, begin, alignUp(end, alignment));
  }

  /// The lowest multiple of the alignment where `bytes` fit beside the
  /// ranges busy during any of `intervals` (inclusive [first, last] slots).
  uint64_t firstFit(const std::vector<std::pair<int64_t, int64_t>> &intervals,
                    uint64_t bytes) const {
    if (bytes == 0)
      return 0;
    std::vector<const RangeUnion *> unions;
    for (auto [first, last] : intervals)
      if (first <= last)
        collect(1, 0, numSlots, first, last, unions);
    uint64_t candidate = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const RangeUnion *busy : unions)
        while (const auto *range = busy->firstEndingAfter(candidate)) {
          if (candidate + bytes <= range->first)
            break;
          candidate = range->second;
          moved = true;
        }
    }
    return candidate;
  }

private:
  struct Node {
    RangeUnion meeting, covering;
  };

  void add(size_t node, int64_t lo, int64_t hi, int64_t first, int64_t last,
           uint64_t begin, uint64_t end) {
    nodes[node].meeting.add(begin, end);
    if (first <= lo && hi - 1 <= last) {
      nodes[node].covering.add(begin, end);
      return;
    }
    int64_t mid = lo + (hi - lo) / 2;
    if (first < mid)
      add(2 * node, lo, mid, first, last, begin, end);
    if (last >= mid)
      add(2 * node + 1, mid, hi, first, last, begin, end);
  }

  void collect(size_t node, int64_t lo, int64_t hi, int64_t first, int64_t last,
               std::vector<const RangeUnion *> &unions) const {
    const Node &here = nodes[node];
    if (first <= lo && hi - 1 <= last) {
      if (!here.meeting.empty())
        unions.push_back(&here.meeting);
      return;
    }
    if (!here.covering.empty())
      unions.push_back(&here.covering);
    int64_t mid = lo + (hi - lo) / 2;
    if (first < mid)
      collect(2 * node, lo, mid, first, last, unions);
    if (last >= mid)
      collect(2 * node + 1, mid, hi, first, last, unions);
  }

  int64_t numSlots;
  uint64_t alignment;
  std::vector<Node> nodes;
};

/// The distinct values of `times`, sorted: slot s stands for the s-th.
/// Intervals keep their order relations (which overlap which) in slots.
class TimeSlots {
public:
  explicit TimeSlots(std::vector<int64_t> times) : values(std::move(times)) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
  }
  int64_t size() const { return int64_t(values.size()); }
  /// The slot of `time`, one of the values given.
  int64_t operator()(int64_t time) const {
    return int64_t(std::lower_bound(values.begin(), values.end(), time) -
                   values.begin());
  }

private:
  std::vector<int64_t> values;
};

} // namespace mlt::analysis

#endif // MLT_LIB_ANALYSIS_FIRSTFIT_H
