//===- rmsnorm.cu - RMS normalization CUDA launchers ----------------------===//
//
// Part of mlt. Host side of the rmsnorm family: argument checks, the launch
// geometry (a function of the shape only, so every device computes the same
// sums in the same order) and the choice between the cached kernels (16-byte
// packs, rows held in registers), the generic 16-byte and the scalar path,
// each in its kAmax instance when an amax is wanted (zeroed here first).
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

Status checkShape(const char *kernel, int64_t rows, int64_t dim) {
  if (rows < 0 || dim < 0 || (rows > 0 && dim == 0))
    return errorf(kernel, ": bad shape [", rows, ", ", dim, "]");
  if (rows > INT32_MAX)
    return errorf(kernel, ": ", rows, " rows are more than one grid holds");
  return Status::ok();
}

/// The cached forward: teams of layout.threads threads, kFwdBlockThreads
/// threads per block.
template <typename T, int kPacks>
Status forwardCached(T *y, float *rstd, const T *x, const T *weight,
                     int64_t rows, int64_t dim, double eps,
                     const RowLayout &layout, float *amax,
                     cudaStream_t stream) {
  constexpr int kRows = rowsPerTeam(kFwdRowPacks, kPacks);
  const int teams = teamsPerBlock(layout, kFwdBlockThreads);
  const int64_t rowsPerBlock = int64_t(teams) * kRows;
  const int64_t blocks = (rows + rowsPerBlock - 1) / rowsPerBlock;
  const auto kernel = amax ? rmsNormFwdCachedKernel<T, kPacks, kRows, true>
                           : rmsNormFwdCachedKernel<T, kPacks, kRows, false>;
  MLT_CUDA_RETURN_IF_ERROR(launchDependent(
      kernel, dim3(unsigned(blocks)), dim3(unsigned(teams * layout.threads)),
      fwdCachedSharedBytes(teams, kRows), stream, y, rstd, x, weight, rows, dim,
      eps, layout.threads, amaxBits(amax)));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_fwd");
  return Status::ok();
}

template <typename T>
Status forward(T *y, float *rstd, const T *x, const T *weight, int64_t rows,
               int64_t dim, double eps, cudaStream_t stream, float *amax) {
  MLT_RETURN_IF_ERROR(checkShape("rms_norm_fwd", rows, dim));
  MLT_CUDA_RETURN_IF_ERROR(zeroAmax(amax, stream));
  if (rows == 0)
    return Status::ok();
  constexpr int W = Pack<T>::kWidth;
  const bool vec =
      dim % W == 0 && isAligned16(x) && isAligned16(y) && isAligned16(weight);
  const RowLayout layout = cachedLayout(dim, vec, W, kPreferredPacks);
  switch (layout.packs) {
  case 1:
    return forwardCached<T, 1>(y, rstd, x, weight, rows, dim, eps, layout, amax,
                               stream);
  case 2:
    return forwardCached<T, 2>(y, rstd, x, weight, rows, dim, eps, layout, amax,
                               stream);
  case 3:
    return forwardCached<T, 3>(y, rstd, x, weight, rows, dim, eps, layout, amax,
                               stream);
  case 4:
    return forwardCached<T, 4>(y, rstd, x, weight, rows, dim, eps, layout, amax,
                               stream);
  default:
    break;
  }
  const int threads = rowBlockThreads(dim, vec, W);
  const auto kernel = vec ? (amax ? rmsNormFwdKernel<T, true, true>
                                  : rmsNormFwdKernel<T, true, false>)
                          : (amax ? rmsNormFwdKernel<T, false, true>
                                  : rmsNormFwdKernel<T, false, false>);
  MLT_CUDA_RETURN_IF_ERROR(launchDependent(kernel, dim3(unsigned(rows)),
                                           dim3(threads), 0, stream, y, rstd, x,
                                           weight, dim, eps, amaxBits(amax)));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_fwd");
  return Status::ok();
}

/// The teams per block of the cached backward: kBwdBlockThreads threads, as
/// many as leave room to combine their dw sums in 48 KiB of shared memory.
int bwdTeams(const RowLayout &layout, int rowsPerTeam, int64_t dim) {
  int teams = teamsPerBlock(layout, kBwdBlockThreads);
  while (teams > 1 && bwdCachedSharedBytes(teams, rowsPerTeam, dim) > 48 * 1024)
    --teams;
  return teams;
}

template <typename T, int kPacks>
Status backwardCached(T *dx, float *partial, const T *dy, const T *x,
                      const T *weight, const T *addend, int64_t rows,
                      int64_t dim, double eps, const BwdSplit &split,
                      const RowLayout &layout, float *amax,
                      cudaStream_t stream) {
  constexpr int kRows = rowsPerTeam(kBwdRowPacks, kPacks);
  const int teams = bwdTeams(layout, kRows, dim);
  const dim3 grid(unsigned(split.blocks)), block(teams * layout.threads);
  const size_t shared = bwdCachedSharedBytes(teams, kRows, dim);
  const auto kernel =
      addend ? (amax ? rmsNormBwdCachedKernel<T, kPacks, kRows, true, true>
                     : rmsNormBwdCachedKernel<T, kPacks, kRows, true, false>)
             : (amax ? rmsNormBwdCachedKernel<T, kPacks, kRows, false, true>
                     : rmsNormBwdCachedKernel<T, kPacks, kRows, false, false>);
  MLT_CUDA_RETURN_IF_ERROR(launchDependent(
      kernel, grid, block, shared, stream, dx, partial, dy, x, weight, addend,
      rows, dim, split.rowsPerBlock, eps, layout.threads, amaxBits(amax)));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (rows)");
  return Status::ok();
}

