//===- ProductGroups.cpp - same-shape launches brought together -----------===//
//
// Part of mlt. See ProductGroups.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/ProductGroups.h"

#include <algorithm>
#include <set>

using namespace mlt::analysis;

namespace {

bool intersects(const std::vector<int64_t> &x, const std::vector<int64_t> &y) {
  for (int64_t a : x)
    if (std::find(y.begin(), y.end(), a) != y.end())
      return true;
  return false;
}

/// Whether the order of `a` and `b` matters: one writes what the other
/// reads or writes.
bool conflict(const GroupItem &a, const GroupItem &b) {
  return intersects(a.writes, b.reads) || intersects(a.writes, b.writes) ||
         intersects(b.writes, a.reads);
}

} // namespace

LaunchGrouping mlt::analysis::groupLaunches(const std::vector<GroupItem> &items,
                                            size_t window) {
  LaunchGrouping result;
  const size_t n = items.size();
  std::vector<bool> placed(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (placed[i])
      continue;
    placed[i] = true;
    result.order.push_back(i);
    if (items[i].kind == 0 || items[i].barrier)
      continue;
    std::vector<size_t> group{i};
    // The launches between that stay behind the group.
    std::vector<size_t> staying;
    for (size_t j = i + 1; j < n && j <= i + window; ++j) {
      if (placed[j])
        continue;
      if (items[j].barrier)
        break;
      const bool joins =
          items[j].kind == items[i].kind &&
          std::none_of(
              group.begin(), group.end(),
              [&](size_t g) { return conflict(items[g], items[j]); }) &&
          std::none_of(staying.begin(), staying.end(),
                       [&](size_t s) { return conflict(items[s], items[j]); });
      if (joins) {
        group.push_back(j);
        placed[j] = true;
        result.order.push_back(j);
      } else {
        staying.push_back(j);
      }
    }
    if (group.size() > 1)
      result.groups.push_back(std::move(group));
  }
  return result;
}

std::string mlt::analysis::checkGrouping(const std::vector<GroupItem> &items,
                                         const LaunchGrouping &grouping) {
  const size_t n = items.size();
  if (grouping.order.size() != n)
    return "the order has " + std::to_string(grouping.order.size()) +
           " items, not " + std::to_string(n);
  std::vector<size_t> position(n, n);
  for (size_t p = 0; p < n; ++p) {
    const size_t item = grouping.order[p];
    if (item >= n || position[item] != n)
      return "the order is not a permutation";
    position[item] = p;
  }
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) {
      const bool keep =
          conflict(items[a], items[b]) || items[a].barrier || items[b].barrier;
      if (keep && position[a] > position[b])
        return "items " + std::to_string(a) + " and " + std::to_string(b) +
               " change order";
    }
  std::set<size_t> grouped;
  for (const std::vector<size_t> &group : grouping.groups) {
    if (group.size() < 2)
      return "a group of fewer than two";
    for (size_t k = 0; k < group.size(); ++k) {
      const size_t item = group[k];
      if (item >= n || !grouped.insert(item).second)
        return "an item in two groups";
      if (items[item].kind == 0 || items[item].kind != items[group[0]].kind ||
          items[item].barrier)
        return "a group of mixed kinds";
      if (k > 0 && position[item] != position[group[k - 1]] + 1)
        return "a group whose members are not consecutive";
      for (size_t other : group)
        if (other != item && conflict(items[item], items[other]))
          return "a group whose members conflict";
    }
  }
  return "";
}
