//===- fp8.cuh - FP8 quantization CUDA kernels ------------------*- CUDA -*-===//
//
// Part of mlt. Device code of the fp8 family (launchers in fp8.cu, declared
// in fp8.h).
//
// Invariants:
// - amax: each block reduces |x| over its grid-stride share as float bits
//   (a non-negative float's bits order as the unsigned integers do, and a
//   NaN's lie above infinity's, so NaNs win), and one atomicMax per block
//   merges the blocks into *amax, zeroed by the launcher first. A maximum
//   does not depend on the order of its operands: the result is exact.
// - quantize: every thread computes the scale from *amax itself (fp8Scale:
//   the CPU's formula, exact frexpf/ldexpf), so no block waits for another;
//   block 0's thread 0 writes 1 / scale. Each element is x * scale (exact:
//   a power of two) rounded by the hardware's cvt.rn.satfinite, which is
//   cpu::toFp8.
// - The plain layout converts packs of 8 elements (one or two 16-byte loads,
//   one 8-byte store) where x is 16-byte aligned, q 8-byte aligned and the
//   count a multiple of 8, else one element per thread. The transposed layout
//   goes through 64 x 64 tiles in shared memory, read from x's rows and
//   written as q's (x's columns), 16 bytes per store where rows is a multiple
//   of 16 and q 16-byte aligned.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH

#include "kernels/common.cuh"

#include <cuda_fp8.h>

namespace mlt::cuda::fp8 {

/// Threads per block of both kernels.
inline constexpr int kThreads = 256;
/// Rows and columns of a transposed tile.
inline constexpr int kTile = 64;
/// Elements of one pack of the plain layout.
inline constexpr int kPack = 8;

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

template <bool E5M2> __device__ __forceinline__ uint16_t toFp8x2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                  E5M2 ? __NV_E5M2 : __NV_E4M3);
}

template <bool E5M2> __device__ __forceinline__ uint8_t toFp8(float a) {
  return __nv_cvt_float_to_fp8(a, __NV_SATFINITE, E5M2 ? __NV_E5M2 : __NV_E4M3);
}

/// |x| as ordered bits.
__device__ __forceinline__ unsigned absBits(float x) {
  return __float_as_uint(x) & 0x7FFFFFFFu;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    absMaxKernel(unsigned *amax, const T *x, int64_t n, bool vec) {
  unsigned best = 0;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail = 0;
  if (vec) {
    constexpr int W = Pack<T>::kWidth;
    const Pack<T> *packs = reinterpret_cast<const Pack<T> *>(x);
    for (int64_t i = first; i < n / W; i += stride) {
      const Pack<T> p = packs[i];
#pragma unroll
      for (int e = 0; e < W; ++e)
        best = max(best, absBits(toCompute(p.v[e])));
    }
    tail = n / W * W;
  }
  for (int64_t i = tail + first; i < n; i += stride)
    best = max(best, absBits(toCompute(x[i])));
  best = __reduce_max_sync(0xFFFFFFFFu, best);
  __shared__ unsigned warps[kThreads / 32];
  if (threadIdx.x % 32 == 0)
    warps[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x < 32) {
    best = threadIdx.x < kThreads / 32 ? warps[threadIdx.x] : 0u;
    best = __reduce_max_sync(0xFFFFFFFFu, best);
    if (threadIdx.x == 0)
      atomicMax(amax, best);
  }
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

template <typename T, bool E5M2>
__global__ void __launch_bounds__(kThreads)
    quantizeKernel(uint8_t *q, float *scaleInv, const T *x, int64_t n,
                   const float *amax, bool vec) {
  const float scale = scaleOf<E5M2>(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *scaleInv = rnDiv(1.0f, scale);
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  int64_t tail = 0;
  if (vec) {
    for (int64_t i = first; i < n / kPack; i += stride) {
      float v[kPack];
      loadEight(v, x + i * kPack);
      uint2 out;
      out.x = uint32_t(toFp8x2<E5M2>(rnMul(v[0], scale), rnMul(v[1], scale))) |
              uint32_t(toFp8x2<E5M2>(rnMul(v[2], scale), rnMul(v[3], scale)))
                  << 16;
      out.y = uint32_t(toFp8x2<E5M2>(rnMul(v[4], scale), rnMul(v[5], scale))) |
              uint32_t(toFp8x2<E5M2>(rnMul(v[6], scale), rnMul(v[7], scale)))
                  << 16;
      reinterpret_cast<uint2 *>(q)[i] = out;
    }
    tail = n / kPack * kPack;
  }
  for (int64_t i = tail + first; i < n; i += stride)
    q[i] = toFp8<E5M2>(rnMul(toCompute(x[i]), scale));
}

/// One 64 x 64 tile per block: x's rows r0.., columns c0.. into q's rows
/// c0.., columns r0.. (q is [cols, rows]). vec: x 16-byte aligned with cols
/// a multiple of 8; store16: q 16-byte aligned with rows a multiple of 16.
template <typename T, bool E5M2>
__global__ void __launch_bounds__(kThreads)
    quantizeTransposedKernel(uint8_t *q, float *scaleInv, const T *x,
                             int64_t rows, int64_t cols, const float *amax,
                             bool vec, bool store16) {
  __shared__ uint8_t tile[kTile][kTile + 16];
  const float scale = scaleOf<E5M2>(*amax);
  const int64_t colTiles = (cols + kTile - 1) / kTile;
  const int64_t r0 = int64_t(blockIdx.x / colTiles) * kTile;
  const int64_t c0 = int64_t(blockIdx.x % colTiles) * kTile;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *scaleInv = rnDiv(1.0f, scale);
  const bool full = r0 + kTile <= rows && c0 + kTile <= cols;
  if (full && vec) {
    // 64 rows of 8 packs of 8 elements: two per thread.
    for (int u = threadIdx.x; u < kTile * kTile / kPack; u += kThreads) {
      const int r = u / (kTile / kPack), c = (u % (kTile / kPack)) * kPack;
      float v[kPack];
      loadEight(v, x + (r0 + r) * cols + c0 + c);
#pragma unroll
      for (int e = 0; e < kPack; ++e)
        tile[r][c + e] = toFp8<E5M2>(rnMul(v[e], scale));
    }
  } else {
    for (int u = threadIdx.x; u < kTile * kTile; u += kThreads) {
      const int r = u / kTile, c = u % kTile;
      if (r0 + r < rows && c0 + c < cols)
        tile[r][c] =
            toFp8<E5M2>(rnMul(toCompute(x[(r0 + r) * cols + c0 + c]), scale));
    }
  }
  __syncthreads();
  if (full && store16) {
    // 64 q rows of 4 chunks of 16 bytes: one per thread.
    const int c = threadIdx.x / 4, chunk = threadIdx.x % 4;
    uint32_t words[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int r = chunk * 16 + w * 4;
      words[w] = uint32_t(tile[r][c]) | uint32_t(tile[r + 1][c]) << 8 |
                 uint32_t(tile[r + 2][c]) << 16 |
                 uint32_t(tile[r + 3][c]) << 24;
    }
    *reinterpret_cast<uint4 *>(q + (c0 + c) * rows + r0 + chunk * 16) =
        make_uint4(words[0], words[1], words[2], words[3]);
  } else {
    for (int u = threadIdx.x; u < kTile * kTile; u += kThreads) {
      const int c = u / kTile, r = u % kTile;
      if (r0 + r < rows && c0 + c < cols)
        q[(c0 + c) * rows + r0 + r] = tile[r][c];
    }
  }
}

#endif // __CUDACC__

} // namespace mlt::cuda::fp8

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_CUH
