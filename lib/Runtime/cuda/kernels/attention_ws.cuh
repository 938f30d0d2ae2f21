//===- attention_ws.cuh - warp-specialized bf16 attention ----*- CUDA -*-===//
//
// Part of mlt. The bf16 forward, dq and dk/dv kernels on Hopper in
// FlashAttention-3's structure (namespace tc, sm_90a): a block of three
// warpgroups owns 128 query rows (forward, dq) or 128 keys (dk/dv). The
// first is the producer: one thread loads the block's resident tiles once
// (q; q and dout; k and v) and then every streamed tile (K and V; Q and dO),
// each by the tensor memory accelerator into a ring of STAGES shared-memory
// slots, and the warpgroup gives most of its registers to the others
// (setmaxnreg). The other two are consumers of 64 rows (keys) each, which
// wait for a slot's "full" barrier, multiply, and release the slot by
// arriving on its "empty" barrier, so that they drift apart as two blocks
// would, instead of meeting at a block barrier every tile (v7 in
// bench/attention-notes.md). Two named barriers order their products:
// consumer 0 issues its products for a tile while consumer 1 runs its
// softmax, then the other way round (ping-pong), so that the tensor cores are
// not idle during a softmax. Within a consumer of the forward, s of tile j
// overlaps p v of tile j - 1 (as the PIPE configuration of
// attention_wgmma.cuh); in dq, s and dp of tile j overlap dq's product with
// tile j - 1's ds. Measured (v8 in bench/attention-notes.md): the forward
// and dq are faster than the wgmma kernels at head_dim 128 and slower at
// 64; dk/dv is slower at both (its two accumulators leave no registers for
// the overlap), and is kept as a measured configuration.
//
// Invariants (in addition to those of attention_common.cuh and
// attention_wgmma.cuh):
// - Streamed tile j sits in slot j % STAGES; the k-th use of a slot completes
//   its full barrier's phase of parity k & 1 (the producer's
//   arrive-with-bytes and the tensor memory accelerator's bytes) and its
//   empty barrier's phase of parity k & 1 (an arrival by each of the 8
//   consumer warps once its products reading the slot are complete). The
//   two streamed operands have separate rings (A: K or Q, B: V or dO), so
//   that s can start before v arrives.
// - Scheduling barrier 1 + c is consumer c's turn to issue: it syncs on its
//   own and arrives on the other's (256 threads each). Consumer 1 arrives
//   on consumer 0's once before the loop and skips its last arrival, so
//   every barrier's arrivals match its syncs.
// - Both consumers walk all the block's tiles (those that cross the
//   diagonal are masked for both), so their turns match.
// - The products, the softmax (conditional rescaling, the same base-2
//   exponentials) and the order of every sum are those of the wgmma
//   kernels (attention_wgmma.cuh) with the same tiles; no atomics: the
//   results are bit-reproducible.
// - The forward's scale must be positive (the launcher keeps a negative
//   one on the wgmma forward, which negates q).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH

#include "kernels/attention_wgmma.cuh"
#include "kernels/tma.cuh"

namespace mlt::cuda::attn {

namespace tc {

/// What the warp-specialized kernels' configurations share: three
/// warpgroups, the registers each keeps (24 + 2 x 240 = 3 x 168, the budget
/// of 384 threads on one SM), and shared memory of RESIDENT bytes of tiles
/// loaded once, two rings of STAGES slots of SLOT bytes, then the barriers
/// (WsBarriers), all after up to 1024 bytes of alignment.
template <int STAGES_, uint32_t RESIDENT, uint32_t SLOT> struct WsShape {
  static constexpr int STAGES = STAGES_;
  static constexpr int kThreads = 3 * kTcThreads;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr uint32_t kBarrierOffset = RESIDENT + 2 * STAGES * SLOT;
  static constexpr size_t kShared =
      size_t(kBarrierOffset) + 8 * (1 + 4 * STAGES) + 1024;
};

/// The warp-specialized forward: 128 query rows a block (two consumer
/// warpgroups), BC keys a K/V tile, STAGES slots per ring. QREGS: a
/// consumer holds its q rows in registers (A operands of s = q k^T, read
/// once by ldmatrix) instead of reading them from shared memory at every
/// tile.
template <int D_, int BC_, int STAGES_, bool QREGS_ = false, bool PP_ = true>
struct WsFwdConfig : WsShape<STAGES_, 128 * D_ * 2, BC_ * D_ * 2> {
  static constexpr int D = D_, BC = BC_, BR = 128;
  static constexpr bool QREGS = QREGS_, PP = PP_;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BC == 64 || BC == 128, "64 or 128 keys a tile");
  static constexpr uint32_t kQBytes = BR * D * 2, kKVBytes = BC * D * 2;
};

/// The warp-specialized dq kernel: 128 query rows a block (two consumer
/// warpgroups; q and dout loaded once), BC keys a K/V tile, STAGES slots.
template <int D_, int BC_, int STAGES_, bool QREGS_ = false, bool PP_ = true>
struct WsDqConfig : WsShape<STAGES_, 2 * 128 * D_ * 2, BC_ * D_ * 2> {
  static constexpr int D = D_, BC = BC_, BR = 128;
  static constexpr bool QREGS = QREGS_, PP = PP_;
  static constexpr bool FUSED = false;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BC == 64, "64 keys a tile (registers)");
  /// (resident: q and dout)
  static constexpr uint32_t kQBytes = BR * D * 2, kKVBytes = BC * D * 2;
};

