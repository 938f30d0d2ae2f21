//===- fp8.cuh - FP8 quantization CUDA kernels ------------------*- CUDA
//-*-===//
//
// Part of mlt. Device code of the fp8 family (launchers in fp8.cu, declared
// in fp8.h).
//
// Invariants:
// - amax: each block reduces |x| over its grid-stride share as float bits
//   and one atomicMax per block merges the blocks into *amax, zeroed by the
//   launcher first (absmax.cuh, which the producers of FP8 operands share):
//   NaNs win, and the result is exact.
// - quantize: every thread computes the scale from *amax itself (fp8Scale:
//   the CPU's formula, exact frexpf/ldexpf), so no block waits for another;
//   block 0's thread 0 writes 1 / scale. Each element is x * scale (exact:
//   a power of two) rounded by the hardware's cvt.rn.satfinite, which is
//   cpu::toFp8.
// - The plain layout converts packs of 8 elements (one or two 16-byte loads,
//   one 8-byte store) where x is 16-byte aligned, q 8-byte aligned and the
//   count a multiple of 8, else one element per thread. The transposed layout
//   (alone or with the plain one, from one read of x) transposes 8 x 16
//   blocks in registers (quantizeTransposedKernel), with full 32-byte
//   sectors for every load and store.
// - Every kernel is queued by launchDependent and waits for its
//   predecessors before it touches memory (common.cuh).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH

#include "kernels/absmax.cuh"
#include "kernels/common.cuh"

#include <cuda_fp8.h>

namespace mlt::cuda::fp8 {

/// Threads per block of both kernels.
inline constexpr int kThreads = 256;
/// Rows and columns of a transposed block's tile (quantizeTransposedKernel).
inline constexpr int kTileRows = 256, kTileCols = 128;
/// Elements of one pack of the plain layout.
inline constexpr int kPack = 8;
/// 16-byte loads a thread of amax and of the plain quantization has in
/// flight (issued together, then used): one a thread left these kernels at
/// 2.0-2.6 TB/s of the H200's 4.8 (bench/RESULTS.md).
inline constexpr int kLoadsInFlight = 4;

#ifdef __CUDACC__

/// cpu::fp8Scale on the device.
template <bool E5M2> __device__ __forceinline__ float scaleOf(float amax) {
  if (!(amax > 0.0f) || !isfinite(amax))
    return 1.0f;
  int ea = 0, em = 0;
  const float m = frexpf(amax, &ea);
  const float mm = frexpf(E5M2 ? 57344.0f : 448.0f, &em);
  int e = em - ea - (m > mm ? 1 : 0);
  e = e < -126 ? -126 : (e > 126 ? 126 : e);
  return ldexpf(1.0f, e);
}

template <bool E5M2>
__device__ __forceinline__ uint16_t toFp8x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                  E5M2 ? __NV_E5M2 : __NV_E4M3);
}

template <bool E5M2> __device__ __forceinline__ uint8_t toFp8(float a) {
  return __nv_cvt_float_to_fp8(a, __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
}

/// Pack `i` of x through the read-only path.
template <typename T>
__device__ __forceinline__ Pack<T> loadPackNc(const T *x, int64_t i) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4 *>(x) + i);
  return *reinterpret_cast<const Pack<T> *>(&raw);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    absMaxKernel(unsigned *amax, const T *x, int64_t n, bool vec) {
  waitForPredecessors();
  allowDependents();
  unsigned best = 0;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int W = Pack<T>::kWidth, U = kLoadsInFlight;
    const int64_t count = n / W;
    int64_t i = first;
    for (; i + (U - 1) * stride < count; i += U * stride) {
      Pack<T> p[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        p[u] = loadPackNc(x, i + u * stride);
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int e = 0; e < W; ++e)
          best = max(best, absBits(toCompute(p[u].v[e])));
    }
    for (; i < count; i += stride) {
      const Pack<T> p = loadPackNc(x, i);
#pragma unroll
      for (int e = 0; e < W; ++e)
        best = max(best, absBits(toCompute(p.v[e])));
    }
    tail = count * W;
  }
  for (int64_t i = tail + first; i < n; i += stride)
    best = max(best, absBits(toCompute(x[i])));
  __shared__ unsigned warps[32];
  blockAbsMaxToGlobal(amax, best, warps);
}

/// Eight elements of x from `at` as floats (16-byte aligned).
template <typename T>
__device__ __forceinline__ void loadEight(float (&v)[kPack], const T *at) {
  constexpr int W = Pack<T>::kWidth;
#pragma unroll
  for (int p = 0; p < kPack / W; ++p) {
    const Pack<T> pack = reinterpret_cast<const Pack<T> *>(at)[p];
#pragma unroll
    for (int e = 0; e < W; ++e)
      v[p * W + e] = toCompute(pack.v[e]);
  }
}

/// Converts 8 floats to 8 FP8 bytes: two words, word w holding elements
/// 4w..4w+3 (lowest byte first).
template <bool E5M2>
__device__ __forceinline__ void toFp8x8(uint32_t *w, const float (&v)[kPack],
                                        float scale) {
#pragma unroll
  for (int k = 0; k < 2; ++k)
    w[k] = uint32_t(toFp8x2<E5M2>(rnMul(v[4 * k], scale),
                                  rnMul(v[4 * k + 1], scale))) |
           uint32_t(toFp8x2<E5M2>(rnMul(v[4 * k + 2], scale),
                                  rnMul(v[4 * k + 3], scale)))
               << 16;
}

