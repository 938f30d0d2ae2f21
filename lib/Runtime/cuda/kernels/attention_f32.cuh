//===- attention_f32.cuh - f32 flash attention kernels ---------*- CUDA -*-===//
//
// Part of mlt. The attention family's f32 kernels (attention_common.cuh
// introduces the family): FlashAttention-2's forward and backward on CUDA
// cores, tiles in shared memory, for any head_dim up to 128. The launchers
// (attention.cu) run them on f32 tensors; the bf16 tensor-core kernels
// (attention_mma.cuh, attention_wgmma.cuh) keep their structure.
//
// Invariants of the f32 kernels:
// - The layouts of attention_common.cuh, all f32.
// - Kernels are compiled for a head-dim bucket D in {32, 64, 128}: tiles
//   hold D columns (those >= headDim are zeros), dot products run over
//   headDim. Tiles are rows of stride D + 1 floats in shared memory (rows
//   read at the same column by different lanes fall in different banks);
//   probability tiles have a stride of 4 mod 32 (kPad) for the same reason.
// - Every block has kThreads = 128 threads: 4 threads (kRowThreads, adjacent
//   lanes of one warp) per row of its own tile (query rows in the forward and
//   the dq kernel, key rows in the dk/dv kernel). Thread t of a row owns the
//   output columns t, t + 4, t + 8, ... (D / 4 accumulators in registers) and
//   computes the scores of the other tile's rows t, t + 4, ... (scores are
//   shared with the row's other threads through shared memory, read after a
//   __syncwarp since the four threads are in one warp).
// - Tile loads read 16-byte float4 when `vec` (headDim % 4 == 0 and the
//   tensors 16-byte aligned, checked on the host), else floats; rows past
//   seq are zeros. Masked scores (j > i when causal, j >= seq) are -inf and
//   their probabilities exactly 0.
// - Queries and keys may differ in number (seq, kvSeq) and in positions
//   (qPos, kPos: SequenceOrder.h), which a context-parallel rank's attention
//   has: its block of queries, in the load-balanced order, attends to the
//   whole sequence's keys in that order; causal then masks by position
//   (kPos(j) > qPos(i)). `natural` says that row r is position r for both
//   and kvSeq == seq, where the causal loops stop early at the diagonal;
//   otherwise every key tile is visited (each query's visible keys are
//   spread over the sequence's chunks).
// - Forward (one block per (query tile of kFwdBr rows, query head, batch)):
//   key tiles of kFwdBc rows; per query row a running max m and sum l in
//   f32: m' = max(m, tile max), o = o * exp(m - m') + P V, l = l * exp(m -
//   m') + rowsum P; out = o / l, lse = m + log(l). Causal blocks stop at the
//   last key tile their last query sees.
// - Backward: delta = rowsum(dout * out) (attentionDeltaKernel, one warp per
//   row); p = exp(scale * q.k - lse), ds = p * (dout.v - delta).
//   dq kernel: one block per (query tile, query head, batch), loops over key
//   tiles: dq = scale * sum_j ds_ij k_j.
//   dk/dv kernel: one block per (key tile, kv head, batch), loops over the
//   group's query heads in order and, for each, over the query tiles that
//   can see the key tile: dv = sum p_ij dout_i, dk = scale * sum ds_ij q_i.
//   Every sum has a fixed order and no atomics are used: results are
//   bit-reproducible. All accumulation is f32 (the CPU kernels use f64).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_F32_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_F32_CUH

#include "kernels/attention_common.cuh"
#include "mlt/Plan/SequenceOrder.h"

