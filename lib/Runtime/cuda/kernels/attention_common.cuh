//===- attention_common.cuh - what the attention kernels share -*- CUDA -*-===//
//
// Part of mlt. Device code of the attention family (launchers in
// attention.cu, declared in attention.h; attention.cuh includes it all):
// FlashAttention-2's forward and backward, three times. First in f32 on CUDA
// cores, tiles in shared memory, for any head_dim up to 128
// (attention_f32.cuh). Then, in namespace tc, for bf16 tensors on tensor
// cores, head_dim 64 and 128: on mma.sync (attention_mma.cuh) and on
// Hopper's wgmma (attention_wgmma.cuh, sm_90a), the latter also
// warp-specialized (attention_ws.cuh: a producer warpgroup loading tiles by
// TMA for two consumer warpgroups). The tensor-core kernels keep
// the f32 kernels' structure (the tiles, the online softmax, recomputing P
// from lse, the split of the backward into a dq pass and a dk/dv pass), with
// the tile products and the softmax held in registers. This header holds
// what the families share: the invariants below, and the building blocks of
// the two tensor-core families (16-byte cp.async into swizzled tiles,
// ldmatrix and mma.sync fragments, bf16 packing, base-2 exponentials, the
// store of a warp's accumulator rows).
//
// Invariants of every attention kernel (each family's header adds its own):
// - q, out, dout, dq are [batch, seq, qHeads, headDim]; k, v, dk, dv [batch,
//   seq, kvHeads, headDim]; lse and delta [batch, qHeads, seq]. All f32 in
//   the f32 kernels; bf16 tensors with f32 lse and statistics in the
//   tensor-core kernels. Query head h reads kv head h / (qHeads / kvHeads).
// - Every sum has a fixed order and no atomics are used: results are
//   bit-reproducible (the mma.sync dk/dv kernel's ATOMIC_DQ variant, kept
//   for comparison only, is the exception).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_COMMON_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_COMMON_CUH

#include "kernels/absmax.cuh"
#include "kernels/common.cuh"

#include <cstddef>
#include <type_traits>

namespace mlt::cuda::attn {

namespace tc {

inline constexpr int kTcThreads = 128;
inline constexpr int kTcWarps = kTcThreads / 32;
/// The most pairs a row may have for RopeEpilogue (head_dim 128).
inline constexpr int kRopeEpilogueMaxHalf = 64;
/// The forward moves a row's softmax base only when its max (log2 units)
/// exceeds the base by more than this (FlashAttention-4's conditional
/// rescaling): probabilities stay below 2^8, far from f32 / bf16 overflow.
inline constexpr float kRescaleSlack = 8.f;

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
/// THREADS: the block's threads (all of them copy).
template <int D, int ROWS, bool WG = false, int THREADS = kTcThreads>
struct TileCopy {
  static constexpr int kChunks = D / 8, kRowStep = THREADS / kChunks;
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

/// Where a tensor-core kernel merges the amax of the outputs it stores
/// (Kernels.def's fused amax outputs; absmax.cuh's bits, zeroed by the
/// launcher; null: not wanted): the forward's out at [0], the backward's dq,
/// dk and dv at [0], [1] and [2]. Each warp merges the maximum of the bf16
/// values it stores (storeWarpRows) with one atomicMax: the same bits as
/// absMaxKernel over the stored tensor, whatever the order.
struct AmaxOutputs {
  unsigned *bits[3] = {nullptr, nullptr, nullptr};
};

/// The rotation a backward that fuses rope's inverse (attention_bwd_rope)
/// applies to dq and dk before it writes them: element pair (i, i + D/2) of
/// the row at sequence position s is rotated by minus (s + positionOffset)
/// * invFreq[i] (rope.h's semantics; invFreq, as rt::ropeInverseFrequency
/// gives it in f64, split into an f32 pair invFreqHi + invFreqLo). Off
/// (`enabled` 0) in a plain attention_bwd.
struct RopeEpilogue {
  float invFreqHi[kRopeEpilogueMaxHalf];
  float invFreqLo[kRopeEpilogueMaxHalf];
  int64_t positionOffset;
  int enabled;
};

/// Rotates a warp's accumulator rows (one slice of 16 rows, the first at
/// sequence position `row0`; the mma accumulator layout, so that a thread
/// holds both columns of each of its pairs) by rope's inverse. In f32 only,
/// a dozen instructions a pair (this runs in the kernels' tails): the angle
/// as an unevaluated sum (the position times invFreqHi, its rounding error
/// and the position times invFreqLo: about 2^-40 relative, near the f64
/// product the rope kernel takes), reduced by 2 pi in two parts, then the
/// sine and cosine units (2^-21 absolute on [-pi, pi]); the f32 rotation of
/// the f32 accumulators is rounded once, when they are written.
template <int D>
__device__ __forceinline__ void
rotateRowsBack(float (&acc)[1][D / 8][4], int row0, const RopeEpilogue &rope) {
  static_assert(D / 2 <= kRopeEpilogueMaxHalf, "head_dim too large");
  const int lane = threadIdx.x % 32;
  // Positions below 2^24 are exact in f32 (the launcher checks).
  float position[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
    position[r] = float(int64_t(row0 + lane / 4 + 8 * r) + rope.positionOffset);
#pragma unroll
  for (int nt = 0; nt < D / 16; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = nt * 8 + 2 * (lane % 4) + (e & 1);
      const float p = position[e >> 1], hi = rope.invFreqHi[i];
      const float angle = p * hi;
      const float angleError = fmaf(p, hi, -angle) + p * rope.invFreqLo[i];
      const float turns = rintf(angle * 0.15915494309189535f);
      float reduced = fmaf(-turns, 6.28318548202514648f, angle);
      reduced = fmaf(-turns, -1.7484555314695172e-07f, reduced) + angleError;
      float sine, cosine;
      __sincosf(reduced, &sine, &cosine);
      const float lo = acc[0][nt][e], hi2 = acc[0][nt + D / 16][e];
      acc[0][nt][e] = lo * cosine + hi2 * sine;
      acc[0][nt + D / 16][e] = hi2 * cosine - lo * sine;
    }
}

/// Writes a warp's accumulator rows (slices of 16 rows from tile row
/// warpRow0) as bf16 through the swizzled tile `stage` (rows of this warp
/// only), then stores the rows below seq to dst (tile row r is global row
/// tileRow0 + r) with 16-byte stores; with `amax`, merges the largest
/// magnitude of what it stored into it (AmaxOutputs). Every lane of the
/// warp calls it.
template <int D, int MT>
__device__ __forceinline__ void storeWarpRows(bf16 *dst, int64_t rowStride,
                                              int tileRow0, int seq,
                                              unsigned char *stage,
                                              int warpRow0,
                                              const float (&acc)[MT][D / 8][4],
                                              unsigned *amax = nullptr) {
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
  unsigned best = 0u;
#pragma unroll
  for (int e = lane; e < 16 * MT * kChunks; e += 32) {
    const int r = warpRow0 + e / kChunks, c = e % kChunks;
    if (tileRow0 + r < seq) {
      const uint4 chunk =
          *reinterpret_cast<const uint4 *>(stage + tileOffset<D>(r, c));
      *reinterpret_cast<uint4 *>(dst + int64_t(tileRow0 + r) * rowStride +
                                 c * 8) = chunk;
      if (amax)
        best = maxAbsBitsBf16x8(best, chunk);
    }
  }
  if (amax)
    warpAbsMaxToGlobal(amax, best);
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_COMMON_CUH
