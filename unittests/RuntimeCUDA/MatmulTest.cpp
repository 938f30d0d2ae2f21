//===- MatmulTest.cpp - tests of the cuBLASLt matmul family ---------------===//
//
// Part of mlt. Checks MatmulRunner against the CPU gemm of lib/Runtime/cpu on
// the same random inputs: every transpose combination, shared and batched b,
// batch 1 and 3, odd sizes; f32 at fp32 tolerance (and not TF32), bf16
// against an f32 product of the same bf16 inputs; the shape cache; operands
// not 256-byte aligned; the empty product; and the argument errors.
//
//===----------------------------------------------------------------------===//

#include "kernels/matmul.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Gemm.h"
#include "mlt/Support/Bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// Normwise tolerance of cuBLASLt's fp32 product against OpenBLAS's: both
/// sum k <= 129 fp32 products, in different orders (blocking, split-k).
constexpr double kF32Tol = 1e-5;
/// Normwise tolerance of a bf16 product against the f32 product of the same
/// bf16 inputs: both accumulate in fp32; the bf16 output rounding alone is
/// 2^-9 = 2e-3 relative.
constexpr double kBf16Tol = 1e-2;

struct Dims {
  int64_t m, n, k;
};
// Odd sizes (no multiple of any vector width), a single row, and one shape
// whose sizes allow 16-byte vectorized kernels.
constexpr Dims kDims[] = {{1, 7, 13}, {37, 65, 129}, {5, 3, 1}, {64, 96, 128}};

std::string describe(const MatmulShape &s) {
  std::ostringstream os;
  os << "batch " << s.batch << " m " << s.m << " n " << s.n << " k " << s.k
     << " transpose_a " << s.transposeA << " transpose_b " << s.transposeB
     << " b_batched " << s.bBatched;
  return os.str();
}

int64_t sizeA(const MatmulShape &s) { return s.batch * s.m * s.k; }
int64_t sizeB(const MatmulShape &s) {
  return (s.bBatched ? s.batch : 1) * s.k * s.n;
}
int64_t sizeC(const MatmulShape &s) { return s.batch * s.m * s.n; }

/// The CPU backend's matmul: Kernels.def's semantics on OpenBLAS.
std::vector<float> cpuMatmul(const MatmulShape &s, const std::vector<float> &a,
                             const std::vector<float> &b) {
  std::vector<float> c(sizeC(s));
  const int64_t lda = std::max<int64_t>(1, s.transposeA ? s.m : s.k);
  const int64_t ldb = std::max<int64_t>(1, s.transposeB ? s.k : s.n);
  const int64_t ldc = std::max<int64_t>(1, s.n);
  Status status = cpu::gemmStridedBatched<float>(
      s.transposeA, s.transposeB, s.m, s.n, s.k, 1.0f, a.data(), lda, s.m * s.k,
      b.data(), ldb, s.bBatched ? s.k * s.n : 0, 0.0f, c.data(), ldc, s.m * s.n,
      s.batch);
  EXPECT_TRUE(status.isOk()) << status.message();
  return c;
}

/// Rounds every element of `x` to bf16 in place, so that an f32 reference
/// reads the values the bf16 product reads, and returns their bits.
std::vector<uint16_t> roundToBf16(std::vector<float> &x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = bf16ToFloat(bits[i] = floatToBF16(x[i]));
  return bits;
}

/// The f32 values of bf16 bits (exact).
std::vector<float> widenBf16(const std::vector<uint16_t> &x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = bf16ToFloat(x[i]);
  return out;
}

/// Runs `shape` on the device from host inputs; c starts as NaN so that a
/// product that read it would show. `offset` shifts every operand by that
/// many elements from cudaMalloc's 256-byte alignment.
template <typename T>
std::vector<T> deviceMatmul(MatmulRunner &runner, const MatmulShape &s,
                            const std::vector<T> &a, const std::vector<T> &b,
                            rt::ElementType dtype, T nan, size_t offset = 0) {
  DeviceBuffer<T> da(a.size() + offset), db(b.size() + offset),
      dc(sizeC(s) + offset);
  da.upload(padFront(a, offset));
  db.upload(padFront(b, offset));
  dc.upload(std::vector<T>(sizeC(s) + offset, nan));
  Status status = runner.run(s, da.get() + offset, db.get() + offset,
                             dc.get() + offset, dtype, nullptr);
  EXPECT_TRUE(status.isOk()) << status.message();
  std::vector<T> c = dc.download();
  return std::vector<T>(c.begin() + offset, c.end());
}

