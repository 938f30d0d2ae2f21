//===- attention_wgmma.cuh - bf16 flash attention on wgmma -----*- CUDA -*-===//
//
// Part of mlt. The attention family's bf16 kernels on Hopper's warpgroup MMA
// (wgmma, sm_90a; namespace tc; attention_common.cuh introduces the family
// and holds their building blocks): the same kernels, partitioning and
// arithmetic as the mma.sync ones (attention_mma.cuh) with MT = 1 (a block
// of 4 warps owns 64 rows of its own tile, 16 per warp), their products
// issued as wgmma.mma_async m64n64k16 by the block's one warpgroup. They
// compile to a trap in any device pass but sm_90a's (MLT_ATTN_WGMMA).
//
// Invariants (in addition to those of attention_common.cuh):
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
// - WGS (every configuration; 1 in production): a block of WGS warpgroups,
//   each owning 64 rows (forward, dq) or keys (dk/dv) of the block's tile,
//   all of them loading the shared operand's tiles (K/V, or Q/dO) once for
//   the block. Each warpgroup decides alone which tiles it masks or skips;
//   the block's barriers are passed by all. With 2, the two warpgroups wait
//   for each other at every tile: measured slower than two blocks of one
//   (bench/attention-notes.md, v7), whose warpgroups drift apart.
// Results are bit-reproducible like those of the mma.sync kernels (same
// fixed orders, no atomics), but not bit-identical to them. A warpgroup's
// results do not depend on WGS.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WGMMA_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WGMMA_CUH

#include "kernels/attention_common.cuh"

