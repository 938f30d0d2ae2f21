//===- fp8.h - FP8 quantization CUDA kernels (host side) --------*- C++ -*-===//
//
// Part of mlt. Host launchers of the fp8 family (fp8.cuh): the largest
// magnitude of a tensor, and its quantization to an FP8 format with the
// power-of-two scale that amax gives, bit for bit the CPU reference
// (mlt/Runtime/cpu/Fp8.h: formats, rounding, saturation, scales). The
// quantized operands and their inverse scales feed MatmulRunner::runFp8.
//
// Current scaling in two launches: launchAbsMax writes amax; launchQuantizeFp8
// reads it on the device (no host round trip, so a step stays one CUDA
// graph), computes the scale and writes q and 1 / scale.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlt::cuda {

/// *amax = max |x[i]| over n elements (NaN when any is NaN, 0 for n = 0).
/// The order of a maximum does not matter: the result is exact and the same
/// on every run. x needs only its element type's alignment.
Status launchAbsMax(float *amax, const float *x, int64_t n,
                    cudaStream_t stream);
Status launchAbsMax(float *amax, const __nv_bfloat16 *x, int64_t n,
                    cudaStream_t stream);

/// The FP8 `format` of x * scale, x [rows, cols] row-major, into q [rows,
/// cols] and into qTransposed [cols, rows] (either may be null, not both:
/// both from one pass over x); scale = cpu::fp8Scale of *amax, and
/// *scaleInv = 1 / scale (exact: a power of two). The copies must not
/// overlap x; amax may be read by several launches.
Status launchQuantizeFp8(uint8_t *q, uint8_t *qTransposed, float *scaleInv,
                         const float *x, int64_t rows, int64_t cols,
                         rt::ElementType format, const float *amax,
                         cudaStream_t stream);
Status launchQuantizeFp8(uint8_t *q, uint8_t *qTransposed, float *scaleInv,
                         const __nv_bfloat16 *x, int64_t rows, int64_t cols,
                         rt::ElementType format, const float *amax,
                         cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_FP8_H