std::unique_ptr<MatmulRunner> makeRunner() {
  auto runner = MatmulRunner::create();
  EXPECT_TRUE(runner.isOk()) << runner.status().message();
  return runner ? std::move(*runner) : nullptr;
}

/// Every combination of transposes, shared/batched b, batch 1 and 3, and the
/// sizes of kDims, calling `check` on each.
template <typename Check> void forEachShape(Check check) {
  for (const Dims &d : kDims)
    for (int64_t batch : {1, 3})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (bool bBatched : {false, true}) {
            MatmulShape s;
            s.batch = batch;
            s.m = d.m;
            s.n = d.n;
            s.k = d.k;
            s.transposeA = ta;
            s.transposeB = tb;
            s.bBatched = bBatched;
            check(s);
          }
}

// Tests the f32 product against the CPU gemm for every combination.
TEST(CudaMatmulTest, F32MatchesCpuGemm) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(21);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  forEachShape([&](const MatmulShape &s) {
    auto a = randomVector<float>(rng, sizeA(s));
    auto b = randomVector<float>(rng, sizeB(s));
    auto c = deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32, nan);
    EXPECT_LT(relError(c, cpuMatmul(s, a, b)), kF32Tol) << describe(s);
  });
}

// Tests the bf16 product (fp32 accumulation) against the f32 product of the
// same bf16-rounded inputs.
TEST(CudaMatmulTest, Bf16MatchesF32Reference) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(22);
  forEachShape([&](const MatmulShape &s) {
    auto a = randomVector<float>(rng, sizeA(s));
    auto b = randomVector<float>(rng, sizeB(s));
    const std::vector<uint16_t> a16 = roundToBf16(a), b16 = roundToBf16(b);
    auto c16 = deviceMatmul<uint16_t>(*runner, s, a16, b16,
                                      rt::ElementType::BF16, uint16_t(0x7FC0));
    EXPECT_LT(relError(widenBf16(c16), cpuMatmul(s, a, b)), kBf16Tol)
        << describe(s);
  });
}

// Tests the mixed-precision forms: bf16 operands into an f32 c (a weight
// gradient), overwritten, and added into c's old contents in the epilogue
// (matmul_accumulate, beta = 1), against the f32 product of the same bf16
// inputs: no output rounding, so fp32 accumulation-order tolerance.
TEST(CudaMatmulTest, Bf16IntoF32OverwritesAndAccumulates) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(23);
  forEachShape([&](const MatmulShape &s) {
    auto a = randomVector<float>(rng, sizeA(s));
    auto b = randomVector<float>(rng, sizeB(s));
    const std::vector<uint16_t> a16 = roundToBf16(a), b16 = roundToBf16(b);
    const std::vector<float> product = cpuMatmul(s, a, b);
    const std::vector<float> old = randomVector<float>(rng, sizeC(s));
    DeviceBuffer<uint16_t> da(a16.size()), db(b16.size());
    DeviceBuffer<float> dc(sizeC(s));
    da.upload(a16);
    db.upload(b16);
    dc.upload(std::vector<float>(sizeC(s), std::nanf("")));
    ASSERT_TRUE(runner->run(s, da.get(), db.get(), dc.get(),
                            rt::ElementType::BF16, rt::ElementType::F32,
                            nullptr, nullptr));
    EXPECT_LT(relError(dc.download(), product), kF32Tol) << describe(s);
    dc.upload(old);
    ASSERT_TRUE(runner->run(s, da.get(), db.get(), dc.get(),
                            rt::ElementType::BF16, rt::ElementType::F32,
                            dc.get(), nullptr));
    std::vector<float> sum(product.size());
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] = old[i] + product[i];
    EXPECT_LT(relError(dc.download(), sum), kF32Tol) << describe(s);

    // matmul_add in bf16: c = product + a separate bf16 addend (a residual),
    // summed in f32 and rounded once.
    std::vector<float> residual = randomVector<float>(rng, sizeC(s));
    const std::vector<uint16_t> residual16 = roundToBf16(residual);
    DeviceBuffer<uint16_t> dresidual(residual16.size()), dout(sizeC(s));
    dresidual.upload(residual16);
    dout.upload(std::vector<uint16_t>(sizeC(s), uint16_t(0x7FC0)));
    ASSERT_TRUE(runner->run(s, da.get(), db.get(), dout.get(),
                            rt::ElementType::BF16, rt::ElementType::BF16,
                            dresidual.get(), nullptr));
    for (size_t i = 0; i < sum.size(); ++i)
      sum[i] = residual[i] + product[i];
    EXPECT_LT(relError(widenBf16(dout.download()), sum), kBf16Tol)
        << describe(s);
    EXPECT_EQ(dresidual.download(), residual16); // the addend is read only
  });
}

