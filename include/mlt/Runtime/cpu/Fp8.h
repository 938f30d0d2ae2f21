//===- Fp8.h - FP8 formats, scales and quantization on the CPU --*- C++ -*-===//
//
// Part of mlt. The reference for FP8 products: the two OCP FP8 formats
// (rt::ElementType::F8E4M3 and F8E5M2) as bytes, the per-tensor scale a
// tensor is quantized with, and the quantization itself, bit for bit what
// the CUDA kernels (lib/Runtime/cuda/kernels/fp8.h) compute.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_FP8_H
#define MLT_RUNTIME_CPU_FP8_H

#include "mlt/Plan/ElementType.h"
#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// fp8 family
//
// Invariants:
// - e4m3 ("FN": no infinities): bias 7, 3 mantissa bits, largest finite 448
//   (0x7E), NaN 0x7F / 0xFF, smallest subnormal 2^-9. e5m2: bias 15, 2
//   mantissa bits, largest finite 57344 (0x7B), infinities 0x7C / 0xFC, NaNs
//   above them, smallest subnormal 2^-16.
// - float -> FP8 rounds to nearest, ties to even, and saturates: a
//   magnitude beyond the largest finite value (an infinity included)
//   becomes the largest finite value of its sign, as the hardware's
//   `cvt.rn.satfinite` does; a NaN becomes the NaN 0x7F. FP8 -> float is
//   exact.
// - A tensor is quantized with one scale, a power of two (current scaling,
//   as Transformer Engine's with power-of-two scales): the largest 2^e with
//   amax * 2^e <= the format's largest finite value, amax the largest
//   magnitude of the tensor, e within [-126, 126] so that the scale and its
//   inverse are normal floats; 1 where amax is 0 or not finite. So x * scale
//   is exact in float, and the dequantized value q * (1 / scale) is exact:
//   the quantization error is the FP8 rounding alone.
// - q[i] = toFp8(x[i] * scale). `transpose` writes the [cols, rows]
//   transpose of the [rows, cols] row-major input (FP8 products on Hopper
//   read both operands with the reduction dimension contiguous).
//===----------------------------------------------------------------------===//

/// The largest finite value of an FP8 format (448 or 57344).
float fp8Max(rt::ElementType format);

/// `value` rounded to the FP8 `format` (nearest-even, saturating), as its
/// byte.
uint8_t toFp8(float value, rt::ElementType format);

/// The value of an FP8 byte (exact).
float fromFp8(uint8_t bits, rt::ElementType format);

/// The power-of-two scale that maps `amax` into the format's range (see
/// above).
float fp8Scale(float amax, rt::ElementType format);

/// The largest |x[i]|; NaN when any x[i] is NaN; 0 for n = 0.
float absMax(const float *x, int64_t n);
/// The same over bf16 bits (exact: a bf16 magnitude's order is its bits'
/// order without the sign), without widening the tensor.
float absMaxBF16(const uint16_t *x, int64_t n);

/// q = toFp8(x * scale) for the [rows, cols] row-major x, written [rows,
/// cols], or [cols, rows] when `transpose`. An error (nothing written) for a
/// format that is not FP8 or negative sizes.
Status quantizeFp8(uint8_t *q, const float *x, int64_t rows, int64_t cols,
                   bool transpose, rt::ElementType format, float scale);

/// out[i] = fromFp8(q[i]) * scaleInv: the values a product of quantized
/// operands multiplies (exact when scaleInv is a power of two).
void dequantizeFp8(float *out, const uint8_t *q, int64_t n,
                   rt::ElementType format, float scaleInv);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_FP8_H
