//===- Fp8Test.cpp - tests of the CPU fp8 family --------------------------===//
//
// Part of mlt. Checks the decoding of both FP8 formats against values of the
// OCP FP8 specification; the rounding against a naive reference (the nearest
// of the format's 256 decoded values, ties to the even byte, saturating) on
// every midpoint between neighbours and on random floats of every
// magnitude; the power-of-two scale against its definition; and the
// quantization of a tensor in both layouts, with its argument errors.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Fp8.h"
#include "mlt/Support/Bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace mlt;
using namespace mlt::cpu;

namespace {

constexpr rt::ElementType kFormats[] = {rt::ElementType::F8E4M3,
                                        rt::ElementType::F8E5M2};

/// The finite non-negative values of `format` with their bytes, ascending.
std::vector<std::pair<float, uint8_t>> finiteValues(rt::ElementType format) {
  std::vector<std::pair<float, uint8_t>> values;
  for (int b = 0; b < 0x80; ++b) {
    const float v = fromFp8(uint8_t(b), format);
    if (std::isfinite(v))
      values.emplace_back(v, uint8_t(b));
  }
  std::sort(values.begin(), values.end());
  return values;
}

/// The naive rounding: the nearest finite value (the even byte on a tie),
/// the largest finite one beyond the range, the sign kept; NaN to 0x7F.
uint8_t naiveToFp8(float x, rt::ElementType format) {
  if (std::isnan(x))
    return 0x7F;
  const auto values = finiteValues(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= values.back().first)
    return uint8_t(sign | values.back().second);
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    const double di = std::fabs(a - values[i].first);
    const double db = std::fabs(a - values[best].first);
    if (di < db || (di == db && values[i].second % 2 == 0))
      best = i;
  }
  return uint8_t(sign | values[best].second);
}

TEST(Fp8Test, DecodesTheSpecificationsValues) {
  const auto e4m3 = rt::ElementType::F8E4M3, e5m2 = rt::ElementType::F8E5M2;
  EXPECT_EQ(fromFp8(0x38, e4m3), 1.0f);
  EXPECT_EQ(fromFp8(0x7E, e4m3), 448.0f);
  EXPECT_EQ(fromFp8(0xFE, e4m3), -448.0f);
  EXPECT_EQ(fromFp8(0x08, e4m3), std::ldexp(1.0f, -6)); // smallest normal
  EXPECT_EQ(fromFp8(0x01, e4m3), std::ldexp(1.0f, -9)); // smallest subnormal
  EXPECT_EQ(fromFp8(0x07, e4m3), 7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fromFp8(0x7F, e4m3)));
  EXPECT_TRUE(std::isnan(fromFp8(0xFF, e4m3)));
  EXPECT_EQ(fromFp8(0x3C, e5m2), 1.0f);
  EXPECT_EQ(fromFp8(0x7B, e5m2), 57344.0f);
  EXPECT_EQ(fromFp8(0x04, e5m2), std::ldexp(1.0f, -14));
  EXPECT_EQ(fromFp8(0x01, e5m2), std::ldexp(1.0f, -16));
  EXPECT_EQ(fromFp8(0x7C, e5m2), INFINITY);
  EXPECT_EQ(fromFp8(0xFC, e5m2), -INFINITY);
  EXPECT_TRUE(std::isnan(fromFp8(0x7D, e5m2)));
  EXPECT_EQ(fp8Max(e4m3), 448.0f);
  EXPECT_EQ(fp8Max(e5m2), 57344.0f);
  // Zero and negative zero.
  EXPECT_EQ(toFp8(0.0f, e4m3), 0x00);
  EXPECT_EQ(toFp8(-0.0f, e4m3), 0x80);
}

TEST(Fp8Test, EveryFiniteByteRoundTrips) {
  for (rt::ElementType format : kFormats)
    for (int b = 0; b < 256; ++b) {
      const float v = fromFp8(uint8_t(b), format);
      if (std::isfinite(v))
        EXPECT_EQ(toFp8(v, format), b) << rt::elementTypeName(format) << b;
    }
}

TEST(Fp8Test, MidpointsRoundToEven) {
  for (rt::ElementType format : kFormats) {
    const auto values = finiteValues(format);
    for (size_t i = 0; i + 1 < values.size(); ++i) {
      const float lo = values[i].first, hi = values[i + 1].first;
      const float mid = 0.5f * (lo + hi); // exact: both have few bits
      const uint8_t even =
          values[i].second % 2 == 0 ? values[i].second : values[i + 1].second;
      EXPECT_EQ(toFp8(mid, format), even) << mid;
      EXPECT_EQ(toFp8(-mid, format), 0x80 | even) << -mid;
      EXPECT_EQ(toFp8(std::nextafter(mid, lo), format), values[i].second);
      EXPECT_EQ(toFp8(std::nextafter(mid, hi), format), values[i + 1].second);
    }
  }
}

TEST(Fp8Test, RandomFloatsMatchTheNaiveRounding) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-24, 18);
  for (rt::ElementType format : kFormats)
    for (int i = 0; i < 4000; ++i) {
      const float x = std::ldexp(mantissa(rng), exponent(rng));
      EXPECT_EQ(toFp8(x, format), naiveToFp8(x, format))
          << rt::elementTypeName(format) << " " << x;
    }
}