// Tests that matmul_add gives the same bits wherever its output lies, at a
// layer's shapes (TinyLlama's o_proj and down_proj with their residuals):
// plans that differ only in where the memory planner put the buffers (one
// with recomputation, one without) train alike. Written over its own
// addend instead, cuBLASLt 13.1 rounds a quarter of the elements of these
// products differently on an H200 (bench/RESULTS.md), so the planner never
// places it there (KernelInfo.h's placesInPlace).
TEST(CudaMatmulTest, OutputPlacementGivesTheSameBits) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(29);
  const MatmulShape shapes[] = {{1, 37, 65, 129, false, true, false},
                                {1, 8192, 2048, 2048, false, true, false},
                                {1, 8192, 2048, 5632, false, true, false}};
  for (const MatmulShape &s : shapes) {
    std::vector<float> a = randomVector<float>(rng, sizeA(s)),
                       b = randomVector<float>(rng, sizeB(s)),
                       residual = randomVector<float>(rng, sizeC(s));
    const std::vector<uint16_t> a16 = roundToBf16(a), b16 = roundToBf16(b),
                                residual16 = roundToBf16(residual);
    // The second output 256 bytes into a larger buffer: another address,
    // the same alignment.
    DeviceBuffer<uint16_t> da(a16.size()), db(b16.size()),
        dresidual(residual16.size()), dout(sizeC(s)), dother(sizeC(s) + 128);
    da.upload(a16);
    db.upload(b16);
    dresidual.upload(residual16);
    ASSERT_TRUE(runner->run(s, da.get(), db.get(), dout.get(),
                            rt::ElementType::BF16, rt::ElementType::BF16,
                            dresidual.get(), nullptr));
    const std::vector<uint16_t> apart = dout.download();
    ASSERT_TRUE(runner->run(s, da.get(), db.get(), dother.get() + 128,
                            rt::ElementType::BF16, rt::ElementType::BF16,
                            dresidual.get(), nullptr));
    std::vector<uint16_t> elsewhere = dother.download();
    elsewhere.erase(elsewhere.begin(), elsewhere.begin() + 128);
    size_t differing = 0;
    for (size_t i = 0; i < apart.size(); ++i)
      differing += apart[i] != elsewhere[i];
    EXPECT_EQ(differing, 0u) << describe(s) << ": " << differing << " of "
                             << apart.size() << " elements differ";
  }
}

// Tests that f32 is pure fp32, not TF32: (1 + 2^-20)^2 rounds to 1 + 2^-19
// in fp32, but to 1 from TF32's 10-bit mantissas.
TEST(CudaMatmulTest, F32IsNotTF32) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  MatmulShape s;
  s.m = 64;
  s.n = 64;
  s.k = 32;
  const float x = 1.0f + std::ldexp(1.0f, -20);
  std::vector<float> a(sizeA(s), 0.0f), b(sizeB(s), x);
  for (int64_t i = 0; i < s.m; ++i)
    a[i * s.k] = x; // only p = 0 contributes: the sum is exact
  auto c = deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32, 0.0f);
  const float expected = 1.0f + std::ldexp(1.0f, -19);
  for (float v : c)
    ASSERT_EQ(v, expected);
}

