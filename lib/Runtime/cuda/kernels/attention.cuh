//===- attention.cuh - flash attention CUDA kernels ------------*- CUDA -*-===//
//
// Part of mlt. Device code of the attention family (launchers in
// attention.cu, declared in attention.h): FlashAttention-2's forward and
// backward, twice. First in f32 on CUDA cores, tiles in shared memory, for
// any head_dim up to 128 (the invariants below). Then, in namespace tc, for
// bf16 tensors on tensor cores (mma.sync, head_dim 64 and 128; the
// invariants of that section follow its banner): the same structure (the
// tiles, the online softmax, recomputing P from lse, the split of the
// backward into a dq pass and a dk/dv pass), with the tile products and the
// softmax held in registers.
//
// Invariants of the f32 kernels:
// - q, out, dout, dq are [batch, seq, qHeads, headDim]; k, v, dk, dv [batch,
//   seq, kvHeads, headDim]; lse and delta [batch, qHeads, seq]; all f32.
//   Query head h reads kv head h / (qHeads / kvHeads).
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

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH

#include "kernels/common.cuh"

#include <cstddef>
#include <type_traits>

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
                       const float *v, int seq, int qHeads, int kvHeads,
                       int headDim, bool causal, float scale, bool vec) {
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
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * headDim;

  loadTile<D, Br>(sQ, q + qOffset, qStride, q0, seq, headDim, vec);
  float o[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    o[c] = 0.f;
  float m = -INFINITY, l = 0.f;

  const int kEnd = causal ? min(seq, q0 + Br) : seq;
  for (int k0 = 0; k0 < kEnd; k0 += Bc) {
    __syncthreads(); // the previous tile's reads are done
    loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, seq, headDim, vec);
    loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, seq, headDim, vec);
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
      const bool visible = j < seq && (!causal || j <= i);
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

  // Stage the normalized rows in sQ, then store them coalesced.
  __syncthreads();
#pragma unroll
  for (int c = 0; c < C; ++c)
    sQ[row * S + t + kRowThreads * c] = o[c] / l;
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
                         const float *delta, int seq, int qHeads, int kvHeads,
                         int headDim, bool causal, float scale, bool vec) {
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
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * headDim;
  const int64_t stat = (int64_t(b) * qHeads + h) * seq + i;

  loadTile<D, Br>(sQ, q + qOffset, qStride, q0, seq, headDim, vec);
  loadTile<D, Br>(sdO, dout + qOffset, qStride, q0, seq, headDim, vec);
  const float lseI = i < seq ? lse[stat] : 0.f;
  const float deltaI = i < seq ? delta[stat] : 0.f;
  float acc[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    acc[c] = 0.f;

  const int kEnd = causal ? min(seq, q0 + Br) : seq;
  for (int k0 = 0; k0 < kEnd; k0 += Bc) {
    __syncthreads();
    loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, seq, headDim, vec);
    loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, seq, headDim, vec);
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
      const bool visible = i < seq && j < seq && (!causal || j <= i);
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
                           int qHeads, int kvHeads, int headDim, bool causal,
                           float scale, bool vec) {
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
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * headDim;

  loadTile<D, Bc>(sK, k + kvOffset, kvStride, k0, seq, headDim, vec);
  loadTile<D, Bc>(sV, v + kvOffset, kvStride, k0, seq, headDim, vec);
  float dkAcc[C], dvAcc[C];
#pragma unroll
  for (int c = 0; c < C; ++c)
    dkAcc[c] = dvAcc[c] = 0.f;

  // Causal: query tiles that end before this key tile see none of it.
  const int qStart = causal ? (k0 / Br) * Br : 0;
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
        const bool visible = i < seq && j < seq && (!causal || j <= i);
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
  storeTile<D, Bc>(dk + kvOffset, sQ, kvStride, k0, seq, headDim, vec);
  storeTile<D, Bc>(dv + kvOffset, sdO, kvStride, k0, seq, headDim, vec);
}

#endif // __CUDACC__

//===----------------------------------------------------------------------===//
// bf16 tensor-core kernels
//
// The same FlashAttention-2 partitioning, with the tile products on tensor
// cores: mma.sync.m16n8k16 (bf16 operands, f32 accumulators) fed by ldmatrix
// from shared memory; tiles arrive through 16-byte cp.async, K/V (forward,
// dq) or Q/dO (dk/dv) double-buffered so that the next tile loads while the
// current one is multiplied.
//
// Invariants (in addition to the layouts above, with bf16 tensors and f32
// lse and statistics):
// - headDim D is 64 or 128 exactly, a compile-time constant: a tile row is D
//   bf16, D / 8 chunks of 16 bytes. Every bf16 tensor is 16-byte aligned and
//   its rows (qHeads * D or kvHeads * D elements apart) therefore are too
//   (checked on the host).
// - Tiles in shared memory are [rows][D] bf16 with chunk c of row r stored at
//   chunk position c ^ (r % 8) (tileOffset): the 8 rows that one ldmatrix
//   phase reads at one logical chunk fall in 8 distinct bank groups, and so
//   do the 16-byte cp.async writes. A thread copies the same chunk of rows 8
//   apart (TileCopy), so its addresses are computed once per block. Rows past
//   seq are zero-filled by cp.async (source size 0), so every value in a
//   tile is finite.
// - A block is kTcThreads = 128 threads, 4 warps. A warp owns MT slices of 16
//   rows (MT = 1 or 2) of the block's own tile: query rows in the forward and
//   the dq kernel (a block covers 64 * MT query rows), key rows in the dk/dv
//   kernel (64 * MT keys). Everything a warp accumulates stays in its
//   registers in the m16n8 accumulator layout: lane l holds rows l / 4 and
//   l / 4 + 8 of each 16-row slice, columns 2 (l % 4) and 2 (l % 4) + 1 of
//   each 8-column tile. Two adjacent 8-column accumulator tiles, rounded to
//   bf16 pairs, are exactly the A operand of the next product (P V, P^T dO,
//   dS^T Q, dS K), so probabilities never go through shared memory. The
//   other tile is double-buffered: the next one is in flight (cp.async)
//   while the current one is multiplied; two barriers per step.
// - Softmax in base 2: p = 2^(c s - m) with c = scale * log2(e) folded into
//   one FFMA per score, ex2.approx for the power. The forward keeps per row
//   a base m (its max of c s, moved only when the max exceeds it by more
//   than kRescaleSlack, so p < 2^8 and most tiles skip rescaling o) and a
//   sum l; lse = (m + log2(l)) ln(2), in natural-log units. The backward
//   takes -lse log2(e) (negLse2) from the delta pass. Masked scores (key j >
//   query i when causal, j >= seq) get probability exactly 0; only tiles
//   that cross the diagonal or the sequence end test elements (a separate
//   copy of the tile code). Causal blocks process the heaviest tiles first
//   (blockIdx.x counts from the end) so that the tail of the grid is made of
//   short blocks.
// - Backward: attentionDeltaTcKernel writes delta = rowsum(dout * out) and
//   negLse2 (f32, [batch, qHeads, seq] each); then the dq kernel (per query
//   tile, over key tiles) and the dk/dv kernel (per key tile, over the query
//   tiles of `heads per part` query heads of the kv head's group). With
//   parts > 1 the group's heads are split over `parts` blocks, each writing
//   f32 partial dk/dv to scratch, and attentionDkDvReduceTcKernel sums the
//   parts in index order. No atomics: results are bit-reproducible for a
//   shape, on any device (parts is a function of the shape only). The
//   ATOMIC_DQ variant of the dk/dv kernel (dq by atomic reductions, no dq
//   kernel) exists for comparison only (bench/attention-notes.md): it was
//   slower.
//===----------------------------------------------------------------------===//

namespace tc {

inline constexpr int kTcThreads = 128;
inline constexpr int kTcWarps = kTcThreads / 32;
/// The forward moves a row's softmax base only when its max (log2 units)
/// exceeds the base by more than this (FlashAttention-4's conditional
/// rescaling): probabilities stay below 2^8, far from f32 / bf16 overflow.
inline constexpr float kRescaleSlack = 8.f;

/// Forward: D head dim, MT 16-row slices per warp (64 * MT query rows per
/// block), BC keys per K/V tile, MINB blocks per multiprocessor asked of the
/// register allocator.
template <int D_, int MT_, int BC_, int MINB_> struct FwdConfig {
  static constexpr int D = D_, MT = MT_, BC = BC_, MINB = MINB_;
  static constexpr int BR = 16 * MT * kTcWarps;
  static constexpr size_t kShared = size_t(BR + 4 * BC) * D * 2;
};

/// dq: as the forward (64 * MT query rows per block, BC keys per tile).
template <int D_, int MT_, int BC_, int MINB_> struct DqConfig {
  static constexpr int D = D_, MT = MT_, BC = BC_, MINB = MINB_;
  static constexpr int BR = 16 * MT * kTcWarps;
  static constexpr size_t kShared = size_t(2 * BR + 4 * BC) * D * 2;
};

/// dk/dv: 64 * MT keys per block, BR query rows per Q/dO tile; KEEPKV keeps
/// the warp's K and V fragments in registers for the whole block instead of
/// reading them from shared memory for every query tile.
template <int D_, int MT_, int BR_, bool KEEPKV_, int MINB_>
struct DkDvConfig {
  static constexpr int D = D_, MT = MT_, BR = BR_, MINB = MINB_;
  static constexpr bool KEEPKV = KEEPKV_;
  static constexpr int BC = 16 * MT * kTcWarps;
  static constexpr size_t kShared =
      size_t(2 * BC + 4 * BR) * D * 2 + 4 * BR * sizeof(float);
};

#ifdef __CUDACC__

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows][D]
/// bf16 tile.
template <int D>
__device__ __forceinline__ uint32_t tileOffset(int row, int chunk) {
  return uint32_t(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

/// Byte offset of 16-byte chunk `chunk` of row `row` in a [ROWS][D] bf16
/// tile in the layout wgmma reads with the 128-byte swizzle: D / 64 column
/// blocks of [ROWS][64] (128-byte rows; 8 rows make a 1024-byte atom), chunk
/// c of a row at position (c ^ row) % 8 of its block. The tile starts
/// 1024-byte aligned, as the hardware swizzles by address bits. For D = 64
/// this is tileOffset<64>.
template <int ROWS>
__device__ __forceinline__ uint32_t wgTileOffset(int row, int chunk) {
  return uint32_t((chunk >> 3) * ROWS * 128 + row * 128 +
                  (((chunk ^ row) & 7) << 4));
}

/// 16 bytes global -> shared, bypassing L1; zero-filled when !valid (the
/// source is then not read).
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src,
                                          bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
/// 4 bytes global -> shared; zero-filled when !valid.
__device__ __forceinline__ void cpAsync4(uint32_t dst, const void *src,
                                         bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Waits until at most N of this thread's committed groups are in flight.
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4],
                                                uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, "
               "%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// c += a b for one m16n8k16 tile: a row-major 16x16 bf16, b column-major
/// 16x8 bf16, c 16x8 f32.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, "
               "%2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}

/// Two floats as a bf16 pair (lo in the low half), rounded to nearest even.
__device__ __forceinline__ uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}

/// 2^x on the special-function unit (relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// 2^x on the FMA and integer pipes: n = round(x) by the 1.5 * 2^23 trick
/// (the sum's low mantissa bits hold n), 2^(x - n) by a cubic (relative
/// error 1.1e-4 on [-0.5, 0.5], far below bf16's 2^-9), and n added to the
/// exponent field. x is clamped at -125 (2^-125 stands for anything
/// smaller: the probabilities it computes are at most 2^-125 of the row's
/// largest, which is at least 2^-8).
__device__ __forceinline__ float exp2Poly(float x) {
  x = fmaxf(x, -125.f);
  const float j = x + 12582912.f;
  const float f = x - (j - 12582912.f);
  const float p =
      fmaf(fmaf(fmaf(0.0550047643f, f, 0.242200166f), f, 0.693282127f), f,
           1.f);
  return __int_as_float(__float_as_int(p) + (__float_as_int(j) << 23));
}

/// The A fragments (16 rows x 16 columns) of rows row0.. of a tile, columns
/// 16 ks.. (ldmatrix lanes 0-15 address rows 0-15 of chunk 2 ks, lanes 16-31
/// the same rows of chunk 2 ks + 1). The same addressing with .trans yields
/// the B fragments of two 8-column tiles of a [k][n] row-major tile.
template <int D>
__device__ __forceinline__ uint32_t fragAddrA(uint32_t tile, int row0,
                                              int ks, int lane) {
  return tile + tileOffset<D>(row0 + (lane & 15), 2 * ks + (lane >> 4));
}
/// The B fragments of two 8-column tiles (rows n0.. and n0 + 8.. of an
/// [n][k] row-major tile), k columns 16 ks..: r[0], r[1] for rows n0..n0+7,
/// r[2], r[3] for rows n0+8..n0+15.
template <int D>
__device__ __forceinline__ uint32_t fragAddrB(uint32_t tile, int n0, int ks,
                                              int lane) {
  return tile + tileOffset<D>(n0 + (lane & 7) + ((lane >> 4) << 3),
                              2 * ks + ((lane >> 3) & 1));
}

/// One thread's share of copying [ROWS][D] bf16 tiles from a [seq][rowStride]
/// matrix with cp.async: chunk c = tid % (D / 8) of rows r0 + i * kRowStep
/// (r0 = tid / (D / 8)). kRowStep is a multiple of 8, so all those rows
/// share one swizzle and their shared-memory offsets differ by constants:
/// a tile costs a few integer instructions per 16-byte copy.
/// WG: the tile is in the wgmma layout (wgTileOffset<ROWS>) instead.
template <int D, int ROWS, bool WG = false> struct TileCopy {
  static constexpr int kChunks = D / 8, kRowStep = kTcThreads / kChunks;
  static constexpr int kIters = ROWS / kRowStep;
  static_assert(ROWS % kRowStep == 0 && kRowStep % 8 == 0, "whole tiles");
  /// Bytes between rows i and i + kRowStep of the tile.
  static constexpr int kDstStep = kRowStep * (WG ? 128 : D * 2);
  int64_t rowStride, step;
  int r0, srcOffset;
  uint32_t dstOffset;

  __device__ __forceinline__ explicit TileCopy(int64_t rowStride)
      : rowStride(rowStride), step(kRowStep * rowStride) {
    const int c = threadIdx.x % kChunks;
    r0 = threadIdx.x / kChunks;
    srcOffset = c * 8;
    dstOffset = WG ? wgTileOffset<ROWS>(r0, c) : tileOffset<D>(r0, c);
  }
  /// Queues rows [row0, row0 + ROWS) of `base` into the swizzled `tile`;
  /// rows >= seq are zero-filled (their source address, past the tensor, is
  /// formed but never read: source size 0).
  __device__ __forceinline__ void operator()(uint32_t tile, const bf16 *base,
                                             int row0, int seq) const {
    const bf16 *src = base + (int64_t(row0 + r0) * rowStride + srcOffset);
    const int rowsLeft = seq - row0 - r0;
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      cpAsync16(tile + dstOffset + i * kDstStep, src,
                i * kRowStep < rowsLeft);
      src += step;
    }
  }
};

