//===- FirstFit.h - the placement step the arena planners share -*- C++ -*-===//
//
// Part of mlt. Both greedy planners (MemoryPlan.cpp within a program,
// StepMemoryPlan.cpp across a step's calls) place a buffer at the lowest
// aligned offset where it fits beside the ranges already placed that are
// live with it; this is that step. Private to lib/Analysis.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_ANALYSIS_FIRSTFIT_H
#define MLT_LIB_ANALYSIS_FIRSTFIT_H

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace mlt::analysis {

inline uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// The lowest multiple of `alignment` at which `bytes` fit without
/// overlapping any of the [begin, end) ranges of `busy` (sorted here).
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

} // namespace mlt::analysis

#endif // MLT_LIB_ANALYSIS_FIRSTFIT_H