// Tests that a second call of a shape reuses the cached plan (no new entry)
// and gives the same bits; a new shape adds one entry.
TEST(CudaMatmulTest, SecondCallHitsTheCache) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(23);
  MatmulShape s;
  s.batch = 3;
  s.m = 37;
  s.n = 65;
  s.k = 129;
  s.transposeA = true;
  auto a = randomVector<float>(rng, sizeA(s));
  auto b = randomVector<float>(rng, sizeB(s));
  auto first = deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32, 0.f);
  const size_t cached = runner->cachedShapes();
  EXPECT_EQ(cached, 1u);
  auto second =
      deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32, 0.f);
  EXPECT_EQ(runner->cachedShapes(), cached);
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(
      std::memcmp(first.data(), second.data(), first.size() * sizeof(float)),
      0);
  EXPECT_LT(relError(second, cpuMatmul(s, a, b)), kF32Tol);
  s.transposeB = true;
  (void)deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32, 0.f);
  EXPECT_EQ(runner->cachedShapes(), cached + 1);
}

// Tests operands one element past cudaMalloc's alignment (an arena offset):
// cuBLASLt is told, and picks an algorithm that handles them.
TEST(CudaMatmulTest, OperandsAlignedOnlyToTheirElements) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(24);
  for (bool bBatched : {false, true}) {
    MatmulShape s;
    s.batch = 3;
    s.m = 64;
    s.n = 96;
    s.k = 128;
    s.transposeB = true;
    s.bBatched = bBatched;
    auto a = randomVector<float>(rng, sizeA(s));
    auto b = randomVector<float>(rng, sizeB(s));
    auto c = deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32,
                                 std::numeric_limits<float>::quiet_NaN(), 1);
    EXPECT_LT(relError(c, cpuMatmul(s, a, b)), kF32Tol) << describe(s);

    const std::vector<uint16_t> a16 = roundToBf16(a), b16 = roundToBf16(b);
    auto c16 = deviceMatmul<uint16_t>(
        *runner, s, a16, b16, rt::ElementType::BF16, uint16_t(0x7FC0), 1);
    EXPECT_LT(relError(widenBf16(c16), cpuMatmul(s, a, b)), kBf16Tol)
        << describe(s);
  }
}

// Tests that k = 0 writes zeros over whatever c held (NaN here).
TEST(CudaMatmulTest, EmptyInnerDimensionWritesZeros) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  MatmulShape s;
  s.batch = 2;
  s.m = 3;
  s.n = 5;
  s.k = 0;
  std::vector<float> a(1, 1.0f), b(1, 1.0f);
  auto c = deviceMatmul<float>(*runner, s, a, b, rt::ElementType::F32,
                               std::numeric_limits<float>::quiet_NaN());
  for (float v : c)
    EXPECT_EQ(v, 0.0f);
}

