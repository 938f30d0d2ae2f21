//===- attention_ws.cuh - warp-specialized bf16 attention forward -*- CUDA -*-===//
//
// Part of mlt. The bf16 forward on Hopper in FlashAttention-3's structure
// (namespace tc, sm_90a): a block of three warpgroups owns 128 query rows.
// The first is the producer: one thread loads the block's Q tile once and
// then every K and V tile, each by the tensor memory accelerator into a
// ring of STAGES shared-memory slots, and gives most of its registers to
// the others (setmaxnreg). The other two are consumers of 64 rows each,
// which wait for a slot's "full" barrier, multiply, and release the slot by
// arriving on its "empty" barrier, so that they drift apart as two blocks
// would, instead of meeting at a block barrier every tile (v7 in
// bench/attention-notes.md). Two named barriers order their products:
// consumer 0 issues its products for a tile (s of tile j and p v of tile j
// - 1) while consumer 1 runs its softmax, then the other way round
// (ping-pong), so that the tensor cores are not idle during a softmax.
// Within a consumer, s of tile j overlaps p v of tile j - 1 as in the PIPE
// configuration of attention_wgmma.cuh.
//
// Invariants (in addition to those of attention_common.cuh and
// attention_wgmma.cuh):
// - K/V tile j sits in slot j % STAGES; the k-th use of a slot completes
//   its full barrier's phase of parity k & 1 (the producer's
//   arrive-with-bytes and the tensor memory accelerator's bytes) and its
//   empty barrier's phase of parity k & 1 (an arrival by each of the 8
//   consumer warps once its products reading the slot are complete). K
//   and V have separate rings, so that s can start before v arrives.
// - Scheduling barrier 1 + c is consumer c's turn to issue: it syncs on its
//   own and arrives on the other's (256 threads each). Consumer 1 arrives
//   on consumer 0's once before the loop and skips its last arrival, so
//   every barrier's arrivals match its syncs.
// - Both consumers walk all the block's key tiles (the diagonal tile is
//   masked for both), so their loops have the same length.
// - The products, the softmax (conditional rescaling, the same base-2
//   exponentials) and the order of every sum are the wgmma forward's with
//   BC-key tiles (q read from shared memory instead of registers): the
//   results are bit-reproducible.
// - Scale must be positive (the launcher keeps a negative one on the
//   wgmma forward, which negates q).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH

#include "kernels/attention_wgmma.cuh"
#include "kernels/tma.cuh"

namespace mlt::cuda::attn {

namespace tc {

/// The warp-specialized forward: 128 query rows a block (two consumer
/// warpgroups), BC keys a K/V tile, STAGES slots per ring.
template <int D_, int BC_, int STAGES_> struct WsFwdConfig {
  static constexpr int D = D_, BC = BC_, STAGES = STAGES_;
  static constexpr int BR = 128, kThreads = 3 * kTcThreads;
  /// Registers a thread of the producer and of a consumer warpgroup keep
  /// (24 + 2 x 240 = 3 x 168, the budget of 384 threads on one SM).
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "64 or 128 keys a tile");
  static constexpr uint32_t kQBytes = BR * D * 2, kKVBytes = BC * D * 2;
  /// The tiles, 1024-byte aligned, then the barriers: full Q, full K and
  /// empty K per slot, full V and empty V per slot.
  static constexpr uint32_t kBarrierOffset = kQBytes + 2 * STAGES * kKVBytes;
  static constexpr size_t kShared =
      size_t(kBarrierOffset) + 8 * (1 + 4 * STAGES) + 1024;
};

#ifdef __CUDACC__

/// The online softmax of one tile's scores for a warp's 16 rows (two per
/// thread): masks (MASK) the keys past `limit` of each row, moves the rows'
/// bases mRow (by more than kRescaleSlack only) with lRow rescaled, sets
/// alpha (o's factors), replaces s by the probabilities and adds them to
/// lRow. Returns, warp-uniformly, whether o must be scaled by alpha. c:
/// the positive scale times log2(e).
template <bool MASK, int NT>
__device__ __forceinline__ bool
onlineSoftmax(float (&s)[NT][4], float (&mRow)[2], float (&lRow)[2],
              float (&alpha)[2], float c, int j0, const int (&limit)[2]) {
  if constexpr (MASK) {
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
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float p = fastExp2(fmaf(s[nt][e], c, negBase[e >> 1]));
      if constexpr (MASK)
        p = s[nt][e] == -INFINITY ? 0.f : p;
      s[nt][e] = p;
      lRow[e >> 1] += p;
    }
  return rescale;
}

/// Forward, warp-specialized: one block per (query tile of 128 rows, query
/// head, batch), heaviest causal tiles first. tmQ maps q as [batch][seq]
/// [qHeads * D] in boxes of [128][64]; tmK and tmV map k and v as
/// [batch][seq][kvHeads * D] in boxes of [BC][64].
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    attentionFwdWsKernel(bf16 *__restrict__ out, float *__restrict__ lse,
                         const __grid_constant__ CUtensorMap tmQ,
                         const __grid_constant__ CUtensorMap tmK,
                         const __grid_constant__ CUtensorMap tmV, int seq,
                         int qHeads, int kvHeads, bool causal,
                         float scaleLog2) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR, S = Cfg::STAGES;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = Cfg::kKVBytes;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sQ = shared.addr, sK = sQ + Cfg::kQBytes,
                 sV = sK + S * kKVBytes;
  const uint32_t barFullQ = shared.addr + Cfg::kBarrierOffset;
  const uint32_t barFullK = barFullQ + 8, barEmptyK = barFullK + 8 * S;
  const uint32_t barFullV = barEmptyK + 8 * S, barEmptyV = barFullV + 8 * S;

