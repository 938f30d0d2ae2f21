//===- attention_blocks.h - a context-parallel rank's attention -*- C++ -*-===//
//
// Part of mlt. A context-parallel rank's attention in bf16 on the tensor-core
// kernels (attention.h), blockwise: the rank holds queries of two chunks of
// the sequence (its block in the load-balanced order, SequenceOrder.h:
// chunks x = coordinate and 2G-1-coordinate of C = seq / 2 tokens) and the
// whole sequence's keys and values in that order (kvSeq = G * seq); or,
// after the all-to-all exchange (--cp-comm a2a), the whole sequence's
// queries in that order too (kvSeq = seq, 2G chunks of queries); or, a ring
// step (--cp-comm ring), the keys and values of one rank's block (kvSeq =
// seq, two chunks). Query chunk x sees the key chunks at positions 0..x it
// has: the ones before it whole (non-causal) and its own causally (the same
// positions, so the kernels' top-left causal mask is exact); a query chunk
// that sees none (a ring step's) gets out 0 and lse -inf. Each (query chunk, key chunk) pair is one launch of the
// tensor-core kernels at seq C; the forward merges the pairs' outputs by
// their log-sum-exp (in f32), the backward gives each pair the merged out
// and lse (so each pair's probabilities are the whole softmax's) and sums
// the pairs' dq, dk and dv in f32. Batch entries run one after another.
// This is the compute structure of ring attention as well, whose blocks
// arrive one by one.
//
// Semantics are attention.h's for shape.queries / shape.keys as
// contextBlock / contextWhole (isContextBlockShape); errors (another shape,
// head_dim other than 64 and 128, misaligned tensors, too little scratch)
// are returned before anything is queued.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_BLOCKS_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_BLOCKS_H

#include "kernels/attention.h"

namespace mlt::cuda {

/// Whether `shape` is a context-parallel rank's: keys the whole sequence in
/// the load-balanced order, causal, and queries the block of some
/// coordinate of `ranks` (seq even, kvSeq = seq * ranks) or the whole
/// sequence in that order too (kvSeq = seq, 2 * ranks dividing it); or a
/// ring step's, queries and keys the blocks of two coordinates (kvSeq =
/// seq, even).
bool isContextBlockShape(const AttentionShape &shape);

/// Scratch bytes of the forward and of the backward (16-byte aligned).
size_t contextAttentionFwdScratchBytes(const AttentionShape &shape);
size_t contextAttentionBwdScratchBytes(const AttentionShape &shape);

Status launchContextAttentionFwd(__nv_bfloat16 *out, float *lse,
                                 const __nv_bfloat16 *q,
                                 const __nv_bfloat16 *k,
                                 const __nv_bfloat16 *v,
                                 const AttentionShape &shape, void *scratch,
                                 size_t scratchBytes, cudaStream_t stream);

Status launchContextAttentionBwd(
    __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
    const __nv_bfloat16 *dout, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
    const __nv_bfloat16 *v, const __nv_bfloat16 *out, const float *lse,
    const AttentionShape &shape, void *scratch, size_t scratchBytes,
    cudaStream_t stream);

/// attention_merge (Kernels.def): two partial attentions of the same
/// queries (out [batch, seq, heads, headDim] in T, lse [batch, heads, seq]
/// f32) merged into the attention over both keys, a side with lse -inf
/// taking no part; weights in f32, each output element rounded once. out
/// may be outA and lse lseA.
template <typename T>
Status launchAttentionMerge(T *out, float *lse, const T *outA,
                            const float *lseA, const T *outB,
                            const float *lseB, int64_t batch, int64_t seq,
                            int64_t heads, int64_t headDim,
                            cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_BLOCKS_H
