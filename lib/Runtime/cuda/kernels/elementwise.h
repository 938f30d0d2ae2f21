//===- elementwise.h - elementwise CUDA kernels (host side) -----*- C++ -*-===//
//
// Part of mlt. Host launchers of the elementwise family (elementwise.cuh):
// the model's elementwise ops (add, mul, accumulate, SwiGLU and SiLU forward
// and backward) and the data-movement kernels that work on any element type
// (cast, transpose, shard_slice, fill). Each queues its work on `stream` and
// returns; argument errors are returned before anything is queued, launch
// errors right after the launch (kernel faults surface at the next
// synchronization). Semantics are those of Kernels.def and of the CPU
// kernels (lib/Runtime/cpu/Elementwise.cpp, VectorOps.cpp, and the
// transpose, cast and shard_slice of CpuBackend.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlt::cuda {

//===----------------------------------------------------------------------===//
// Model ops: n elements, computed in f32 (bf16 storage: widened to f32,
// rounded back as the CPU backend rounds). Outputs may alias inputs element
// for element (as in cpu/Elementwise.h).
//===----------------------------------------------------------------------===//

/// out = a + b.
Status launchAdd(float *out, const float *a, const float *b, int64_t n,
                 cudaStream_t stream);
Status launchAdd(__nv_bfloat16 *out, const __nv_bfloat16 *a,
                 const __nv_bfloat16 *b, int64_t n, cudaStream_t stream);

/// out = a * b.
Status launchMul(float *out, const float *a, const float *b, int64_t n,
                 cudaStream_t stream);
Status launchMul(__nv_bfloat16 *out, const __nv_bfloat16 *a,
                 const __nv_bfloat16 *b, int64_t n, cudaStream_t stream);

/// y += x.
Status launchAccumulate(float *y, const float *x, int64_t n,
                        cudaStream_t stream);
Status launchAccumulate(__nv_bfloat16 *y, const __nv_bfloat16 *x, int64_t n,
                        cudaStream_t stream);
/// y (f32) += x (bf16): a bf16 gradient into a parameter's f32 gradient
/// (Kernels.def's accumulate with x bf16, y f32). Not in place.
Status launchAccumulate(float *y, const __nv_bfloat16 *x, int64_t n,
                        cudaStream_t stream);

/// out = silu(gate) * up. `amax` (may be null) receives max |out| of out as
/// stored, the bits launchAbsMax (fp8.h) would give (NaN if any is NaN, 0 for
/// n = 0), from this pass instead of a second read of out (FP8 current
/// scaling).
Status launchSwiGLUForward(float *out, const float *gate, const float *up,
                           int64_t n, cudaStream_t stream,
                           float *amax = nullptr);
Status launchSwiGLUForward(__nv_bfloat16 *out, const __nv_bfloat16 *gate,
                           const __nv_bfloat16 *up, int64_t n,
                           cudaStream_t stream, float *amax = nullptr);

/// dgate = dout * up * silu'(gate); dup = dout * silu(gate); with `out`
/// (may be null), also launchSwiGLUForward's out, the same bits, in the same
/// pass. amaxDgate, amaxDup and amaxOut (may be null) receive the amaxes of
/// dgate, dup and out as launchSwiGLUForward's amax does of its out: amaxDgate
/// and amaxDup both or neither, amaxOut only with out (else an error).
Status launchSwiGLUBackward(float *dgate, float *dup, const float *dout,
                            const float *gate, const float *up, int64_t n,
                            cudaStream_t stream, float *out = nullptr,
                            float *amaxDgate = nullptr,
                            float *amaxDup = nullptr, float *amaxOut = nullptr);
Status launchSwiGLUBackward(__nv_bfloat16 *dgate, __nv_bfloat16 *dup,
                            const __nv_bfloat16 *dout,
                            const __nv_bfloat16 *gate, const __nv_bfloat16 *up,
                            int64_t n, cudaStream_t stream,
                            __nv_bfloat16 *out = nullptr,
                            float *amaxDgate = nullptr,
                            float *amaxDup = nullptr, float *amaxOut = nullptr);

/// out = x * sigmoid(x).
Status launchSiLUForward(float *out, const float *x, int64_t n,
                         cudaStream_t stream);
Status launchSiLUForward(__nv_bfloat16 *out, const __nv_bfloat16 *x, int64_t n,
                         cudaStream_t stream);

/// dx = dout * sigmoid(x) * (1 + x * (1 - sigmoid(x))).
Status launchSiLUBackward(float *dx, const float *dout, const float *x,
                          int64_t n, cudaStream_t stream);
Status launchSiLUBackward(__nv_bfloat16 *dx, const __nv_bfloat16 *dout,
                          const __nv_bfloat16 *x, int64_t n,
                          cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Data movement, any element type.
//===----------------------------------------------------------------------===//

/// out = in converted, n elements, between f32, f64 and bf16 (bf16 <-> f32 as
/// the CPU backend rounds; f64 <-> bf16 through f32, as it does; the same
/// type: a copy). Fails on other types.
Status launchCast(void *out, rt::ElementType outType, const void *in,
                  rt::ElementType inType, int64_t n, cudaStream_t stream);

/// The largest rank transpose handles once unit dimensions are dropped and
/// dimensions that stay adjacent are merged.
inline constexpr int kMaxTransposeRank = 8;

/// The number of dimensions transpose works on for `shape` and `perm`
/// (`rank` entries each) once unit dimensions are dropped and dimensions that
/// stay adjacent merged; launchTranspose fails above kMaxTransposeRank.
int64_t mergedTransposeRank(const int64_t *shape, const int64_t *perm,
                            int64_t rank);

/// y = x with the dimensions permuted (y's dimension i is x's dimension
/// perm[i]); elements of `elementBytes` (1, 2, 4 or 8) bytes; `shape` and
/// `perm` have `rank` entries. Not in place.
Status launchTranspose(void *out, const void *in, size_t elementBytes,
                       const int64_t *shape, const int64_t *perm, int64_t rank,
                       cudaStream_t stream);

/// y [outer, n, inner] = block `index` of the middle dimension of x [outer,
/// groupSize * n, inner]; elements of `elementBytes` bytes. Fails when y
/// overlaps x or index is not in [0, groupSize).
Status launchShardSlice(void *out, const void *in, size_t elementBytes,
                        int64_t outer, int64_t n, int64_t inner,
                        int64_t groupSize, int64_t index, cudaStream_t stream);

/// Sets the n elements of `data` to `value` converted to `type` as the CPU
/// backend converts it (f32: float(value); bf16: that float rounded; f64;
/// i32 and i64: truncated toward zero). Fails on f16.
Status launchFill(void *data, rt::ElementType type, int64_t n, double value,
                  cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_H
