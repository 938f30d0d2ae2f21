//===- VectorOpsTest.cpp - tests of the CPU vector family -----------------===//
//
// Part of mlt. Checks fill, zero, axpy, accumulate, scale and the sum of
// squares against plain loops, the float/double conversions, and the
// float -> bfloat16 rounding bit by bit: chosen halfway cases, special
// values, random floats against a nearest-even reference, and the exact
// round trip of every bfloat16.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/VectorOps.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

#include <limits>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

float floatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <typename T> class VectorOpsTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(VectorOpsTest, FloatTypes);

// Tests the overwriting and accumulating utilities against plain loops.
TYPED_TEST(VectorOpsTest, UtilitiesMatchPlainLoops) {
  using T = TypeParam;
  std::mt19937 rng(91);
  const int64_t n = 1001;
  auto x = randomVector<T>(rng, n);
  auto y = randomVector<T>(rng, n);

  std::vector<T> buf(n);
  fill<T>(buf.data(), n, T(2.5));
  EXPECT_EQ(buf, std::vector<T>(n, T(2.5)));
  zero<T>(buf.data(), n);
  EXPECT_EQ(buf, std::vector<T>(n, T(0)));

  auto expected = y;
  for (int64_t i = 0; i < n; ++i)
    expected[i] += T(-0.3) * x[i];
  auto out = y;
  axpy<T>(out.data(), x.data(), n, T(-0.3));
  EXPECT_EQ(out, expected);

  expected = y;
  for (int64_t i = 0; i < n; ++i)
    expected[i] += x[i];
  out = y;
  accumulate<T>(out.data(), x.data(), n);
  EXPECT_EQ(out, expected);

  expected = x;
  for (T &e : expected)
    e *= T(0.7);
  out = x;
  scale<T>(out.data(), n, T(0.7));
  EXPECT_EQ(out, expected);
}

// Tests that the sum of squares is accumulated in double: against a long
// double sum it is within n * 2^-53 relative even for float input, far
// below float's own 6e-8.
TYPED_TEST(VectorOpsTest, SumOfSquaresAccumulatesInDouble) {
  using T = TypeParam;
  std::mt19937 rng(92);
  const int64_t n = 100003;
  auto x = randomVector<T>(rng, n, -3.0, 3.0);
  long double expected = 0.0L;
  for (T xi : x)
    expected += (long double)xi * (long double)xi;
  const double got = sumOfSquares<T>(x.data(), n);
  EXPECT_NEAR(got, double(expected), double(expected) * n * 0x1p-53);
}

// Tests that sumsOfSquares (the sum_squares_multi kernel) gives each tensor
// the float of its sumOfSquares, bit for bit, on random tensors of several
// sizes (an empty one included), and writes every output.
TYPED_TEST(VectorOpsTest, SumsOfSquaresMatchOneTensorAtATime) {
  using T = TypeParam;
  std::mt19937 rng(94);
  const std::vector<int64_t> sizes = {1, 0, 7, 4096, 4097, 100003, 3};
  std::vector<std::vector<T>> tensors;
  std::vector<const T *> xs;
  for (int64_t n : sizes) {
    tensors.push_back(randomVector<T>(rng, n, -3.0, 3.0));
    xs.push_back(tensors.back().data());
  }
  std::vector<float> sums(sizes.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float *> out;
  for (float &sum : sums)
    out.push_back(&sum);
  sumsOfSquares<T>(out.data(), xs.data(), sizes.data(), sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    const float expected = float(sumOfSquares<T>(xs[k], sizes[k]));
    EXPECT_EQ(sums[k], expected) << "tensor " << k << " of " << sizes[k];
  }
  EXPECT_EQ(sums[1], 0.0f);
  EXPECT_GT(sums[5], 0.0f);
}

// Tests float <-> double conversion.
TEST(VectorOpsConvertTest, FloatDoubleRoundTrip) {
  std::mt19937 rng(93);
  auto f = randomVector<float>(rng, 77);
  std::vector<double> d(77);
  std::vector<float> back(77);
  convert<float, double>(d.data(), f.data(), 77);
  convert<double, float>(back.data(), d.data(), 77);
  EXPECT_EQ(back, f);
  std::vector<double> third = {1.0 / 3.0};
  std::vector<float> narrowed(1);
  convert<double, float>(narrowed.data(), third.data(), 1);
  EXPECT_EQ(narrowed[0], 1.0f / 3.0f);
}

// Tests bfloat16 rounding on hand-picked bit patterns.
TEST(VectorOpsBF16Test, RoundsToNearestEvenOnChosenValues) {
  struct Case {
    uint32_t floatBits;
    uint16_t bf16;
  };
  const Case cases[] = {
      {0x3F800000, 0x3F80}, // 1.0 exactly
      {0x3F808000, 0x3F80}, // halfway, kept half even: down
      {0x3F818000, 0x3F82}, // halfway, kept half odd: up
      {0x3F808001, 0x3F81}, // just above halfway: up
      {0x3F807FFF, 0x3F80}, // just below halfway: down
      {0xBF818000, 0xBF82}, // negative halfway, odd: away from zero
      {0x7F800000, 0x7F80}, // +inf
      {0xFF800000, 0xFF80}, // -inf
      {0x7F7FFFFF, 0x7F80}, // largest float rounds up to +inf
      {0x00000001, 0x0000}, // smallest subnormal rounds to +0
      {0x80000000, 0x8000}, // -0
      {0x00018000, 0x0002}, // subnormal halfway, odd: up
  };
  for (const Case &c : cases)
    EXPECT_EQ(floatToBF16(floatFromBits(c.floatBits)), c.bf16)
        << std::hex << "float bits 0x" << c.floatBits;
  EXPECT_EQ(floatToBF16(std::numeric_limits<float>::quiet_NaN()), 0x7FC0);
  EXPECT_EQ(floatToBF16(floatFromBits(0xFF800001)), 0x7FC0); // signaling NaN
}

// Tests the buffer cast on random floats against the nearest of the two
// neighboring bfloat16 values (ties to the even one), computed in double.
TEST(VectorOpsBF16Test, CastMatchesNearestEvenReference) {
  std::mt19937 rng(94);
  std::uniform_int_distribution<uint32_t> bitsDist;
  std::vector<float> in;
  while (in.size() < 20000) {
    float f = floatFromBits(bitsDist(rng));
    if (std::isfinite(f) && std::abs(f) < 3.0e38f)
      in.push_back(f);
  }
  std::vector<uint16_t> out(in.size());
  castFloatToBF16(out.data(), in.data(), int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &in[i], sizeof(bits));
    const uint16_t down = uint16_t(bits >> 16);
    const uint16_t up = uint16_t(down + 1);
    const double x = in[i];
    const double dDown = std::abs(x - double(bf16ToFloat(down)));
    const double dUp = std::abs(x - double(bf16ToFloat(up)));
    uint16_t expected = dDown < dUp   ? down
                        : dUp < dDown ? up
                                      : ((down & 1) ? up : down);
    ASSERT_EQ(out[i], expected) << "input " << in[i];
  }
}

// Tests that every non-NaN bfloat16 widens to a float that rounds back to it.
TEST(VectorOpsBF16Test, EveryBF16RoundTrips) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    all[i] = uint16_t(i);
  std::vector<float> widened(65536);
  std::vector<uint16_t> back(65536);
  castBF16ToFloat(widened.data(), all.data(), 65536);
  castFloatToBF16(back.data(), widened.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    if (std::isnan(widened[i]))
      continue;
    ASSERT_EQ(back[i], all[i]) << std::hex << i;
  }
}

} // namespace