namespace mlt::cuda::attn {

inline constexpr int kThreads = 128;
inline constexpr int kRowThreads = 4;
inline constexpr int kTileRows = kThreads / kRowThreads; // 32
inline constexpr int kFwdBr = kTileRows;                 // query rows
inline constexpr int kFwdBc = 64;                        // key rows
inline constexpr int kBwdBr = 32;                        // query rows
inline constexpr int kBwdBc = kTileRows;                 // key rows
/// Probability tiles: row stride = columns + kPad (4 mod 32).
inline constexpr int kPad = 4;

template <int D> constexpr size_t fwdSharedBytes() {
  return sizeof(float) *
         (size_t(kFwdBr + 2 * kFwdBc) * (D + 1) + kFwdBr * (kFwdBc + kPad));
}
template <int D> constexpr size_t dqSharedBytes() {
  return sizeof(float) *
         (size_t(2 * kTileRows + 2 * kBwdBc) * (D + 1) +
          kTileRows * (kBwdBc + kPad));
}
template <int D> constexpr size_t dkdvSharedBytes() {
  return sizeof(float) * (size_t(2 * kBwdBc + 2 * kBwdBr) * (D + 1) +
                          2 * kBwdBc * (kBwdBr + kPad) + 2 * kBwdBr);
}

#ifdef __CUDACC__

/// dst[r][d] (row stride D + 1) = src[(row0 + r) * rowStride + d] for row0 +
/// r < seq and d < headDim, else 0; r < ROWS, d < D.
template <int D, int ROWS>
__device__ __forceinline__ void loadTile(float *dst, const float *src,
                                         int64_t rowStride, int row0, int seq,
                                         int headDim, bool vec) {
  if (vec) {
    constexpr int kPacks = D / 4;
    for (int e = threadIdx.x; e < ROWS * kPacks; e += blockDim.x) {
      const int r = e / kPacks, d = (e % kPacks) * 4;
      float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
      if (row0 + r < seq && d < headDim)
        val = *reinterpret_cast<const float4 *>(src + (row0 + r) * rowStride +
                                                d);
      float *out = dst + r * (D + 1) + d;
      out[0] = val.x;
      out[1] = val.y;
      out[2] = val.z;
      out[3] = val.w;
    }
  } else {
    for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
      const int r = e / D, d = e % D;
      dst[r * (D + 1) + d] = row0 + r < seq && d < headDim
                                 ? src[(row0 + r) * rowStride + d]
                                 : 0.f;
    }
  }
}

/// dst[(row0 + r) * rowStride + d] = src[r][d] for row0 + r < seq and d <
/// headDim.
template <int D, int ROWS>
__device__ __forceinline__ void storeTile(float *dst, const float *src,
                                          int64_t rowStride, int row0, int seq,
                                          int headDim, bool vec) {
  if (vec) {
    const int packs = headDim / 4;
    for (int e = threadIdx.x; e < ROWS * packs; e += blockDim.x) {
      const int r = e / packs, d = (e % packs) * 4;
      if (row0 + r >= seq)
        continue;
      const float *in = src + r * (D + 1) + d;
      *reinterpret_cast<float4 *>(dst + (row0 + r) * rowStride + d) =
          make_float4(in[0], in[1], in[2], in[3]);
    }
  } else {
    for (int e = threadIdx.x; e < ROWS * headDim; e += blockDim.x) {
      const int r = e / headDim, d = e % headDim;
      if (row0 + r < seq)
        dst[(row0 + r) * rowStride + d] = src[r * (D + 1) + d];
    }
  }
}

/// Sum and max over the kRowThreads adjacent lanes of a row; every lane gets
/// the same bits (the butterfly adds the same pairs on each lane).
__device__ __forceinline__ float rowSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float rowMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

