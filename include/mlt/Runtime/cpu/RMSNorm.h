//===- RMSNorm.h - CPU RMS normalization kernels ----------------*- C++ -*-===//
//
// Part of mlt. Forward and backward of `mlt.rms_norm` on the CPU, matching
// Hugging Face's LlamaRMSNorm: `x * rsqrt(mean(x^2) + eps) * weight` over the
// last dimension. The forward saves one reciprocal RMS per row so that the
// backward does not recompute the statistics.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_RMSNORM_H
#define MLT_RUNTIME_CPU_RMSNORM_H

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// rmsnorm family
//
// Invariants:
// - `x`, `out`, `dout`, `dx` are [rows, cols] (rows = batch * seq, cols =
//   hidden); `weight` and `dweight` are [cols]; `rstd` is [rows].
// - Statistics are accumulated in double whatever T is, then rounded to T:
//   `rstd[r] = T(1 / sqrt(mean(x[r, :]^2) + eps))`. The output is then formed
//   in T exactly as HF does: `out = weight * (x * rstd)`.
// - Saved for the backward: `x` (the input) and `rstd`.
// - Backward overwrites `dx` and accumulates into `dweight` (a parameter
//   gradient). It computes in double: each dx element is rounded to T once,
//   and dweight's sum over rows is kept in double and added to `dweight`
//   once, so its rounding does not grow with the number of rows.
// - `out` may alias `x`; `dx` may alias `dout`.
//===----------------------------------------------------------------------===//

/// out = x * rstd * weight per row, rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T>
void rmsnormForward(T *out, T *rstd, const T *x, const T *weight, int64_t rows,
                    int64_t cols, double eps);

/// dx = rstd * (weight * dout - n * mean(weight * dout * n)) with
/// n = x * rstd; dweight += sum over rows of dout * n.
template <typename T>
void rmsnormBackward(T *dx, T *dweight, const T *dout, const T *x,
                     const T *weight, const T *rstd, int64_t rows,
                     int64_t cols);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_RMSNORM_H
