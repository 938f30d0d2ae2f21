//===- fp8.cu - FP8 quantization CUDA launchers ---------------------------===//
//
// Part of mlt. Host side of the fp8 family: argument checks, the choice
// between packed and scalar paths (alignment and sizes, checked here), and
// grids that are functions of the shape only.
//
//===----------------------------------------------------------------------===//

#include "kernels/fp8.h"

#include "CudaCheck.h"
#include "kernels/fp8.cuh"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::fp8;

namespace {

bool isAligned(const void *p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <typename T>
Status absMax(float *amax, const T *x, int64_t n, cudaStream_t stream) {
  if (n < 0)
    return errorf("amax: negative size ", n);
  MLT_CUDA_RETURN_IF_ERROR(zeroAmax(amax, stream));
  if (n == 0)
    return Status::ok();
  constexpr int64_t W = Pack<T>::kWidth;
  const bool vec = isAligned16(x);
  // About kLoadsInFlight packs a thread, at most kAmaxMaxBlocks blocks (the
  // rest loop).
  const int64_t perBlock = int64_t(kThreads) * W * kLoadsInFlight;
  const int64_t blocks = (n + perBlock - 1) / perBlock;
  MLT_CUDA_RETURN_IF_ERROR(launchDependent(
      absMaxKernel<T>,
      dim3(unsigned(blocks < kAmaxMaxBlocks ? blocks : kAmaxMaxBlocks)),
      dim3(kThreads), 0, stream, reinterpret_cast<unsigned *>(amax), x, n,
      vec));
  MLT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

template <typename T, bool E5M2>
Status quantize(uint8_t *q, uint8_t *qT, float *scaleInv, const T *x,
                int64_t rows, int64_t cols, const float *amax,
                cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (!qT) {
    const bool vec = isAligned16(x) && isAligned(q, 8) && n % kPack == 0;
    const int64_t perBlock = int64_t(kThreads) * kPack * 4;
    const int64_t blocks = (n + perBlock - 1) / perBlock;
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(
        quantizeKernel<T, E5M2>,
        dim3(unsigned(blocks < 1 ? 1 : (blocks > 4096 ? 4096 : blocks))),
        dim3(kThreads), 0, stream, q, scaleInv, x, n, amax, vec));
  } else {
    const int64_t tiles = ((rows + kTileRows - 1) / kTileRows) *
                          ((cols + kTileCols - 1) / kTileCols);
    if (tiles > INT32_MAX)
      return errorf("quantize_fp8: [", rows, ", ", cols,
                    "] has too many tiles to transpose");
    const bool vec = isAligned16(x) && cols % 16 == 0 && rows % 8 == 0 &&
                     (!q || isAligned16(q)) && isAligned(qT, 8);
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(
        quantizeTransposedKernel<T, E5M2>, dim3(unsigned(tiles < 1 ? 1 : tiles)),
        dim3(kThreads), 0, stream, q, qT, scaleInv, x, rows, cols, amax, vec));
  }
  MLT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

template <typename T>
Status quantizeFp8(uint8_t *q, uint8_t *qT, float *scaleInv, const T *x,
                   int64_t rows, int64_t cols, rt::ElementType format,
                   const float *amax, cudaStream_t stream) {
  if (!rt::isFp8ElementType(format))
    return errorf("quantize_fp8: ", rt::elementTypeName(format),
                  " is not an FP8 format (f8e4m3 or f8e5m2)");
  if (rows < 0 || cols < 0)
    return errorf("quantize_fp8: negative size (rows = ", rows,
                  ", cols = ", cols, ")");
  if (!q && !qT)
    return errorf("quantize_fp8: no copy to write");
  if (format == rt::ElementType::F8E5M2)
    return quantize<T, true>(q, qT, scaleInv, x, rows, cols, amax, stream);
  return quantize<T, false>(q, qT, scaleInv, x, rows, cols, amax, stream);
}

} // namespace

Status mlt::cuda::launchAbsMax(float *amax, const float *x, int64_t n,
                               cudaStream_t stream) {
  return absMax(amax, x, n, stream);
}

Status mlt::cuda::launchAbsMax(float *amax, const __nv_bfloat16 *x, int64_t n,
                               cudaStream_t stream) {
  return absMax(amax, x, n, stream);
}

Status mlt::cuda::launchQuantizeFp8(uint8_t *q, uint8_t *qTransposed,
                                    float *scaleInv, const float *x,
                                    int64_t rows, int64_t cols,
                                    rt::ElementType format, const float *amax,
                                    cudaStream_t stream) {
  return quantizeFp8(q, qTransposed, scaleInv, x, rows, cols, format, amax,
                     stream);
}

Status mlt::cuda::launchQuantizeFp8(uint8_t *q, uint8_t *qTransposed,
                                    float *scaleInv, const __nv_bfloat16 *x,
                                    int64_t rows, int64_t cols,
                                    rt::ElementType format, const float *amax,
                                    cudaStream_t stream) {
  return quantizeFp8(q, qTransposed, scaleInv, x, rows, cols, format, amax,
                     stream);
}