/// Forward: one block per (query tile, query head, batch entry).
template <int D>
__global__ void __launch_bounds__(kThreads)
    attentionFwdKernel(float *out, float *lse, const float *q, const float *k,
                       const float *v, int seq, int kvSeq, int qHeads,
                       int kvHeads, int headDim, bool causal, bool natural,
                       rt::SequencePositions qPos, rt::SequencePositions kPos,
                       float scale, bool vec) {
  constexpr int Br = kFwdBr, Bc = kFwdBc, S = D + 1, PS = Bc + kPad;
  constexpr int C = D / kRowThreads, M = Bc / kRowThreads;
  extern __shared__ float smem[];
  float *sQ = smem, *sK = sQ + Br * S, *sV = sK + Bc * S, *sP = sV + Bc * S;

  const int q0 = blockIdx.x * Br, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int row = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;
  const int i = q0 + row;
  const int64_t qStride = int64_t(qHeads) * headDim;
  const int64_t kvStride = int64_t(kvHeads) * headDim;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * headDim;
  const int64_t kvOffset = (int64_t(b) * kvSeq * kvHeads + g) * headDim;

  loadTile<D, Br>(sQ, q + qOffset, qStride, q0, seq, headDim, vec);
  float o[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    o[c] = 0.f;
  float m = -INFINITY, l = 0.f;

  const int kEnd = causal && natural ? min(kvSeq, q0 + Br) : kvSeq;
  const int64_t posI = natural ? i : qPos(i);
  for (int k0 = 0; k0 < kEnd; k0 += Bc) {
    __syncthreads(); // the previous tile's reads are done
    loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, kvSeq, headDim, vec);
    loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, kvSeq, headDim, vec);
    __syncthreads();

    float s[M];
#pragma unroll
    for (int mi = 0; mi < M; ++mi)
      s[mi] = 0.f;
    for (int d = 0; d < headDim; ++d) {
      const float qd = sQ[row * S + d];
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
        s[mi] = fmaf(qd, sK[(t + kRowThreads * mi) * S + d], s[mi]);
    }
    float tileMax = -INFINITY;
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      const int j = k0 + t + kRowThreads * mi;
      const bool visible =
          j < kvSeq && (!causal || (natural ? j : kPos(j)) <= posI);
      s[mi] = visible ? s[mi] * scale : -INFINITY;
      tileMax = fmaxf(tileMax, s[mi]);
    }
    tileMax = rowMax(tileMax);
    const float mNew = fmaxf(m, tileMax);
    const float alpha = mNew == -INFINITY ? 1.f : expf(m - mNew);
    float sum = 0.f;
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      const float p = s[mi] == -INFINITY ? 0.f : expf(s[mi] - mNew);
      sP[row * PS + t + kRowThreads * mi] = p;
      sum += p;
    }
    sum = rowSum(sum);
    l = l * alpha + sum;
    m = mNew;
    __syncwarp();
#pragma unroll
    for (int c = 0; c < C; ++c)
      o[c] *= alpha;
    for (int jj = 0; jj < Bc; ++jj) {
      const float p = sP[row * PS + jj];
      const float *vRow = sV + jj * S + t;
#pragma unroll
      for (int c = 0; c < C; ++c)
        o[c] = fmaf(p, vRow[kRowThreads * c], o[c]);
    }
  }

  // Stage the normalized rows in sQ, then store them coalesced. A row that
  // saw no key (a ring step's block all after it) is 0, its lse -inf.
  __syncthreads();
  const float inverse = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c)
    sQ[row * S + t + kRowThreads * c] = o[c] * inverse;
  if (t == 0 && i < seq)
    lse[(int64_t(b) * qHeads + h) * seq + i] = m + logf(l);
  __syncthreads();
  storeTile<D, Br>(out + qOffset, sQ, qStride, q0, seq, headDim, vec);
}

/// delta[b, h, s] = dout[b, s, h, :] . out[b, s, h, :]; one warp per row,
/// rows taken in a grid-stride loop. (static: every includer gets its own.)
static __global__ void attentionDeltaKernel(float *delta, const float *dout,
                                     const float *out, int64_t rows, int seq,
                                     int qHeads, int headDim) {
  const int lane = threadIdx.x & 31;
  const int64_t warpsPerGrid = globalThreadCount() / 32;
  for (int64_t w = globalThreadIndex() / 32; w < rows; w += warpsPerGrid) {
    // w = (b * seq + s) * qHeads + h.
    const float *a = dout + w * headDim, *c = out + w * headDim;
    float sum = 0.f;
    for (int d = lane; d < headDim; d += 32)
      sum = fmaf(a[d], c[d], sum);
    for (int offset = 16; offset > 0; offset >>= 1)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
      const int64_t h = w % qHeads, bs = w / qHeads;
      const int64_t s = bs % seq, b = bs / seq;
      delta[(b * qHeads + h) * seq + s] = sum;
    }
  }
}

