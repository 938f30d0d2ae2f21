//===- rmsnorm.cu - RMS normalization CUDA launchers ----------------------===//
//
// Part of mlt. Host side of the rmsnorm family: argument checks, the launch
// geometry (a function of the shape only, so every device computes the same
// sums in the same order) and the choice between the cached kernels (16-byte
// packs, rows held in registers), the generic 16-byte and the scalar path.
//
//===----------------------------------------------------------------------===//

#include "kernels/rmsnorm.h"

#include "CudaCheck.h"
#include "kernels/rmsnorm.cuh"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::rmsnorm;

namespace {

/// Rows per block and blocks of the backward.
struct BwdSplit {
  int64_t rowsPerBlock = 0, blocks = 0;
};
BwdSplit bwdSplit(int64_t rows) {
  BwdSplit split;
  if (rows <= 0)
    return split;
  split.rowsPerBlock = (rows + kMaxBwdBlocks - 1) / kMaxBwdBlocks;
  split.blocks = (rows + split.rowsPerBlock - 1) / split.rowsPerBlock;
  return split;
}

rt::Status checkShape(const char *kernel, int64_t rows, int64_t dim) {
  if (rows < 0 || dim < 0 || (rows > 0 && dim == 0))
    return rt::errorf(kernel, ": bad shape [", rows, ", ", dim, "]");
  if (rows > INT32_MAX)
    return rt::errorf(kernel, ": ", rows, " rows are more than one grid holds");
  return rt::Status::ok();
}

/// Packs per thread of the cached kernels for rows of `dim` elements, `threads`
/// threads per row: 1, 2 or 4, or 0 where the generic kernels run (no
/// 16-byte path, or a row longer than kMaxCachedPacks packs per thread).
int cachedPacks(int64_t dim, bool vec, int width, int threads) {
  if (!vec)
    return 0;
  const int64_t perThread = (dim / width + threads - 1) / threads;
  for (int k = 1; k <= kMaxCachedPacks; k *= 2)
    if (perThread <= k)
      return k;
  return 0;
}

template <typename T, int kPacks>
rt::Status forwardCached(T *y, float *rstd, const T *x, const T *weight,
                         int64_t rows, int64_t dim, double eps, int threads,
                         cudaStream_t stream) {
  constexpr int kRows = kFwdRowPacks / kPacks > 1 ? kFwdRowPacks / kPacks : 1;
  const int64_t blocks = (rows + kRows - 1) / kRows;
  rmsNormFwdCachedKernel<T, kPacks, kRows>
      <<<unsigned(blocks), threads, 0, stream>>>(y, rstd, x, weight, rows, dim,
                                                 eps);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_fwd");
  return rt::Status::ok();
}

template <typename T>
rt::Status forward(T *y, float *rstd, const T *x, const T *weight, int64_t rows,
                   int64_t dim, double eps, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("rms_norm_fwd", rows, dim));
  if (rows == 0)
    return rt::Status::ok();
  constexpr int W = Pack<T>::kWidth;
  const bool vec =
      dim % W == 0 && isAligned16(x) && isAligned16(y) && isAligned16(weight);
  const int threads = rowBlockThreads(dim, vec, W);
  switch (cachedPacks(dim, vec, W, threads)) {
  case 1:
    return forwardCached<T, 1>(y, rstd, x, weight, rows, dim, eps, threads,
                               stream);
  case 2:
    return forwardCached<T, 2>(y, rstd, x, weight, rows, dim, eps, threads,
                               stream);
  case 4:
    return forwardCached<T, 4>(y, rstd, x, weight, rows, dim, eps, threads,
                               stream);
  default:
    break;
  }
  if (vec)
    rmsNormFwdKernel<T, true>
        <<<unsigned(rows), threads, 0, stream>>>(y, rstd, x, weight, dim, eps);
  else
    rmsNormFwdKernel<T, false>
        <<<unsigned(rows), threads, 0, stream>>>(y, rstd, x, weight, dim, eps);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_fwd");
  return rt::Status::ok();
}

template <typename T, int kPacks>
rt::Status backwardCached(T *dx, float *partial, const T *dy, const T *x,
                          const T *weight, const T *addend, int64_t rows,
                          int64_t dim, double eps, const BwdSplit &split,
                          int threads, cudaStream_t stream) {
  constexpr int kRows = kBwdRowPacks / kPacks > 1 ? kBwdRowPacks / kPacks : 1;
  if (addend)
    rmsNormBwdCachedKernel<T, kPacks, kRows, true>
        <<<unsigned(split.blocks), threads, 0, stream>>>(
            dx, partial, dy, x, weight, addend, rows, dim, split.rowsPerBlock,
            eps);
  else
    rmsNormBwdCachedKernel<T, kPacks, kRows, false>
        <<<unsigned(split.blocks), threads, 0, stream>>>(
            dx, partial, dy, x, weight, nullptr, rows, dim, split.rowsPerBlock,
            eps);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (rows)");
  return rt::Status::ok();
}