template <typename T>
Status backward(T *dx, float *dw, const T *dy, const T *x, const T *weight,
                const T *addend, int64_t rows, int64_t dim, double eps,
                void *scratch, size_t scratchBytes, cudaStream_t stream,
                float *amaxDx) {
  MLT_RETURN_IF_ERROR(checkShape("rms_norm_bwd", rows, dim));
  const size_t needed = rmsNormBwdScratchBytes(rows, dim);
  if (needed > 0 && (!scratch || scratchBytes < needed))
    return errorf("rms_norm_bwd: ", scratchBytes, " bytes of scratch given, ",
                  needed, " needed");
  // An empty dx has amax 0, as launchAbsMax gives.
  MLT_CUDA_RETURN_IF_ERROR(zeroAmax(amaxDx, stream));
  if (dim == 0)
    return Status::ok();
  if (rows == 0) {
    // No rows: the sum over rows is zero (all-zero bits are 0.0f).
    MLT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dw, 0, size_t(dim) * sizeof(float), stream));
    return Status::ok();
  }
  const BwdSplit split = bwdSplit(rows);
  float *partial = static_cast<float *>(scratch);

  constexpr int W = Pack<T>::kWidth;
  const bool vec = dim % W == 0 && isAligned16(x) && isAligned16(dy) &&
                   isAligned16(dx) && isAligned16(weight) &&
                   (!addend || isAligned16(addend));
  const RowLayout layout = cachedLayout(dim, vec, W, kPreferredPacks);
  if (layout.packs == 1) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 1>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, layout, amaxDx, stream)));
  } else if (layout.packs == 2) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 2>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, layout, amaxDx, stream)));
  } else if (layout.packs == 3) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 3>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, layout, amaxDx, stream)));
  } else if (layout.packs == 4) {
    MLT_RETURN_IF_ERROR(
        (backwardCached<T, 4>(dx, partial, dy, x, weight, addend, rows, dim,
                              eps, split, layout, amaxDx, stream)));
  } else {
    // The per-block dw accumulator lives in shared memory when it fits the
    // default 48 KiB (no opt-in needed), else in the block's partial row.
    const int threads = rowBlockThreads(dim, vec, W);
    const size_t accBytes = size_t(dim) * sizeof(float);
    const bool accInShared = accBytes <= 48 * 1024;
    const size_t shared = accInShared ? accBytes : 0;
    const auto kernel = vec ? (amaxDx ? rmsNormBwdRowsKernel<T, true, true>
                                      : rmsNormBwdRowsKernel<T, true, false>)
                            : (amaxDx ? rmsNormBwdRowsKernel<T, false, true>
                                      : rmsNormBwdRowsKernel<T, false, false>);
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(
        kernel, dim3(unsigned(split.blocks)), dim3(threads), shared, stream, dx,
        partial, dy, x, weight, addend, rows, dim, split.rowsPerBlock, eps,
        accInShared, amaxBits(amaxDx)));
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (rows)");
  }
  const int64_t columnBlocks = (dim + kColumnTile - 1) / kColumnTile;
  MLT_CUDA_RETURN_IF_ERROR(launchDependent(
      rmsNormBwdColumnsKernel<float>, dim3(unsigned(columnBlocks)),
      dim3(kColumnTile * kColumnSlices), 0, stream, dw, partial, split.blocks,
      dim));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rms_norm_bwd (dw)");
  return Status::ok();
}

} // namespace

size_t mlt::cuda::rmsNormBwdScratchBytes(int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0)
    return 0;
  return size_t(bwdSplit(rows).blocks) * size_t(dim) * sizeof(float);
}

Status mlt::cuda::launchRmsNormFwd(float *y, float *rstd, const float *x,
                                   const float *weight, int64_t rows,
                                   int64_t dim, double eps, cudaStream_t stream,
                                   float *amax) {
  return forward(y, rstd, x, weight, rows, dim, eps, stream, amax);
}

Status mlt::cuda::launchRmsNormFwd(__nv_bfloat16 *y, float *rstd,
                                   const __nv_bfloat16 *x,
                                   const __nv_bfloat16 *weight, int64_t rows,
                                   int64_t dim, double eps, cudaStream_t stream,
                                   float *amax) {
  return forward(y, rstd, x, weight, rows, dim, eps, stream, amax);
}

Status mlt::cuda::launchRmsNormBwd(float *dx, float *dw, const float *dy,
                                   const float *x, const float *weight,
                                   const float *addend, int64_t rows,
                                   int64_t dim, double eps, void *scratch,
                                   size_t scratchBytes, cudaStream_t stream,
                                   float *amaxDx) {
  return backward(dx, dw, dy, x, weight, addend, rows, dim, eps, scratch,
                  scratchBytes, stream, amaxDx);
}

Status mlt::cuda::launchRmsNormBwd(
    __nv_bfloat16 *dx, float *dw, const __nv_bfloat16 *dy,
    const __nv_bfloat16 *x, const __nv_bfloat16 *weight,
    const __nv_bfloat16 *addend, int64_t rows, int64_t dim, double eps,
    void *scratch, size_t scratchBytes, cudaStream_t stream, float *amaxDx) {
  return backward(dx, dw, dy, x, weight, addend, rows, dim, eps, scratch,
                  scratchBytes, stream, amaxDx);
}