/// dq: one block per (query tile, query head, batch entry).
template <int D>
__global__ void __launch_bounds__(kThreads)
    attentionBwdDqKernel(float *dq, const float *dout, const float *q,
                         const float *k, const float *v, const float *lse,
                         const float *delta, int seq, int kvSeq, int qHeads,
                         int kvHeads, int headDim, bool causal, bool natural,
                         rt::SequencePositions qPos,
                         rt::SequencePositions kPos, float scale, bool vec) {
  constexpr int Br = kTileRows, Bc = kBwdBc, S = D + 1, PS = Bc + kPad;
  constexpr int C = D / kRowThreads, M = Bc / kRowThreads;
  extern __shared__ float smem[];
  float *sQ = smem, *sdO = sQ + Br * S, *sK = sdO + Br * S, *sV = sK + Bc * S,
        *sdS = sV + Bc * S;

  const int q0 = blockIdx.x * Br, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int row = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;
  const int i = q0 + row;
  const int64_t qStride = int64_t(qHeads) * headDim;
  const int64_t kvStride = int64_t(kvHeads) * headDim;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * headDim;
  const int64_t kvOffset = (int64_t(b) * kvSeq * kvHeads + g) * headDim;
  const int64_t stat = (int64_t(b) * qHeads + h) * seq + i;

  loadTile<D, Br>(sQ, q + qOffset, qStride, q0, seq, headDim, vec);
  loadTile<D, Br>(sdO, dout + qOffset, qStride, q0, seq, headDim, vec);
  const float lseI = i < seq ? lse[stat] : 0.f;
  const float deltaI = i < seq ? delta[stat] : 0.f;
  float acc[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    acc[c] = 0.f;

  const int kEnd = causal && natural ? min(kvSeq, q0 + Br) : kvSeq;
  const int64_t posI = natural ? i : qPos(i);
  for (int k0 = 0; k0 < kEnd; k0 += Bc) {
    __syncthreads();
    loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, kvSeq, headDim, vec);
    loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, kvSeq, headDim, vec);
    __syncthreads();

    float s[M], dp[M];
#pragma unroll
    for (int mi = 0; mi < M; ++mi)
      s[mi] = dp[mi] = 0.f;
    for (int d = 0; d < headDim; ++d) {
      const float qd = sQ[row * S + d], gd = sdO[row * S + d];
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        const int kr = (t + kRowThreads * mi) * S + d;
        s[mi] = fmaf(qd, sK[kr], s[mi]);
        dp[mi] = fmaf(gd, sV[kr], dp[mi]);
      }
    }
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      const int j = k0 + t + kRowThreads * mi;
      const bool visible = i < seq && j < kvSeq &&
                           (!causal || (natural ? j : kPos(j)) <= posI);
      const float p = visible ? expf(s[mi] * scale - lseI) : 0.f;
      sdS[row * PS + t + kRowThreads * mi] = p * (dp[mi] - deltaI);
    }
    __syncwarp();
    for (int jj = 0; jj < Bc; ++jj) {
      const float ds = sdS[row * PS + jj];
      const float *kRow = sK + jj * S + t;
#pragma unroll
      for (int c = 0; c < C; ++c)
        acc[c] = fmaf(ds, kRow[kRowThreads * c], acc[c]);
    }
  }

  __syncthreads();
#pragma unroll
  for (int c = 0; c < C; ++c)
    sQ[row * S + t + kRowThreads * c] = acc[c] * scale;
  __syncthreads();
  storeTile<D, Br>(dq + qOffset, sQ, qStride, q0, seq, headDim, vec);
}