/// Whether a dq configuration is the warp-specialized one.
template <class Cfg> struct IsWsDq : std::false_type {};
template <int D, int BC, int S, bool Q, bool P>
struct IsWsDq<WsDqConfig<D, BC, S, Q, P>> : std::true_type {};

/// The warp-specialized dk/dv kernel: 128 keys a block (two consumer
/// warpgroups; k and v loaded once), BR queries a Q/dO tile, STAGES slots.
/// With parts > 1 it writes f32 partials (the reduction kernel sums them).
/// PIPE: a consumer's s and dp of tile j overlap its dk and dv products of
/// tile j - 1 (more registers than a consumer has: ptxas spills); without,
/// each tile's products are two turns.
template <int D_, int BR_, int STAGES_, bool PIPE_ = false, bool PP_ = true>
struct WsDkDvConfig : WsShape<STAGES_, 2 * 128 * D_ * 2, BR_ * D_ * 2> {
  static constexpr int D = D_, BR = BR_, BC = 128;
  static constexpr bool PIPE = PIPE_, PP = PP_;
  static constexpr bool REDUCE = false;
  static_assert(D == 64 || D == 128, "head_dim 64 or 128");
  static_assert(BR == 64, "64 queries a tile (registers)");
  /// (resident: k and v)
  static constexpr uint32_t kKVBytes = BC * D * 2, kQBytes = BR * D * 2;
};

template <class Cfg> struct IsWsDkDv : std::false_type {};
template <int D, int BR, int S, bool P, bool PP>
struct IsWsDkDv<WsDkDvConfig<D, BR, S, P, PP>> : std::true_type {};

#ifdef __CUDACC__

/// The barriers of a warp-specialized kernel, 8 bytes each from `base`: one
/// for the tiles loaded once (their bytes), then per slot of two rings (A
/// and B: K and V) a full barrier (the producer's arrival and the bytes)
/// and an empty one (an arrival by each consumer warp).
template <int S> struct WsBarriers {
  uint32_t base;
  __device__ __forceinline__ uint32_t once() const { return base; }
  __device__ __forceinline__ uint32_t fullA(int slot) const {
    return base + 8 + 8 * slot;
  }
  __device__ __forceinline__ uint32_t emptyA(int slot) const {
    return base + 8 + 8 * (S + slot);
  }
  __device__ __forceinline__ uint32_t fullB(int slot) const {
    return base + 8 + 8 * (2 * S + slot);
  }
  __device__ __forceinline__ uint32_t emptyB(int slot) const {
    return base + 8 + 8 * (3 * S + slot);
  }
  /// By one thread, before a block barrier.
  __device__ __forceinline__ void init(int consumerWarps) const {
    tma::mbarInit(once(), 1);
#pragma unroll
    for (int i = 0; i < S; ++i) {
      tma::mbarInit(fullA(i), 1);
      tma::mbarInit(fullB(i), 1);
      tma::mbarInit(emptyA(i), consumerWarps);
      tma::mbarInit(emptyB(i), consumerWarps);
    }
    tma::mbarInitFence();
  }
  /// The parity of tile j's full phase (its slot's (j / S)-th use).
  __device__ __forceinline__ static uint32_t fullParity(int j) {
    return (j / S) & 1;
  }
};

/// Loads rows [row0, row0 + ROWS) and columns [col0, col0 + D) of batch b
/// of `map` into a [ROWS][D] wgmma tile at dst (D / 64 boxes of [ROWS][64]).
template <int D, int ROWS>
__device__ __forceinline__ void loadWgTile(uint32_t dst, const CUtensorMap *map,
                                           int col0, int row0, int b,
                                           uint32_t bar) {
#pragma unroll
  for (int cb = 0; cb < D / 64; ++cb)
    tma::loadTile3d(dst + cb * ROWS * 128, map, col0 + 64 * cb, row0, b, bar);
}

