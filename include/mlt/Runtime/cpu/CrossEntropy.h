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

#include "mlt/Runtime/Status.h"

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
rt::Status crossEntropyForward(T *loss, T *lse, const T *logits,
                               const int32_t *labels, int64_t rows,
                               int64_t vocab, int64_t lossDivisor);

/// dlogits = (softmax - onehot) * dloss / lossDivisor, from the saved lse.
template <typename T>
rt::Status crossEntropyBackward(T *dlogits, const T *logits, const T *lse,
                                const int32_t *labels, T dloss, int64_t rows,
                                int64_t vocab, int64_t lossDivisor);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_CROSSENTROPY_H