/// Writes a warp's accumulator rows (slices of 16 rows from tile row
/// warpRow0) as bf16 through the swizzled tile `stage` (rows of this warp
/// only), then stores the rows below seq to dst (tile row r is global row
/// tileRow0 + r) with 16-byte stores.
template <int D, int MT>
__device__ __forceinline__ void storeWarpRows(bf16 *dst, int64_t rowStride,
                                              int tileRow0, int seq,
                                              unsigned char *stage,
                                              int warpRow0,
                                              const float (&acc)[MT][D / 8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    const int r = warpRow0 + mt * 16 + lane / 4;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      *reinterpret_cast<uint32_t *>(stage + tileOffset<D>(r, nt) +
                                    (lane % 4) * 4) =
          packBf16(acc[mt][nt][0], acc[mt][nt][1]);
      *reinterpret_cast<uint32_t *>(stage + tileOffset<D>(r + 8, nt) +
                                    (lane % 4) * 4) =
          packBf16(acc[mt][nt][2], acc[mt][nt][3]);
    }
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int e = lane; e < 16 * MT * kChunks; e += 32) {
    const int r = warpRow0 + e / kChunks, c = e % kChunks;
    if (tileRow0 + r < seq)
      *reinterpret_cast<uint4 *>(dst + int64_t(tileRow0 + r) * rowStride +
                                 c * 8) =
          *reinterpret_cast<const uint4 *>(stage + tileOffset<D>(r, c));
  }
}

/// Forward: one block per (query tile of Cfg::BR rows, query head, batch).
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionFwdTcKernel(bf16 *__restrict__ out, float *__restrict__ lse,
                         const bf16 *__restrict__ q,
                         const bf16 *__restrict__ k,
                         const bf16 *__restrict__ v, int seq, int qHeads,
                         int kvHeads, bool causal, float scaleLog2) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = BC * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = sharedAddress(smem);
  const uint32_t sK = sQ + BR * D * 2, sV = sK + 2 * kKVBytes;

  const int nQT = (seq + BR - 1) / BR;
  const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = qt * BR, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  const bf16 *kBase = k + kvOffset, *vBase = v + kvOffset;

  const int kEnd = causal ? min(seq, q0 + BR) : seq;
  const int nKT = (kEnd + BC - 1) / BC;
  const TileCopy<D, BR> copyQ(qStride);
  const TileCopy<D, BC> copyKV(kvStride);
  copyQ(sQ, q + qOffset, q0, seq);
  copyKV(sK, kBase, 0, seq);
  copyKV(sV, vBase, 0, seq);
  cpAsyncCommit();

  // p = 2^(c s - m) with c = |scale| log2(e) and m a row's base (its max of
  // c s, up to kRescaleSlack): each exponent is one FFMA. A negative scale
  // negates q instead (exact in bf16); a zero one is a tiny c (no 0 * inf).
  const bool negate = scaleLog2 < 0.f;
  const float c = fmaxf(fabsf(scaleLog2), 1e-30f);
  // This lane's rows: warpFirst + 16 mt + lane / 4 (+ 8).
  const int warpRow0 = warp * 16 * MT;
  const int warpFirst = q0 + warpRow0, warpLast = warpFirst + 16 * MT - 1;
  // mRow: each row's base in units of c s (log2), lRow: its sum of p.
  float o[MT][OT][4], mRow[MT][2], lRow[MT][2];
  uint32_t qf[MT][KS][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
      o[mt][nt][0] = o[mt][nt][1] = o[mt][nt][2] = o[mt][nt][3] = 0.f;
    mRow[mt][0] = mRow[mt][1] = -INFINITY;
    lRow[mt][0] = lRow[mt][1] = 0.f;
  }

  // One key tile: s = q k^T, the online softmax, o += p v. MASK: some key of
  // the tile is >= seq or, causal, after some row of this warp (the masked
  // scores are -inf, their probabilities 0); otherwise no element is tested.
  auto keyTile = [&](uint32_t tK, uint32_t tV, int k0, auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        ldmatrixX4(bk, fragAddrB<D>(tK, 16 * np, ks, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(s[mt][2 * np], qf[mt][ks], bk[0], bk[1]);
          mma16816(s[mt][2 * np + 1], qf[mt][ks], bk[2], bk[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (MASK) {
        // Key k0 + jj is visible from row i iff k0 + jj <= limit(i).
        const int i0 = warpFirst + 16 * mt + lane / 4;
        const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                              causal ? min(i0 + 8, seq - 1) : seq - 1};
        const int j0 = k0 + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (j0 + nt * 8 + (e & 1) > limit[e >> 1])
              s[mt][nt][e] = -INFINITY;
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      bool grow = false;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        mx[r] *= c;
        grow |= mx[r] > mRow[mt][r] + kRescaleSlack;
      }
      // The rows' bases move (and o, l are rescaled) only when some row's
      // max exceeds its base by more than kRescaleSlack, warp-uniformly: the
      // probabilities stay <= 2^kRescaleSlack, and most tiles skip the
      // rescale. A row with nothing visible yet keeps the base -inf and only
      // masked (zeroed) probabilities.
      if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const bool up = mx[r] > mRow[mt][r] + kRescaleSlack;
          const float alpha = up ? fastExp2(mRow[mt][r] - mx[r]) : 1.f;
          mRow[mt][r] = up ? mx[r] : mRow[mt][r];
          lRow[mt][r] *= alpha;
#pragma unroll
          for (int nt = 0; nt < OT; ++nt) {
            o[mt][nt][2 * r] *= alpha;
            o[mt][nt][2 * r + 1] *= alpha;
          }
        }
      }
      const float negBase[2] = {-mRow[mt][0], -mRow[mt][1]};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = fastExp2(fmaf(s[mt][nt][e], c, negBase[e >> 1]));
          if constexpr (MASK)
            p = s[mt][nt][e] == -INFINITY ? 0.f : p;
          s[mt][nt][e] = p;
          lRow[mt][e >> 1] += p;
        }
      }
    }
    // o += p v, p rounded to bf16 in registers.
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = packBf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = packBf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = packBf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = packBf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        uint32_t bv[4];
        ldmatrixX4Trans(bv, fragAddrA<D>(tV, 16 * kk, dp, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
          mma16816(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
        }
      }
    }
  };

  for (int kt = 0; kt < nKT; ++kt) {
    const uint32_t bufOff = (kt & 1) * kKVBytes;
    if (kt + 1 < nKT) {
      copyKV(sK + (bufOff ^ kKVBytes), kBase, (kt + 1) * BC, seq);
      copyKV(sV + (bufOff ^ kKVBytes), vBase, (kt + 1) * BC, seq);
    }
    cpAsyncCommit();
    cpAsyncWait<1>(); // tile kt (and Q) have landed for this thread
    __syncthreads();  // ... and for every thread
    if (kt == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          ldmatrixX4(qf[mt][ks],
                     fragAddrA<D>(sQ, warpRow0 + 16 * mt, ks, lane));
          if (negate)
#pragma unroll
            for (int x = 0; x < 4; ++x)
              qf[mt][ks][x] ^= 0x80008000u;
        }
    }
    const int k0 = kt * BC;
    // Causal: a warp whose rows all precede the tile skips it (only in the
    // diagonal tiles of a block with more rows than BC).
    if (!(causal && warpLast < k0)) {
      if (k0 + BC > seq || (causal && k0 + BC - 1 > warpFirst))
        keyTile(sK + bufOff, sV + bufOff, k0, std::true_type());
      else
        keyTile(sK + bufOff, sV + bufOff, k0, std::false_type());
    }
    __syncthreads(); // buffer kt & 1 is refilled by the next iteration
  }

  // Normalize; lse in natural-log units. Every row saw at least key 0.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = lRow[mt][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.f / l;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        o[mt][nt][2 * r] *= inv;
        o[mt][nt][2 * r + 1] *= inv;
      }
      const int i = warpFirst + 16 * mt + lane / 4 + 8 * r;
      if (lane % 4 == 0 && i < seq)
        lse[(int64_t(b) * qHeads + h) * seq + i] =
            (mRow[mt][r] + log2f(l)) * 0.69314718055994531f;
    }
  }
  // sQ's rows of this warp were read by this warp only (its fragments).
  storeWarpRows<D, MT>(out + qOffset, qStride, q0, seq, smem, warpRow0, o);
}