TEST(Fp8Test, SaturatesAndKeepsNaN) {
  const auto e4m3 = rt::ElementType::F8E4M3, e5m2 = rt::ElementType::F8E5M2;
  // 470 would round to 480, which e4m3 lacks (its NaN): the largest value.
  for (float x : {449.0f, 470.0f, 1e9f, INFINITY})
    EXPECT_EQ(toFp8(x, e4m3), 0x7E) << x;
  EXPECT_EQ(toFp8(-INFINITY, e4m3), 0xFE);
  for (float x : {61440.0f, 1e30f, INFINITY})
    EXPECT_EQ(toFp8(x, e5m2), 0x7B) << x;
  EXPECT_EQ(toFp8(-1e30f, e5m2), 0xFB);
  for (rt::ElementType format : kFormats)
    EXPECT_TRUE(std::isnan(fromFp8(toFp8(NAN, format), format)));
  // Below half the smallest subnormal: zero, the sign kept.
  EXPECT_EQ(toFp8(std::ldexp(1.0f, -11), e4m3), 0x00);
  EXPECT_EQ(toFp8(-std::ldexp(1.0f, -18), e5m2), 0x80);
}

TEST(Fp8Test, ScaleIsTheLargestPowerOfTwoThatFits) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mantissa(0.5f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  for (rt::ElementType format : kFormats) {
    const float max = fp8Max(format);
    for (int i = 0; i < 1000; ++i) {
      const float amax = std::ldexp(mantissa(rng), exponent(rng));
      const float scale = fp8Scale(amax, format);
      int e = 0;
      EXPECT_EQ(std::frexp(scale, &e), 0.5f) << "a power of two";
      EXPECT_LE(double(amax) * scale, max) << amax;
      EXPECT_GT(double(amax) * scale * 2.0, max) << amax;
    }
    EXPECT_EQ(fp8Scale(max, format), 1.0f);
    EXPECT_EQ(fp8Scale(std::nextafter(max, INFINITY), format), 0.5f);
    EXPECT_EQ(fp8Scale(0.0f, format), 1.0f);
    EXPECT_EQ(fp8Scale(INFINITY, format), 1.0f);
    EXPECT_EQ(fp8Scale(NAN, format), 1.0f);
    // Clamped so that the scale and its inverse stay normal floats.
    EXPECT_EQ(fp8Scale(1e-38f, format), std::ldexp(1.0f, 126));
  }
  EXPECT_EQ(fp8Scale(1.0f, rt::ElementType::F8E4M3), 256.0f);
  EXPECT_EQ(fp8Scale(1.0f, rt::ElementType::F8E5M2), 32768.0f);
}

TEST(Fp8Test, AbsMaxFindsTheLargestMagnitudeAndNaN) {
  std::vector<float> x = {0.5f, -3.0f, 2.0f, -0.0f};
  EXPECT_EQ(absMax(x.data(), int64_t(x.size())), 3.0f);
  EXPECT_EQ(absMax(x.data(), 0), 0.0f);
  x.push_back(NAN);
  x.push_back(7.0f);
  EXPECT_TRUE(std::isnan(absMax(x.data(), int64_t(x.size()))));
}

TEST(Fp8Test, AbsMaxOfBf16BitsIsTheWidenedOnes) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 999)(rng);
    std::vector<uint16_t> bits(n);
    std::vector<float> wide(n);
    for (int64_t i = 0; i < n; ++i) {
      // every bit pattern but NaNs (those come below): signs, subnormals,
      // infinities
      uint16_t b;
      do
        b = uint16_t(rng());
      while ((b & 0x7FFF) > 0x7F80);
      bits[i] = b;
      wide[i] = bf16ToFloat(b);
    }
    EXPECT_EQ(absMaxBF16(bits.data(), n), absMax(wide.data(), n)) << n;
    if (n > 0) {
      bits[n / 2] = uint16_t(0xFFC1); // a negative NaN
      EXPECT_TRUE(std::isnan(absMaxBF16(bits.data(), n)));
    }
  }
}

TEST(Fp8Test, QuantizesInBothLayouts) {
  const int64_t rows = 5, cols = 7;
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = dist(rng);
  for (rt::ElementType format : kFormats) {
    const float scale = fp8Scale(absMax(x.data(), rows * cols), format);
    std::vector<uint8_t> q(rows * cols), qt(rows * cols);
    ASSERT_TRUE(
        quantizeFp8(q.data(), x.data(), rows, cols, false, format, scale));
    ASSERT_TRUE(
        quantizeFp8(qt.data(), x.data(), rows, cols, true, format, scale));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float v = x[r * cols + c];
        EXPECT_EQ(q[r * cols + c], toFp8(v * scale, format));
        EXPECT_EQ(qt[c * rows + r], q[r * cols + c]);
        // Dequantized, within half an FP8 step (3 or 2 mantissa bits).
        const float back = fromFp8(q[r * cols + c], format) / scale;
        const double step = format == rt::ElementType::F8E4M3 ? 0.0625 : 0.125;
        EXPECT_LE(std::fabs(back - v), step * std::fabs(v) + 1e-6) << v;
      }
    // The largest magnitude lands in the format's top binade.
    const float amax = absMax(x.data(), rows * cols);
    EXPECT_GT(amax * scale, 0.5f * fp8Max(format));
  }
  std::vector<uint8_t> q(1);
  const float one = 1.0f;
  Status bf16 =
      quantizeFp8(q.data(), &one, 1, 1, false, rt::ElementType::BF16, 1.0f);
  EXPECT_FALSE(bf16);
  EXPECT_NE(bf16.message().find("not an FP8 format"), std::string::npos);
  EXPECT_FALSE(
      quantizeFp8(q.data(), &one, -1, 1, false, rt::ElementType::F8E4M3, 1.0f));
}

} // namespace