  const int nQT = (seq + BR - 1) / BR;
  const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int q0 = qt * BR, h = blockIdx.y, b = blockIdx.z;
  const int g = h / (qHeads / kvHeads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int kEnd = causal ? min(seq, q0 + BR) : seq;
  const int nKT = (kEnd + BC - 1) / BC;

  if (threadIdx.x == 0) {
    tma::mbarInit(barFullQ, 1);
#pragma unroll
    for (int i = 0; i < S; ++i) {
      tma::mbarInit(barFullK + 8 * i, 1);
      tma::mbarInit(barFullV + 8 * i, 1);
      tma::mbarInit(barEmptyK + 8 * i, 2 * kTcWarps);
      tma::mbarInit(barEmptyV + 8 * i, 2 * kTcWarps);
    }
    tma::mbarInitFence();
  }
  __syncthreads();

  if (warp < kTcWarps) {
    // The producer.
    tma::regsDecrease<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::prefetchTensorMap(&tmQ);
      tma::prefetchTensorMap(&tmK);
      tma::prefetchTensorMap(&tmV);
      tma::mbarArriveExpectTx(barFullQ, Cfg::kQBytes);
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb)
        tma::loadTile3d(sQ + cb * BR * 128, &tmQ, h * D + 64 * cb, q0, b,
                        barFullQ);
      for (int j = 0; j < nKT; ++j) {
        const int slot = j % S;
        const uint32_t parity = ((j / S) + 1) & 1;
        const uint32_t off = slot * kKVBytes;
        if (j >= S)
          tma::mbarWait(barEmptyK + 8 * slot, parity);
        tma::mbarArriveExpectTx(barFullK + 8 * slot, kKVBytes);
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb)
          tma::loadTile3d(sK + off + cb * BC * 128, &tmK, g * D + 64 * cb,
                          j * BC, b, barFullK + 8 * slot);
        if (j >= S)
          tma::mbarWait(barEmptyV + 8 * slot, parity);
        tma::mbarArriveExpectTx(barFullV + 8 * slot, kKVBytes);
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb)
          tma::loadTile3d(sV + off + cb * BC * 128, &tmV, g * D + 64 * cb,
                          j * BC, b, barFullV + 8 * slot);
      }
    }
    return;
  }

  // A consumer: warpgroup c owns rows 64 c.. of the block's tile.
  tma::regsIncrease<Cfg::kConsumerRegs>();
  const int c = warp / kTcWarps - 1;
  const int wgRow0 = q0 + 64 * c;
  const int warpRow0 = 64 * c + (warp % kTcWarps) * 16;
  const int warpFirst = q0 + warpRow0;
  const float scale2 = scaleLog2;
  float o[1][OT][4], mRow[2], lRow[2], s[NT][4], alpha[2];
  uint32_t pa[BC / 16][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
    o[0][nt][0] = o[0][nt][1] = o[0][nt][2] = o[0][nt][3] = 0.f;
  mRow[0] = mRow[1] = -INFINITY;
  lRow[0] = lRow[1] = 0.f;
  const int i0 = warpFirst + lane / 4;
  const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                        causal ? min(i0 + 8, seq - 1) : seq - 1};

  const uint64_t dQ = wgDesc(sQ);
  auto issueS = [&](int slot) {
    const uint64_t dK = wgDesc(sK + slot * kKVBytes);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BC / 64; ++nb)
        wgmmaSS<0>(cols64(s, nb), dQ + wgKOff<BR>(64 * c, ks),
                   dK + wgKOff<BC>(64 * nb, ks), ks > 0);
    wgCommit();
  };
  auto issuePV = [&](int slot) {
    const uint64_t dV = wgDesc(sV + slot * kKVBytes);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb)
        wgmmaRS<1>(cols64(o[0], cb), pa[kk], dV + wgMnOff<BC>(kk, cb), true);
    wgCommit();
  };
  // Warpgroup-uniform: the tiles that cross the warpgroup's diagonal or the
  // sequence end are masked.
  auto softmaxTile = [&](int k0) {
    const int j0 = k0 + 2 * (lane % 4);
    return k0 + BC > seq || (causal && k0 + BC - 1 > wgRow0)
               ? onlineSoftmax<true>(s, mRow, lRow, alpha, scale2, j0, limit)
               : onlineSoftmax<false>(s, mRow, lRow, alpha, scale2, j0,
                                      limit);
  };
  auto pack = [&] {
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      pa[kk][0] = packBf16(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = packBf16(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = packBf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = packBf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0)
      tma::mbarArrive(bar);
  };
  constexpr int kConsumers = 2 * kTcThreads;
  auto turnBegin = [&] { tma::namedSync(1 + c, kConsumers); };
  auto turnEnd = [&] { tma::namedArrive(2 - c, kConsumers); };

  if (c == 1)
    turnEnd(); // consumer 0 goes first
  tma::mbarWait(barFullQ, 0);
  // Tile 0: s only.
  tma::mbarWait(barFullK, 0);
  turnBegin();
  issueS(0);
  turnEnd();
  wgWait();
  wgKeep(s);
  release(barEmptyK);
  softmaxTile(0); // o is zero: nothing to rescale
  pack();
  for (int j = 1; j < nKT; ++j) {
    const int slot = j % S, prev = (j - 1) % S;
    tma::mbarWait(barFullK + 8 * slot, (j / S) & 1);
    turnBegin();
    issueS(slot);
    tma::mbarWait(barFullV + 8 * prev, ((j - 1) / S) & 1);
    issuePV(prev);
    turnEnd();
    wgWait1(); // s complete, p v may still run
    wgKeep(s);
    release(barEmptyK + 8 * slot);
    const bool rescale = softmaxTile(j * BC);
    wgWait(); // p v of tile j - 1: o and pa are free
    wgKeep(o[0]);
    release(barEmptyV + 8 * prev);
    if (rescale)
#pragma unroll
      for (int nt = 0; nt < OT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[0][nt][e] *= alpha[e >> 1];
    pack();
  }
  {
    const int last = (nKT - 1) % S;
    tma::mbarWait(barFullV + 8 * last, ((nKT - 1) / S) & 1);
    turnBegin();
    issuePV(last);
    if (c == 0)
      turnEnd(); // consumer 1's last turn; its own last arrival is skipped
    wgWait();
    wgKeep(o[0]);
    release(barEmptyV + 8 * last);
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
  // Staged through the Q tile once both consumers are done with it.
  tma::namedSync(3, kConsumers);
  const int64_t qStride = int64_t(qHeads) * D;
  storeWarpRows<D, 1>(out + (int64_t(b) * seq * qHeads + h) * D, qStride, q0,
                      seq, shared.ptr, warpRow0, o);
#else
  __trap();
#endif
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH
