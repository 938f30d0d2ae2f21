//===- optimizer.h - optimizer CUDA kernels (host side) ---------*- C++ -*-===//
//
// Part of mlt. Host launchers of the optimizer family (optimizer.cuh): the
// gradient norm (sum_squares per tensor, global_norm over the tensors'
// sums), the clipping coefficient, and the AdamW update. Every scalar they
// read (the sums, the norm, max_norm, grad_scale, the hyper-parameters, the
// step) stays in device memory: nothing here waits for the device. Semantics
// are those of Kernels.def and of the CPU backend (CpuBackend.cpp,
// cpu/VectorOps.cpp's sumOfSquares, cpu/AdamW.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_H

#include "DeviceError.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mlt::cuda {

/// The device scratch launchSumSquares needs for n elements (at most 8 KiB).
size_t sumSquaresScratchBytes(int64_t n);

/// *out = float(sum_i double(x[i])^2), accumulated in double as the CPU does:
/// one kernel up to 4096 elements, else one that writes per-block partial
/// sums and one that combines them. Deterministic: the decomposition depends
/// on n only, and partial sums are combined in a fixed order (no atomics).
/// `scratch` holds sumSquaresScratchBytes(n) bytes (8-byte aligned) and may
/// be null when that is 0.
Status launchSumSquares(float *out, const float *x, int64_t n, void *scratch,
                        cudaStream_t stream);

/// The device scratch launchSumSquaresMulti needs for tensors of ns[0..count)
/// elements (8 bytes per partial sum of one batch of tensors; at most
/// 112 * 1024 * 8 bytes).
size_t sumSquaresMultiScratchBytes(const int64_t *ns, int64_t count);

/// *out[k] = float(sum_i double(xs[k][i])^2) for k < count, each the same
/// bits launchSumSquares(out[k], xs[k], ns[k]) gives, in two kernels per
/// batch of up to 112 tensors (one that reads every tensor, one that combines
/// the partial sums of those with several blocks) instead of up to two per
/// tensor. `out`, `xs` and `ns` are host arrays of `count` entries, read
/// before the call returns; `scratch` holds
/// sumSquaresMultiScratchBytes(ns, count) bytes (8-byte aligned) and may be
/// null when that is 0.
/// `halves` (may be null: all f32) marks the tensors that are bf16 (a
/// gradient reduced in bf16), widened as they are read: the bits of their
/// f32 copies' sums.
Status launchSumSquaresMulti(float *const *out, const void *const *xs,
                             const bool *halves, const int64_t *ns,
                             int64_t count, void *scratch, cudaStream_t stream);

/// The device scratch launchGlobalNorm needs (8 bytes).
inline constexpr size_t kGlobalNormScratchBytes = 8;

/// *out = float(sqrt(sum_k double(*parts[k]))), summed in k order as the CPU
/// does. `parts` is a host array of `count` device pointers to f32 scalars;
/// it is read before the call returns. `scratch`: kGlobalNormScratchBytes
/// (8-byte aligned), used when count exceeds one launch's batch of pointers.
Status launchGlobalNorm(float *out, const float *const *parts, int64_t count,
                        void *scratch, cudaStream_t stream);

/// *out = 1 when *maxNorm is 0, else min(1, *maxNorm / (*norm + 1e-6)) in
/// f32 (torch.nn.utils.clip_grad_norm_).
Status launchClipCoefficient(float *out, const float *norm,
                             const float *maxNorm, cudaStream_t stream);

/// The f32 scalars of an AdamW update, in device memory.
struct AdamWScalars {
  const float *gradScale = nullptr;
  const float *lr = nullptr;
  const float *beta1 = nullptr;
  const float *beta2 = nullptr;
  const float *eps = nullptr;
  const float *weightDecay = nullptr;
  /// The 1-based step number, as an f32 holding an integer.
  const float *step = nullptr;
};

/// One AdamW update of n elements, exactly as CpuBackend.cpp runs
/// cpu::adamwStep: the gradient scaled by grad_scale in f32 when it is not 1
/// (the gradient buffer is left as it is), PyTorch's order of operations,
/// the scalars derived in double and rounded to f32. A step that is not a
/// number >= 1 (up to 9e15) is reported to `errors` and nothing is updated.
/// With `copy` (may be null: Kernels.def's optional fourth output), the
/// updated parameter is also written there rounded to bf16 (as `cast`
/// rounds), in the same pass: a mixed-precision plan's compute copy.
Status launchAdamW(float *param, float *m, float *v, const float *grad,
                   int64_t n, const AdamWScalars &scalars,
                   bool applyWeightDecay, __nv_bfloat16 *copy,
                   DeviceErrorSink errors, cudaStream_t stream);

/// One tensor of a multi-tensor AdamW update.
struct AdamWTensor {
  float *param = nullptr, *m = nullptr, *v = nullptr;
  /// The gradient, f32; or, when null, gradHalf: bf16 (a gradient reduced
  /// in bf16), widened as it is read (the bits of its f32 copy's update).
  const float *grad = nullptr;
  const __nv_bfloat16 *gradHalf = nullptr;
  /// The compute copy, or null.
  __nv_bfloat16 *copy = nullptr;
  int64_t n = 0;
  bool decay = false;
};

/// launchAdamW for every tensor (the same bits per tensor) with the same
/// scalars, in a few kernels: one per kAdamWMultiTensors tensors
/// (optimizer.cuh), each splitting its tensors into chunks over its blocks.
Status launchAdamWMulti(const AdamWTensor *tensors, size_t count,
                        const AdamWScalars &scalars, DeviceErrorSink errors,
                        cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_H