/// The producer's loop (one thread): tiles j = 0..n-1 of rings A and B,
/// the [ROWS][D] box at (column, row) = at(j) of mapA into slot j % S of sA
/// (and of mapB into sB), each slot reused once its consumers have released
/// it.
template <int D, int ROWS, int S, class At>
__device__ __forceinline__ void
produceRings(const WsBarriers<S> &bars, uint32_t sA, uint32_t sB,
             const CUtensorMap *mapA, const CUtensorMap *mapB, int b, int n,
             At at) {
  constexpr uint32_t kBytes = ROWS * D * 2;
  for (int j = 0; j < n; ++j) {
    const int slot = j % S;
    const uint32_t parity = ((j / S) + 1) & 1, off = slot * kBytes;
    const int2 where = at(j);
    if (j >= S)
      tma::mbarWait(bars.emptyA(slot), parity);
    tma::mbarArriveExpectTx(bars.fullA(slot), kBytes);
    loadWgTile<D, ROWS>(sA + off, mapA, where.x, where.y, b, bars.fullA(slot));
    if (j >= S)
      tma::mbarWait(bars.emptyB(slot), parity);
    tma::mbarArriveExpectTx(bars.fullB(slot), kBytes);
    loadWgTile<D, ROWS>(sB + off, mapB, where.x, where.y, b, bars.fullB(slot));
  }
}

/// The two consumer warpgroups' turns at the tensor cores (named barriers
/// 1 and 2, 256 threads): consumer c syncs on 1 + c to begin its turn and
/// arrives on the other's to end it. start() lets consumer 0 go first;
/// every turn but consumer 1's last is ended (last = true skips it), so
/// each barrier's arrivals match its syncs. ON false: no turns (the
/// consumers issue as they come).
template <bool ON> struct WsTurns {
  int c;
  static constexpr int kThreads = 2 * kTcThreads;
  __device__ __forceinline__ void start() const {
    if (ON && c == 1)
      tma::namedArrive(1, kThreads);
  }
  __device__ __forceinline__ void begin() const {
    if (ON)
      tma::namedSync(1 + c, kThreads);
  }
  __device__ __forceinline__ void end(bool last = false) const {
    if (ON && !(last && c == 1))
      tma::namedArrive(2 - c, kThreads);
  }
  /// Both consumers (barrier 3).
  __device__ __forceinline__ static void syncConsumers() {
    tma::namedSync(3, kThreads);
  }
};

/// A consumer warp's release of a ring slot (once its products reading the
/// slot are complete).
__device__ __forceinline__ void releaseSlot(uint32_t bar) {
  __syncwarp();
  if (threadIdx.x % 32 == 0)
    tma::mbarArrive(bar);
}

/// The forward and dq kernels' block: one per (query tile of BR rows,
/// query head, batch), heaviest causal tiles first; its kv head and the
/// BC-key tiles it reads.
template <int BR, int BC> struct WsQueryBlock {
  int q0, h, b, g, nKT;
  __device__ __forceinline__ WsQueryBlock(int seq, int qHeads, int kvHeads,
                                          bool causal) {
    const int nQT = (seq + BR - 1) / BR;
    const int qt = causal ? nQT - 1 - int(blockIdx.x) : int(blockIdx.x);
    q0 = qt * BR;
    h = blockIdx.y;
    b = blockIdx.z;
    g = h / (qHeads / kvHeads);
    const int kEnd = causal ? min(seq, q0 + BR) : seq;
    nKT = (kEnd + BC - 1) / BC; // at least one
  }
};

/// (The wgmma kernels of attention_wgmma.cuh keep their own copies of
/// onlineSoftmax and storePartialRows, written inline: their code is what
/// bench/attention-notes.md timed, until a GPU session re-times them on
/// these.)
/// The online softmax of one tile's scores for a warp's 16 rows (two per
/// thread): masks (MASK) the keys past `limit` of each row, moves the rows'
/// bases mRow (by more than kRescaleSlack only) with lRow rescaled, sets
/// alpha (o's factors), replaces s by the probabilities and adds them to
/// lRow. Returns, warp-uniformly, whether o must be scaled by alpha. c:
/// the positive scale times log2(e). POLY: the exponentials of the last
/// POLY of the NT column tiles on the FMA pipes (exp2Poly).
template <bool MASK, int POLY, int NT>
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
      const float x = fmaf(s[nt][e], c, negBase[e >> 1]);
      float p = nt >= NT - POLY ? exp2Poly(x) : fastExp2(x);
      if constexpr (MASK)
        p = s[nt][e] == -INFINITY ? 0.f : p;
      s[nt][e] = p;
      lRow[e >> 1] += p;
    }
  return rescale;
}

