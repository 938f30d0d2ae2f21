//===- rmsnorm.h - RMS normalization CUDA kernels (host side) ---*- C++ -*-===//
//
// Part of mlt. Host launchers of the rmsnorm family (rmsnorm.cuh): forward
// and backward of `mlt.rms_norm` (Kernels.def rms_norm_fwd, rms_norm_bwd,
// rms_norm_bwd_add), with the semantics of the CPU kernels
// (lib/Runtime/cpu/RMSNorm.cpp) as the CPU backend drives them: the plan
// keeps no rstd, so the backward recomputes it exactly as the forward does,
// and the backward OVERWRITES dw; rms_norm_bwd_add adds the residual
// gradient to dx as it is written.
//
// Each launcher queues its work on `stream` and returns; argument errors are
// returned before anything is queued, launch errors right after the launch.
//
// Scratch memory: the backward's weight gradient is a sum over rows, made
// deterministic (no atomics) by two kernels: the first writes one partial
// sum per block of rows into `scratch` ([blocks, dim] f32), the second sums
// the partials of each column in a fixed order. `rmsNormBwdScratchBytes(rows,
// dim)` is the size it needs, a function of the shape only; the caller owns
// the memory (the CUDA backend's device context allocates one scratch area
// per context lazily with cudaMalloc, grown to the largest request, and
// hands it to every launcher that needs scratch; launches on one stream
// reuse it safely because they run in order). Launchers check scratchBytes.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_H

#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mlt::cuda {

/// y = weight * (x * rstd) per row of x [rows, dim], rstd = 1 / sqrt(mean(x^2)
/// + eps) (statistics in f32, rstd rounded to f32 as the CPU kernel rounds it
/// to T). `rstd` ([rows] f32) may be null; when given it receives rstd. `y`
/// may alias `x`. dim must be positive when rows are. `amax` (may be null)
/// receives max |y| of y as stored, the bits launchAbsMax (fp8.h) would give
/// (NaN if any is NaN, 0 without rows), from this pass instead of a second
/// read of y (FP8 current scaling).
Status launchRmsNormFwd(float *y, float *rstd, const float *x,
                        const float *weight, int64_t rows, int64_t dim,
                        double eps, cudaStream_t stream, float *amax = nullptr);
Status launchRmsNormFwd(__nv_bfloat16 *y, float *rstd, const __nv_bfloat16 *x,
                        const __nv_bfloat16 *weight, int64_t rows, int64_t dim,
                        double eps, cudaStream_t stream, float *amax = nullptr);

/// Bytes of scratch launchRmsNormBwd needs for this shape (0 when it needs
/// none).
size_t rmsNormBwdScratchBytes(int64_t rows, int64_t dim);

/// dx = rstd * (weight * dy - n * mean(weight * dy * n)) [+ addend], n = x *
/// rstd, with rstd recomputed from x and eps; dw (overwritten) = sum over rows
/// of dy * n, in a fixed order (deterministic), f32 in both variants (a
/// parameter's gradient accumulates in f32: Kernels.def's "Element types").
/// `addend` ([rows, dim], may be null: Kernels.def's rms_norm_bwd_add) is
/// added to dx in the same pass, in f32, the sum rounded once to T. `dx` may
/// alias `dy`; `addend` may alias `dy` or `dx` (element for element).
/// `scratch` holds at least rmsNormBwdScratchBytes(rows, dim) bytes (16-byte
/// aligned, as cudaMalloc returns) that nothing else uses while this work
/// runs. `amaxDx` (may be null) receives max |dx| of dx as stored (the addend
/// added), as launchRmsNormFwd's amax does of y; dw is the same either way.
Status launchRmsNormBwd(float *dx, float *dw, const float *dy, const float *x,
                        const float *weight, const float *addend, int64_t rows,
                        int64_t dim, double eps, void *scratch,
                        size_t scratchBytes, cudaStream_t stream,
                        float *amaxDx = nullptr);
Status launchRmsNormBwd(__nv_bfloat16 *dx, float *dw, const __nv_bfloat16 *dy,
                        const __nv_bfloat16 *x, const __nv_bfloat16 *weight,
                        const __nv_bfloat16 *addend, int64_t rows, int64_t dim,
                        double eps, void *scratch, size_t scratchBytes,
                        cudaStream_t stream, float *amaxDx = nullptr);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_RMSNORM_H