/// dk, dv: one block per (key tile, kv head, batch entry).
template <int D>
__global__ void __launch_bounds__(kThreads)
    attentionBwdDkDvKernel(float *dk, float *dv, const float *dout,
                           const float *q, const float *k, const float *v,
                           const float *lse, const float *delta, int seq,
                           int kvSeq, int qHeads, int kvHeads, int headDim,
                           bool causal, bool natural,
                           rt::SequencePositions qPos,
                           rt::SequencePositions kPos, float scale, bool vec) {
  constexpr int Br = kBwdBr, Bc = kTileRows, S = D + 1, PT = Br + kPad;
  constexpr int C = D / kRowThreads, M = Br / kRowThreads;
  extern __shared__ float smem[];
  float *sK = smem, *sV = sK + Bc * S, *sQ = sV + Bc * S, *sdO = sQ + Br * S,
        *sPT = sdO + Br * S, *sdST = sPT + Bc * PT, *sLse = sdST + Bc * PT,
        *sDelta = sLse + Br;

  const int k0 = blockIdx.x * Bc, g = blockIdx.y, b = blockIdx.z;
  const int group = qHeads / kvHeads;
  const int krow = threadIdx.x / kRowThreads, t = threadIdx.x % kRowThreads;
  const int j = k0 + krow;
  const int64_t qStride = int64_t(qHeads) * headDim;
  const int64_t kvStride = int64_t(kvHeads) * headDim;
  const int64_t kvOffset = (int64_t(b) * kvSeq * kvHeads + g) * headDim;

  loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, kvSeq, headDim, vec);
  loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, kvSeq, headDim, vec);
  const int64_t posJ = natural ? j : kPos(j);
  float dkAcc[C], dvAcc[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    dkAcc[c] = dvAcc[c] = 0.f;

  // Causal: query tiles that end before this key tile see none of it.
  const int qStart = causal && natural ? (k0 / Br) * Br : 0;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * headDim;
    const int64_t statRow = (int64_t(b) * qHeads + h) * seq;
    for (int q0 = qStart; q0 < seq; q0 += Br) {
      __syncthreads();
      loadTile<D, Br>(sQ, q + qOffset, qStride, q0, seq, headDim, vec);
      loadTile<D, Br>(sdO, dout + qOffset, qStride, q0, seq, headDim, vec);
      for (int r = threadIdx.x; r < Br; r += blockDim.x) {
        const bool inside = q0 + r < seq;
        sLse[r] = inside ? lse[statRow + q0 + r] : 0.f;
        sDelta[r] = inside ? delta[statRow + q0 + r] : 0.f;
      }
      __syncthreads();

      float s[M], dp[M];
#pragma unroll
      for (int mi = 0; mi < M; ++mi)
        s[mi] = dp[mi] = 0.f;
      for (int d = 0; d < headDim; ++d) {
        const float kd = sK[krow * S + d], vd = sV[krow * S + d];
#pragma unroll
        for (int mi = 0; mi < M; ++mi) {
          const int qr = (t + kRowThreads * mi) * S + d;
          s[mi] = fmaf(sQ[qr], kd, s[mi]);
          dp[mi] = fmaf(sdO[qr], vd, dp[mi]);
        }
      }
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        const int ii = t + kRowThreads * mi, i = q0 + ii;
        const bool visible = i < seq && j < kvSeq &&
                             (!causal || posJ <= (natural ? i : qPos(i)));
        const float p = visible ? expf(s[mi] * scale - sLse[ii]) : 0.f;
        sPT[krow * PT + ii] = p;
        sdST[krow * PT + ii] = p * (dp[mi] - sDelta[ii]);
      }
      __syncwarp();
      for (int ii = 0; ii < Br; ++ii) {
        const float p = sPT[krow * PT + ii], ds = sdST[krow * PT + ii];
        const float *gRow = sdO + ii * S + t, *qRow = sQ + ii * S + t;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          dvAcc[c] = fmaf(p, gRow[kRowThreads * c], dvAcc[c]);
          dkAcc[c] = fmaf(ds, qRow[kRowThreads * c], dkAcc[c]);
        }
      }
    }
  }

  // Stage dk in sQ and dv in sdO, then store them coalesced.
  __syncthreads();
#pragma unroll
  for (int c = 0; c < C; ++c) {
    sQ[krow * S + t + kRowThreads * c] = dkAcc[c] * scale;
    sdO[krow * S + t + kRowThreads * c] = dvAcc[c];
  }
  __syncthreads();
  storeTile<D, Bc>(dk + kvOffset, sQ, kvStride, k0, kvSeq, headDim, vec);
  storeTile<D, Bc>(dv + kvOffset, sdO, kvStride, k0, kvSeq, headDim, vec);
}

#endif // __CUDACC__

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_F32_CUH
