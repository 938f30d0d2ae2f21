//===- attention.h - flash attention CUDA kernels (host side) ---*- C++ -*-===//
//
// Part of mlt. Host launchers of the attention family (attention.cuh):
// Kernels.def's attention_fwd / attention_bwd, causal or full grouped-query
// attention with the semantics of the CPU kernels
// (lib/Runtime/cpu/Attention.cpp):
//   q, out, dout, dq [batch, seq, qHeads, headDim]; k, v, dk, dv [batch, seq,
//   kvHeads, headDim]; lse [batch, qHeads, seq] f32; query head h reads kv
//   head h / (qHeads / kvHeads); out = softmax(scale * q k^T + mask) v and
//   lse = the log-sum-exp of each query row's scaled, unmasked scores.
//
// Design (FlashAttention-2 structure): no [seq, seq] matrix is ever stored.
// The forward runs one block per (query tile, query head, batch entry),
// streams K/V tiles through shared memory and keeps an online softmax per
// query row. The backward recomputes the probabilities from q, k and the
// saved lse: a small kernel computes delta = rowsum(dout * out) into
// scratch, one kernel computes dq per query tile (looping over key tiles),
// another dk and dv per key tile (looping over the query heads of its group
// and their query tiles, in a fixed order). No atomics anywhere: results are
// bit-reproducible.
// Two implementations: f32 tensors on CUDA cores (the parity mode; any
// head_dim up to 128, not tuned), and bf16 tensors on tensor cores (bf16
// operands, f32 accumulation and softmax): on Hopper (compute capability
// 9.0, in a build for sm_90a, the default) with wgmma, about 350 TFLOP/s
// forward and 300 backward at TinyLlama's shape on an H100; elsewhere with
// mma.sync.m16n8k16, about 270 and 190 (bench/attention-notes.md). With
// wgmma the dq kernel also computes the row statistics and the dk/dv kernel
// reduces its own parts (no separate kernels).
//
// Limits: f32: headDim in [1, 128] (tiles are compiled for 32, 64 and 128
// and a smaller head_dim uses the next size up). bf16: headDim 64 or 128
// (another is an error naming it), every bf16 tensor 16-byte aligned (an
// error otherwise; lse needs only float alignment). Both: qHeads and batch
// at most 65535 (grid dimensions); argument errors are returned before
// anything is queued.
//
// Scratch memory (backward only): attentionBwdScratchBytes(shape) bytes,
// 16-byte aligned, owned by the caller: the CUDA backend's device context
// allocates one scratch area per context lazily with cudaMalloc, grown to
// the largest request (launches on one stream reuse it safely: they run in
// order). The f32 kernels use delta (one f32 per query row); the bf16 ones
// two f32 per query row (delta and the lse in base 2), an int per (batch,
// kv head, 64-key tile) (the wgmma dk/dv kernel's part counters) and, when
// the dk/dv kernel splits a group of query heads over several blocks (GQA shapes with
// few kv heads, e.g. TinyLlama: 4 parts), f32 partial dk and dv, parts *
// batch * seq * kvHeads * headDim floats each (TinyLlama, batch 4 at seq
// 2048: 34 MiB in all). One size serves both, as the backend's call does not
// say which it runs.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_H

#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Runtime/cpu/Attention.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mlt::cuda {

/// Shape and attributes of one attention call (Kernels.def's ints and
/// float): the CPU kernels' struct, so that both families read one
/// description and share its argument check (cpu::checkAttentionParams).
using AttentionShape = cpu::AttentionParams;

/// The largest head_dim the kernels handle.
inline constexpr int64_t kMaxAttentionHeadDim = 128;

/// out = attention(q, k, v); lse [batch, qHeads, seq] f32. out must not
/// overlap q, k or v.
Status launchAttentionFwd(float *out, float *lse, const float *q,
                          const float *k, const float *v,
                          const AttentionShape &shape, cudaStream_t stream);

/// Bytes of scratch launchAttentionBwd needs for this shape (either element
/// type; 0 for an invalid shape).
size_t attentionBwdScratchBytes(const AttentionShape &shape);

/// dq, dk, dv (overwritten; dk and dv summed over the query heads of each kv
/// head's group) from dout and the forward's q, k, v, out and lse. The
/// outputs must not overlap the inputs. `scratch` holds at least
/// attentionBwdScratchBytes(shape) bytes.
Status launchAttentionBwd(float *dq, float *dk, float *dv, const float *dout,
                          const float *q, const float *k, const float *v,
                          const float *out, const float *lse,
                          const AttentionShape &shape, void *scratch,
                          size_t scratchBytes, cudaStream_t stream);

/// Rope's inverse (rope.h, inverse) that a backward applies to dq and dk
/// (Kernels.def's attention_bwd_rope): q and k were rotated, dq and dk are
/// the gradients of the unrotated ones.
struct AttentionRope {
  double theta = 0.0;
  int64_t positionOffset = 0;
  rt::RopeScaling scaling;
};

/// The backward then, with `rope`, rope's inverse on dq and dk: in the bf16
/// wgmma kernels (Hopper) before they write them (the f32 accumulators
/// rotated, then rounded once), elsewhere by launchRope after them.
Status launchAttentionBwd(float *dq, float *dk, float *dv, const float *dout,
                          const float *q, const float *k, const float *v,
                          const float *out, const float *lse,
                          const AttentionShape &shape, void *scratch,
                          size_t scratchBytes, cudaStream_t stream,
                          const AttentionRope *rope);

/// Where a bf16 launch writes the amax of its outputs as stored (Kernels.def's
/// fused amax outputs of attention_fwd and attention_bwd(_rope); f32, the
/// amax kernel's value, NaN where any is NaN; null: not wanted): the
/// forward's out at of[0]; the backward's dq, dk and dv at of[0], of[1] and
/// of[2]. The tensor-core kernels take the maximum of what they store (no
/// pass of its own) and the launcher sets taken[i] for each of[i] they
/// wrote; an amax the kernels cannot take (dq and dk where rope's launches
/// rotate them after the kernels) is left to the caller, which launches
/// the amax kernel on that output after the launch (CudaDispatch does, for
/// every path).
struct AttentionAmax {
  float *of[3] = {nullptr, nullptr, nullptr};
  bool taken[3] = {false, false, false};
};

/// bf16 q, k, v, out, dout, dq, dk, dv (lse stays f32): the same semantics
/// on tensor cores, bf16 inputs with f32 accumulation and softmax, each
/// output rounded to bf16 once (the probabilities and ds are rounded to bf16
/// as operands of the products: errors against an f64 reference on the same
/// inputs are about 2e-3, normwise). headDim 64 or 128; every bf16 pointer
/// 16-byte aligned; `scratch` 16-byte aligned.
Status launchAttentionFwd(__nv_bfloat16 *out, float *lse,
                          const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                          const __nv_bfloat16 *v, const AttentionShape &shape,
                          cudaStream_t stream, AttentionAmax *amax = nullptr);
Status launchAttentionBwd(__nv_bfloat16 *dq, __nv_bfloat16 *dk,
                          __nv_bfloat16 *dv, const __nv_bfloat16 *dout,
                          const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                          const __nv_bfloat16 *v, const __nv_bfloat16 *out,
                          const float *lse, const AttentionShape &shape,
                          void *scratch, size_t scratchBytes,
                          cudaStream_t stream,
                          const AttentionRope *rope = nullptr,
                          AttentionAmax *amax = nullptr);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_H
