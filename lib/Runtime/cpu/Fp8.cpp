//===- Fp8.cpp - FP8 formats, scales and quantization on the CPU ----------===//
//
// Part of mlt. Rounding works on the value, not the bits: a magnitude's
// quantum (the spacing of FP8 values around it, a power of two) divides it
// exactly, std::nearbyint rounds the quotient to nearest-even (the default
// rounding mode), and the rounded value is then encoded. Every step is exact
// in float, so the result is the correctly rounded one.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Fp8.h"

#include "mlt/Support/Bf16.h"

#include <cmath>

using namespace mlt;
using namespace mlt::cpu;

namespace {

/// The parameters of an FP8 format.
struct Format {
  int mantissaBits;
  int bias;
  float max;
};

Format formatOf(rt::ElementType format) {
  if (format == rt::ElementType::F8E5M2)
    return {2, 15, 57344.0f};
  return {3, 7, 448.0f};
}

} // namespace

float mlt::cpu::fp8Max(rt::ElementType format) { return formatOf(format).max; }

uint8_t mlt::cpu::toFp8(float value, rt::ElementType format) {
  if (std::isnan(value))
    return 0x7F;
  const Format f = formatOf(format);
  const uint8_t sign = std::signbit(value) ? 0x80 : 0x00;
  const float magnitude = std::fabs(value);
  // The smallest normal exponent; below it the quantum is fixed.
  const int minExponent = 1 - f.bias;
  int exponent = minExponent;
  if (magnitude >= std::ldexp(1.0f, minExponent)) {
    int e2 = 0;
    (void)std::frexp(magnitude, &e2); // magnitude = m * 2^e2, m in [0.5, 1)
    exponent = e2 - 1;
  }
  const float quantum = std::ldexp(1.0f, exponent - f.mantissaBits);
  const float rounded = std::nearbyint(magnitude / quantum) * quantum;
  if (!(rounded <= f.max)) // beyond the range, or infinite: saturate
    return uint8_t(sign | (format == rt::ElementType::F8E5M2 ? 0x7B : 0x7E));
  if (rounded < std::ldexp(1.0f, minExponent)) // subnormal (or zero)
    return uint8_t(
        sign |
        uint8_t(rounded / std::ldexp(1.0f, minExponent - f.mantissaBits)));
  int e2 = 0;
  const float m = std::frexp(rounded, &e2); // rounding may carry a binade
  const int biased = e2 - 1 + f.bias;
  const int mantissa = int((2.0f * m - 1.0f) * float(1 << f.mantissaBits));
  return uint8_t(sign | (biased << f.mantissaBits) | mantissa);
}

float mlt::cpu::fromFp8(uint8_t bits, rt::ElementType format) {
  const Format f = formatOf(format);
  const bool negative = (bits & 0x80) != 0;
  const int exponentField = (bits & 0x7F) >> f.mantissaBits;
  const int mantissa = bits & ((1 << f.mantissaBits) - 1);
  const int maxField = (1 << (7 - f.mantissaBits)) - 1;
  float value;
  if (format == rt::ElementType::F8E4M3 && exponentField == maxField &&
      mantissa == (1 << f.mantissaBits) - 1)
    value = NAN;
  else if (format == rt::ElementType::F8E5M2 && exponentField == maxField)
    value = mantissa == 0 ? INFINITY : NAN;
  else if (exponentField == 0)
    value = std::ldexp(float(mantissa), 1 - f.bias - f.mantissaBits);
  else
    value = std::ldexp(float((1 << f.mantissaBits) | mantissa),
                       exponentField - f.bias - f.mantissaBits);
  return negative ? -value : value;
}

float mlt::cpu::fp8Scale(float amax, rt::ElementType format) {
  if (!(amax > 0.0f) || !std::isfinite(amax))
    return 1.0f;
  // amax = m * 2^ea and max = mm * 2^em, m and mm in [0.5, 1): amax * 2^e <=
  // max holds for e = em - ea when m <= mm, else for one less.
  int ea = 0, em = 0;
  const float m = std::frexp(amax, &ea);
  const float mm = std::frexp(formatOf(format).max, &em);
  int e = em - ea - (m > mm ? 1 : 0);
  e = e < -126 ? -126 : (e > 126 ? 126 : e);
  return std::ldexp(1.0f, e);
}

float mlt::cpu::absMax(const float *x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a))
      return a;
    amax = a > amax ? a : amax;
  }
  return amax;
}

float mlt::cpu::absMaxBF16(const uint16_t *x, int64_t n) {
  uint16_t amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t a = x[i] & 0x7FFF;
    if (a > 0x7F80) // NaN
      return bf16ToFloat(a);
    amax = a > amax ? a : amax;
  }
  return bf16ToFloat(amax);
}

Status mlt::cpu::quantizeFp8(uint8_t *q, const float *x, int64_t rows,
                             int64_t cols, bool transpose,
                             rt::ElementType format, float scale) {
  if (!rt::isFp8ElementType(format))
    return errorf("quantize_fp8: ", rt::elementTypeName(format),
                  " is not an FP8 format (f8e4m3 or f8e5m2)");
  if (rows < 0 || cols < 0)
    return errorf("quantize_fp8: negative size (rows = ", rows,
                  ", cols = ", cols, ")");
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      q[transpose ? c * rows + r : r * cols + c] =
          toFp8(x[r * cols + c] * scale, format);
  return Status::ok();
}

void mlt::cpu::dequantizeFp8(float *out, const uint8_t *q, int64_t n,
                             rt::ElementType format, float scaleInv) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fromFp8(q[i], format) * scaleInv;
}
