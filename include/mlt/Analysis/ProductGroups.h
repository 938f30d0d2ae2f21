//===- ProductGroups.h - same-shape launches brought together ---*- C++ -*-===//
//
// Part of mlt. The ordering rule of mlt-group-products (Passes.td): in a
// program's list of launches, launches of one kind (a matrix product's
// shape) that do not depend on each other are brought next to the first of
// them, so that one batched launch can run them; every launch they move
// past must be independent of them, so the program computes what it did.
// Plain C++: launches are items with the buffers they read and write.
//
// Invariants of groupLaunches' result (checkGrouping tests them, the naive
// reference: every pair of items, in O(n^2)):
// - `order` is a permutation of the items; every pair of items that
//   conflict (one writes what the other reads or writes) keeps its order;
// - every group has at least two members, all of one nonzero kind, listed
//   in their new order, consecutive in `order`, and no member conflicts
//   with another;
// - barriers and kind-0 items never move relative to barriers: nothing
//   moves across a barrier.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_PRODUCTGROUPS_H
#define MLT_ANALYSIS_PRODUCTGROUPS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlt::analysis {

/// One launch: its kind (0: never grouped; launches of one nonzero kind may
/// form a group), the buffers it reads and writes (any ids; a buffer that
/// overlaps another must share its id), and whether nothing may move across
/// it (a launch ordered by more than program order: streams, tokens).
struct GroupItem {
  uint64_t kind = 0;
  std::vector<int64_t> reads, writes;
  bool barrier = false;
};

struct LaunchGrouping {
  /// The new program order: item indices.
  std::vector<size_t> order;
  /// The groups (item indices in their new order), each of two or more.
  std::vector<std::vector<size_t>> groups;
};

/// Greedy, in program order: the first launch of a kind not yet placed
/// starts a group; each later launch of that kind within `window` launches,
/// before the next barrier, joins it when it conflicts with no member and
/// with no launch between that stays behind; the members then run one after
/// another at the first's place. O(n * window * operands).
LaunchGrouping groupLaunches(const std::vector<GroupItem> &items,
                             size_t window);

/// Whether `grouping` keeps the invariants above for `items` (empty), or
/// the first it breaks.
std::string checkGrouping(const std::vector<GroupItem> &items,
                          const LaunchGrouping &grouping);

} // namespace mlt::analysis

#endif // MLT_ANALYSIS_PRODUCTGROUPS_H