/// The f32 partial dk and dv of a warp's 16 key rows (from key `warpFirst`)
/// at `partOffset` of dkPart and dvPart (rows kvStride apart; the mma
/// accumulator layout), rows past seq left out: what a dk/dv block of a
/// split group writes for the reduction.
template <int D>
__device__ __forceinline__ void
storePartialRows(float *dkPart, float *dvPart, int64_t partOffset,
                 int64_t kvStride, int warpFirst, int seq,
                 const float (&dkAcc)[1][D / 8][4],
                 const float (&dvAcc)[1][D / 8][4]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = warpFirst + lane / 4 + 8 * r;
    if (j >= seq)
      continue;
    float *dkRow = dkPart + partOffset + int64_t(j) * kvStride;
    float *dvRow = dvPart + partOffset + int64_t(j) * kvStride;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int d = nt * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2 *>(dkRow + d) =
          make_float2(dkAcc[0][nt][2 * r], dkAcc[0][nt][2 * r + 1]);
      *reinterpret_cast<float2 *>(dvRow + d) =
          make_float2(dvAcc[0][nt][2 * r], dvAcc[0][nt][2 * r + 1]);
    }
  }
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
                         float scaleLog2, const AmaxOutputs amax) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR, S = Cfg::STAGES;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = Cfg::kKVBytes;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sQ = shared.addr, sK = sQ + Cfg::kQBytes,
                 sV = sK + S * kKVBytes;
  const WsBarriers<S> bars{shared.addr + Cfg::kBarrierOffset};

  const WsQueryBlock<BR, BC> blk(seq, qHeads, kvHeads, causal);
  const int q0 = blk.q0, h = blk.h, b = blk.b, g = blk.g, nKT = blk.nKT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0)
    bars.init(2 * kTcWarps);
  __syncthreads();

  if (warp < kTcWarps) {
    // The producer.
    tma::regsDecrease<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::prefetchTensorMap(&tmQ);
      tma::prefetchTensorMap(&tmK);
      tma::prefetchTensorMap(&tmV);
      tma::mbarArriveExpectTx(bars.once(), Cfg::kQBytes);
      loadWgTile<D, BR>(sQ, &tmQ, h * D, q0, b, bars.once());
      produceRings<D, BC, S>(bars, sK, sV, &tmK, &tmV, b, nKT, [&](int j) {
        return make_int2(g * D, j * BC);
      });
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
  uint32_t qf[Cfg::QREGS ? KS : 1][4];
  auto issueS = [&](int slot) {
    const uint64_t dK = wgDesc(sK + slot * kKVBytes);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BC / 64; ++nb) {
        if constexpr (Cfg::QREGS)
          wgmmaRS<0>(cols64(s, nb), qf[ks], dK + wgKOff<BC>(64 * nb, ks),
                     ks > 0);
        else
          wgmmaSS<0>(cols64(s, nb), dQ + wgKOff<BR>(64 * c, ks),
                     dK + wgKOff<BC>(64 * nb, ks), ks > 0);
      }
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
               ? onlineSoftmax<true, 0>(s, mRow, lRow, alpha, scale2, j0, limit)
               : onlineSoftmax<false, 0>(s, mRow, lRow, alpha, scale2, j0,
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
  const WsTurns<Cfg::PP> turns{c};

  turns.start();
  tma::mbarWait(bars.once(), 0);
  if constexpr (Cfg::QREGS)
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
      ldmatrixX4(qf[ks], sQ + wgTileOffset<BR>(warpRow0 + (lane & 15),
                                               2 * ks + (lane >> 4)));
  // Tile 0: s only.
  tma::mbarWait(bars.fullA(0), 0);
  turns.begin();
  issueS(0);
  turns.end();
  wgWait();
  wgKeep(s);
  releaseSlot(bars.emptyA(0));
  softmaxTile(0); // o is zero: nothing to rescale
  pack();
  for (int j = 1; j < nKT; ++j) {
    const int slot = j % S, prev = (j - 1) % S;
    tma::mbarWait(bars.fullA(slot), bars.fullParity(j));
    turns.begin();
    issueS(slot);
    tma::mbarWait(bars.fullB(prev), bars.fullParity(j - 1));
    issuePV(prev);
    turns.end();
    wgWait1(); // s complete, p v may still run
    wgKeep(s);
    releaseSlot(bars.emptyA(slot));
    const bool rescale = softmaxTile(j * BC);
    wgWait(); // p v of tile j - 1: o and pa are free
    wgKeep(o[0]);
    releaseSlot(bars.emptyB(prev));
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
    tma::mbarWait(bars.fullB(last), bars.fullParity(nKT - 1));
    turns.begin();
    issuePV(last);
    turns.end(true);
    wgWait();
    wgKeep(o[0]);
    releaseSlot(bars.emptyB(last));
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
  WsTurns<Cfg::PP>::syncConsumers();
  const int64_t qStride = int64_t(qHeads) * D;
  storeWarpRows<D, 1>(out + (int64_t(b) * seq * qHeads + h) * D, qStride, q0,
                      seq, shared.ptr, warpRow0, o, amax.bits[0]);
#else
  __trap();
#endif
}

/// dq, warp-specialized: one block per (query tile of 128 rows, query head,
/// batch); attentionBwdDqWgKernel's arithmetic (without its FUSED
/// statistics: negLse2 and delta come from the delta kernel). tmQ and tmdO
/// map q and dout as [batch][seq][qHeads * D] in boxes of [128][64]; tmK and
/// tmV map k and v in boxes of [BC][64]. Within a consumer, s and dp of key
/// tile j overlap dq's product with tile j - 1's ds.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) attentionBwdDqWsKernel(
    bf16 *__restrict__ dq, const float *__restrict__ negLse2,
    const float *__restrict__ delta, const __grid_constant__ CUtensorMap tmQ,
    const __grid_constant__ CUtensorMap tmdO,
    const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV, int seq, int qHeads, int kvHeads,
    bool causal, float scale, float scaleLog2,
    const __grid_constant__ RopeEpilogue rope, const AmaxOutputs amax) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR, S = Cfg::STAGES;
  constexpr int KS = D / 16, NT = BC / 8, OT = D / 8;
  constexpr uint32_t kKVBytes = Cfg::kKVBytes;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sQ = shared.addr, sdO = sQ + Cfg::kQBytes,
                 sK = sdO + Cfg::kQBytes, sV = sK + S * kKVBytes;
  const WsBarriers<S> bars{shared.addr + Cfg::kBarrierOffset};

  const WsQueryBlock<BR, BC> blk(seq, qHeads, kvHeads, causal);
  const int q0 = blk.q0, h = blk.h, b = blk.b, g = blk.g, nKT = blk.nKT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (threadIdx.x == 0)
    bars.init(2 * kTcWarps);
  __syncthreads();

  if (warp < kTcWarps) {
    tma::regsDecrease<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::prefetchTensorMap(&tmK);
      tma::prefetchTensorMap(&tmV);
      tma::mbarArriveExpectTx(bars.once(), 2 * Cfg::kQBytes);
      loadWgTile<D, BR>(sQ, &tmQ, h * D, q0, b, bars.once());
      loadWgTile<D, BR>(sdO, &tmdO, h * D, q0, b, bars.once());
      produceRings<D, BC, S>(bars, sK, sV, &tmK, &tmV, b, nKT, [&](int j) {
        return make_int2(g * D, j * BC);
      });
    }
    return;
  }

  tma::regsIncrease<Cfg::kConsumerRegs>();
  const int c = warp / kTcWarps - 1;
  const int wgRow0 = q0 + 64 * c;
  const int warpRow0 = 64 * c + (warp % kTcWarps) * 16;
  const int warpFirst = q0 + warpRow0;
  const int64_t statRow = (int64_t(b) * qHeads + h) * seq;
  float nl2[2], dlt[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = warpFirst + lane / 4 + 8 * r;
    nl2[r] = i < seq ? negLse2[statRow + i] : 0.f;
    dlt[r] = i < seq ? delta[statRow + i] : 0.f;
  }
  const int i0 = warpFirst + lane / 4;
  const int limit[2] = {causal ? min(i0, seq - 1) : seq - 1,
                        causal ? min(i0 + 8, seq - 1) : seq - 1};
  float acc[1][OT][4], s[NT][4], dp[NT][4];
  uint32_t da[BC / 16][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
    acc[0][nt][0] = acc[0][nt][1] = acc[0][nt][2] = acc[0][nt][3] = 0.f;
  const uint64_t dQ = wgDesc(sQ), ddO = wgDesc(sdO);
  // QREGS: the q and dout rows as A fragments.
  uint32_t qf[Cfg::QREGS ? KS : 1][4], gf[Cfg::QREGS ? KS : 1][4];

  // s = q k^T and dp = dout v^T of a slot: one group, not waited for.
  auto issueSdP = [&](int slot) {
    const uint64_t dK = wgDesc(sK + slot * kKVBytes),
                   dV = wgDesc(sV + slot * kKVBytes);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BC / 64; ++nb) {
        if constexpr (Cfg::QREGS) {
          wgmmaRS<0>(cols64(s, nb), qf[ks], dK + wgKOff<BC>(64 * nb, ks),
                     ks > 0);
          wgmmaRS<0>(cols64(dp, nb), gf[ks], dV + wgKOff<BC>(64 * nb, ks),
                     ks > 0);
        } else {
          wgmmaSS<0>(cols64(s, nb), dQ + wgKOff<BR>(64 * c, ks),
                     dK + wgKOff<BC>(64 * nb, ks), ks > 0);
          wgmmaSS<0>(cols64(dp, nb), ddO + wgKOff<BR>(64 * c, ks),
                     dV + wgKOff<BC>(64 * nb, ks), ks > 0);
        }
      }
    wgCommit();
  };
  // dq += ds k, ds packed in da, k the MN-major B operand of the slot.
  auto issueDq = [&](int slot) {
    const uint64_t dK = wgDesc(sK + slot * kKVBytes);
    wgFence();
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
      for (int cb = 0; cb < D / 64; ++cb)
        wgmmaRS<1>(cols64(acc[0], cb), da[kk], dK + wgMnOff<BC>(kk, cb),
                   true);
    wgCommit();
  };
  // ds = p (dp - delta) into dp (masked where the tile crosses the
  // warpgroup's diagonal or the sequence end: warpgroup-uniform).
  auto gradScores = [&](int k0, auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    const int j0 = k0 + 2 * (lane % 4);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = fastExp2(fmaf(s[nt][e], scaleLog2, nl2[e >> 1]));
        if constexpr (MASK)
          if (j0 + nt * 8 + (e & 1) > limit[e >> 1])
            p = 0.f;
        dp[nt][e] = p * (dp[nt][e] - dlt[e >> 1]);
      }
  };
  auto gradScoresTile = [&](int k0) {
    if (k0 + BC > seq || (causal && k0 + BC - 1 > wgRow0))
      gradScores(k0, std::true_type());
    else
      gradScores(k0, std::false_type());
  };
  auto pack = [&] {
#pragma unroll
    for (int kk = 0; kk < BC / 16; ++kk) {
      da[kk][0] = packBf16(dp[2 * kk][0], dp[2 * kk][1]);
      da[kk][1] = packBf16(dp[2 * kk][2], dp[2 * kk][3]);
      da[kk][2] = packBf16(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      da[kk][3] = packBf16(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
    }
  };
  const WsTurns<Cfg::PP> turns{c};

  turns.start();
  tma::mbarWait(bars.once(), 0);
  if constexpr (Cfg::QREGS)
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      const int r = warpRow0 + (lane & 15), ch = 2 * ks + (lane >> 4);
      ldmatrixX4(qf[ks], sQ + wgTileOffset<BR>(r, ch));
      ldmatrixX4(gf[ks], sdO + wgTileOffset<BR>(r, ch));
    }
  tma::mbarWait(bars.fullA(0), 0);
  tma::mbarWait(bars.fullB(0), 0);
  turns.begin();
  issueSdP(0);
  turns.end();
  wgWait();
  wgKeep(s);
  wgKeep(dp);
  releaseSlot(bars.emptyB(0)); // v is read by dp only
  gradScoresTile(0);
  pack();
  for (int j = 1; j < nKT; ++j) {
    const int slot = j % S, prev = (j - 1) % S;
    tma::mbarWait(bars.fullA(slot), bars.fullParity(j));
    tma::mbarWait(bars.fullB(slot), bars.fullParity(j));
    turns.begin();
    issueSdP(slot);
    issueDq(prev);
    turns.end();
    wgWait1(); // s and dp complete, dq's product may still run
    wgKeep(s);
    wgKeep(dp);
    releaseSlot(bars.emptyB(slot));
    // da still feeds dq's product: ds is computed in dp, packed after.
    gradScoresTile(j * BC);
    wgWait();
    wgKeep(acc[0]);
    releaseSlot(bars.emptyA(prev));
    pack();
  }
  {
    const int last = (nKT - 1) % S;
    turns.begin();
    issueDq(last);
    turns.end(true);
    wgWait();
    wgKeep(acc[0]);
    releaseSlot(bars.emptyA(last));
  }

#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[0][nt][e] *= scale;
  if (rope.enabled)
    rotateRowsBack<D>(acc, warpFirst, rope);
  // Staged through the q tile once both consumers are done with it.
  WsTurns<Cfg::PP>::syncConsumers();
  storeWarpRows<D, 1>(dq + (int64_t(b) * seq * qHeads + h) * D,
                      int64_t(qHeads) * D, q0, seq, shared.ptr, warpRow0, acc,
                      amax.bits[0]);
#else
  __trap();
#endif
}

