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

#include "mlt/Runtime/Status.h"

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
rt::Status embeddingForward(T *out, const int32_t *ids, const T *table,
                            int64_t numTokens, int64_t vocab, int64_t hidden);

/// dtable[ids[p], :] += dout[p, :] for p in [0, numTokens).
template <typename T>
rt::Status embeddingBackward(T *dtable, const int32_t *ids, const T *dout,
                             int64_t numTokens, int64_t vocab, int64_t hidden);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_EMBEDDING_H