/// The backward's per-row statistics: delta[b, h, s] = dout[b, s, h, :] .
/// out[b, s, h, :] in f32 and negLse2[b, h, s] = -lse[b, h, s] log2(e) (the
/// exponent offset of p, so that the dq and dk/dv kernels compute p with one
/// FFMA). D / 8 lanes per row, one 16-byte pack each; `rows` = batch * seq *
/// qHeads, in memory order.
template <int D>
__global__ void __launch_bounds__(256)
    attentionDeltaTcKernel(float *__restrict__ delta,
                           float *__restrict__ negLse2,
                           const bf16 *__restrict__ dout,
                           const bf16 *__restrict__ out,
                           const float *__restrict__ lse, int64_t rows,
                           int seq, int qHeads) {
  constexpr int kLanes = D / 8;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = t / kLanes;
  const int c = int(t % kLanes);
  float sum = 0.f;
  if (row < rows) {
    const uint4 a = *reinterpret_cast<const uint4 *>(dout + row * D + c * 8);
    const uint4 o = *reinterpret_cast<const uint4 *>(out + row * D + c * 8);
    const __nv_bfloat162 *a2 = reinterpret_cast<const __nv_bfloat162 *>(&a);
    const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __bfloat1622float2(a2[i]), y = __bfloat1622float2(o2[i]);
      sum = fmaf(x.x, y.x, sum);
      sum = fmaf(x.y, y.y, sum);
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (row < rows && c == 0) {
    const int64_t bs = row / qHeads;
    const int h = int(row % qHeads);
    const int64_t bb = bs / seq, s = bs % seq;
    const int64_t at = (bb * qHeads + h) * seq + s;
    delta[at] = sum;
    negLse2[at] = -lse[at] * 1.4426950408889634f;
  }
}

/// dq: one block per (query tile of Cfg::BR rows, query head, batch), over
/// the key tiles: s = q k^T, dp = dout v^T, p = 2^(s scale log2e + negLse2),
/// ds = p (dp - delta), dq += ds k; dq *= scale at the end.
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionBwdDqTcKernel(bf16 *__restrict__ dq,
                           const bf16 *__restrict__ dout,
                           const bf16 *__restrict__ q,
                           const bf16 *__restrict__ k,
                           const bf16 *__restrict__ v,
                           const float *__restrict__ negLse2,
                           const float *__restrict__ delta, int seq,
                           int qHeads, int kvHeads, bool causal, float scale,
                           float scaleLog2) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = BC * D * 2;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = sharedAddress(smem), sdO = sQ + BR * D * 2;
  const uint32_t sK = sdO + BR * D * 2, sV = sK + 2 * kKVBytes;

  const int nQT = (seq + BR - 1) / BR;
  const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = qt * BR, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  const int64_t statRow = (int64_t(b) * qHeads + h) * seq;
  const bf16 *kBase = k + kvOffset, *vBase = v + kvOffset;

  const int kEnd = causal ? min(seq, q0 + BR) : seq;
  const int nKT = (kEnd + BC - 1) / BC;
  const TileCopy<D, BR> copyQ(qStride);
  const TileCopy<D, BC> copyKV(kvStride);
  copyQ(sQ, q + qOffset, q0, seq);
  copyQ(sdO, dout + qOffset, q0, seq);
  copyKV(sK, kBase, 0, seq);
  copyKV(sV, vBase, 0, seq);
  cpAsyncCommit();

  const int warpRow0 = warp * 16 * MT;
  const int warpFirst = q0 + warpRow0, warpLast = warpFirst + 16 * MT - 1;
  // -lse (in log2 units) and delta of this lane's rows; rows >= seq are
  // masked or never stored, their values unused.
  float nl2[MT][2], dlt[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = warpFirst + 16 * mt + lane / 4 + 8 * r;
      nl2[mt][r] = i < seq ? negLse2[statRow + i] : 0.f;
      dlt[mt][r] = i < seq ? delta[statRow + i] : 0.f;
    }
  float acc[MT][OT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
      acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;
  uint32_t qf[MT][KS][4], gf[MT][KS][4];

  // One key tile. MASK as in the forward: masked probabilities are 0.
  auto keyTile = [&](uint32_t tK, uint32_t tV, int k0, auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[mt][nt][e] = dp[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4], bv[4];
        ldmatrixX4(bk, fragAddrB<D>(tK, 16 * np, ks, lane));
        ldmatrixX4(bv, fragAddrB<D>(tV, 16 * np, ks, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(s[mt][2 * np], qf[mt][ks], bk[0], bk[1]);
          mma16816(s[mt][2 * np + 1], qf[mt][ks], bk[2], bk[3]);
          mma16816(dp[mt][2 * np], gf[mt][ks], bv[0], bv[1]);
          mma16816(dp[mt][2 * np + 1], gf[mt][ks], bv[2], bv[3]);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int i0 = warpFirst + 16 * mt + lane / 4;
      const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                            causal ? min(i0 + 8, seq - 1) : seq - 1};
      const int j0 = k0 + 2 * (lane % 4);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p =
              fastExp2(fmaf(s[mt][nt][e], scaleLog2, nl2[mt][e >> 1]));
          if constexpr (MASK)
            if (j0 + nt * 8 + (e & 1) > limit[e >> 1])
              p = 0.f;
          dp[mt][nt][e] = p * (dp[mt][nt][e] - dlt[mt][e >> 1]);
        }
      }
    }
    // dq += ds k: k is the [key][d] row-major B operand (ldmatrix.trans).
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t da[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        da[mt][0] = packBf16(dp[mt][2 * kk][0], dp[mt][2 * kk][1]);
        da[mt][1] = packBf16(dp[mt][2 * kk][2], dp[mt][2 * kk][3]);
        da[mt][2] = packBf16(dp[mt][2 * kk + 1][0], dp[mt][2 * kk + 1][1]);
        da[mt][3] = packBf16(dp[mt][2 * kk + 1][2], dp[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bk[4];
        ldmatrixX4Trans(bk, fragAddrA<D>(tK, 16 * kk, dd, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(acc[mt][2 * dd], da[mt], bk[0], bk[1]);
          mma16816(acc[mt][2 * dd + 1], da[mt], bk[2], bk[3]);
        }
      }
    }
  };

  for (int kt = 0; kt < nKT; ++kt) {
    const uint32_t bufOff = (kt & 1) * kKVBytes;
    if (kt + 1 < nKT) {
      copyKV(sK + (bufOff ^ kKVBytes), kBase, (kt + 1) * BC, seq);
      copyKV(sV + (bufOff ^ kKVBytes), vBase, (kt + 1) * BC, seq);
    }
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          ldmatrixX4(qf[mt][ks],
                     fragAddrA<D>(sQ, warpRow0 + 16 * mt, ks, lane));
          ldmatrixX4(gf[mt][ks],
                     fragAddrA<D>(sdO, warpRow0 + 16 * mt, ks, lane));
        }
    }
    const int k0 = kt * BC;
    if (!(causal && warpLast < k0)) {
      if (k0 + BC > seq || (causal && k0 + BC - 1 > warpFirst))
        keyTile(sK + bufOff, sV + bufOff, k0, std::true_type());
      else
        keyTile(sK + bufOff, sV + bufOff, k0, std::false_type());
    }
    __syncthreads();
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[mt][nt][e] *= scale;
  storeWarpRows<D, MT>(dq + qOffset, qStride, q0, seq, smem, warpRow0, acc);
}

