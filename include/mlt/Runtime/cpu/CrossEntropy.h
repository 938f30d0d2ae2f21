//===- CrossEntropy.h - CPU softmax cross-entropy loss ----------*- C++ -*-===//
//
// Part of mlt. Forward and backward of `mlt.cross_entropy` on the CPU: the
// mean over positions of `logsumexp(logits) - logits[label]`, as HF's
// LlamaForCausalLM computes its loss. Labels come from data files, so they are
// checked and an out-of-range label is reported with its position.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_CROSSENTROPY_H
#define MLT_RUNTIME_CPU_CROSSENTROPY_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// cross_entropy family
//
// Invariants:
// - `logits` and `dlogits` are [rows, vocab] (rows = batch * seq); `labels`
//   are `rows` int32 ids; `lse` is [rows]; the loss is one T scalar.
// - `loss = sum_r (lse[r] - logits[r, labels[r]]) / lossDivisor`. Pass
//   `lossDivisor = rows` for a plain mean; when these rows are a part of the
//   batch (a microbatch, a data- or sequence-parallel shard), pass the number
//   of rows of the whole batch so that the parts' losses and gradients add up
//   to those of the whole.
// - Row statistics (max, sum of exponentials) and the loss sum are computed in
//   double; lse and the loss are rounded to T once. Saved for the backward:
//   logits, labels and lse.
// - Backward overwrites `dlogits = (softmax(logits) - onehot(label)) * dloss /
//   lossDivisor`; `dlogits` may alias `logits` (the logits buffer is the
//   largest activation, so reusing it matters).
// - Every label is checked against [0, vocab) before anything is written;
//   the message names the first bad label and its flat position.
//===----------------------------------------------------------------------===//

/// *loss = mean-style cross-entropy (see above); lse[r] = logsumexp(row r).
template <typename T>
Status crossEntropyForward(T *loss, T *lse, const T *logits,
                           const int32_t *labels, int64_t rows, int64_t vocab,
                           int64_t lossDivisor);

/// dlogits = (softmax - onehot) * dloss / lossDivisor, from the saved lse.
template <typename T>
Status crossEntropyBackward(T *dlogits, const T *logits, const T *lse,
                            const int32_t *labels, T dloss, int64_t rows,
                            int64_t vocab, int64_t lossDivisor);

//===----------------------------------------------------------------------===//
// cross_entropy over vocabulary shards
//
// The same loss when the logits' columns are split into shards (tensor
// parallel LM heads): shard k holds the columns [vocabOffset, vocabOffset +
// vocabShard) of a global vocabulary of vocabTotal entries.
//
// Invariants:
// - `logits` and `dlogits` are [rows, vocabShard]; `labels` are `rows` int32
//   ids into the global vocabulary; `lse`, `target` are [rows]; `parts` is
//   [numParts, rows] (part g at g * rows, as all_gather concatenates them).
// - crossEntropyStats: lse[r] = the logsumexp of the shard's row r (max
//   shifted, summed in double, rounded to T once, as the forward above);
//   target[r] = logits[r, labels[r] - vocabOffset] when the label falls in
//   the shard, else 0, so that the targets of all shards add up to the
//   label's logit.
// - crossEntropyCombine: lse[r] = the logsumexp over g of parts[g, r] (in
//   double, max shifted); *loss = sum_r (lse[r] - target[r]) / lossDivisor,
//   summed in double and rounded once. With the shards' statistics it gives
//   the loss and lse of crossEntropyForward on the whole rows, up to the
//   rounding of the parts to T.
// - crossEntropyStatsBackward overwrites the shard's dlogits = (softmax -
//   onehot(label)) * dloss / lossDivisor from the GLOBAL lse (combine's):
//   the shards' dlogits side by side are crossEntropyBackward's. dlogits may
//   alias logits.
// - Labels are checked against [0, vocabTotal) before anything is written,
//   and the message names the first bad label and its position, as above;
//   vocabOffset + vocabShard must not exceed vocabTotal, and lossDivisor and
//   (when rows > 0) numParts must be positive.
//===----------------------------------------------------------------------===//

/// lse[r] = logsumexp(shard row r); target[r] = the label's logit if the
/// label is in [vocabOffset, vocabOffset + vocabShard), else 0.
template <typename T>
Status crossEntropyStats(T *lse, T *target, const T *logits,
                         const int32_t *labels, int64_t rows,
                         int64_t vocabShard, int64_t vocabOffset,
                         int64_t vocabTotal);

/// lse[r] = logsumexp_g parts[g, r]; *loss = sum_r (lse[r] - target[r]) /
/// lossDivisor.
template <typename T>
Status crossEntropyCombine(T *lse, T *loss, const T *parts, const T *target,
                           int64_t rows, int64_t numParts, int64_t lossDivisor);

/// The shard's dlogits = (exp(logits - lse) - onehot) * dloss / lossDivisor,
/// with `lse` the global one.
template <typename T>
Status crossEntropyStatsBackward(T *dlogits, const T *logits, const T *lse,
                                 const int32_t *labels, T dloss, int64_t rows,
                                 int64_t vocabShard, int64_t vocabOffset,
                                 int64_t vocabTotal, int64_t lossDivisor);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_CROSSENTROPY_H