namespace mlt::cuda::attn {

namespace tc {

#ifdef __CUDACC__

/// Forward on wgmma: 64 query rows per block, BC keys per K/V tile (64 or
/// 128).
/// PIPE: the softmax of key tile j overlaps the product p v of tile j - 1
/// (issued after s of tile j, waited for after the softmax; v lags k by one
/// tile in the double buffers), as FlashAttention-3 does within a
/// warpgroup. POLY: the exponentials of the last POLY of the tile's BC / 8
/// key columns tiles are computed on the FMA pipes (exp2Poly) instead of
/// the special-function unit, which at head_dim 64 needs as long per tile
/// as the tensor cores (FlashAttention-4's offload).
template <int D_, int BC_, int MINB_, bool PIPE_ = false, int POLY_ = 0,
          int WGS_ = 1>
struct WgFwdConfig {
  static constexpr int D = D_, BC = BC_, MINB = MINB_, WGS = WGS_;
  static constexpr int BR = 64 * WGS, kThreads = kTcThreads * WGS;
  static constexpr bool PIPE = PIPE_;
  static constexpr int POLY = POLY_;
  static_assert(WGS == 1 || WGS == 2, "one or two warpgroups");
  static_assert(!(PIPE && WGS > 1), "the overlap takes one warpgroup");
  /// The tiles, plus 1024 bytes to align them.
  static constexpr size_t kShared = size_t(BR + 4 * BC) * D * 2 + 1024;
};

/// dq on wgmma: 64 query rows per block, BC keys per K/V tile.
/// FUSED: the kernel computes its rows' statistics itself (delta from its
/// dout and out tiles, negLse2 from lse) and writes them for the dk/dv
/// kernel, in place of attentionDeltaTcKernel, and zeroes the dk/dv
/// kernel's part counters; it then also reads an out tile.
template <int D_, int BC_, int MINB_, bool FUSED_ = true, int WGS_ = 1>
struct WgDqConfig {
  static constexpr int D = D_, BC = BC_, MINB = MINB_, WGS = WGS_;
  static constexpr int BR = 64 * WGS, kThreads = kTcThreads * WGS;
  static constexpr bool FUSED = FUSED_;
  static_assert(WGS == 1 || WGS == 2, "one or two warpgroups");
  static constexpr size_t kShared =
      size_t((FUSED ? 3 : 2) * BR + 4 * BC) * D * 2 +
      (FUSED ? 2 * BR * sizeof(float) : 0) + 1024;
};

/// dk/dv on wgmma: 64 keys per block, BR query rows per Q/dO tile. REDUCE:
/// with parts > 1, the last of a key tile's part blocks to finish sums the
/// f32 partials (in part order) into bf16 dk and dv, in place of
/// attentionDkDvReduceTcKernel; needs the part counters zeroed (by a FUSED
/// dq kernel).
template <int D_, int BR_, int MINB_, bool REDUCE_ = true, int WGS_ = 1>
struct WgDkDvConfig {
  static constexpr int D = D_, BR = BR_, MINB = MINB_, WGS = WGS_;
  static constexpr int BC = 64 * WGS, kThreads = kTcThreads * WGS;
  static constexpr bool REDUCE = REDUCE_;
  static_assert(WGS == 1 || WGS == 2, "one or two warpgroups");
  static constexpr size_t kShared =
      size_t(2 * BC + 4 * BR) * D * 2 + 4 * BR * sizeof(float) + 1024;
};


/// Keys per part counter of the dk/dv kernels' in-kernel reduction (a
/// block of BC keys uses its first one; the fused dq kernel zeroes them).
inline constexpr int kPartCounterRows = 64;

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
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MINB)
    attentionFwdWgKernel(bf16 *__restrict__ out, float *__restrict__ lse,
                         const bf16 *__restrict__ q,
                         const bf16 *__restrict__ k,
                         const bf16 *__restrict__ v, int seq, int qHeads,
                         int kvHeads, bool causal, float scaleLog2,
                         const AmaxOutputs amax) {
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
  const TileCopy<D, BR, true, Cfg::kThreads> copyQ(qStride);
  const TileCopy<D, BC, true, Cfg::kThreads> copyKV(kvStride);
  copyQ(sQ, q + qOffset, q0, seq);
  copyKV(sK, kBase, 0, seq);
  // This warpgroup's 64 rows of the block's BR.
  const int wgRow0 = q0 + 64 * (warp / 4);

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
  // Warpgroup-uniform (wgmma): masks in every tile that crosses the
  // warpgroup's diagonal or the sequence end; with two warpgroups, the
  // first skips the tiles wholly above its diagonal (their keys follow all
  // its rows) while the second computes them.
  auto needsMask = [&](int k0) {
    return k0 + BC > seq || (causal && k0 + BC - 1 > wgRow0);
  };
  auto seesTile = [&](int k0) { return !causal || k0 <= wgRow0 + 63; };
  // The softmax of key tile k0's scores, masked where the tile needs it.
  auto softmaxTile = [&](int k0) {
    return needsMask(k0) ? softmax(k0, std::true_type())
                         : softmax(k0, std::false_type());
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
      if (seesTile(k0)) {
        issueS(s, sK + bufOff);
        wgWait();
        wgKeep(s);
        const bool rescale = softmaxTile(k0);
        if (rescale)
          scaleO(alpha);
        pack(pa, s);
        issuePV(pa, sV + bufOff);
        wgWait();
        wgKeep(o[0]);
      }
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
        const bool rescale = softmaxTile(k0);
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
                      o, amax.bits[0]);
#else
  __trap();
#endif
}

/// dq on wgmma: one block per (query tile of 64 rows, query head, batch);
/// attentionBwdDqTcKernel's algorithm. At head_dim 128 the q and dout
/// operands are read from shared memory (registers go to the accumulators).
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MINB) attentionBwdDqWgKernel(
    bf16 *__restrict__ dq, const bf16 *__restrict__ dout,
    const bf16 *__restrict__ q, const bf16 *__restrict__ k,
    const bf16 *__restrict__ v, const bf16 *__restrict__ out,
    const float *__restrict__ lse, float *__restrict__ negLse2,
    float *__restrict__ delta, int *__restrict__ partCounters, int seq,
    int qHeads, int kvHeads, bool causal, float scale, float scaleLog2,
    const __grid_constant__ RopeEpilogue rope, const AmaxOutputs amax) {
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
  const TileCopy<D, BR, true, Cfg::kThreads> copyQ(qStride);
  const TileCopy<D, BC, true, Cfg::kThreads> copyKV(kvStride);
  // This warpgroup's 64 rows of the block's BR (its A operands at row
  // 64 wg of the q and dout tiles).
  const int wg = warp / 4, wgRow0 = q0 + 64 * wg;
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
    static_assert(Cfg::kThreads == 2 * BR, "two threads per row");
    // The dk/dv kernel's counters, one per 64 keys (kPartCounterRows):
    // blocks of the first kvHeads heads zero those of their rows.
    const int nCounters = (seq + kPartCounterRows - 1) / kPartCounterRows;
    const int counter = q0 / kPartCounterRows + int(threadIdx.x);
    if (threadIdx.x < BR / kPartCounterRows && h < kvHeads &&
        counter < nCounters)
      partCounters[(int64_t(b) * kvHeads + h) * nCounters + counter] = 0;
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
          wgmmaSS<0>(cols64(s, nb), dQ + wgKOff<BR>(64 * wg, ks),
                     dK + wgKOff<BC>(64 * nb, ks), ks > 0);
          wgmmaSS<0>(cols64(dp, nb), ddO + wgKOff<BR>(64 * wg, ks),
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
    // Warpgroup-uniform, as in the forward.
    if (!causal || k0 <= wgRow0 + 63) {
      if (k0 + BC > seq || (causal && k0 + BC - 1 > wgRow0))
        keyTile(sK + bufOff, sV + bufOff, k0, std::true_type());
      else
        keyTile(sK + bufOff, sV + bufOff, k0, std::false_type());
    }
    __syncthreads();
  }

#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[0][nt][e] *= scale;
  if (rope.enabled)
    rotateRowsBack<D>(acc, q0 + warpRow0, rope);
  // Staged through sQ: no longer read by anything (every wgmma completed
  // before the last barrier).
  storeWarpRows<D, 1>(dq + qOffset, qStride, q0, seq, shared.ptr, warpRow0,
                      acc, amax.bits[0]);
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
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MINB)
    attentionBwdDkDvWgKernel(
        bf16 *__restrict__ dk, bf16 *__restrict__ dv,
        float *__restrict__ dkPart, float *__restrict__ dvPart,
        const bf16 *__restrict__ dout, const bf16 *__restrict__ q,
        const bf16 *__restrict__ k, const bf16 *__restrict__ v,
        const float *__restrict__ negLse2, const float *__restrict__ delta,
        int seq, int qHeads, int kvHeads, int parts, bool causal, float scale,
        float scaleLog2, int *__restrict__ partCounters,
        const __grid_constant__ RopeEpilogue rope, const AmaxOutputs amax) {
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
  const TileCopy<D, BC, true, Cfg::kThreads> copyKV(kvStride);
  const TileCopy<D, BR, true, Cfg::kThreads> copyQ(qStride);
  constexpr int kThreads = Cfg::kThreads;

  int ldH = h0, ldQt = qtStart;
  const uint32_t statAddress = sharedAddress(sStat + threadIdx.x);
  auto loadQueryTiles = [&](int buf) {
    const int q0 = ldQt * BR;
    const uint32_t off = buf * kQBytes;
    copyQ(sQ + off, qBatch + ldH * D, q0, seq);
    copyQ(sdO + off, gBatch + ldH * D, q0, seq);
#pragma unroll
    for (int i = 0; i < (2 * BR + kThreads - 1) / kThreads; ++i) {
      const int t = threadIdx.x + i * kThreads;
      if (2 * BR % kThreads == 0 || t < 2 * BR) {
        const int r = t % BR;
        const float *src =
            (t < BR ? lseBatch : deltaBatch) + int64_t(ldH) * seq + q0 + r;
        cpAsync4(statAddress + (buf * 2 * BR + i * kThreads) * 4, src,
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
  // This warpgroup's 64 keys of the block's BC (its A operands at row 64 wg
  // of the k and v tiles).
  const int wg = warp / 4, wgKey0 = k0 + 64 * wg;
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
          wgmmaSS<0>(cols64(s, nb), dKd + wgKOff<BC>(64 * wg, ks),
                     dQ + wgKOff<BR>(64 * nb, ks), ks > 0);
          wgmmaSS<0>(cols64(dp, nb), dVd + wgKOff<BC>(64 * wg, ks),
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
    // Warpgroup-uniform (wgmma): a query tile entirely before the
    // warpgroup's keys is skipped, one that crosses them or the sequence
    // end is masked.
    if (!(causal && q0 + BR - 1 < wgKey0)) {
      const uint32_t tQ = sQ + buf * kQBytes, tdO = sdO + buf * kQBytes;
      const float *tLse = sStat + buf * 2 * BR;
      if (q0 + BR > seq || wgKey0 + 64 > seq ||
          (causal && q0 < wgKey0 + 63))
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
  // Each part's share is rotated (the rotation is linear: the parts' sum is
  // the rotated sum).
  if (rope.enabled)
    rotateRowsBack<D>(dkAcc, warpFirst, rope);
  if (parts == 1) {
    // Staged through the K and V tiles (no wgmma reads them any more).
    storeWarpRows<D, 1>(dk + kvOffset, kvStride, k0, seq, shared.ptr,
                        warpKey0, dkAcc, amax.bits[1]);
    storeWarpRows<D, 1>(dv + kvOffset, kvStride, k0, seq,
                        shared.ptr + size_t(BC) * D * 2, warpKey0, dvAcc,
                        amax.bits[2]);
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
    const int nCounters = (seq + kPartCounterRows - 1) / kPartCounterRows;
    if (threadIdx.x == 0)
      last = atomicAdd(partCounters + (int64_t(b) * kvHeads + g) * nCounters +
                           k0 / kPartCounterRows,
                       1) == parts - 1;
    __syncthreads();
    if (!last)
      return;
    __threadfence();
    const int64_t partStride = int64_t(gridDim.z) * seq * kvStride;
    constexpr int kPacks = D / 4; // float4 per row
    unsigned bestK = 0u, bestV = 0u;
    const bool wanted = amax.bits[1] || amax.bits[2];
    for (int e = threadIdx.x; e < BC * kPacks; e += kThreads) {
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
      const uint2 k2 = make_uint2(packBf16(a.x, a.y), packBf16(a.z, a.w));
      const uint2 v2 = make_uint2(packBf16(c.x, c.y), packBf16(c.z, c.w));
      *reinterpret_cast<uint2 *>(dk + at) = k2;
      *reinterpret_cast<uint2 *>(dv + at) = v2;
      if (wanted) {
        bestK = maxAbsBitsBf16x8(bestK, make_uint4(k2.x, k2.y, 0u, 0u));
        bestV = maxAbsBitsBf16x8(bestV, make_uint4(v2.x, v2.y, 0u, 0u));
      }
    }
    // (kThreads is whole warps, every lane past the loop)
    if (wanted) {
      warpAbsMaxToGlobal(amax.bits[1], bestK);
      warpAbsMaxToGlobal(amax.bits[2], bestV);
    }
  }
#else
  __trap();
#endif
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WGMMA_CUH
