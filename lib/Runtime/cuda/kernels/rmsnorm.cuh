//===- rmsnorm.cuh - RMS normalization CUDA kernels ------------*- CUDA -*-===//
//
// Part of mlt. Device code of the rmsnorm family (host launchers in
// rmsnorm.cu, declared in rmsnorm.h): LlamaRMSNorm forward and backward.
//
// Invariants:
// - x, y, dy, dx are [rows, dim] row-major; weight, dw are [dim]; T is the
//   storage type (float or bf16), every computation is in f32.
// - One block per row (forward), one block per contiguous chunk of rows
//   (backward); blockDim.x is a multiple of 32 (at most 1024), chosen on the
//   host from dim only. Each thread owns the same columns in every row: with
//   kVec, the 16-byte packs i = threadIdx.x + k * blockDim.x (kVec needs
//   dim % Pack<T>::kWidth == 0 and 16-byte aligned x, y, dy, dx, weight,
//   which the host checks); without, the columns j = threadIdx.x + k *
//   blockDim.x.
// - Row statistics (sum of x^2, and sum of w * dy * x in the backward) are
//   per-thread f32 sums, then a warp butterfly and a sum over warps in warp
//   order: a fixed order, so results are bit-reproducible run to run.
//   rstd = float(1 / sqrt(double(sumSq) / dim + eps)), rounded to f32 as the
//   CPU kernel rounds it to T.
// - Forward: y = weight * T(x * rstd) (HF rounds x * rstd to the input type
//   before scaling by the weight). y may alias x: each thread reads its
//   elements of the row (pass 1) before any thread writes (the block
//   reduction synchronizes), and writes only what it read.
// - Backward: dx = rstd * (w * dy - n * meanDot), n = x * rstd, meanDot =
//   rstd * sum(w * dy * x) / dim (= mean(w * dy * n)); dx may alias dy for the
//   same reason as above. dw: each block accumulates sum over its rows of
//   dy * n per column in f32 (in a per-block accumulator row: shared memory
//   when dim floats fit, else its own row of the scratch), writes it to row
//   blockIdx.x of `partial` [blocks, dim]; a second kernel sums the partials
//   of each column in block order in f64 and rounds once. No atomics: the
//   result depends on the shape only.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH

#include "kernels/common.cuh"

namespace mlt::cuda::rmsnorm {

/// The backward splits the rows into at most this many chunks (blocks).
inline constexpr int64_t kMaxBwdBlocks = 512;

#ifdef __CUDACC__

__device__ __forceinline__ float2 warpSum2(float2 v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v.x += __shfl_xor_sync(0xffffffffu, v.x, offset);
    v.y += __shfl_xor_sync(0xffffffffu, v.y, offset);
  }
  return v;
}

/// The sum of `v` over the block, returned to every thread, in a fixed
/// order. `red` is 32 float2 of shared memory, reusable when it returns.
__device__ __forceinline__ float2 blockSum2(float2 v, float2 *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum2(v);
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? red[lane] : make_float2(0.f, 0.f);
  v = warpSum2(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float rmsRstd(float sumSq, int64_t dim,
                                         double eps) {
  return float(1.0 / sqrt(double(sumSq) / double(dim) + eps));
}

/// One block per row: y = weight * T(x * rstd).
template <typename T, bool kVec>
__global__ void rmsNormFwdKernel(T *y, float *rstd, const T *x, const T *weight,
                                 int64_t dim, double eps) {
  __shared__ float2 red[32];
  constexpr int W = Pack<T>::kWidth;
  const int64_t row = blockIdx.x;
  const T *xr = x + row * dim;
  T *yr = y + row * dim;
  float sumSq = 0.f;
  if constexpr (kVec) {
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
      const Pack<T> p = xp[i];
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float v = toCompute(p.v[e]);
        sumSq = fmaf(v, v, sumSq);
      }
    }
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const float v = toCompute(xr[j]);
      sumSq = fmaf(v, v, sumSq);
    }
  }
  sumSq = blockSum2(make_float2(sumSq, 0.f), red).x;
  const float rs = rmsRstd(sumSq, dim, eps);
  if (rstd && threadIdx.x == 0)
    rstd[row] = rs;
  if constexpr (kVec) {
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
    const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
    Pack<T> *yp = reinterpret_cast<Pack<T> *>(yr);
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
      const Pack<T> p = xp[i], wv = wp[i];
      Pack<T> out;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const T n = fromCompute<T>(rnMul(toCompute(p.v[e]), rs));
        out.v[e] = fromCompute<T>(rnMul(toCompute(wv.v[e]), toCompute(n)));
      }
      yp[i] = out;
    }
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const T n = fromCompute<T>(rnMul(toCompute(xr[j]), rs));
      yr[j] = fromCompute<T>(rnMul(toCompute(weight[j]), toCompute(n)));
    }
  }
}

/// One block per chunk of `rowsPerBlock` rows: dx of each row, and the
/// chunk's partial dw into partial[blockIdx.x, :]. Dynamic shared memory:
/// dim floats when `accInShared`, else none (the partial row accumulates in
/// place in global memory).
template <typename T, bool kVec>
__global__ void rmsNormBwdRowsKernel(T *dx, float *partial, const T *dy,
                                     const T *x, const T *weight, int64_t rows,
                                     int64_t dim, int64_t rowsPerBlock,
                                     double eps, bool accInShared) {
  extern __shared__ float sharedAcc[];
  __shared__ float2 red[32];
  constexpr int W = Pack<T>::kWidth;
  float *outRow = partial + int64_t(blockIdx.x) * dim;
  float *acc = accInShared ? sharedAcc : outRow;
  // Each thread zeroes, accumulates and writes back only its own columns.
  if constexpr (kVec) {
    for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x)
#pragma unroll
      for (int e = 0; e < W; ++e)
        acc[i * W + e] = 0.f;
  } else {
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
      acc[j] = 0.f;
  }
  const int64_t rBegin = int64_t(blockIdx.x) * rowsPerBlock;
  const int64_t rEnd = min(rows, rBegin + rowsPerBlock);
  for (int64_t r = rBegin; r < rEnd; ++r) {
    const T *xr = x + r * dim;
    const T *gr = dy + r * dim;
    T *dxr = dx + r * dim;
    // Pass 1: sum x^2 and sum w * g * x.
    float2 stats = make_float2(0.f, 0.f);
    if constexpr (kVec) {
      const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
      const Pack<T> *gp = reinterpret_cast<const Pack<T> *>(gr);
      const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
        const Pack<T> xv = xp[i], gv = gp[i], wv = wp[i];
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float xe = toCompute(xv.v[e]);
          stats.x = fmaf(xe, xe, stats.x);
          stats.y = fmaf(toCompute(wv.v[e]) * toCompute(gv.v[e]), xe, stats.y);
        }
      }
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float xe = toCompute(xr[j]);
        stats.x = fmaf(xe, xe, stats.x);
        stats.y = fmaf(toCompute(weight[j]) * toCompute(gr[j]), xe, stats.y);
      }
    }
    stats = blockSum2(stats, red);
    const float rs = rmsRstd(stats.x, dim, eps);
    const float meanDot = rs * stats.y / float(dim);
    // Pass 2: dx, and dy * n into the accumulator.
    if constexpr (kVec) {
      const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(xr);
      const Pack<T> *gp = reinterpret_cast<const Pack<T> *>(gr);
      const Pack<T> *wp = reinterpret_cast<const Pack<T> *>(weight);
      Pack<T> *dxp = reinterpret_cast<Pack<T> *>(dxr);
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x) {
        const Pack<T> xv = xp[i], gv = gp[i], wv = wp[i];
        Pack<T> out;
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const float n = toCompute(xv.v[e]) * rs;
          const float g = toCompute(gv.v[e]);
          out.v[e] = fromCompute<T>(rs * (toCompute(wv.v[e]) * g - n * meanDot));
          acc[i * W + e] = fmaf(g, n, acc[i * W + e]);
        }
        dxp[i] = out;
      }
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        const float n = toCompute(xr[j]) * rs;
        const float g = toCompute(gr[j]);
        dxr[j] = fromCompute<T>(rs * (toCompute(weight[j]) * g - n * meanDot));
        acc[j] = fmaf(g, n, acc[j]);
      }
    }
  }
  if (accInShared) {
    if constexpr (kVec) {
      for (int64_t i = threadIdx.x; i < dim / W; i += blockDim.x)
#pragma unroll
        for (int e = 0; e < W; ++e)
          outRow[i * W + e] = acc[i * W + e];
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x)
        outRow[j] = acc[j];
    }
  }
}

/// dw[j] = sum over b in [0, blocks) of partial[b, j], in order, in f64.
template <typename T>
__global__ void rmsNormBwdColumnsKernel(T *dw, const float *partial,
                                        int64_t blocks, int64_t dim) {
  const int64_t j = globalThreadIndex();
  if (j >= dim)
    return;
  double sum = 0.0;
  for (int64_t b = 0; b < blocks; ++b)
    sum += double(partial[b * dim + j]);
  dw[j] = fromCompute<T>(float(sum));
}

#endif // __CUDACC__

} // namespace mlt::cuda::rmsnorm

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_CUH