template <typename T, bool E5M2>
__global__ void __launch_bounds__(kThreads)
    quantizeKernel(uint8_t *q, float *scaleInv, const T *x, int64_t n,
                   const float *amax, bool vec) {
  waitForPredecessors();
  allowDependents();
  const float scale = scaleOf<E5M2>(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *scaleInv = rnDiv(1.0f, scale);
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int U = kLoadsInFlight;
    const int64_t count = n / kPack;
    int64_t i = first;
    for (; i + (U - 1) * stride < count; i += U * stride) {
      float v[U][kPack];
#pragma unroll
      for (int u = 0; u < U; ++u)
        loadEight(v[u], x + (i + u * stride) * kPack);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        uint32_t out[2];
        toFp8x8<E5M2>(out, v[u], scale);
        reinterpret_cast<uint2 *>(q)[i + u * stride] =
            make_uint2(out[0], out[1]);
      }
    }
    for (; i < count; i += stride) {
      float v[kPack];
      loadEight(v, x + i * kPack);
      uint32_t out[2];
      toFp8x8<E5M2>(out, v, scale);
      reinterpret_cast<uint2 *>(q)[i] = make_uint2(out[0], out[1]);
    }
    tail = count * kPack;
  }
  for (int64_t i = tail + first; i < n; i += stride)
    q[i] = toFp8<E5M2>(rnMul(toCompute(x[i]), scale));
}

/// The transposed layout (and the plain one with q): each thread converts a
/// block of 8 rows x 16 columns in registers. A warp's 32 threads are 4 row
/// groups x 8 column groups (a 32 x 128 tile): its loads read 256
/// contiguous bytes of bf16 a row, its plain stores write 128 contiguous
/// bytes a row, and the 4 row groups' 8-byte pieces of a transposed row
/// are 32 contiguous bytes. A block's 8 warps stack into 256 rows x 128
/// columns. The 8 x 16 byte block is transposed with byte permutes (4 x 4
/// byte transposes of words). vec: x 16-byte aligned, cols a multiple of
/// 16, rows of 8, q 16-byte and qT 8-byte aligned; else (and for blocks
/// past the edges) element by element.
template <typename T, bool E5M2>
__global__ void __launch_bounds__(kThreads)
    quantizeTransposedKernel(uint8_t *q, uint8_t *qT, float *scaleInv,
                             const T *x, int64_t rows, int64_t cols,
                             const float *amax, bool vec) {
  waitForPredecessors();
  allowDependents();
  const float scale = scaleOf<E5M2>(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *scaleInv = rnDiv(1.0f, scale);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t colTiles = (cols + kTileCols - 1) / kTileCols;
  const int64_t r0 =
      int64_t(blockIdx.x / colTiles) * kTileRows + warp * 32 + (lane / 8) * 8;
  const int64_t c0 =
      int64_t(blockIdx.x % colTiles) * kTileCols + (lane % 8) * 16;
  if (r0 >= rows || c0 >= cols)
    return;
  if (vec && r0 + 8 <= rows && c0 + 16 <= cols) {
    uint32_t w[8][4]; // row i's 16 bytes
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float lo[kPack], hi[kPack];
      loadEight(lo, x + (r0 + i) * cols + c0);
      loadEight(hi, x + (r0 + i) * cols + c0 + kPack);
      toFp8x8<E5M2>(w[i], lo, scale);
      toFp8x8<E5M2>(w[i] + 2, hi, scale);
      if (q)
        *reinterpret_cast<uint4 *>(q + (r0 + i) * cols + c0) =
            make_uint4(w[i][0], w[i][1], w[i][2], w[i][3]);
    }
    // Output row c0 + 4k + b: byte b of word k of rows 0..7.
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t out[2][4]; // [rows 0-3 | rows 4-7][b]
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a0 = w[4 * h][k], a1 = w[4 * h + 1][k],
                       a2 = w[4 * h + 2][k], a3 = w[4 * h + 3][k];
        const uint32_t t0 = __byte_perm(a0, a1, 0x5140);
        const uint32_t t1 = __byte_perm(a2, a3, 0x5140);
        const uint32_t t2 = __byte_perm(a0, a1, 0x7362);
        const uint32_t t3 = __byte_perm(a2, a3, 0x7362);
        out[h][0] = __byte_perm(t0, t1, 0x5410);
        out[h][1] = __byte_perm(t0, t1, 0x7632);
        out[h][2] = __byte_perm(t2, t3, 0x5410);
        out[h][3] = __byte_perm(t2, t3, 0x7632);
      }
#pragma unroll
      for (int b = 0; b < 4; ++b)
        *reinterpret_cast<uint2 *>(qT + (c0 + 4 * k + b) * rows + r0) =
            make_uint2(out[0][b], out[1][b]);
    }
    return;
  }
  for (int i = 0; i < 8 && r0 + i < rows; ++i)
    for (int j = 0; j < 16 && c0 + j < cols; ++j) {
      const uint8_t byte =
          toFp8<E5M2>(rnMul(toCompute(x[(r0 + i) * cols + c0 + j]), scale));
      if (q)
        q[(r0 + i) * cols + c0 + j] = byte;
      qT[(c0 + j) * rows + r0 + i] = byte;
    }
}

#endif // __CUDACC__

} // namespace mlt::cuda::fp8

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH
