//===- MemoryPlan.h - static arena offsets from buffer lifetimes -*- C++ -*-===//
//
// Part of mlt. Assigns every buffer of a program a byte offset in one arena so
// that buffers alive at the same time never overlap. Lifetimes are intervals
// of instruction indices; the result states the arena's peak size, which is
// the memory the runtime allocates and the figure reported before launch.
// Plain C++: the planner needs neither MLIR nor the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_MEMORYPLAN_H
#define MLT_ANALYSIS_MEMORYPLAN_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// A buffer that is live from instruction `firstUse` to `lastUse`, inclusive.
struct BufferLifetime {
  uint64_t bytes = 0;
  int64_t firstUse = 0;
  int64_t lastUse = 0;

  bool overlaps(const BufferLifetime &other) const {
    return firstUse <= other.lastUse && other.firstUse <= lastUse;
  }
};

/// Offsets (parallel to the lifetimes planned) and the arena size they need.
struct MemoryPlan {
  std::vector<uint64_t> offsets;
  uint64_t peakBytes = 0;

  /// Checks the plan against `lifetimes`: one aligned offset per buffer, every
  /// buffer inside the peak, and no two overlapping in both time and space.
  /// On failure `why` names the first offending pair.
  bool verify(const std::vector<BufferLifetime> &lifetimes, uint64_t alignment,
              std::string *why = nullptr) const;
};

/// The reference planner: every buffer gets its own range (no reuse).
MemoryPlan planMemoryNaive(const std::vector<BufferLifetime> &lifetimes,
                           uint64_t alignment);

/// Greedy by size: buffers from largest to smallest, each at the lowest
/// aligned offset where it fits beside the already placed buffers whose
/// lifetimes overlap its own.
MemoryPlan planMemory(const std::vector<BufferLifetime> &lifetimes,
                      uint64_t alignment);

} // namespace mlt

#endif // MLT_ANALYSIS_MEMORYPLAN_H