/// dk, dv, warp-specialized: one block per (key tile of 128 keys, kv head *
/// parts + part, batch); attentionBwdDkDvWgKernel's arithmetic and outputs
/// (bf16 dk and dv with parts == 1, f32 partials otherwise). tmK and tmV
/// map k and v as [batch][seq][kvHeads * D] in boxes of [128][64]; tmQ and
/// tmdO map q and dout in boxes of [BR][64]. Within a consumer, s and dp of
/// query tile j overlap the dv and dk products of tile j - 1.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) attentionBwdDkDvWsKernel(
    bf16 *__restrict__ dk, bf16 *__restrict__ dv, float *__restrict__ dkPart,
    float *__restrict__ dvPart, const float *__restrict__ negLse2,
    const float *__restrict__ delta, const __grid_constant__ CUtensorMap tmK,
    const __grid_constant__ CUtensorMap tmV,
    const __grid_constant__ CUtensorMap tmQ,
    const __grid_constant__ CUtensorMap tmdO, int seq, int qHeads,
    int kvHeads, int parts, bool causal, float scale, float scaleLog2,
    const __grid_constant__ RopeEpilogue rope, const AmaxOutputs amax) {
#if MLT_ATTN_WGMMA
  constexpr int D = Cfg::D, BC = Cfg::BC, BR = Cfg::BR, S = Cfg::STAGES;
  constexpr int KS = D / 16, NT = BR / 8, OT = D / 8;
  constexpr uint32_t kQBytes = Cfg::kQBytes;
  extern __shared__ __align__(1024) unsigned char wgSmem[];
  const WgShared shared(wgSmem);
  const uint32_t sK = shared.addr, sV = sK + Cfg::kKVBytes,
                 sQ = sV + Cfg::kKVBytes, sdO = sQ + S * kQBytes;
  const WsBarriers<S> bars{shared.addr + Cfg::kBarrierOffset};

  const int nKT = (seq + BC - 1) / BC;
  const int kt = causal ? nKT - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int k0 = kt * BC, b = blockIdx.z;
  const int g = blockIdx.y / parts, part = blockIdx.y % parts;
  const int group = qHeads / kvHeads, perPart = group / parts;
  const int h0 = g * group + part * perPart;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nQT = (seq + BR - 1) / BR;
  const int qtStart = causal ? k0 / BR : 0;
  // At least one tile (qtStart < nQT).
  const int perHead = nQT - qtStart, nIter = perPart * perHead;

  if (threadIdx.x == 0)
    bars.init(2 * kTcWarps);
  __syncthreads();

  if (warp < kTcWarps) {
    tma::regsDecrease<Cfg::kProducerRegs>();
    if (threadIdx.x == 0) {
      tma::prefetchTensorMap(&tmQ);
      tma::prefetchTensorMap(&tmdO);
      tma::mbarArriveExpectTx(bars.once(), 2 * Cfg::kKVBytes);
      loadWgTile<D, BC>(sK, &tmK, g * D, k0, b, bars.once());
      loadWgTile<D, BC>(sV, &tmV, g * D, k0, b, bars.once());
      produceRings<D, BR, S>(
          bars, sQ, sdO, &tmQ, &tmdO, b, nIter, [&](int j) {
            return make_int2((h0 + j / perHead) * D,
                             (qtStart + j % perHead) * BR);
          });
    }
    return;
  }

  tma::regsIncrease<Cfg::kConsumerRegs>();
  const int c = warp / kTcWarps - 1;
  const int wgKey0 = k0 + 64 * c;
  const int warpKey0 = 64 * c + (warp % kTcWarps) * 16;
  const int warpFirst = k0 + warpKey0;
  int lo[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = warpFirst + lane / 4 + 8 * r;
    lo[r] = j >= seq ? seq : (causal ? j : 0);
  }
  const float *lseBatch = negLse2 + int64_t(b) * qHeads * seq;
  const float *deltaBatch = delta + int64_t(b) * qHeads * seq;
  float dkAcc[1][OT][4], dvAcc[1][OT][4], s[NT][4], dp[NT][4];
  uint32_t pa[BR / 16][4], da[BR / 16][4];
#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[0][nt][e] = dvAcc[0][nt][e] = 0.f;
  const uint64_t dKd = wgDesc(sK), dVd = wgDesc(sV);

  // s^T = k q^T and dp^T = v dout^T of a slot: one group.
  auto issueSdP = [&](int slot) {
    const uint64_t dQ = wgDesc(sQ + slot * kQBytes),
                   ddO = wgDesc(sdO + slot * kQBytes);
    wgFence();
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int nb = 0; nb < BR / 64; ++nb) {
        wgmmaSS<0>(cols64(s, nb), dKd + wgKOff<BC>(64 * c, ks),
                   dQ + wgKOff<BR>(64 * nb, ks), ks > 0);
        wgmmaSS<0>(cols64(dp, nb), dVd + wgKOff<BC>(64 * c, ks),
                   ddO + wgKOff<BR>(64 * nb, ks), ks > 0);
      }
    wgCommit();
  };
  // dv += p^T dout, dk += ds^T q (pa, da packed; the slot's dout and q are
  // MN-major B operands): one group.
  auto issueDkDv = [&](int slot) {
    const uint64_t dQ = wgDesc(sQ + slot * kQBytes),
                   ddO = wgDesc(sdO + slot * kQBytes);
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
  };
  // Tile j's query head and first query.
  auto tileHead = [&](int j) { return h0 + j / perHead; };
  auto tileQuery = [&](int j) { return (qtStart + j % perHead) * BR; };
  // p^T into s and ds^T into dp, masked where the tile crosses the
  // warpgroup's keys or the sequence end (warpgroup-uniform). The
  // statistics of the tile's query columns come from global memory (L1),
  // a few at a time (registers).
  auto gradScores = [&](int j, auto maskTag) {
    constexpr bool MASK = decltype(maskTag)::value;
    const int q0 = tileQuery(j);
    const int64_t row = int64_t(tileHead(j)) * seq;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float nl[2], dl[2];
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int i = q0 + nt * 8 + 2 * (lane % 4) + x;
        nl[x] = i < seq ? __ldg(lseBatch + row + i) : 0.f;
        dl[x] = i < seq ? __ldg(deltaBatch + row + i) : 0.f;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = fastExp2(fmaf(s[nt][e], scaleLog2, nl[e & 1]));
        if constexpr (MASK) {
          const int i = q0 + nt * 8 + 2 * (lane % 4) + (e & 1);
          if (i < lo[e >> 1] || i >= seq)
            p = 0.f;
        }
        s[nt][e] = p;
        dp[nt][e] = p * (dp[nt][e] - dl[e & 1]);
      }
    }
  };
  auto gradScoresTile = [&](int j) {
    const int q0 = tileQuery(j);
    if (q0 + BR > seq || wgKey0 + 64 > seq || (causal && q0 < wgKey0 + 63))
      gradScores(j, std::true_type());
    else
      gradScores(j, std::false_type());
  };
  auto pack = [&] {
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
  };
  auto releaseBoth = [&](int slot) {
    releaseSlot(bars.emptyA(slot));
    releaseSlot(bars.emptyB(slot));
  };
  const WsTurns<Cfg::PP> turns{c};

  turns.start();
  tma::mbarWait(bars.once(), 0);
  if constexpr (!Cfg::PIPE) {
    for (int j = 0; j < nIter; ++j) {
      const int slot = j % S;
      tma::mbarWait(bars.fullA(slot), bars.fullParity(j));
      tma::mbarWait(bars.fullB(slot), bars.fullParity(j));
      turns.begin();
      issueSdP(slot);
      turns.end();
      wgWait();
      wgKeep(s);
      wgKeep(dp);
      gradScoresTile(j);
      pack();
      turns.begin();
      issueDkDv(slot);
      turns.end(j == nIter - 1);
      wgWait();
      wgKeep(dkAcc[0]);
      wgKeep(dvAcc[0]);
      releaseBoth(slot);
    }
  } else if (nIter > 0) {
    tma::mbarWait(bars.fullA(0), 0);
    tma::mbarWait(bars.fullB(0), 0);
    turns.begin();
    issueSdP(0);
    turns.end();
    wgWait();
    wgKeep(s);
    wgKeep(dp);
    gradScoresTile(0);
    pack();
    for (int j = 1; j < nIter; ++j) {
      const int slot = j % S, prev = (j - 1) % S;
      tma::mbarWait(bars.fullA(slot), bars.fullParity(j));
      tma::mbarWait(bars.fullB(slot), bars.fullParity(j));
      turns.begin();
      issueSdP(slot);
      issueDkDv(prev);
      turns.end();
      wgWait1(); // s and dp complete; dk, dv of tile j - 1 may still run
      wgKeep(s);
      wgKeep(dp);
      gradScoresTile(j);
      wgWait(); // pa, da and slot prev are free
      wgKeep(dkAcc[0]);
      wgKeep(dvAcc[0]);
      releaseBoth(prev);
      pack();
    }
    const int last = (nIter - 1) % S;
    turns.begin();
    issueDkDv(last);
    turns.end(true);
    wgWait();
    wgKeep(dkAcc[0]);
    wgKeep(dvAcc[0]);
    releaseBoth(last);
  }

#pragma unroll
  for (int nt = 0; nt < OT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dkAcc[0][nt][e] *= scale;
  if (rope.enabled)
    rotateRowsBack<D>(dkAcc, warpFirst, rope);
  const int64_t kvStride = int64_t(kvHeads) * D;
  const int64_t kvOffset = (int64_t(b) * seq * kvHeads + g) * D;
  if (parts == 1) {
    // Staged through the K and V tiles once both consumers are done.
    WsTurns<Cfg::PP>::syncConsumers();
    storeWarpRows<D, 1>(dk + kvOffset, kvStride, k0, seq, shared.ptr,
                        warpKey0, dkAcc, amax.bits[1]);
    storeWarpRows<D, 1>(dv + kvOffset, kvStride, k0, seq,
                        shared.ptr + Cfg::kKVBytes, warpKey0, dvAcc,
                        amax.bits[2]);
    return;
  }
  // (the partials' reduction takes the amaxes)
  storePartialRows<D>(dkPart, dvPart,
                      ((int64_t(part) * gridDim.z + b) * seq * kvHeads + g) * D,
                      kvStride, warpFirst, seq, dkAcc, dvAcc);
#else
  __trap();
#endif
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_WS_CUH