/// dk, dv: one block per (key tile of Cfg::BC keys, kv head * parts + part,
/// batch), over heads [h0, h0 + heads per part) of the group and, for each,
/// the query tiles that can see the key tile, in that order: s^T = k q^T,
/// dp^T = v dout^T, p^T and ds^T as in the dq kernel, dv += p^T dout, dk +=
/// ds^T q; dk *= scale at the end. parts == 1 writes bf16 dk/dv; otherwise
/// f32 partials [parts][batch][seq][kvHeads][D] for the reduce kernel.
/// ATOMIC_DQ (an alternative to the dq kernel, not bit-reproducible): ds^T
/// also goes to shared memory, and after each query tile the block adds its
/// keys' share of dq (ds k, unscaled) to dqAccum [batch, seq, qHeads, D] f32
/// with atomic reductions; needs BR = 64 and Cfg::kShared + BC * BR * 2
/// bytes of shared memory.
template <class Cfg, bool ATOMIC_DQ = false>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionBwdDkDvTcKernel(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                             float *__restrict__ dkPart,
                             float *__restrict__ dvPart,
                             const bf16 *__restrict__ dout,
                             const bf16 *__restrict__ q,
                             const bf16 *__restrict__ k,
                             const bf16 *__restrict__ v,
                             const float *__restrict__ negLse2,
                             const float *__restrict__ delta, int seq,
                             int qHeads, int kvHeads, int parts, bool causal,
                             float scale, float scaleLog2,
                             float *__restrict__ dqAccum = nullptr) {
  constexpr int D = Cfg::D, MT = Cfg::MT, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BR / 8, OT = D / 8;
  constexpr uint32_t kQBytes = BR * D * 2;
  static_assert(!ATOMIC_DQ || BR == 16 * kTcWarps, "a warp per 16 queries");
  extern __shared__ __align__(128) unsigned char smem[];
  // ATOMIC_DQ: ds^T [BC keys][BR queries] bf16, after the statistics.
  unsigned char *sdSBytes = smem + Cfg::kShared;
  const uint32_t sdS = sharedAddress(sdSBytes);
  const uint32_t sK = sharedAddress(smem), sV = sK + BC * D * 2;
  const uint32_t sQ = sV + BC * D * 2, sdO = sQ + 2 * kQBytes;
  // [buffer][negLse2 BR, delta BR]
  float *sStat = reinterpret_cast<float *>(smem + size_t(2 * BC) * D * 2 +
                                           4 * size_t(kQBytes));

  const int nKT = (seq + BC - 1) / BC;
  const int kt = causal ? nKT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int k0 = kt * BC, b = blockIdx.z;
  const int g = blockIdx.y / parts, part = blockIdx.y % parts;
  const int group = qHeads / kvHeads, perPart = group / parts;
  const int h0 = g * group + part * perPart;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  // Head h's rows start at qBatch + h * D, its statistics at statBatch + h *
  // seq.
  const bf16 *qBatch = q + int64_t(b) * seq * qStride;
  const bf16 *gBatch = dout + int64_t(b) * seq * qStride;
  const float *lseBatch = negLse2 + int64_t(b) * qHeads * seq;
  const float *deltaBatch = delta + int64_t(b) * qHeads * seq;

  const int nQT = (seq + BR - 1) / BR;
  const int qtStart = causal ? k0 / BR : 0;
  const int nIter = perPart * (nQT - qtStart);
  const TileCopy<D, BC> copyKV(kvStride);
  const TileCopy<D, BR> copyQ(qStride);

  // Queues the Q, dO, negLse2 and delta tiles of (head ldH, query tile ldQt)
  // into buffer `buf`, then steps (ldH, ldQt) in iteration order.
  int ldH = h0, ldQt = qtStart;
  const uint32_t statAddress = sharedAddress(sStat + threadIdx.x);
  auto loadQueryTiles = [&](int buf) {
    const int q0 = ldQt * BR;
    const uint32_t off = buf * kQBytes;
    copyQ(sQ + off, qBatch + ldH * D, q0, seq);
    copyQ(sdO + off, gBatch + ldH * D, q0, seq);
    // 2 BR statistics, one per thread and pass (a compile-time count).
#pragma unroll
    for (int i = 0; i < (2 * BR + kTcThreads - 1) / kTcThreads; ++i) {
      const int t = threadIdx.x + i * kTcThreads;
      if (2 * BR % kTcThreads == 0 || t < 2 * BR) {
        const int r = t % BR;
        const float *src =
            (t < BR ? lseBatch : deltaBatch) + int64_t(ldH) * seq + q0 + r;
        cpAsync4(statAddress + (buf * 2 * BR + i * kTcThreads) * 4, src,
                 q0 + r < seq);
      }
    }
    if (++ldQt == nQT) {
      ldQt = qtStart;
      ++ldH;
    }
  };

  copyKV(sK, k + kvOffset, k0, seq);
  copyKV(sV, v + kvOffset, k0, seq);
  loadQueryTiles(0);
  cpAsyncCommit();

  const int warpKey0 = warp * 16 * MT;
  const int warpFirst = k0 + warpKey0; // first key of this warp
  float dkAcc[MT][OT][4], dvAcc[MT][OT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dkAcc[mt][nt][e] = dvAcc[mt][nt][e] = 0.f;
  uint32_t kf[Cfg::KEEPKV ? MT : 1][KS][4], vf[Cfg::KEEPKV ? MT : 1][KS][4];

  // One query tile. MASK: some query of the tile is >= seq or, causal,
  // before some key of this warp, or some key is >= seq.
  auto queryTile = [&](uint32_t tQ, uint32_t tdO, const float *tLse, int q0,
                       auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    const float *tDelta = tLse + BR;
    float s[MT][NT][4], dp[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[mt][nt][e] = dp[mt][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t ka[MT][4], va[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (Cfg::KEEPKV) {
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            ka[mt][x] = kf[mt][ks][x];
            va[mt][x] = vf[mt][ks][x];
          }
        } else {
          ldmatrixX4(ka[mt], fragAddrA<D>(sK, warpKey0 + 16 * mt, ks, lane));
          ldmatrixX4(va[mt], fragAddrA<D>(sV, warpKey0 + 16 * mt, ks, lane));
        }
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bq[4], bg[4];
        ldmatrixX4(bq, fragAddrB<D>(tQ, 16 * np, ks, lane));
        ldmatrixX4(bg, fragAddrB<D>(tdO, 16 * np, ks, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(s[mt][2 * np], ka[mt], bq[0], bq[1]);
          mma16816(s[mt][2 * np + 1], ka[mt], bq[2], bq[3]);
          mma16816(dp[mt][2 * np], va[mt], bg[0], bg[1]);
          mma16816(dp[mt][2 * np + 1], va[mt], bg[2], bg[3]);
        }
      }
    }
    // Query q0 + ii is visible from key j iff lo(j) <= q0 + ii < seq.
    int lo[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = warpFirst + 16 * mt + lane / 4 + 8 * r;
        lo[mt][r] = j >= seq ? seq : (causal ? j : 0);
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int cc = nt * 8 + 2 * (lane % 4);
      const float2 l2 = *reinterpret_cast<const float2 *>(tLse + cc);
      const float2 d2 = *reinterpret_cast<const float2 *>(tDelta + cc);
      const float negL[2] = {l2.x, l2.y};
      const float dc[2] = {d2.x, d2.y};
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float p = fastExp2(fmaf(s[mt][nt][e], scaleLog2, negL[e & 1]));
          if constexpr (MASK) {
            const int i = q0 + cc + (e & 1);
            if (i < lo[mt][e >> 1] || i >= seq)
              p = 0.f;
          }
          s[mt][nt][e] = p;
          dp[mt][nt][e] = p * (dp[mt][nt][e] - dc[e & 1]);
        }
      }
    }
    if constexpr (ATOMIC_DQ) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int r = warpKey0 + 16 * mt + lane / 4;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          *reinterpret_cast<uint32_t *>(sdSBytes + tileOffset<BR>(r, nt) +
                                        (lane % 4) * 4) =
              packBf16(dp[mt][nt][0], dp[mt][nt][1]);
          *reinterpret_cast<uint32_t *>(sdSBytes + tileOffset<BR>(r + 8, nt) +
                                        (lane % 4) * 4) =
              packBf16(dp[mt][nt][2], dp[mt][nt][3]);
        }
      }
    }
    // dv += p^T dout, dk += ds^T q: dout and q are [query][d] row-major B
    // operands (ldmatrix.trans).
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      uint32_t pa[MT][4], da[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        pa[mt][0] = packBf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = packBf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = packBf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = packBf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        da[mt][0] = packBf16(dp[mt][2 * kk][0], dp[mt][2 * kk][1]);
        da[mt][1] = packBf16(dp[mt][2 * kk][2], dp[mt][2 * kk][3]);
        da[mt][2] = packBf16(dp[mt][2 * kk + 1][0], dp[mt][2 * kk + 1][1]);
        da[mt][3] = packBf16(dp[mt][2 * kk + 1][2], dp[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bg[4], bq[4];
        ldmatrixX4Trans(bg, fragAddrA<D>(tdO, 16 * kk, dd, lane));
        ldmatrixX4Trans(bq, fragAddrA<D>(tQ, 16 * kk, dd, lane));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(dvAcc[mt][2 * dd], pa[mt], bg[0], bg[1]);
          mma16816(dvAcc[mt][2 * dd + 1], pa[mt], bg[2], bg[3]);
          mma16816(dkAcc[mt][2 * dd], da[mt], bq[0], bq[1]);
          mma16816(dkAcc[mt][2 * dd + 1], da[mt], bq[2], bq[3]);
        }
      }
    }
  };

  // ATOMIC_DQ: dqAccum[query tile q0 of head h] += ds k over this block's
  // keys, warp w taking queries 16 w.. of the tile (ds from shared memory).
  auto addDq = [&](int q0, int h) {
    float acc[OT][4];
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
      acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      uint32_t a[4];
      ldmatrixX4Trans(a, fragAddrB<BR>(sdS, 16 * kk, warp, lane));
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t bk[4];
        ldmatrixX4Trans(bk, fragAddrA<D>(sK, 16 * kk, dd, lane));
        mma16816(acc[2 * dd], a, bk[0], bk[1]);
        mma16816(acc[2 * dd + 1], a, bk[2], bk[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = q0 + 16 * warp + lane / 4 + 8 * r;
      if (i >= seq)
        continue;
      float *row = dqAccum + ((int64_t(b) * seq + i) * qHeads + h) * D +
                   2 * (lane % 4);
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(
                         row + nt * 8),
                     "f"(acc[nt][2 * r]), "f"(acc[nt][2 * r + 1])
                     : "memory");
    }
  };

  int qt = qtStart, curH = h0; // the query tile and head of iteration it
  for (int it = 0; it < nIter; ++it) {
    const int buf = it & 1;
    if (it + 1 < nIter)
      loadQueryTiles(buf ^ 1);
    cpAsyncCommit();
    cpAsyncWait<1>();
    __syncthreads();
    if (Cfg::KEEPKV && it == 0) {
#pragma unroll
      for (int mt = 0; mt < (Cfg::KEEPKV ? MT : 1); ++mt)
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          ldmatrixX4(kf[mt][ks],
                     fragAddrA<D>(sK, warpKey0 + 16 * mt, ks, lane));
          ldmatrixX4(vf[mt][ks],
                     fragAddrA<D>(sV, warpKey0 + 16 * mt, ks, lane));
        }
    }
    const int q0 = qt * BR;
    // Causal: every query of the tile precedes every key of this warp.
    if (!(causal && q0 + BR - 1 < warpFirst)) {
      const uint32_t tQ = sQ + buf * kQBytes, tdO = sdO + buf * kQBytes;
      const float *tLse = sStat + buf * 2 * BR;
      if (q0 + BR > seq || k0 + BC > seq ||
          (causal && q0 < warpFirst + 16 * MT - 1))
        queryTile(tQ, tdO, tLse, q0, std::true_type());
      else
        queryTile(tQ, tdO, tLse, q0, std::false_type());
    } else if constexpr (ATOMIC_DQ) {
      // This warp's keys contribute nothing: zero rows of ds^T.
#pragma unroll
      for (int e = lane; e < 16 * MT * (BR / 8); e += 32) {
        const int r = warpKey0 + e / (BR / 8), c = e % (BR / 8);
        *reinterpret_cast<uint4 *>(sdSBytes + tileOffset<BR>(r, c)) =
            make_uint4(0, 0, 0, 0);
      }
    }
    if constexpr (ATOMIC_DQ) {
      __syncthreads(); // every warp's ds^T rows are written
      addDq(q0, curH);
    }
    if (++qt == nQT) {
      qt = qtStart;
      ++curH;
    }
    __syncthreads(); // buffer it & 1 is refilled by the next iteration
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        dkAcc[mt][nt][e] *= scale;
  if (parts == 1) {
    // Stage through the K and V tiles: each warp reads and writes only its
    // own rows of them.
    storeWarpRows<D, MT>(dk + kvOffset, kvStride, k0, seq, smem, warpKey0,
                         dkAcc);
    storeWarpRows<D, MT>(dv + kvOffset, kvStride, k0, seq,
                         smem + size_t(BC) * D * 2, warpKey0, dvAcc);
    return;
  }
  const int64_t partOffset =
      ((int64_t(part) * gridDim.z + b) * seq * kvHeads + g) * D;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = warpFirst + 16 * mt + lane / 4 + 8 * r;
      if (j >= seq)
        continue;
      float *dkRow = dkPart + partOffset + int64_t(j) * kvStride;
      float *dvRow = dvPart + partOffset + int64_t(j) * kvStride;
#pragma unroll
      for (int nt = 0; nt < OT; ++nt) {
        const int d = nt * 8 + 2 * (lane % 4);
        *reinterpret_cast<float2 *>(dkRow + d) =
            make_float2(dkAcc[mt][nt][2 * r], dkAcc[mt][nt][2 * r + 1]);
        *reinterpret_cast<float2 *>(dvRow + d) =
            make_float2(dvAcc[mt][nt][2 * r], dvAcc[mt][nt][2 * r + 1]);
      }
    }
}

/// dk, dv = the sums over p < parts, in order, of the f32 partials (each
/// [n] after the previous); n % 4 == 0. Grid-stride over packs of 4. D is
/// the head dim (a template, like every kernel here, so that the header can
/// be included by several translation units).
template <int D>
__global__ void __launch_bounds__(256)
    attentionDkDvReduceTcKernel(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                                const float *__restrict__ dkPart,
                                const float *__restrict__ dvPart, int64_t n,
                                int parts) {
  const int64_t packs = n / 4;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    float4 a = reinterpret_cast<const float4 *>(dkPart)[i];
    float4 c = reinterpret_cast<const float4 *>(dvPart)[i];
    for (int p = 1; p < parts; ++p) {
      const float4 x = reinterpret_cast<const float4 *>(dkPart + p * n)[i];
      const float4 y = reinterpret_cast<const float4 *>(dvPart + p * n)[i];
      a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w;
      c.x += y.x, c.y += y.y, c.z += y.z, c.w += y.w;
    }
    const uint2 ka = make_uint2(packBf16(a.x, a.y), packBf16(a.z, a.w));
    const uint2 va = make_uint2(packBf16(c.x, c.y), packBf16(c.z, c.w));
    reinterpret_cast<uint2 *>(dk)[i] = ka;
    reinterpret_cast<uint2 *>(dv)[i] = va;
  }
}

/// dq = bf16(scale * dqAccum) for the ATOMIC_DQ backward; n % 4 == 0.
template <int D>
__global__ void __launch_bounds__(256)
    attentionDqConvertTcKernel(bf16 *__restrict__ dq,
                               const float *__restrict__ dqAccum, int64_t n,
                               float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n / 4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = reinterpret_cast<const float4 *>(dqAccum)[i];
    reinterpret_cast<uint2 *>(dq)[i] = make_uint2(
        packBf16(a.x * scale, a.y * scale), packBf16(a.z * scale, a.w * scale));
  }
}


//===----------------------------------------------------------------------===//
// bf16 kernels on Hopper's warpgroup MMA (wgmma, sm_90a)
//
// The same kernels, partitioning and arithmetic as the mma.sync ones above
// with MT = 1 (a block of 4 warps owns 64 rows of its own tile, 16 per
// warp), their products issued as wgmma.mma_async m64n64k16 by the block's
// one warpgroup:
// - The wgmma accumulator of m64nN is, per warp, the m16n8 accumulator
//   layout repeated over N / 8 column tiles, and its A operand from
//   registers is the m16n8k16 A fragment: the softmax, masking and packing
//   code of the mma.sync kernels carries over unchanged, and P and dS stay
//   in registers as the A operand of the next product. The block's own rows
//   (q and dout fragments in the forward and dq kernels, k and v in the
//   dk/dv kernel at head_dim 64) are loaded once with ldmatrix as A
//   fragments; at head_dim 128 the dq and dk/dv kernels read them from
//   shared memory instead (descriptors), to keep registers for the
//   accumulators.
// - B operands come from shared memory through matrix descriptors, the
//   tiles in the 128-byte swizzle layout (wgTileOffset): K-major for the
//   products over head_dim (q k^T, dout v^T, and transposed), MN-major
//   (transpose-b) for the products over keys or queries (p v, ds k, p^T
//   dout, ds^T q). Each instruction reads one 64-column block (N = 64).
// - Tiles still arrive through cp.async, double-buffered; each thread
//   fences its writes to the async proxy (fence.proxy.async) before the
//   barrier that hands the tile to wgmma. Every wgmma group is complete
//   (wait_group) before its accumulators are read and before the barrier
//   that lets the next cp.async overwrite its operands.
// - Control flow around wgmma is uniform over the block (every thread of
//   the warpgroup issues the same instructions): whether a tile needs masks
//   is decided per block, not per warp.
// - Backward at head_dim 64 (FUSED / REDUCE configurations): the dq kernel
//   computes delta and negLse2 of its rows itself (from its dout and out
//   tiles) and writes them for the dk/dv kernel, so no delta kernel runs;
//   with parts > 1 each dk/dv block writes its f32 partials, and the last
//   of a key tile's part blocks to arrive (a counter per key tile, zeroed
//   by the dq kernel) sums all parts in part order: the sum does not
//   depend on which block came last, so results stay bit-reproducible.
// Results are bit-reproducible like those of the mma.sync kernels (same
// fixed orders, no atomics), but not bit-identical to them.
//===----------------------------------------------------------------------===//

/// Forward on wgmma: 64 query rows per block, BC keys per K/V tile (64 or
/// 128).
/// PIPE: the softmax of key tile j overlaps the product p v of tile j - 1
/// (issued after s of tile j, waited for after the softmax; v lags k by one
/// tile in the double buffers), as FlashAttention-3 does within a
/// warpgroup. POLY: the exponentials of the last POLY of the tile's BC / 8
/// key columns tiles are computed on the FMA pipes (exp2Poly) instead of
/// the special-function unit, which at head_dim 64 needs as long per tile
/// as the tensor cores (FlashAttention-4's offload).
template <int D_, int BC_, int MINB_, bool PIPE_ = false, int POLY_ = 0>
struct WgFwdConfig {
  static constexpr int D = D_, BC = BC_, MINB = MINB_, BR = 64;
  static constexpr bool PIPE = PIPE_;
  static constexpr int POLY = POLY_;
  /// The tiles, plus 1024 bytes to align them.
  static constexpr size_t kShared = size_t(BR + 4 * BC) * D * 2 + 1024;
};

/// dq on wgmma: 64 query rows per block, BC keys per K/V tile.
/// FUSED: the kernel computes its rows' statistics itself (delta from its
/// dout and out tiles, negLse2 from lse) and writes them for the dk/dv
/// kernel, in place of attentionDeltaTcKernel, and zeroes the dk/dv
/// kernel's part counters; it then also reads an out tile.
template <int D_, int BC_, int MINB_, bool FUSED_ = true> struct WgDqConfig {
  static constexpr int D = D_, BC = BC_, MINB = MINB_, BR = 64;
  static constexpr bool FUSED = FUSED_;
  static constexpr size_t kShared =
      size_t((FUSED ? 3 : 2) * BR + 4 * BC) * D * 2 +
      (FUSED ? 2 * BR * sizeof(float) : 0) + 1024;
};

/// dk/dv on wgmma: 64 keys per block, BR query rows per Q/dO tile. REDUCE:
/// with parts > 1, the last of a key tile's part blocks to finish sums the
/// f32 partials (in part order) into bf16 dk and dv, in place of
/// attentionDkDvReduceTcKernel; needs the part counters zeroed (by a FUSED
/// dq kernel).
template <int D_, int BR_, int MINB_, bool REDUCE_ = true>
struct WgDkDvConfig {
  static constexpr int D = D_, BR = BR_, MINB = MINB_, BC = 64;
  static constexpr bool REDUCE = REDUCE_;
  static constexpr size_t kShared =
      size_t(2 * BC + 4 * BR) * D * 2 + 4 * BR * sizeof(float) + 1024;
};


/// 1 in the device pass that may emit wgmma (sm_90a); the wgmma kernels
/// compile to a trap in any other device pass.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MLT_ATTN_WGMMA 1
#else
#define MLT_ATTN_WGMMA 0
#endif

/// The shared-memory matrix descriptor of a 128-byte-swizzled operand whose
/// first 8-row atom starts at `addr`: start address >> 4 (bits 0-13),
/// leading byte offset 16 (unused: an instruction reads one 64-column
/// block), stride byte offset 1024 (between 8-row atoms), swizzle mode 1
/// (128 bytes; bits 62-63). Shared addresses are below 2^18, so adding
/// (bytes >> 4) to a descriptor moves its start without carrying out of the
/// field.
__device__ __forceinline__ uint64_t wgDesc(uint32_t addr) {
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t(16 >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
/// Offset (in descriptor units) of the K-major operand made of rows n0..n0
/// + 63 and columns 16 ks..16 ks + 15 of a [ROWS][D] wgmma tile.
template <int ROWS>
__device__ __forceinline__ constexpr uint64_t wgKOff(int n0, int ks) {
  return uint64_t(((ks >> 2) * ROWS * 128 + n0 * 128 + (ks & 3) * 32) >> 4);
}
/// Offset of the MN-major operand made of rows 16 kk..16 kk + 15 (the k
/// dimension) and columns 64 cb..64 cb + 63 (n) of a [ROWS][D] wgmma tile.
template <int ROWS>
__device__ __forceinline__ constexpr uint64_t wgMnOff(int kk, int cb) {
  return uint64_t((cb * ROWS * 128 + kk * 2048) >> 4);
}

__device__ __forceinline__ void wgFence() {
#if MLT_ATTN_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgCommit() {
#if MLT_ATTN_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/// Waits until at most N of this warpgroup's committed wgmma groups are
/// pending (the older ones complete).
__device__ __forceinline__ void wgWait() {
#if MLT_ATTN_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
/// As wgWait, leaving the newest group pending.
__device__ __forceinline__ void wgWait1() {
#if MLT_ATTN_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
#endif
}
/// Orders this thread's ordinary (and cp.async) shared-memory writes before
/// the async proxy's (wgmma's) reads that follow a barrier.
__device__ __forceinline__ void fenceProxyAsync() {
#if MLT_ATTN_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/// Keeps the compiler from moving uses of accumulators above the wgWait
/// that completes them.
template <int N>
__device__ __forceinline__ void wgKeep(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+f"(d[i][e])::"memory");
}
/// The 8 accumulator column tiles (64 columns) starting at tile 8 i.
template <int N>
__device__ __forceinline__ float (&cols64(float (&d)[N][4], int i))[8][4] {
  return *reinterpret_cast<float(*)[8][4]>(&d[8 * i]);
}

#define MLT_WG_ACC32(d)                                                        \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),   \
      "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]),              \
      "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]),              \
      "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]),              \
      "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]),              \
      "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]),              \
      "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]),              \
      "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define MLT_WG_D32                                                             \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "     \
  "%30, %31}"

/// d (64 x 64 over the warpgroup, f32) = a b + (accumulate ? d : 0), with
/// a (64 x 16 bf16) from registers (the m16n8k16 A fragment of each warp's
/// 16 rows) and b (16 x 64 bf16) from shared memory: K-major (TRANS_B 0) or
/// MN-major (TRANS_B 1).
template <int TRANS_B>
__device__ __forceinline__ void wgmmaRS(float (&d)[8][4],
                                        const uint32_t (&a)[4], uint64_t b,
                                        bool accumulate) {
#if MLT_ATTN_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MLT_WG_D32
               ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
               : MLT_WG_ACC32(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                 "r"(int(accumulate)), "n"(TRANS_B));
#endif
}
/// As wgmmaRS with a from shared memory too (K-major).
template <int TRANS_B>
__device__ __forceinline__ void wgmmaSS(float (&d)[8][4], uint64_t a,
                                        uint64_t b, bool accumulate) {
#if MLT_ATTN_WGMMA
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " MLT_WG_D32
               ", %32, %33, p, 1, 1, 0, %35;\n}\n"
               : MLT_WG_ACC32(d)
               : "l"(a), "l"(b), "r"(int(accumulate)), "n"(TRANS_B));
#endif
}
#undef MLT_WG_ACC32
#undef MLT_WG_D32

/// The dynamic shared memory of a wgmma kernel, rounded up to 1024 bytes
/// (its configurations ask for 1024 more): the generic pointer and the
/// shared address.
struct WgShared {
  unsigned char *ptr;
  uint32_t addr;
  __device__ __forceinline__ explicit WgShared(unsigned char *raw) {
    const uint32_t a = sharedAddress(raw);
    addr = (a + 1023u) & ~1023u;
    ptr = raw + (addr - a);
  }
};

/// Forward on wgmma: one block per (query tile of 64 rows, query head,
/// batch); attentionFwdTcKernel's algorithm.
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionFwdWgKernel(bf16 *__restrict__ out, float *__restrict__ lse,
                         const bf16 *__restrict__ q,
                         const bf16 *__restrict__ k,
                         const bf16 *__restrict__ v, int seq, int qHeads,
                         int kvHeads, bool causal, float scaleLog2) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = BC * D * 2;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sQ = shared.addr;
  const uint32_t sK = sQ + BR * D * 2, sV = sK + 2 * kKVBytes;

  const int nQT = (seq + BR - 1) / BR;
  const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = qt * BR, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  const bf16 *kBase = k + kvOffset, *vBase = v + kvOffset;

  const int kEnd = causal ? min(seq, q0 + BR) : seq;
  const int nKT = (kEnd + BC - 1) / BC;
  const TileCopy<D, BR, true> copyQ(qStride);
  const TileCopy<D, BC, true> copyKV(kvStride);
  copyQ(sQ, q + qOffset, q0, seq);
  copyKV(sK, kBase, 0, seq);

  const bool negate = scaleLog2 < 0.f;
  const float c = fmaxf(fabsf(scaleLog2), 1e-30f);
  const int warpRow0 = warp * 16;
  const int warpFirst = q0 + warpRow0;
  float o[1][OT][4], mRow[2], lRow[2];
  uint32_t qf[KS][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
    o[0][nt][0] = o[0][nt][1] = o[0][nt][2] = o[0][nt][3] = 0.f;
  mRow[0] = mRow[1] = -INFINITY;
  lRow[0] = lRow[1] = 0.f;

  // The scores (then probabilities) of the current tile, o's rescale
  // factors for it, and the previous tile's probabilities as bf16 A
  // fragments.
  float s[NT][4], alpha[2];
  uint32_t pa[BC / 16][4];

  // s = q k^T for the key tile at tK: issued and committed, not waited for.
  auto issueS = [&](float (&s)[NT][4], uint32_t tK) {
    const uint64_t dK = wgDesc(tK);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BC / 64; ++nb)
        wgmmaRS<0>(cols64(s, nb), qf[ks], dK + wgKOff<BC>(64 * nb, ks),
                   ks > 0);
    wgCommit();
  };
  // o += p v for the value tile at tV, p packed in pa: issued and
  // committed. o must not be touched until it completes.
  auto issuePV = [&](uint32_t (&pa)[BC / 16][4], uint32_t tV) {
    const uint64_t dV = wgDesc(tV);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb)
        wgmmaRS<1>(cols64(o[0], cb), pa[kk], dV + wgMnOff<BC>(kk, cb), true);
    wgCommit();
  };
  // The online softmax of the tile's scores s (replaced by p): moves the
  // rows' bases (lRow rescaled) and returns, warp-uniformly, whether o must
  // be scaled by alpha (per row half) before it takes this tile's p v.
  // (s and alpha are captured: cicc 13.0 crashes on a generic lambda with
  // array-reference parameters.)
  auto softmax = [&](int k0, auto maskTag) -> bool {
    constexpr bool MASK = decltype(maskTag)::value;
    if constexpr (MASK) {
      const int i0 = warpFirst + lane / 4;
      const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                            causal ? min(i0 + 8, seq - 1) : seq - 1};
      const int j0 = k0 + 2 * (lane % 4);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (j0 + nt * 8 + (e & 1) > limit[e >> 1])
            s[nt][e] = -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
    }
    bool grow = false;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      mx[r] *= c;
      grow |= mx[r] > mRow[r] + kRescaleSlack;
    }
    const bool rescale = __any_sync(0xffffffffu, grow);
    alpha[0] = alpha[1] = 1.f;
    if (rescale) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const bool up = mx[r] > mRow[r] + kRescaleSlack;
        alpha[r] = up ? fastExp2(mRow[r] - mx[r]) : 1.f;
        mRow[r] = up ? mx[r] : mRow[r];
        lRow[r] *= alpha[r];
      }
    }
    const float negBase[2] = {-mRow[0], -mRow[1]};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float x = fmaf(s[nt][e], c, negBase[e >> 1]);
        float p = nt >= NT - Cfg::POLY ? exp2Poly(x) : fastExp2(x);
        if constexpr (MASK)
          p = s[nt][e] == -INFINITY ? 0.f : p;
        s[nt][e] = p;
        lRow[e >> 1] += p;
      }
    }
    return rescale;
  };
  auto scaleO = [&](float (&alpha)[2]) {
#pragma unroll
    for (int nt = 0; nt < OT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[0][nt][e] *= alpha[e >> 1];
  };
  auto pack = [&](uint32_t (&pa)[BC / 16][4], float (&s)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      pa[kk][0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };
  auto loadQ = [&] {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      ldmatrixX4(qf[ks], sQ + wgTileOffset<BR>(warpRow0 + (lane & 15),
                                               2 * ks + (lane >> 4)));
      if (negate)
#pragma unroll
        for (int x = 0; x < 4; ++x)
          qf[ks][x] ^= 0x80008000u;
    }
  };
  // Block-uniform (wgmma): masks in every tile that crosses the block's
  // diagonal or the sequence end.
  auto needsMask = [&](int k0) {
    return k0 + BC > seq || (causal && k0 + BC - 1 > q0);
  };

  if constexpr (!Cfg::PIPE) {
    copyKV(sV, vBase, 0, seq);
    cpAsyncCommit();
    for (int kt = 0; kt < nKT; ++kt) {
      const uint32_t bufOff = (kt & 1) * kKVBytes;
      if (kt + 1 < nKT) {
        copyKV(sK + (bufOff ^ kKVBytes), kBase, (kt + 1) * BC, seq);
        copyKV(sV + (bufOff ^ kKVBytes), vBase, (kt + 1) * BC, seq);
      }
      cpAsyncCommit();
      cpAsyncWait<1>();
      fenceProxyAsync();
      __syncthreads();
      if (kt == 0)
        loadQ();
      const int k0 = kt * BC;
      issueS(s, sK + bufOff);
      wgWait();
      wgKeep(s);
      bool rescale;
      if (needsMask(k0))
        rescale = softmax(k0, std::true_type());
      else
        rescale = softmax(k0, std::false_type());
      if (rescale)
        scaleO(alpha);
      pack(pa, s);
      issuePV(pa, sV + bufOff);
      wgWait();
      wgKeep(o[0]);
      __syncthreads();
    }
  } else {
    // Iteration j: s of key tile j (K buffer j % 2), then p v of tile j - 1
    // (V buffer (j - 1) % 2); the loads of iteration j bring k tile j + 1
    // and v tile j, so that iteration j + 1 finds both.
    cpAsyncCommit(); // q and k tile 0 (no v yet)
    for (int j = 0; j <= nKT; ++j) {
      if (j + 1 < nKT)
        copyKV(sK + ((j + 1) & 1) * kKVBytes, kBase, (j + 1) * BC, seq);
      if (j < nKT)
        copyKV(sV + (j & 1) * kKVBytes, vBase, j * BC, seq);
      cpAsyncCommit();
      cpAsyncWait<1>();
      fenceProxyAsync();
      __syncthreads();
      if (j == 0)
        loadQ();
      if (j < nKT) {
        const int k0 = j * BC;
        issueS(s, sK + (j & 1) * kKVBytes);
        if (j > 0) {
          issuePV(pa, sV + ((j - 1) & 1) * kKVBytes);
          wgWait1(); // s complete, p v may still run
        } else {
          wgWait();
        }
        wgKeep(s);
        bool rescale;
        if (needsMask(k0))
          rescale = softmax(k0, std::true_type());
        else
          rescale = softmax(k0, std::false_type());
        wgWait(); // p v of tile j - 1: o and pa are free
        wgKeep(o[0]);
        if (rescale)
          scaleO(alpha);
        pack(pa, s);
      } else {
        issuePV(pa, sV + ((j - 1) & 1) * kKVBytes);
        wgWait();
        wgKeep(o[0]);
      }
      __syncthreads();
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = lRow[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = 1.f / l;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      o[0][nt][2 * r] *= inv;
      o[0][nt][2 * r + 1] *= inv;
    }
    const int i = warpFirst + lane / 4 + 8 * r;
    if (lane % 4 == 0 && i < seq)
      lse[(int64_t(b) * qHeads + h) * seq + i] =
          (mRow[r] + log2f(l)) * 0.69314718055994531f;
  }
  // Staged through sQ: this warp's rows of it were read only by this warp
  // (its q fragments).
  storeWarpRows<D, 1>(out + qOffset, qStride, q0, seq, shared.ptr, warpRow0,
                      o);
#else
  __trap();
#endif
}

/// dq on wgmma: one block per (query tile of 64 rows, query head, batch);
/// attentionBwdDqTcKernel's algorithm. At head_dim 128 the q and dout
/// operands are read from shared memory (registers go to the accumulators).
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionBwdDqWgKernel(bf16 *__restrict__ dq,
                           const bf16 *__restrict__ dout,
                           const bf16 *__restrict__ q,
                           const bf16 *__restrict__ k,
                           const bf16 *__restrict__ v,
                           const bf16 *__restrict__ out,
                           const float *__restrict__ lse,
                           float *__restrict__ negLse2,
                           float *__restrict__ delta,
                           int *__restrict__ partCounters, int seq,
                           int qHeads, int kvHeads, bool causal, float scale,
                           float scaleLog2) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr bool kARegs = D == 64;
  constexpr uint32_t kKVBytes = BC * D * 2;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sQ = shared.addr, sdO = sQ + BR * D * 2;
  const uint32_t sK = sdO + BR * D * 2, sV = sK + 2 * kKVBytes;
  // FUSED: the out tile, then [negLse2 BR, delta BR] f32.
  const uint32_t sO = sV + 2 * kKVBytes;
  float *sStat =
      reinterpret_cast<float *>(shared.ptr + (sO - shared.addr) + BR * D * 2);

  const int nQT = (seq + BR - 1) / BR;
  const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = qt * BR, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t qOffset = (int64_t(b) * seq * qHeads + h) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  const int64_t statRow = (int64_t(b) * qHeads + h) * seq;
  const bf16 *kBase = k + kvOffset, *vBase = v + kvOffset;

  const int kEnd = causal ? min(seq, q0 + BR) : seq;
  const int nKT = (kEnd + BC - 1) / BC;
  const TileCopy<D, BR, true> copyQ(qStride);
  const TileCopy<D, BC, true> copyKV(kvStride);
  copyQ(sQ, q + qOffset, q0, seq);
  copyQ(sdO, dout + qOffset, q0, seq);
  copyKV(sK, kBase, 0, seq);
  copyKV(sV, vBase, 0, seq);
  if constexpr (Cfg::FUSED)
    copyQ(sO, out + qOffset, q0, seq);
  cpAsyncCommit();

  const int warpRow0 = warp * 16;
  const int warpFirst = q0 + warpRow0;
  float nl2[2], dlt[2];
  if constexpr (Cfg::FUSED) {
    static_assert(kTcThreads == 2 * BR, "two threads per row");
    // The key tiles of the dk/dv kernel are as many as the query tiles
    // here (both 64 rows): blocks of the first kvHeads heads zero them.
    if (threadIdx.x == 0 && h < kvHeads)
      partCounters[(int64_t(b) * kvHeads + h) * nQT + qt] = 0;
    // delta of row r = threadIdx.x / 2 from half the row per thread: the
    // tiles in shared memory, zero past seq.
    cpAsyncWait<0>();
    __syncthreads();
    const int r = threadIdx.x / 2, half = threadIdx.x % 2;
    float sum = 0.f;
#pragma unroll
    for (int cc = 0; cc < D / 16; ++cc) {
      const uint32_t off = wgTileOffset<BR>(r, half * (D / 16) + cc);
      uint4 a, o;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w)
                   : "r"(sdO + off));
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(o.x), "=r"(o.y), "=r"(o.z), "=r"(o.w)
                   : "r"(sO + off));
      const __nv_bfloat162 *a2 = reinterpret_cast<const __nv_bfloat162 *>(&a);
      const __nv_bfloat162 *o2 = reinterpret_cast<const __nv_bfloat162 *>(&o);
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const float2 fa = __bfloat1622float2(a2[x]);
        const float2 fo = __bfloat1622float2(o2[x]);
        sum = fmaf(fa.x, fo.x, sum);
        sum = fmaf(fa.y, fo.y, sum);
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (half == 0) {
      const int i = q0 + r;
      const float nl = i < seq ? -lse[statRow + i] * 1.4426950408889634f : 0.f;
      sStat[r] = nl;
      sStat[BR + r] = sum;
      if (i < seq) {
        negLse2[statRow + i] = nl;
        delta[statRow + i] = sum;
      }
    }
    __syncthreads();
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int tr = warpRow0 + lane / 4 + 8 * rr;
      nl2[rr] = sStat[tr];
      dlt[rr] = sStat[BR + tr];
    }
  } else {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = warpFirst + lane / 4 + 8 * r;
      nl2[r] = i < seq ? negLse2[statRow + i] : 0.f;
      dlt[r] = i < seq ? delta[statRow + i] : 0.f;
    }
  }
  float acc[1][OT][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
    acc[0][nt][0] = acc[0][nt][1] = acc[0][nt][2] = acc[0][nt][3] = 0.f;
  uint32_t qf[kARegs ? KS : 1][4], gf[kARegs ? KS : 1][4];
  const uint64_t dQ = wgDesc(sQ), ddO = wgDesc(sdO);

  auto keyTile = [&](uint32_t tK, uint32_t tV, int k0, auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    float s[NT][4], dp[NT][4];
    const uint64_t dK = wgDesc(tK), dV = wgDesc(tV);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BC / 64; ++nb) {
        if constexpr (kARegs) {
          wgmmaRS<0>(cols64(s, nb), qf[ks], dK + wgKOff<BC>(64 * nb, ks),
                     ks > 0);
          wgmmaRS<0>(cols64(dp, nb), gf[ks], dV + wgKOff<BC>(64 * nb, ks),
                     ks > 0);
        } else {
          wgmmaSS<0>(cols64(s, nb), dQ + wgKOff<BR>(0, ks),
                     dK + wgKOff<BC>(64 * nb, ks), ks > 0);
          wgmmaSS<0>(cols64(dp, nb), ddO + wgKOff<BR>(0, ks),
                     dV + wgKOff<BC>(64 * nb, ks), ks > 0);
        }
      }
    wgCommit();
    wgWait();
    wgKeep(s);
    wgKeep(dp);
    const int i0 = warpFirst + lane / 4;
    const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                          causal ? min(i0 + 8, seq - 1) : seq - 1};
    const int j0 = k0 + 2 * (lane % 4);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = fastExp2(fmaf(s[nt][e], scaleLog2, nl2[e >> 1]));
        if constexpr (MASK)
          if (j0 + nt * 8 + (e & 1) > limit[e >> 1])
            p = 0.f;
        dp[nt][e] = p * (dp[nt][e] - dlt[e >> 1]);
      }
    }
    uint32_t da[BC / 16][4];
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      da[kk][0] = packBf16(dp[2 * kk][0], dp[2 * kk][1]);
      da[kk][1] = packBf16(dp[2 * kk][2], dp[2 * kk][3]);
      da[kk][2] = packBf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      da[kk][3] = packBf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }
    // dq += ds k: k is the MN-major B operand.
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb)
        wgmmaRS<1>(cols64(acc[0], cb), da[kk], dK + wgMnOff<BC>(kk, cb),
                   true);
    wgCommit();
    wgWait();
    wgKeep(acc[0]);
  };

  for (int kt = 0; kt < nKT; ++kt) {
    const uint32_t bufOff = (kt & 1) * kKVBytes;
    if (kt + 1 < nKT) {
      copyKV(sK + (bufOff ^ kKVBytes), kBase, (kt + 1) * BC, seq);
      copyKV(sV + (bufOff ^ kKVBytes), vBase, (kt + 1) * BC, seq);
    }
    cpAsyncCommit();
    cpAsyncWait<1>();
    fenceProxyAsync();
    __syncthreads();
    if constexpr (kARegs) {
      if (kt == 0) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const int r = warpRow0 + (lane & 15), ch = 2 * ks + (lane >> 4);
          ldmatrixX4(qf[ks], sQ + wgTileOffset<BR>(r, ch));
          ldmatrixX4(gf[ks], sdO + wgTileOffset<BR>(r, ch));
        }
      }
    }
    const int k0 = kt * BC;
    if (k0 + BC > seq || (causal && k0 + BC - 1 > q0))
      keyTile(sK + bufOff, sV + bufOff, k0, std::true_type());
    else
      keyTile(sK + bufOff, sV + bufOff, k0, std::false_type());
    __syncthreads();
  }

