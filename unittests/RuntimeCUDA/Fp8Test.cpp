//===- Fp8Test.cpp - tests of the CUDA fp8 family and FP8 products --------===//
//
// Part of mlt. Checks launchAbsMax and launchQuantizeFp8 against the CPU
// reference (mlt/Runtime/cpu/Fp8.h) bit for bit, on fresh random inputs
// spread over many binades (so that rounding, subnormals and the scale's
// choice are all exercised), f32 and bf16, both FP8 formats, both layouts,
// odd shapes and partial tiles, aligned and not; and MatmulRunner::runFp8
// against a double-precision product of the dequantized operands (bf16 and
// f32 outputs, with an addend, fast accumulation or not), with its argument
// errors (among them a scale pointer cuBLASLt would refuse).
//
//===----------------------------------------------------------------------===//

#include "kernels/fp8.h"
#include "CudaTestUtil.h"
#include "kernels/matmul.h"

#include "mlt/Runtime/cpu/Fp8.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

constexpr rt::ElementType kFormats[] = {rt::ElementType::F8E4M3,
                                        rt::ElementType::F8E5M2};

/// n values m * 2^e, m uniform in [-1, 1), e uniform in [-lo, hi], each
/// representable in bf16 (so that the f32 and bf16 kernels see one tensor).
std::vector<float> spreadValues(std::mt19937 &rng, int64_t n, int lo = 12,
                                int hi = 4) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-lo, hi);
  std::vector<float> x(n);
  for (float &v : x)
    v = bf16ToFloat(floatToBF16(std::ldexp(mantissa(rng), exponent(rng))));
  return x;
}

/// The device's amax, scale inverse and quantized bytes of x (as T): q in
/// `layout` 0 (plain), 1 (transposed) or 2 (both: q plain, qT transposed).
struct Quantized {
  float amax = 0.0f, scaleInv = 0.0f;
  std::vector<uint8_t> q, qT;
};

template <typename T>
Quantized deviceQuantize(const std::vector<float> &x, int64_t rows,
                         int64_t cols, int layout, rt::ElementType format,
                         int64_t offset) {
  std::vector<T> host(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      host[i] = x[i];
    } else {
      const uint16_t bits = floatToBF16(x[i]);
      std::memcpy(&host[i], &bits, sizeof(bits));
    }
  }
  OffsetBuffer<T> dx(host, offset);
  DeviceBuffer<float> scalars(2);
  DeviceBuffer<uint8_t> dq(x.size() + offset + 1), dqT(x.size() + offset + 1);
  uint8_t *q = dq.get() + offset, *qT = dqT.get() + offset;
  Status status = launchAbsMax(scalars.get(), dx.get(), rows * cols, nullptr);
  EXPECT_TRUE(status) << status.message();
  status = launchQuantizeFp8(
      layout == 1 ? nullptr : q, layout == 0 ? nullptr : qT, scalars.get() + 1,
      dx.get(), rows, cols, format, scalars.get(), nullptr);
  EXPECT_TRUE(status) << status.message();
  Quantized out;
  const std::vector<float> s = scalars.download();
  out.amax = s[0];
  out.scaleInv = s[1];
  const std::vector<uint8_t> all = dq.download(), allT = dqT.download();
  out.q.assign(all.begin() + offset, all.begin() + offset + x.size());
  out.qT.assign(allT.begin() + offset, allT.begin() + offset + x.size());
  return out;
}

struct Shape {
  int64_t rows, cols;
};
// One element, odd sizes, whole tiles, partial tiles (of the 256 x 128
// transposed tiles and their 8 x 16 blocks), and packed shapes.
constexpr Shape kShapes[] = {{1, 1},    {5, 7},     {64, 64},   {130, 200},
                             {96, 128}, {256, 520}, {264, 144}, {520, 272}};

template <typename T> void checkQuantizeMatchesCpu() {
  std::mt19937 rng(11);
  for (const Shape &shape : kShapes)
    for (rt::ElementType format : kFormats)
      for (int layout : {0, 1, 2})
        for (int64_t offset : {0, 1}) {
          const int64_t n = shape.rows * shape.cols;
          const std::vector<float> x = spreadValues(rng, n);
          const Quantized got = deviceQuantize<T>(x, shape.rows, shape.cols,
                                                  layout, format, offset);
          const float amax = cpu::absMax(x.data(), n);
          const float scale = cpu::fp8Scale(amax, format);
          std::vector<uint8_t> plain(n), transposed(n);
          ASSERT_TRUE(cpu::quantizeFp8(plain.data(), x.data(), shape.rows,
                                       shape.cols, false, format, scale));
          ASSERT_TRUE(cpu::quantizeFp8(transposed.data(), x.data(), shape.rows,
                                       shape.cols, true, format, scale));
          const std::string what =
              std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
              " " + rt::elementTypeName(format) + " layout " +
              std::to_string(layout) + " offset " + std::to_string(offset);
          EXPECT_EQ(got.amax, amax) << what;
          EXPECT_EQ(got.scaleInv, 1.0f / scale) << what;
          int64_t mismatches = 0;
          for (int64_t i = 0; i < n; ++i) {
            if (layout != 1)
              mismatches += got.q[i] != plain[i];
            if (layout != 0)
              mismatches += got.qT[i] != transposed[i];
          }
          EXPECT_EQ(mismatches, 0) << what;
        }
}

