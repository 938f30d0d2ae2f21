//===- SequenceOrder.h - the load-balanced order of a sequence --*- C++ -*-===//
//
// Part of mlt. Context parallelism splits each sequence over the `cp` ranks
// of a mesh axis. Causal attention makes later tokens dearer (a token
// attends to every token before it), so contiguous blocks would give the
// last rank the most work. Instead the sequence is cut into 2 * cp equal
// chunks and rank i holds chunks i and 2 * cp - 1 - i: every rank attends
// over the same number of (query, key) pairs. The plan feeds the tokens and
// labels in this order (the data loader permutes each sequence), so every
// per-token op is unaffected; only the ops that read positions (the rotary
// embedding, attention's causal mask) map a row to its position here. The
// compiler, the runtime's data loader and both backends' kernels share
// these functions.
//
//   seq 16, cp 2: chunks of 4; the order is chunks 0, 3 (rank 0's block),
//   then 1, 2 (rank 1's):  index 0..3 -> positions 0..3, 4..7 -> 12..15,
//   8..11 -> 4..7, 12..15 -> 8..11.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_SEQUENCEORDER_H
#define MLT_PLAN_SEQUENCEORDER_H

#include <cstdint>

// Callable from CUDA kernels too (the CUDA backend's rope and attention).
#ifdef __CUDACC__
#define MLT_SEQUENCE_ORDER_FN __host__ __device__
#else
#define MLT_SEQUENCE_ORDER_FN
#endif

namespace mlt::rt {

/// The position of index `index` of the load-balanced order of a sequence
/// of 2 * `ranks` chunks of `chunk` tokens.
MLT_SEQUENCE_ORDER_FN constexpr int64_t loadBalancedPosition(int64_t index, int64_t chunk,
                                       int64_t ranks) {
  const int64_t slot = index / chunk, offset = index % chunk;
  const int64_t holder = slot / 2;
  const int64_t piece = slot % 2 == 0 ? holder : 2 * ranks - 1 - holder;
  return piece * chunk + offset;
}

/// The slot (chunk of the load-balanced order) of chunk `piece` (its
/// position in chunks) of a sequence of 2 * `ranks` chunks.
MLT_SEQUENCE_ORDER_FN constexpr int64_t loadBalancedSlot(int64_t piece,
                                                         int64_t ranks) {
  return piece < ranks ? 2 * piece : 2 * (2 * ranks - 1 - piece) + 1;
}

/// The index in that order of position `position` (the inverse).
MLT_SEQUENCE_ORDER_FN constexpr int64_t loadBalancedIndex(int64_t position, int64_t chunk,
                                    int64_t ranks) {
  return loadBalancedSlot(position / chunk, ranks) * chunk + position % chunk;
}

/// Where chunk `piece` (its position in chunks) of a sequence of 2 *
/// `ranks` chunks moves when the sequence is reordered whole: from its
/// load-balanced slot to its position (`toNatural`), or back.
struct ChunkMove {
  int64_t from = 0, to = 0;
};
MLT_SEQUENCE_ORDER_FN constexpr ChunkMove reorderedChunk(int64_t piece,
                                                         int64_t ranks,
                                                         bool toNatural) {
  const int64_t slot = loadBalancedSlot(piece, ranks);
  return toNatural ? ChunkMove{slot, piece} : ChunkMove{piece, slot};
}

/// The positions of a block of consecutive rows of a sequence: row r of the
/// block is index `first + r` of the sequence's order, at position
/// `offset` plus that index (natural order, `ranks` 1) or plus its
/// load-balanced position (`ranks` context ranks, chunks of `chunk`).
struct SequencePositions {
  int64_t first = 0;
  int64_t chunk = 1;
  int64_t ranks = 1;
  int64_t offset = 0;

  /// Rows in natural order from position `offset` (the common case, so an
  /// offset converts).
  MLT_SEQUENCE_ORDER_FN constexpr SequencePositions(int64_t offset = 0)
      : offset(offset) {}
  MLT_SEQUENCE_ORDER_FN constexpr SequencePositions(int64_t first,
                                                  int64_t chunk,
                                                  int64_t ranks,
                                                  int64_t offset)
      : first(first), chunk(chunk), ranks(ranks), offset(offset) {}
  /// The block of `rows` rows that rank `coordinate` of `ranks` context
  /// ranks holds (`rows` even: its two chunks).
  static constexpr SequencePositions contextBlock(int64_t rows,
                                                  int64_t coordinate,
                                                  int64_t ranks,
                                                  int64_t offset = 0) {
    return SequencePositions(coordinate * rows, rows / 2, ranks, offset);
  }
  /// The whole sequence in the load-balanced order of `ranks` ranks whose
  /// blocks are `blockRows` rows (what an all-gather of the blocks holds).
  static constexpr SequencePositions contextWhole(int64_t blockRows,
                                                  int64_t ranks) {
    return SequencePositions(0, blockRows / 2, ranks, 0);
  }

  /// Whether row r is at position r (natural order from 0).
  MLT_SEQUENCE_ORDER_FN constexpr bool isIdentity() const {
    return ranks == 1 && first == 0 && offset == 0;
  }

  MLT_SEQUENCE_ORDER_FN constexpr bool
  operator==(const SequencePositions &other) const {
    return first == other.first && chunk == other.chunk &&
           ranks == other.ranks && offset == other.offset;
  }

  MLT_SEQUENCE_ORDER_FN constexpr int64_t operator()(int64_t row) const {
    return offset + (ranks == 1 ? first + row
                                : loadBalancedPosition(first + row, chunk,
                                                       ranks));
  }
};

} // namespace mlt::rt

#endif // MLT_PLAN_SEQUENCEORDER_H
