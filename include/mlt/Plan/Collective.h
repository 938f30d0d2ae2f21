//===- Collective.h - one rank's side of a collective -----------*- C++ -*-===//
//
// Part of mlt. The collectives over one mesh axis (all-reduce, reduce-scatter,
// all-gather, broadcast) and one rank's side of a call of one: what the
// members of a group must agree on (kind, element type, count, root), which
// the plan verifier compares across a plan's ranks (PlanVerifier.cpp), and
// what a backend hands its Communicator (Communicator.h, with the rules every
// implementation keeps). Plain values with no dependency beyond
// ElementType.h, so that the plan library speaks of collectives without the
// runtime's collectives library.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_COLLECTIVE_H
#define MLT_PLAN_COLLECTIVE_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Plan/SequenceOrder.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlt::rt {

/// The collectives over one mesh axis.
enum class CollectiveKind : uint8_t {
  AllReduceSum,
  ReduceScatterSum,
  AllGather,
  Broadcast,
  /// Block k of every rank's input goes to rank k, which keeps it as its
  /// output's block of the sender's index.
  AllToAll,
  /// Every rank's input goes to the rank `shift` places after it in the
  /// group, cyclically; its output comes from the rank `shift` before.
  Permute,
};

/// Where an all-to-all's blocks lie in its input and output. Context
/// parallelism holds a sequence in the load-balanced order (SequenceOrder.h):
/// group member k holds chunks k and 2G - 1 - k of the 2G. Its all-to-all
/// exchange (heads scattered, sequence gathered) can put the two halves of
/// member k's block at those chunks' natural places as they arrive, and take
/// them from there when it sends back, so that no reorder runs beside it.
enum class BlockOrder : uint8_t {
  /// Block k of the input goes to member k; block k of the output comes
  /// from member k.
  Blocks,
  /// The output is 2G chunks of half a block: member k's block fills chunks
  /// k (its first half) and 2G - 1 - k (its second).
  ToNatural,
  /// The input is 2G chunks of half a block: member k gets chunks k and
  /// 2G - 1 - k, in that order, as its block.
  FromNatural,
};

/// The chunk, of the 2 * `groupSize` of a natural-order sequence, that half
/// `half` (0 or 1) of member `member`'s block holds.
constexpr int64_t naturalChunkOfBlock(int64_t member, int64_t half,
                                      int64_t groupSize) {
  return loadBalancedPosition(2 * member + half, 1, groupSize);
}

/// "blocks", "to_natural", "from_natural".
const char *blockOrderName(BlockOrder order);

/// "all_reduce_sum", "reduce_scatter_sum", "all_gather", "broadcast",
/// "all_to_all", "permute".
const char *collectiveKindName(CollectiveKind kind);

/// One rank's side of one collective, as a backend receives it. `count` is
/// the element count of all-reduce and broadcast, and the count per rank of
/// reduce-scatter, all-gather and all-to-all (each of the input's and the
/// output's blocks). Broadcast has in == out (the buffer).
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::AllReduceSum;
  ElementType dtype = ElementType::F32;
  size_t count = 0;
  /// Broadcast's root, as an index in the group; 0 for the other kinds.
  int root = 0;
  const void *in = nullptr;
  void *out = nullptr;
  /// Permute's step along the group (0 < shift < group size); 0 for the
  /// other kinds.
  int shift = 0;
  /// All-to-all's order of blocks; Blocks for the other kinds.
  BlockOrder order = BlockOrder::Blocks;

  /// Bytes per element of `dtype`.
  size_t elementBytes() const;
  /// Elements of `in` and of `out` in a group of `groupSize` ranks.
  size_t inCount(int groupSize) const;
  size_t outCount(int groupSize) const;
  /// Whether two ranks' calls are the same collective (kind, type, count,
  /// root, shift and order; not the buffers).
  bool matches(const CollectiveCall &other) const;
  /// "all_gather of 8 i32 per rank", "broadcast of 16 f32 from index 1".
  std::string describe() const;
};

} // namespace mlt::rt

#endif // MLT_PLAN_COLLECTIVE_H