TEST(CudaFp8Test, QuantizeF32MatchesCpuBitForBit) {
  MLT_REQUIRE_CUDA();
  checkQuantizeMatchesCpu<float>();
}

TEST(CudaFp8Test, QuantizeBf16MatchesCpuBitForBit) {
  MLT_REQUIRE_CUDA();
  checkQuantizeMatchesCpu<__nv_bfloat16>();
}

TEST(CudaFp8Test, AbsMaxOfLargeAndNaNTensors) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(2);
  std::vector<float> x = spreadValues(rng, 1 << 20, 12, 8);
  x[123457] = -700.0f; // the largest, negative, in the middle
  DeviceBuffer<float> dx(x.size()), amax(1);
  dx.upload(x);
  ASSERT_TRUE(launchAbsMax(amax.get(), dx.get(), int64_t(x.size()), nullptr));
  EXPECT_EQ(amax.download()[0], 700.0f);
  x[999] = NAN;
  dx.upload(x);
  ASSERT_TRUE(launchAbsMax(amax.get(), dx.get(), int64_t(x.size()), nullptr));
  EXPECT_TRUE(std::isnan(amax.download()[0]));
  ASSERT_TRUE(launchAbsMax(amax.get(), dx.get(), 0, nullptr));
  EXPECT_EQ(amax.download()[0], 0.0f);
  DeviceBuffer<uint8_t> q(1);
  EXPECT_FALSE(launchQuantizeFp8(q.get(), nullptr, amax.get(), dx.get(), 1, 1,
                                 rt::ElementType::BF16, amax.get(), nullptr));
  EXPECT_FALSE(launchQuantizeFp8(nullptr, nullptr, amax.get(), dx.get(), 1, 1,
                                 rt::ElementType::F8E4M3, amax.get(), nullptr));
}

/// A quantized operand on the device: bytes, inverse scale, dequantized
/// values (on the host, exact).
struct Operand {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<float> scalars; // amax, then the scale inverse 16 bytes in
  std::vector<double> values;
  Operand(const std::vector<float> &x, int64_t rows, int64_t cols,
          rt::ElementType format)
      : q(x.size()), scalars(8) {
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    EXPECT_TRUE(launchAbsMax(scalars.get(), dx.get(), rows * cols, nullptr));
    EXPECT_TRUE(launchQuantizeFp8(q.get(), nullptr, scalars.get() + 4, dx.get(),
                                  rows, cols, format, scalars.get(), nullptr));
    const std::vector<uint8_t> bytes = q.download();
    const float scaleInv = scalars.download()[4];
    for (uint8_t b : bytes)
      values.push_back(double(cpu::fromFp8(b, format)) * scaleInv);
  }
  const float *scaleInv() const { return scalars.get() + 4; }
};

struct ProductCase {
  int64_t m, n, k;
  rt::ElementType aType, bType, outType;
  bool addend, fast;
};

