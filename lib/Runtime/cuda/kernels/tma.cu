//===- tma.cu - tensor maps of the tensor memory accelerator --------------===//
//
// Part of mlt. Host side of tma.cuh: the tensor maps of bf16 tensors, encoded
// by the driver's cuTensorMapEncodeTiled, which the CUDA runtime looks up
// once (cudaGetDriverEntryPointByVersion), so the library needs no link
// against libcuda.
//
//===----------------------------------------------------------------------===//

#include "kernels/tma.cuh"

#include <cudaTypedefs.h>

namespace mlt::cuda::tma {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encodeEntryPoint(cudaError_t &err) {
  static cudaError_t lookupError = cudaSuccess;
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    lookupError = cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (lookupError == cudaSuccess && found != cudaDriverEntryPointSuccess)
      lookupError = cudaErrorSymbolNotFound;
    return lookupError == cudaSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p)
               : nullptr;
  }();
  err = lookupError;
  return fn;
}

} // namespace

cudaError_t encodeBf16TileMap(CUtensorMap *map, const void *base,
                              int64_t batch, int64_t rows, int64_t columns,
                              int boxRows) {
  cudaError_t err = cudaSuccess;
  PFN_cuTensorMapEncodeTiled_v12000 encode = encodeEntryPoint(err);
  if (!encode)
    return err;
  const cuuint64_t dims[3] = {cuuint64_t(columns), cuuint64_t(rows),
                              cuuint64_t(batch)};
  // Bytes between rows and between batches (the innermost stride is the
  // element's).
  const cuuint64_t strides[2] = {cuuint64_t(columns) * 2,
                                 cuuint64_t(columns) * 2 * cuuint64_t(rows)};
  const cuuint32_t box[3] = {64, cuuint32_t(boxRows), 1};
  const cuuint32_t elementStrides[3] = {1, 1, 1};
  const CUresult r = encode(
      map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(base), dims,
      strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

} // namespace mlt::cuda::tma
