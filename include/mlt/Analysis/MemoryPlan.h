//===- MemoryPlan.h - static arena offsets from buffer lifetimes -*- C++ -*-===//
//
// Part of mlt. Assigns every buffer of a program a byte offset in one arena so
// that buffers alive at the same time never overlap, except where a kernel
// writes an output in place of an input that dies at that instruction.
// Lifetimes are intervals of instruction indices; the result states the
// arena's peak size, which is the memory the runtime allocates and the
// figure reported before launch. Plain C++: the planner needs neither MLIR
// nor the runtime (which kernel may write which output in place is the
// caller's knowledge, given as candidates per buffer).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_MEMORYPLAN_H
#define MLT_ANALYSIS_MEMORYPLAN_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// A buffer that is live from instruction `firstUse` to `lastUse`, inclusive.
struct BufferLifetime {
  uint64_t bytes = 0;
  int64_t firstUse = 0;
  int64_t lastUse = 0;
  /// Buffers (indices into the planned list) whose memory this one may take
  /// over, in order of preference: inputs of the instruction that first
  /// writes this buffer, which die there and which its kernel may overwrite
  /// with this output element for element. Only a donor whose `lastUse` is
  /// this buffer's `firstUse` and which is at least as large counts (see
  /// mayTakeOver); the planner may then give this buffer the donor's offset.
  std::vector<size_t> inPlaceOf;

  bool overlaps(const BufferLifetime &other) const {
    return firstUse <= other.lastUse && other.firstUse <= lastUse;
  }

  /// Whether this buffer may occupy the memory of `donor` (buffer number
  /// `donorIndex`) in place: the donor is one of its candidates, dies at the
  /// instruction where this buffer is first written, and holds it.
  bool mayTakeOver(size_t donorIndex, const BufferLifetime &donor) const;
};

/// Offsets (parallel to the lifetimes planned) and the arena size they need.
struct MemoryPlan {
  std::vector<uint64_t> offsets;
  uint64_t peakBytes = 0;

  /// Checks the plan against `lifetimes`: one aligned offset per buffer,
  /// every buffer inside the peak, and no two overlapping in both time and
  /// space, except a buffer at the very offset of a donor it may take over
  /// (BufferLifetime::mayTakeOver). On failure `why` names the first
  /// offending pair. A sweep over the buffers by first use, O(n log n); a
  /// plan it refuses is checked again by verifyAllPairs, which names the
  /// pair.
  bool verify(const std::vector<BufferLifetime> &lifetimes, uint64_t alignment,
              std::string *why = nullptr) const;

  /// The reference checker: the same checks, buffer by buffer (the first
  /// that fails named, a pair as "buffers j and i", j < i), every pair of
  /// buffers compared; O(n^2).
  bool verifyAllPairs(const std::vector<BufferLifetime> &lifetimes,
                      uint64_t alignment, std::string *why = nullptr) const;
};

/// Which buffers share memory in place: for each buffer, the buffer whose
/// memory it takes over, or -1. Each buffer takes over at most one donor and
/// gives its memory to at most one; a chain of such buffers occupies one
/// range, so every buffer of a chain must be allowed to share it with every
/// other one it is live with. Candidates are tried by recipient in order of
/// first use (then index), and each recipient's in order of preference; a
/// candidate that would break a chain's rule is skipped. A chain's rule is
/// checked at the one instant where its members can meet another chain's
/// (the donor's last use), O(n log n) in all.
std::vector<int64_t>
chooseInPlace(const std::vector<BufferLifetime> &lifetimes);

/// The same choice, each chain's rule checked on every pair of members of
/// the two chains (O(n^2) for long chains): the reference chooseInPlace is
/// tested against.
std::vector<int64_t>
chooseInPlaceByPairs(const std::vector<BufferLifetime> &lifetimes);

/// The reference planner: every buffer gets its own range (no reuse), except
/// that a chain of in-place buffers (chooseInPlace) shares one range.
MemoryPlan planMemoryNaive(const std::vector<BufferLifetime> &lifetimes,
                           uint64_t alignment);

/// Greedy by size: the chains of in-place buffers (chooseInPlace), each as
/// one buffer as large as its largest member and live from its first to its
/// last use, from largest to smallest (ties by first use, then index), each
/// at the lowest aligned offset where it fits beside the already placed
/// ones whose lifetimes overlap its own. The placed ranges are indexed by
/// time (a segment tree over the instructions), so a placement does not
/// look at every placed buffer: O(n log^2 n) for n buffers, times the ranges
/// a placement moves past.
MemoryPlan planMemory(const std::vector<BufferLifetime> &lifetimes,
                      uint64_t alignment);

/// The same plan as planMemory, each placement made from a scan of every
/// placed buffer (O(n^2)): the reference planMemory is tested against.
MemoryPlan planMemoryByScan(const std::vector<BufferLifetime> &lifetimes,
                            uint64_t alignment);

} // namespace mlt

#endif // MLT_ANALYSIS_MEMORYPLAN_H