TEST(CudaFp8Test, ProductMatchesDequantizedReference) {
  MLT_REQUIRE_CUDA();
  auto runner = MatmulRunner::create();
  ASSERT_TRUE(runner) << runner.status().message();
  const auto e4m3 = rt::ElementType::F8E4M3, e5m2 = rt::ElementType::F8E5M2;
  const auto bf16 = rt::ElementType::BF16, f32 = rt::ElementType::F32;
  const ProductCase cases[] = {
      {16, 16, 16, e4m3, e4m3, bf16, false, true},
      {37, 64, 128, e4m3, e4m3, bf16, false, false},
      {256, 192, 512, e4m3, e4m3, bf16, false, true},
      {256, 192, 512, e5m2, e4m3, bf16, false, false}, // dgrad: dy e5m2
      {128, 96, 1024, e5m2, e4m3, f32, false, false},  // wgrad into f32
      {128, 96, 1024, e4m3, e5m2, f32, true, false},   // accumulated
      {300, 128, 256, e4m3, e4m3, f32, true, true},
  };
  std::mt19937 rng(23);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (const ProductCase &pc : cases) {
    std::vector<float> a(pc.m * pc.k), b(pc.n * pc.k), addend(pc.m * pc.n);
    for (float &v : a)
      v = 3.0f * dist(rng);
    for (float &v : b)
      v = 0.02f * dist(rng); // a weight's scale
    for (float &v : addend)
      v = dist(rng);
    Operand qa(a, pc.m, pc.k, pc.aType), qb(b, pc.n, pc.k, pc.bType);
    std::vector<double> expected(pc.m * pc.n);
    for (int64_t i = 0; i < pc.m; ++i)
      for (int64_t j = 0; j < pc.n; ++j) {
        double sum = pc.addend ? double(addend[i * pc.n + j]) : 0.0;
        for (int64_t p = 0; p < pc.k; ++p)
          sum += qa.values[i * pc.k + p] * qb.values[j * pc.k + p];
        expected[i * pc.n + j] = sum;
      }
    MatmulShape shape;
    shape.m = pc.m;
    shape.n = pc.n;
    shape.k = pc.k;
    shape.transposeB = true;
    const std::string what =
        std::to_string(pc.m) + "x" + std::to_string(pc.n) + "x" +
        std::to_string(pc.k) + " " + rt::elementTypeName(pc.aType) + " x " +
        rt::elementTypeName(pc.bType) + " -> " +
        rt::elementTypeName(pc.outType) + (pc.addend ? " +addend" : "") +
        (pc.fast ? " fast" : "");
    std::vector<double> got(pc.m * pc.n);
    if (pc.outType == f32) {
      DeviceBuffer<float> c(pc.m * pc.n);
      c.upload(pc.addend ? addend : std::vector<float>(pc.m * pc.n, NAN));
      Status status =
          (*runner)->runFp8(shape, qa.q.get(), pc.aType, qa.scaleInv(),
                            qb.q.get(), pc.bType, qb.scaleInv(), c.get(), f32,
                            pc.addend ? c.get() : nullptr, pc.fast, nullptr);
      ASSERT_TRUE(status) << what << ": " << status.message();
      const std::vector<float> out = c.download();
      got.assign(out.begin(), out.end());
    } else {
      DeviceBuffer<uint16_t> c(pc.m * pc.n);
      c.upload(std::vector<uint16_t>(pc.m * pc.n, 0x7FC0));
      Status status = (*runner)->runFp8(
          shape, qa.q.get(), pc.aType, qa.scaleInv(), qb.q.get(), pc.bType,
          qb.scaleInv(), c.get(), bf16, nullptr, pc.fast, nullptr);
      ASSERT_TRUE(status) << what << ": " << status.message();
      const std::vector<uint16_t> out = c.download();
      for (size_t i = 0; i < out.size(); ++i)
        got[i] = bf16ToFloat(out[i]);
    }
    // The products of FP8 values are exact; what differs is the
    // accumulation and the output rounding. Hopper's FP8 tensor cores keep
    // fewer bits than f32 between their promotions to f32, even without
    // fast accumulation (measured: 1.6e-4 at k = 1024 on an H100), and
    // fewer still with it.
    const double tol = pc.outType == bf16 ? 1e-2 : (pc.fast ? 3e-3 : 1e-3);
    EXPECT_LT(relError(got, expected), tol) << what;
  }
}

TEST(CudaFp8Test, ProductArgumentErrors) {
  MLT_REQUIRE_CUDA();
  auto runner = MatmulRunner::create();
  ASSERT_TRUE(runner) << runner.status().message();
  DeviceBuffer<uint8_t> a(256), b(256);
  DeviceBuffer<float> c(256), scale(8);
  MatmulShape shape;
  shape.m = shape.n = shape.k = 16;
  shape.transposeB = true;
  const auto e4m3 = rt::ElementType::F8E4M3, e5m2 = rt::ElementType::F8E5M2;
  auto run = [&](const MatmulShape &s, rt::ElementType at, rt::ElementType bt,
                 const float *sa, rt::ElementType out) {
    return (*runner)->runFp8(s, a.get(), at, sa, b.get(), bt, scale.get(),
                             c.get(), out, nullptr, false, nullptr);
  };
  auto expectError = [](const Status &status, const char *words) {
    ASSERT_FALSE(status);
    EXPECT_NE(status.message().find(words), std::string::npos)
        << status.message();
  };
  MatmulShape untransposed = shape;
  untransposed.transposeB = false;
  expectError(run(untransposed, e4m3, e4m3, scale.get(), rt::ElementType::F32),
              "reduction dimension contiguous");
  expectError(run(shape, e5m2, e5m2, scale.get(), rt::ElementType::F32),
              "one operand must be f8e4m3");
  expectError(run(shape, rt::ElementType::BF16, e4m3, scale.get(),
                  rt::ElementType::F32),
              "must be f8e4m3 or f8e5m2");
  expectError(run(shape, e4m3, e4m3, nullptr, rt::ElementType::F32),
              "inverse scale");
  expectError(run(shape, e4m3, e4m3, scale.get(), e4m3), "cannot produce");
  expectError(run(shape, e4m3, e4m3, scale.get() + 1, rt::ElementType::F32),
              "16-byte aligned");
  // The same arguments, right, run.
  EXPECT_TRUE(run(shape, e4m3, e4m3, scale.get(), rt::ElementType::F32));
}

} // namespace
