//===- StepMemoryPlan.h - arena offsets across a step's calls ----*- C++ -*-===//
//
// Part of mlt. The second level of memory planning for a training step that
// keeps values from one call to a later one: a forward body leaves
// activations that the backward body of the same micro-batch reads, maybe
// several calls later (pipeline schedules, GPipe). Each body's temporaries
// are packed first, alone (MemoryPlan.h), into one region per body; then
// those regions and the kept activations are blocks whose lifetimes are
// sets of call spans (a body's region is live during each of its calls, a
// kept activation from the call that writes it to the call that last reads
// it, for each micro-batch), and this planner gives every block an offset
// so that no two blocks live in a common call overlap. A schedule that keeps
// k micro-batches' activations alive at once therefore needs exactly k
// copies of them (the compiler gives them one copy per slot), and the plan
// says how much memory that is before anything runs. Plain C++.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_STEPMEMORYPLAN_H
#define MLT_ANALYSIS_STEPMEMORYPLAN_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// The calls `first` to `last` of a step, inclusive.
struct CallSpan {
  int64_t first = 0;
  int64_t last = 0;
};

/// A block of `bytes` that is live during the calls of `live`.
struct StepBlock {
  uint64_t bytes = 0;
  std::vector<CallSpan> live;

  /// Sorts the spans and merges those that overlap or touch.
  void normalize();
  /// Whether some call is in a span of both (both normalized).
  bool liveTogether(const StepBlock &other) const;
};

/// Offsets (parallel to the blocks) and the size they need.
struct StepMemoryPlan {
  std::vector<uint64_t> offsets;
  uint64_t peakBytes = 0;

  /// One aligned offset per block, every block inside the peak, and no two
  /// blocks live in a common call overlapping in memory. On failure `why`
  /// names the first offending pair. A sweep over the blocks' spans by
  /// first call, O(s log s) for s spans of normalized blocks; a plan it
  /// refuses (or blocks not normalized) is checked by verifyAllPairs.
  bool verify(const std::vector<StepBlock> &blocks, uint64_t alignment,
              std::string *why = nullptr) const;

  /// The reference checker: the same checks block by block (the first that
  /// fails named, a pair as "blocks j and i", j < i), every pair of blocks
  /// compared; O(n^2).
  bool verifyAllPairs(const std::vector<StepBlock> &blocks, uint64_t alignment,
                      std::string *why = nullptr) const;
};

/// The reference: every block its own range, in order.
StepMemoryPlan planStepMemoryNaive(const std::vector<StepBlock> &blocks,
                                   uint64_t alignment);

/// Greedy by size: from the largest block to the smallest (ties by first
/// call, then index), each at the lowest aligned offset where it fits
/// beside the placed blocks it is live with. The blocks must be normalized.
/// The placed blocks' ranges are indexed by call (a segment tree), so a
/// placement does not look at every placed block.
StepMemoryPlan planStepMemory(const std::vector<StepBlock> &blocks,
                              uint64_t alignment);

/// The same plan as planStepMemory, each placement made from a scan of
/// every placed block (O(n^2)): the reference planStepMemory is tested
/// against.
StepMemoryPlan planStepMemoryByScan(const std::vector<StepBlock> &blocks,
                                    uint64_t alignment);

} // namespace mlt

#endif // MLT_ANALYSIS_STEPMEMORYPLAN_H