template <typename T>
rt::Status backward(T *dx, float *dw, const T *dy, const T *x, const T *weight,
                    const T *addend, int64_t rows, int64_t dim, double eps,
                    void *scratch, size_t scratchBytes, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("rms_norm_bwd", rows, dim));
  if (dim == 0)
    return rt::Status::ok();
  if (rows == 0) {
    // No rows: the sum over rows is zero (all-zero bits are 0.0f).
    MLT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dw, 0, size_t(dim) * sizeof(float), stream));
    return rt::Status::ok();
  }
  const size_t needed = rmsNormBwdScratchBytes(rows, dim);
  if (!scratch || scratchBytes < needed)
    return rt::errorf("rms_norm_bwd: ", scratchBytes,
                      " bytes of scratch given, ", needed, " needed");
  const BwdSplit split = bwdSplit(rows);
  float *partial = static_cast<float *>(scratch);

  constexpr int W = Pack<T>::kWidth;
  const bool vec = dim % W == 0 && isAligned16(x) && isAligned16(dy) &&
                   isAligned16(dx) && isAligned16(weight) &&
                   (!addend || isAligned16(addend));
  const int threads = rowBlockThreads(dim, vec, W);
  const int packs = cachedPacks(dim, vec, W, threads);
  if (packs == 1) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 1>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, threads, stream)));
  } else if (packs == 2) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 2>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, threads, stream)));
  } else if (packs == 4) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 4>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, threads, stream)));
  } else {
    // The per-block dw accumulator lives in shared memory when it fits the
    // default 48 KiB (no opt-in needed), else in the block's partial row.
    const size_t accBytes = size_t(dim) * sizeof(float);
    const bool accInShared = accBytes <= 48 * 1024;
    const size_t shared = accInShared ? accBytes : 0;
    if (vec)
      rmsNormBwdRowsKernel<T, true>
          <<<unsigned(split.blocks), threads, shared, stream>>>(
              dx, partial, dy, x, weight, addend, rows, dim, split.rowsPerBlock,
              eps, accInShared);
    else
      rmsNormBwdRowsKernel<T, false>
          <<<unsigned(split.blocks), threads, shared, stream>>>(
              dx, partial, dy, x, weight, addend, rows, dim, split.rowsPerBlock,
              eps, accInShared);
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (rows)");
  }
  const int64_t columnBlocks = (dim + kColumnTile - 1) / kColumnTile;
  rmsNormBwdColumnsKernel<float>
      <<<unsigned(columnBlocks), kColumnTile * kColumnSlices, 0, stream>>>(
          dw, partial, split.blocks, dim);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (dw)");
  return rt::Status::ok();
}

} // namespace

size_t mlt::cuda::rmsNormBwdScratchBytes(int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0)
    return 0;
  return size_t(bwdSplit(rows).blocks) * size_t(dim) * sizeof(float);
}

rt::Status mlt::cuda::launchRmsNormFwd(float *y, float *rstd, const float *x,
                                       const float *weight, int64_t rows,
                                       int64_t dim, double eps,
                                       cudaStream_t stream) {
  return forward(y, rstd, x, weight, rows, dim, eps, stream);
}

rt::Status mlt::cuda::launchRmsNormFwd(__nv_bfloat16 *y, float *rstd,
                                       const __nv_bfloat16 *x,
                                       const __nv_bfloat16 *weight,
                                       int64_t rows, int64_t dim, double eps,
                                       cudaStream_t stream) {
  return forward(y, rstd, x, weight, rows, dim, eps, stream);
}

rt::Status mlt::cuda::launchRmsNormBwd(float *dx, float *dw, const float *dy,
                                       const float *x, const float *weight,
                                       const float *addend, int64_t rows,
                                       int64_t dim, double eps, void *scratch,
                                       size_t scratchBytes,
                                       cudaStream_t stream) {
  return backward(dx, dw, dy, x, weight, addend, rows, dim, eps, scratch,
                  scratchBytes, stream);
}

rt::Status mlt::cuda::launchRmsNormBwd(
    __nv_bfloat16 *dx, float *dw, const __nv_bfloat16 *dy,
    const __nv_bfloat16 *x, const __nv_bfloat16 *weight,
    const __nv_bfloat16 *addend, int64_t rows, int64_t dim, double eps,
    void *scratch, size_t scratchBytes, cudaStream_t stream) {
  return backward(dx, dw, dy, x, weight, addend, rows, dim, eps, scratch,
                  scratchBytes, stream);
}

rt::Status mlt::cuda::launchRmsNormBwd(float *dx, float *dw, const float *dy,
                                       const float *x, const float *weight,
                                       int64_t rows, int64_t dim, double eps,
                                       void *scratch, size_t scratchBytes,
                                       cudaStream_t stream) {
  return backward(dx, dw, dy, x, weight, static_cast<const float *>(nullptr),
                  rows, dim, eps, scratch, scratchBytes, stream);
}

rt::Status mlt::cuda::launchRmsNormBwd(__nv_bfloat16 *dx, float *dw,
                                       const __nv_bfloat16 *dy,
                                       const __nv_bfloat16 *x,
                                       const __nv_bfloat16 *weight,
                                       int64_t rows, int64_t dim, double eps,
                                       void *scratch, size_t scratchBytes,
                                       cudaStream_t stream) {
  return backward(dx, dw, dy, x, weight,
                  static_cast<const __nv_bfloat16 *>(nullptr), rows, dim, eps,
                  scratch, scratchBytes, stream);
}
