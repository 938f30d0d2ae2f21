//===- Attention.h - CPU causal grouped-query attention ---------*- C++ -*-===//
//
// Part of mlt. Forward and backward of `mlt.attention` on the CPU, organized
// as flash attention is on the GPU: the forward saves one log-sum-exp per
// query row instead of the probabilities, and the backward recomputes the
// probabilities from q, k and that statistic. No [seq, seq] matrix is ever
// stored, so memory grows linearly with the sequence.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_ATTENTION_H
#define MLT_RUNTIME_CPU_ATTENTION_H

#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

/// Shape and attributes of one attention call.
struct AttentionParams {
  int64_t batch = 0;
  /// Query rows.
  int64_t seq = 0;
  /// Key/value rows; 0: seq.
  int64_t kvSeq = 0;
  /// Query heads; a multiple of kvHeads.
  int64_t qHeads = 0;
  /// Key/value heads; query head h reads kv head h / (qHeads / kvHeads).
  int64_t kvHeads = 0;
  int64_t headDim = 0;
  /// Multiplies q.k before the softmax (usually 1 / sqrt(headDim)).
  double scale = 1.0;
  /// A query attends to the keys at its position and before only.
  bool causal = true;
  /// The positions of the query rows and of the key rows (natural order
  /// from 0 unless the sequence is split over context-parallel ranks:
  /// SequenceOrder.h).
  rt::SequencePositions queries, keys;
  /// A step of context parallelism's ring exchange (-1: none): the keys
  /// are one rank's block, of the rank `ringStep` places before this one
  /// on the context axis (attentionPositionsAt sets `keys` from it).
  int64_t ringStep = -1;

  int64_t keyRows() const { return kvSeq ? kvSeq : seq; }
};

//===----------------------------------------------------------------------===//
// attention family
//
// Invariants:
// - q, out, dout, dq are [batch, seq, qHeads, headDim]; k, v, dk, dv are
//   [batch, kvSeq, kvHeads, headDim]; lse is [batch, qHeads, seq].
// - Forward: `out = softmax(scale * q k^T + mask) v` per (batch, head), and
//   `lse[b, h, i] = log(sum_j exp(scale * q_i . k_j))` over the unmasked j:
//   with causal, the keys whose position (params.keys) is at most the
//   query's (params.queries). Keys are visited in order of position, so a
//   sequence split over context-parallel ranks sums as the whole one does.
//   Saved for the backward: q, k, v, out and lse. A query that sees no key
//   (a ring step's block of keys all after it) gets out 0 and lse -inf.
// - Backward recomputes `p_ij = exp(scale * q_i . k_j - lse_i)` in the same
//   order as the forward and overwrites dq, dk and dv. dk and dv sum over the
//   qHeads / kvHeads query heads that share a kv head.
// - Dot products, softmax sums and the dk/dv sums are accumulated in double
//   and rounded to T once. Scratch memory is one row of scores [kvSeq] and,
//   in the backward, dk/dv accumulators of one kv head [kvSeq, headDim].
// - qHeads % kvHeads != 0 or a non-positive size is an error, reported before
//   anything is written.
//===----------------------------------------------------------------------===//

/// The argument check of the attention family, shared with the CUDA kernels:
/// every size positive and qHeads a multiple of kvHeads; the error names
/// `kernel`.
Status checkAttentionParams(const char *kernel, const AttentionParams &params);

/// out = attention(q, k, v); lse = per-row log-sum-exp of the scaled scores.
template <typename T>
Status attentionForward(T *out, T *lse, const T *q, const T *k, const T *v,
                        const AttentionParams &params);

/// Gradients of attention with respect to q, k, v (all overwritten), given
/// dout and the forward's inputs, output and lse.
template <typename T>
Status attentionBackward(T *dq, T *dk, T *dv, const T *dout, const T *q,
                         const T *k, const T *v, const T *out, const T *lse,
                         const AttentionParams &params);

/// Two partial attentions of the same queries over disjoint keys (out
/// [batch, seq, heads, headDim], lse [batch, heads, seq]) merged into the
/// attention over both (Kernels.def's attention_merge): lse = log(exp(lseA)
/// + exp(lseB)), out = outA exp(lseA - lse) + outB exp(lseB - lse), in
/// double; a side with lse -inf takes no part. out may be outA and lse lseA
/// (each row is read before it is written).
template <typename T>
void attentionMerge(T *out, T *lse, const T *outA, const T *lseA,
                    const T *outB, const T *lseB, int64_t batch, int64_t seq,
                    int64_t heads, int64_t headDim);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_ATTENTION_H