#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[0][nt][e] *= scale;
  // Staged through sQ: no longer read by anything (every wgmma completed
  // before the last barrier).
  storeWarpRows<D, 1>(dq + qOffset, qStride, q0, seq, shared.ptr, warpRow0,
                      acc);
#else
  __trap();
#endif
}

/// dk, dv on wgmma: one block per (key tile of 64 keys, kv head * parts +
/// part, batch); attentionBwdDkDvTcKernel's algorithm and outputs (bf16 dk
/// and dv with parts == 1, f32 partials otherwise). At head_dim 64 the k and
/// v operands stay in registers for the whole block; at 128 they are read
/// from shared memory.
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionBwdDkDvWgKernel(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                             float *__restrict__ dkPart,
                             float *__restrict__ dvPart,
                             const bf16 *__restrict__ dout,
                             const bf16 *__restrict__ q,
                             const bf16 *__restrict__ k,
                             const bf16 *__restrict__ v,
                             const float *__restrict__ negLse2,
                             const float *__restrict__ delta, int seq,
                             int qHeads, int kvHeads, int parts, bool causal,
                             float scale, float scaleLog2,
                             int *__restrict__ partCounters) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR;
  constexpr int KS = D / 16, NT = BR / 8, OT = D / 8;
  constexpr bool kARegs = D == 64;
  constexpr uint32_t kQBytes = BR * D * 2;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sK = shared.addr, sV = sK + BC * D * 2;
  const uint32_t sQ = sV + BC * D * 2, sdO = sQ + 2 * kQBytes;
  float *sStat = reinterpret_cast<float *>(shared.ptr + size_t(2 * BC) * D * 2 +
                                           4 * size_t(kQBytes));

  const int nKT = (seq + BC - 1) / BC;
  const int kt = causal ? nKT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int k0 = kt * BC, b = blockIdx.z;
  const int g = blockIdx.y / parts, part = blockIdx.y % parts;
  const int group = qHeads / kvHeads, perPart = group / parts;
  const int h0 = g * group + part * perPart;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t qStride = int64_t(qHeads) * D, kvStride = int64_t(kvHeads) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  const bf16 *qBatch = q + int64_t(b) * seq * qStride;
  const bf16 *gBatch = dout + int64_t(b) * seq * qStride;
  const float *lseBatch = negLse2 + int64_t(b) * qHeads * seq;
  const float *deltaBatch = delta + int64_t(b) * qHeads * seq;

  const int nQT = (seq + BR - 1) / BR;
  const int qtStart = causal ? k0 / BR : 0;
  const int nIter = perPart * (nQT - qtStart);
  const TileCopy<D, BC, true> copyKV(kvStride);
  const TileCopy<D, BR, true> copyQ(qStride);

  int ldH = h0, ldQt = qtStart;
  const uint32_t statAddress = sharedAddress(sStat + threadIdx.x);
  auto loadQueryTiles = [&](int buf) {
    const int q0 = ldQt * BR;
    const uint32_t off = buf * kQBytes;
    copyQ(sQ + off, qBatch + ldH * D, q0, seq);
    copyQ(sdO + off, gBatch + ldH * D, q0, seq);
#pragma unroll
    for (int i = 0; i < (2 * BR + kTcThreads - 1) / kTcThreads; ++i) {
      const int t = threadIdx.x + i * kTcThreads;
      if (2 * BR % kTcThreads == 0 || t < 2 * BR) {
        const int r = t % BR;
        const float *src =
            (t < BR ? lseBatch : deltaBatch) + int64_t(ldH) * seq + q0 + r;
        cpAsync4(statAddress + (buf * 2 * BR + i * kTcThreads) * 4, src,
                 q0 + r < seq);
      }
    }
    if (++ldQt == nQT) {
      ldQt = qtStart;
      ++ldH;
    }
  };

  copyKV(sK, k + kvOffset, k0, seq);
  copyKV(sV, v + kvOffset, k0, seq);
  loadQueryTiles(0);
  cpAsyncCommit();

  const int warpKey0 = warp * 16;
  const int warpFirst = k0 + warpKey0;
  float dkAcc[1][OT][4], dvAcc[1][OT][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[0][nt][e] = dvAcc[0][nt][e] = 0.f;
  uint32_t kf[kARegs ? KS : 1][4], vf[kARegs ? KS : 1][4];
  const uint64_t dKd = wgDesc(sK), dVd = wgDesc(sV);
  int lo[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = warpFirst + lane / 4 + 8 * r;
    lo[r] = j >= seq ? seq : (causal ? j : 0);
  }

  auto queryTile = [&](uint32_t tQ, uint32_t tdO, const float *tLse, int q0,
                       auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    const float *tDelta = tLse + BR;
    float s[NT][4], dp[NT][4];
    const uint64_t dQ = wgDesc(tQ), ddO = wgDesc(tdO);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BR / 64; ++nb) {
        if constexpr (kARegs) {
          wgmmaRS<0>(cols64(s, nb), kf[ks], dQ + wgKOff<BR>(64 * nb, ks),
                     ks > 0);
          wgmmaRS<0>(cols64(dp, nb), vf[ks], ddO + wgKOff<BR>(64 * nb, ks),
                     ks > 0);
        } else {
          wgmmaSS<0>(cols64(s, nb), dKd + wgKOff<BC>(0, ks),
                     dQ + wgKOff<BR>(64 * nb, ks), ks > 0);
          wgmmaSS<0>(cols64(dp, nb), dVd + wgKOff<BC>(0, ks),
                     ddO + wgKOff<BR>(64 * nb, ks), ks > 0);
        }
      }
    wgCommit();
    wgWait();
    wgKeep(s);
    wgKeep(dp);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int cc = nt * 8 + 2 * (lane % 4);
      const float2 l2 = *reinterpret_cast<const float2 *>(tLse + cc);
      const float2 d2 = *reinterpret_cast<const float2 *>(tDelta + cc);
      const float negL[2] = {l2.x, l2.y};
      const float dc[2] = {d2.x, d2.y};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = fastExp2(fmaf(s[nt][e], scaleLog2, negL[e & 1]));
        if constexpr (MASK) {
          const int i = q0 + cc + (e & 1);
          if (i < lo[e >> 1] || i >= seq)
            p = 0.f;
        }
        s[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - dc[e & 1]);
      }
    }
    uint32_t pa[BR / 16][4], da[BR / 16][4];
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      pa[kk][0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      da[kk][0] = packBf16(dp[2 * kk][0], dp[2 * kk][1]);
      da[kk][1] = packBf16(dp[2 * kk][2], dp[2 * kk][3]);
      da[kk][2] = packBf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      da[kk][3] = packBf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }
    // dv += p^T dout, dk += ds^T q: dout and q are MN-major B operands.
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb) {
        wgmmaRS<1>(cols64(dvAcc[0], cb), pa[kk], ddO + wgMnOff<BR>(kk, cb),
                   true);
        wgmmaRS<1>(cols64(dkAcc[0], cb), da[kk], dQ + wgMnOff<BR>(kk, cb),
                   true);
      }
    wgCommit();
    wgWait();
    wgKeep(dvAcc[0]);
    wgKeep(dkAcc[0]);
  };

  int qt = qtStart;
  for (int it = 0; it < nIter; ++it) {
    const int buf = it & 1;
    if (it + 1 < nIter)
      loadQueryTiles(buf ^ 1);
    cpAsyncCommit();
    cpAsyncWait<1>();
    fenceProxyAsync();
    __syncthreads();
    if constexpr (kARegs) {
      if (it == 0) {
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          const int r = warpKey0 + (lane & 15), ch = 2 * ks + (lane >> 4);
          ldmatrixX4(kf[ks], sK + wgTileOffset<BC>(r, ch));
          ldmatrixX4(vf[ks], sV + wgTileOffset<BC>(r, ch));
        }
      }
    }
    const int q0 = qt * BR;
    // Block-uniform (wgmma): a query tile entirely before the key tile is
    // skipped, one that crosses it or the sequence end is masked.
    if (!(causal && q0 + BR - 1 < k0)) {
      const uint32_t tQ = sQ + buf * kQBytes, tdO = sdO + buf * kQBytes;
      const float *tLse = sStat + buf * 2 * BR;
      if (q0 + BR > seq || k0 + BC > seq || (causal && q0 < k0 + BC - 1))
        queryTile(tQ, tdO, tLse, q0, std::true_type());
      else
        queryTile(tQ, tdO, tLse, q0, std::false_type());
    }
    if (++qt == nQT)
      qt = qtStart;
    __syncthreads();
  }