// Tests runGroup (matmul_group): each product of a group against the CPU
// gemm of the same inputs (bf16 operands into bf16 and into an f32 c that
// accumulates; f32), one pointer-array launch where the products are one
// matrix each and G launches where they are strided batches, the same bits
// when run again, and the argument errors.
TEST(CudaMatmulTest, GroupComputesEachProduct) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  std::mt19937 rng(31);
  struct GroupCase {
    MatmulShape shape;
    rt::ElementType dtype, outType;
    bool accumulate;
  };
  const GroupCase cases[] = {
      {{1, 96, 64, 128, false, true, false},
       rt::ElementType::BF16,
       rt::ElementType::BF16,
       false},
      {{1, 64, 64, 96, true, false, false},
       rt::ElementType::BF16,
       rt::ElementType::F32,
       true},
      {{4, 24, 40, 32, false, true, false},
       rt::ElementType::F32,
       rt::ElementType::F32,
       false}, // folded: one matrix
      {{3, 37, 65, 129, true, false, true},
       rt::ElementType::F32,
       rt::ElementType::F32,
       true}, // strided batches: G launches
  };
  for (const GroupCase &gc : cases) {
    const MatmulShape &s = gc.shape;
    SCOPED_TRACE(describe(s));
    const bool bf16 = gc.dtype == rt::ElementType::BF16;
    const bool f32Out = gc.outType == rt::ElementType::F32;
    constexpr size_t kGroups = 3;
    std::vector<std::vector<float>> as, bs, c0s, refs;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> da32, db32, dc32;
    std::vector<std::unique_ptr<DeviceBuffer<uint16_t>>> da16, db16, dc16;
    std::vector<const void *> a, b;
    std::vector<void *> c;
    for (size_t g = 0; g < kGroups; ++g) {
      as.push_back(randomVector<float>(rng, sizeA(s)));
      bs.push_back(randomVector<float>(rng, sizeB(s)));
      c0s.push_back(randomVector<float>(rng, sizeC(s)));
      std::vector<uint16_t> a16, b16;
      if (bf16) {
        a16 = roundToBf16(as.back());
        b16 = roundToBf16(bs.back());
      }
      std::vector<float> ref = cpuMatmul(s, as.back(), bs.back());
      if (gc.accumulate)
        for (size_t i = 0; i < ref.size(); ++i)
          ref[i] += c0s.back()[i];
      refs.push_back(ref);
      if (bf16) {
        da16.push_back(std::make_unique<DeviceBuffer<uint16_t>>(a16.size()));
        db16.push_back(std::make_unique<DeviceBuffer<uint16_t>>(b16.size()));
        da16.back()->upload(a16);
        db16.back()->upload(b16);
        a.push_back(da16.back()->get());
        b.push_back(db16.back()->get());
      } else {
        da32.push_back(std::make_unique<DeviceBuffer<float>>(as.back().size()));
        db32.push_back(std::make_unique<DeviceBuffer<float>>(bs.back().size()));
        da32.back()->upload(as.back());
        db32.back()->upload(bs.back());
        a.push_back(da32.back()->get());
        b.push_back(db32.back()->get());
      }
      if (f32Out) {
        dc32.push_back(std::make_unique<DeviceBuffer<float>>(sizeC(s)));
        c.push_back(dc32.back()->get());
      } else {
        dc16.push_back(std::make_unique<DeviceBuffer<uint16_t>>(sizeC(s)));
        c.push_back(dc16.back()->get());
      }
    }
    // Runs the group from c0 and returns each product's result as floats.
    auto runGroup = [&]() {
      for (size_t g = 0; g < kGroups; ++g)
        if (f32Out)
          dc32[g]->upload(c0s[g]);
      EXPECT_TRUE(runner->runGroup(s, a, b, c, gc.dtype, gc.outType,
                                   gc.accumulate, nullptr));
      std::vector<std::vector<float>> out;
      for (size_t g = 0; g < kGroups; ++g)
        out.push_back(f32Out ? dc32[g]->download()
                             : widenBf16(dc16[g]->download()));
      return out;
    };
    const auto first = runGroup();
    for (size_t g = 0; g < kGroups; ++g)
      EXPECT_LT(relError(first[g], refs[g]),
                bf16 && !f32Out ? kBf16Tol : kF32Tol)
          << "product " << g;
    EXPECT_EQ(runGroup(), first);
  }
  DeviceBuffer<float> buffer(16);
  MatmulShape s;
  s.m = s.n = s.k = 2;
  Status mismatched = runner->runGroup(s, {buffer.get()}, {}, {buffer.get()},
                                       rt::ElementType::F32,
                                       rt::ElementType::F32, false, nullptr);
  ASSERT_FALSE(mismatched.isOk());
  EXPECT_NE(mismatched.message().find("one of each per product"),
            std::string::npos)
      << mismatched.message();
}

// Tests the argument errors: f64, negative and too large sizes.
TEST(CudaMatmulTest, RejectsBadArguments) {
  MLT_REQUIRE_CUDA();
  auto runner = makeRunner();
  ASSERT_TRUE(runner);
  DeviceBuffer<double> buffer(16);
  MatmulShape s;
  s.m = s.n = s.k = 2;
  Status f64 = runner->run(s, buffer.get(), buffer.get(), buffer.get(),
                           rt::ElementType::F64, nullptr);
  ASSERT_FALSE(f64.isOk());
  EXPECT_NE(f64.message().find("f64"), std::string::npos) << f64.message();
  s.k = -1;
  Status negative = runner->run(s, buffer.get(), buffer.get(), buffer.get(),
                                rt::ElementType::F32, nullptr);
  ASSERT_FALSE(negative.isOk());
  EXPECT_NE(negative.message().find("negative"), std::string::npos)
      << negative.message();
  s.k = int64_t(1) << 32;
  Status large = runner->run(s, buffer.get(), buffer.get(), buffer.get(),
                             rt::ElementType::F32, nullptr);
  ASSERT_FALSE(large.isOk());
  EXPECT_NE(large.message().find("32-bit"), std::string::npos)
      << large.message();
}

} // namespace
