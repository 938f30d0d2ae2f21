//===- VectorOps.h - CPU buffer utilities -----------------------*- C++ -*-===//
//
// Part of mlt. The small whole-buffer operations that the executor and the
// optimizer need around the model's kernels: filling and zeroing gradient
// buffers, adding one gradient into another (fan-out in the graph, gradient
// accumulation over microbatches), the global gradient norm and the clipping
// scale, and conversions between float and bfloat16 for mixed precision.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_VECTOROPS_H
#define MLT_RUNTIME_CPU_VECTOROPS_H

#include "mlt/Support/Bf16.h"

#include <cstddef>
#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// vector family
//
// Invariants:
// - Buffers are flat arrays of `n` elements; layout does not matter.
// - fill, zero, scale and convert overwrite; axpy and accumulate add into y.
// - sumOfSquares accumulates in double whatever T is and returns double, so
//   that the global gradient norm over billions of elements, summed over
//   tensors and ranks, does not lose the small tensors' contributions.
// - bfloat16 is stored as uint16_t (the high half of a float32), converted
//   by Bf16.h's floatToBF16 and bf16ToFloat: float -> bfloat16 rounds to
//   nearest, ties to even, keeps infinities and maps every NaN to the quiet
//   NaN 0x7FC0, as PyTorch's c10::BFloat16 does.
//===----------------------------------------------------------------------===//

/// x[i] = value.
template <typename T> void fill(T *x, int64_t n, T value);

/// x[i] = 0.
template <typename T> void zero(T *x, int64_t n);

/// y[i] += alpha * x[i].
template <typename T> void axpy(T *y, const T *x, int64_t n, T alpha);

/// y[i] += x[i].
template <typename T> void accumulate(T *y, const T *x, int64_t n);

/// x[i] *= alpha (gradient clipping: alpha = min(1, maxNorm / norm)).
template <typename T> void scale(T *x, int64_t n, T alpha);

/// sum_i x[i]^2, accumulated in double.
template <typename T> double sumOfSquares(const T *x, int64_t n);

/// out[k] = float(sumOfSquares(xs[k], ns[k])) for k < count: the
/// sum_squares_multi kernel, the same numbers as count sumOfSquares calls.
template <typename T>
void sumsOfSquares(float *const *out, const T *const *xs, const int64_t *ns,
                   size_t count);

/// out[i] = Dst(in[i]) between float and double (rounds to nearest when
/// narrowing). Instantiated for (float, double) and (double, float).
template <typename Src, typename Dst>
void convert(Dst *out, const Src *in, int64_t n);

/// out[i] = floatToBF16(in[i]).
void castFloatToBF16(uint16_t *out, const float *in, int64_t n);

/// out[i] = bf16ToFloat(in[i]).
void castBF16ToFloat(float *out, const uint16_t *in, int64_t n);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_VECTOROPS_H