#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[0][nt][e] *= scale;
  if (parts == 1) {
    // Staged through the K and V tiles (no wgmma reads them any more).
    storeWarpRows<D, 1>(dk + kvOffset, kvStride, k0, seq, shared.ptr,
                        warpKey0, dkAcc);
    storeWarpRows<D, 1>(dv + kvOffset, kvStride, k0, seq,
                        shared.ptr + size_t(BC) * D * 2, warpKey0, dvAcc);
    return;
  }
  const int64_t partOffset =
      ((int64_t(part) * gridDim.z + b) * seq * kvHeads + g) * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = warpFirst + lane / 4 + 8 * r;
    if (j >= seq)
      continue;
    float *dkRow = dkPart + partOffset + int64_t(j) * kvStride;
    float *dvRow = dvPart + partOffset + int64_t(j) * kvStride;
#pragma unroll
    for (int nt = 0; nt < OT; ++nt) {
      const int d = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2 *>(dkRow + d) =
          make_float2(dkAcc[0][nt][2 * r], dkAcc[0][nt][2 * r + 1]);
      *reinterpret_cast<float2 *>(dvRow + d) =
          make_float2(dvAcc[0][nt][2 * r], dvAcc[0][nt][2 * r + 1]);
    }
  }
  if constexpr (Cfg::REDUCE) {
    // The last part block of this key tile to arrive sums every part's
    // partials, in part order (the result does not depend on which block
    // is last), from L2 (.cg: the other blocks' stores are not in this
    // SM's L1).
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
      last = atomicAdd(partCounters + (int64_t(b) * kvHeads + g) * nKT + kt,
                       1) == parts - 1;
    __syncthreads();
    if (!last)
      return;
    __threadfence();
    const int64_t partStride = int64_t(gridDim.z) * seq * kvStride;
    constexpr int kPacks = D / 4; // float4 per row
    for (int e = threadIdx.x; e < BC * kPacks; e += kTcThreads) {
      const int j = k0 + e / kPacks, d = (e % kPacks) * 4;
      if (j >= seq)
        break; // rows only grow with e
      const int64_t at = kvOffset + int64_t(j) * kvStride + d;
      float4 a = __ldcg(reinterpret_cast<const float4 *>(dkPart + at));
      float4 c = __ldcg(reinterpret_cast<const float4 *>(dvPart + at));
      for (int p = 1; p < parts; ++p) {
        const float4 x = __ldcg(
            reinterpret_cast<const float4 *>(dkPart + p * partStride + at));
        const float4 y = __ldcg(
            reinterpret_cast<const float4 *>(dvPart + p * partStride + at));
        a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w;
        c.x += y.x, c.y += y.y, c.z += y.z, c.w += y.w;
      }
      *reinterpret_cast<uint2 *>(dk + at) =
          make_uint2(packBf16(a.x, a.y), packBf16(a.z, a.w));
      *reinterpret_cast<uint2 *>(dv + at) =
          make_uint2(packBf16(c.x, c.y), packBf16(c.z, c.w));
    }
  }
#else
  __trap();
#endif
}

/// Queues the bf16 forward with configuration Cfg (after raising the
/// kernel's dynamic shared-memory limit). Shapes were checked by the caller.
template <class Cfg, bool WG = false>
cudaError_t enqueueForward(bf16 *out, float *lse, const bf16 *q,
                           const bf16 *k, const bf16 *v, int batch, int seq,
                           int qHeads, int kvHeads, bool causal, float scale,
                           cudaStream_t stream) {
  auto *kernel = [] {
    if constexpr (WG)
      return attentionFwdWgKernel<Cfg>;
    else
      return attentionFwdTcKernel<Cfg>;
  }();
  cudaError_t err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kShared));
  if (err != cudaSuccess)
    return err;
  const dim3 grid(unsigned((seq + Cfg::BR - 1) / Cfg::BR), unsigned(qHeads),
                  unsigned(batch));
  kernel<<<grid, kTcThreads, Cfg::kShared, stream>>>(
      out, lse, q, k, v, seq, qHeads, kvHeads, causal,
      scale * 1.4426950408889634f);
  return cudaGetLastError();
}

/// Queues the bf16 backward: the statistics into `stats` (negLse2 then
/// delta, each [batch, qHeads, seq] f32), dq, then dk/dv over `parts`
/// blocks per kv head (parts divides qHeads / kvHeads; with parts > 1,
/// dkPart and dvPart each hold parts * batch * seq * kvHeads * D floats)
/// and, then, their reduction. WG: the wgmma kernels; with a FUSED dq
/// configuration the dq kernel computes the statistics (no delta kernel),
/// with a REDUCE dk/dv one the dk/dv kernel reduces the parts itself
/// (partCounters: batch * kvHeads * ceil(seq / 64) ints, zeroed by the dq
/// kernel). Returns the first launch error and the name of the kernel it
/// came from.
template <class DqCfg, class DkDvCfg, bool WG = false>
cudaError_t enqueueBackward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v,
                            const bf16 *out, const float *lse, float *stats,
                            float *dkPart, float *dvPart, int parts,
                            int batch, int seq, int qHeads, int kvHeads,
                            bool causal, float scale, cudaStream_t stream,
                            const char **failed, int *partCounters = nullptr) {
  static_assert(DqCfg::D == DkDvCfg::D, "one head dim");
  constexpr bool kFused = [] {
    if constexpr (WG)
      return DqCfg::FUSED;
    else
      return false;
  }();
  constexpr bool kReduce = [] {
    if constexpr (WG)
      return DkDvCfg::REDUCE;
    else
      return false;
  }();
  static_assert(!kReduce || kFused, "the fused dq kernel zeroes the counters");
  constexpr int D = DqCfg::D;
  const float scaleLog2 = scale * 1.4426950408889634f;
  cudaError_t err = cudaSuccess;
  auto check = [&](const char *name) {
    if (err == cudaSuccess)
      err = cudaGetLastError();
    if (err != cudaSuccess)
      *failed = name;
    return err == cudaSuccess;
  };

  const int64_t rows = int64_t(batch) * seq * qHeads;
  float *negLse2 = stats, *delta = stats + rows;
  if (!kFused) {
    const int64_t deltaThreads = rows * (D / 8);
    attentionDeltaTcKernel<D><<<unsigned((deltaThreads + 255) / 256), 256, 0,
                                stream>>>(delta, negLse2, dout, out, lse, rows,
                                          seq, qHeads);
    if (!check("attention_bwd (bf16 delta)"))
      return err;
  }

  const dim3 dqGrid(unsigned((seq + DqCfg::BR - 1) / DqCfg::BR),
                    unsigned(qHeads), unsigned(batch));
  if constexpr (WG) {
    err = cudaFuncSetAttribute(attentionBwdDqWgKernel<DqCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DqCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDqWgKernel<DqCfg>
          <<<dqGrid, kTcThreads, DqCfg::kShared, stream>>>(
              dq, dout, q, k, v, out, lse, negLse2, delta, partCounters, seq,
              qHeads, kvHeads, causal, scale, scaleLog2);
  } else {
    err = cudaFuncSetAttribute(attentionBwdDqTcKernel<DqCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DqCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDqTcKernel<DqCfg>
          <<<dqGrid, kTcThreads, DqCfg::kShared, stream>>>(
              dq, dout, q, k, v, negLse2, delta, seq, qHeads, kvHeads, causal,
              scale, scaleLog2);
  }
  if (!check("attention_bwd (bf16 dq)"))
    return err;

  const dim3 dkdvGrid(unsigned((seq + DkDvCfg::BC - 1) / DkDvCfg::BC),
                      unsigned(kvHeads * parts), unsigned(batch));
  if constexpr (WG) {
    err = cudaFuncSetAttribute(attentionBwdDkDvWgKernel<DkDvCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DkDvCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDkDvWgKernel<DkDvCfg>
          <<<dkdvGrid, kTcThreads, DkDvCfg::kShared, stream>>>(
              dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq,
              qHeads, kvHeads, parts, causal, scale, scaleLog2, partCounters);
  } else {
    err = cudaFuncSetAttribute(attentionBwdDkDvTcKernel<DkDvCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DkDvCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDkDvTcKernel<DkDvCfg>
          <<<dkdvGrid, kTcThreads, DkDvCfg::kShared, stream>>>(
              dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq,
              qHeads, kvHeads, parts, causal, scale, scaleLog2);
  }
  if (!check("attention_bwd (bf16 dk, dv)"))
    return err;

  if (parts > 1 && !kReduce) {
    const int64_t n = int64_t(batch) * seq * kvHeads * D;
    const int64_t blocks = (n / 4 + 255) / 256;
    attentionDkDvReduceTcKernel<D><<<unsigned(blocks < 65536 ? blocks : 65536),
                                  256, 0, stream>>>(dk, dv, dkPart, dvPart, n,
                                                    parts);
    if (!check("attention_bwd (bf16 dk, dv reduction)"))
      return err;
  }
  return cudaSuccess;
}

/// The backward with dq from atomic reductions in the dk/dv kernel
/// (ATOMIC_DQ) instead of the dq kernel: not bit-reproducible, measured by
/// bench/attention_bench.cu against enqueueBackward. dqAccum: batch * seq *
/// qHeads * D floats, zeroed here.
template <class DkDvCfg>
cudaError_t enqueueBackwardAtomicDq(
    bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
    const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
    float *stats, float *dkPart, float *dvPart, float *dqAccum, int parts,
    int batch, int seq, int qHeads, int kvHeads, bool causal, float scale,
    cudaStream_t stream) {
  constexpr int D = DkDvCfg::D;
  const float scaleLog2 = scale * 1.4426950408889634f;
  const int64_t rows = int64_t(batch) * seq * qHeads;
  float *negLse2 = stats, *delta = stats + rows;
  cudaError_t err = cudaMemsetAsync(dqAccum, 0, rows * D * sizeof(float),
                                    stream);
  if (err != cudaSuccess)
    return err;
  attentionDeltaTcKernel<D><<<unsigned((rows * (D / 8) + 255) / 256), 256, 0,
                              stream>>>(delta, negLse2, dout, out, lse, rows,
                                        seq, qHeads);
  const size_t shared =
      DkDvCfg::kShared + size_t(DkDvCfg::BC) * DkDvCfg::BR * 2;
  err = cudaFuncSetAttribute(attentionBwdDkDvTcKernel<DkDvCfg, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(shared));
  if (err != cudaSuccess)
    return err;
  const dim3 grid(unsigned((seq + DkDvCfg::BC - 1) / DkDvCfg::BC),
                  unsigned(kvHeads * parts), unsigned(batch));
  attentionBwdDkDvTcKernel<DkDvCfg, true>
      <<<grid, kTcThreads, shared, stream>>>(
          dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq, qHeads,
          kvHeads, parts, causal, scale, scaleLog2, dqAccum);
  const int64_t n = int64_t(batch) * seq * kvHeads * D;
  if (parts > 1)
    attentionDkDvReduceTcKernel<D><<<4096, 256, 0, stream>>>(dk, dv, dkPart,
                                                             dvPart, n, parts);
  attentionDqConvertTcKernel<D>
      <<<4096, 256, 0, stream>>>(dq, dqAccum, rows * D, scale);
  return cudaGetLastError();
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH
