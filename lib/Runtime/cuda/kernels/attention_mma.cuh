//===- attention_mma.cuh - bf16 flash attention on mma.sync ----*- CUDA -*-===//
//
// Part of mlt. The attention family's bf16 kernels on tensor cores with
// mma.sync (namespace tc; attention_common.cuh introduces the family and
// holds their building blocks): the f32 kernels' FlashAttention-2
// partitioning (attention_f32.cuh), with the tile products on tensor cores:
// mma.sync.m16n8k16 (bf16 operands, f32 accumulators) fed by ldmatrix from
// shared memory; tiles arrive through 16-byte cp.async, K/V (forward, dq) or
// Q/dO (dk/dv) double-buffered so that the next tile loads while the current
// one is multiplied. The launchers run them where the wgmma kernels
// (attention_wgmma.cuh) cannot run; the wgmma backward also runs this
// header's statistics and reduction kernels where it does not fuse them.
//
// Invariants (in addition to the layouts of attention_common.cuh, with bf16
// tensors and f32 lse and statistics):
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
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_MMA_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_MMA_CUH

#include "kernels/attention_common.cuh"

namespace mlt::cuda::attn {

namespace tc {

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

/// Forward: one block per (query tile of Cfg::BR rows, query head, batch).
template <class Cfg>
__global__ void __launch_bounds__(kTcThreads, Cfg::MINB)
    attentionFwdTcKernel(bf16 *__restrict__ out, float *__restrict__ lse,
                         const bf16 *__restrict__ q,
                         const bf16 *__restrict__ k,
                         const bf16 *__restrict__ v, int seq, int qHeads,
                         int kvHeads, bool causal, float scaleLog2,
                         const AmaxOutputs amax) {
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
  storeWarpRows<D, MT>(out + qOffset, qStride, q0, seq, smem, warpRow0, o,
                       amax.bits[0]);
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
                           float scaleLog2, const AmaxOutputs amax) {
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
  storeWarpRows<D, MT>(dq + qOffset, qStride, q0, seq, smem, warpRow0, acc,
                       amax.bits[0]);
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
                             const AmaxOutputs amax,
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
                         dkAcc, amax.bits[1]);
    storeWarpRows<D, MT>(dv + kvOffset, kvStride, k0, seq,
                         smem + size_t(BC) * D * 2, warpKey0, dvAcc,
                         amax.bits[2]);
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
/// be included by several translation units). With amax.bits[1] and [2],
/// merges dk's and dv's amaxes (one atomicMax per block each).
template <int D>
__global__ void __launch_bounds__(256)
    attentionDkDvReduceTcKernel(bf16 *__restrict__ dk, bf16 *__restrict__ dv,
                                const float *__restrict__ dkPart,
                                const float *__restrict__ dvPart, int64_t n,
                                int parts, const AmaxOutputs amax) {
  __shared__ unsigned warps[2 * 32];
  unsigned best[2] = {0u, 0u};
  const bool wanted = amax.bits[1] || amax.bits[2];
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
    if (wanted) {
      best[0] = maxAbsBitsBf16x8(best[0], make_uint4(ka.x, ka.y, 0u, 0u));
      best[1] = maxAbsBitsBf16x8(best[1], make_uint4(va.x, va.y, 0u, 0u));
    }
  }
  if (wanted) {
    unsigned *const targets[2] = {amax.bits[1], amax.bits[2]};
    blockAbsMaxToGlobal(targets, best, warps);
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

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_MMA_CUH
