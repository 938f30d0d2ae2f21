//===- Embedding.h - CPU token embedding kernels ----------------*- C++ -*-===//
//
// Part of mlt. Forward and backward of `mlt.embedding` on the CPU: a gather
// of table rows by token id, and its transpose, a scatter-add into the table's
// gradient. Token ids come from data files, so they are checked: an id outside
// the vocabulary is reported with its position instead of being read out of
// bounds.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_EMBEDDING_H
#define MLT_RUNTIME_CPU_EMBEDDING_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// embedding family
//
// Invariants:
// - `ids` are `numTokens` int32 token ids (a [batch, seq] tensor, flattened);
//   `table` is [vocab, hidden]; activations are [numTokens, hidden].
// - Every id is checked against [0, vocab) before anything is written: on an
//   error the outputs are untouched and the message names the first bad id
//   and its flat position (`b * seq + s`).
// - Forward overwrites `out`. Backward accumulates into `dtable` (it is a
//   parameter gradient): row `ids[p]` gets `dout[p, :]` added, in position
//   order, in T, so repeated ids sum deterministically.
// - Nothing is saved beyond the ids themselves.
//===----------------------------------------------------------------------===//

/// out[p, :] = table[ids[p], :] for p in [0, numTokens).
template <typename T>
Status embeddingForward(T *out, const int32_t *ids, const T *table,
                        int64_t numTokens, int64_t vocab, int64_t hidden);

/// dtable[ids[p], :] += dout[p, :] for p in [0, numTokens).
template <typename T>
Status embeddingBackward(T *dtable, const int32_t *ids, const T *dout,
                         int64_t numTokens, int64_t vocab, int64_t hidden);

//===----------------------------------------------------------------------===//
// embedding over vocabulary shards
//
// The same lookup when the table's rows are split into shards (a vocabulary
// parallel embedding): this shard holds rows [vocabOffset, vocabOffset +
// vocabShard) of a global table of vocabTotal rows.
//
// Invariants:
// - `table` and `dtable` are [vocabShard, hidden]; ids index the global
//   vocabulary and are checked against [0, vocabTotal) as above (the
//   message names the first bad id and its position; nothing is written);
//   vocabOffset + vocabShard must not exceed vocabTotal.
// - Forward overwrites every row of `out`: the table row of an id in the
//   shard, zeros for any other id, so that the shards' outputs add up to the
//   whole table's lookup (one nonzero term per row, so exactly).
// - Backward accumulates into `dtable` like embeddingBackward, from the
//   positions whose ids are in the shard only: the shards' dtables stacked
//   are the whole table's gradient.
//===----------------------------------------------------------------------===//

/// out[p, :] = table[ids[p] - vocabOffset, :] for ids in the shard, else 0.
template <typename T>
Status embeddingForwardShard(T *out, const int32_t *ids, const T *table,
                             int64_t numTokens, int64_t vocabShard,
                             int64_t hidden, int64_t vocabOffset,
                             int64_t vocabTotal);

/// dtable[ids[p] - vocabOffset, :] += dout[p, :] for the ids in the shard.
template <typename T>
Status embeddingBackwardShard(T *dtable, const int32_t *ids, const T *dout,
                              int64_t numTokens, int64_t vocabShard,
                              int64_t hidden, int64_t vocabOffset,
                              int64_t vocabTotal);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_EMBEDDING_H
