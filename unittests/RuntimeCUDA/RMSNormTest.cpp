//===- RMSNormTest.cpp - tests of the CUDA rmsnorm family -----------------===//
//
// Part of mlt. Checks the CUDA RMSNorm forward and backward against the CPU
// kernels of lib/Runtime/cpu on the same random inputs, as the CPU backend
// drives them (rstd recomputed, dw overwritten): odd dims (scalar path),
// dims that allow 16-byte packs (the cached kernels with 1 to 4 packs per
// thread, and the generic ones past them), the row layouts chosen, rows beyond
// one backward block's share, a dim whose dw accumulator does not fit shared
// memory, misaligned pointers, in-place use, zero rows, bit-reproducibility,
// bf16 storage, and the backward's addend (rms_norm_bwd_add), aliased to dx and
// dy too. The fused amax of y and dx (FP8 current scaling) on every kernel
// path: the same outputs as without it, and max |output| bit for bit.
//
//===----------------------------------------------------------------------===//

#include "kernels/rmsnorm.h"
#include "CudaTestUtil.h"
#include "kernels/rmsnorm.cuh"

#include "mlt/Runtime/cpu/RMSNorm.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <type_traits>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

constexpr double kEps = 1e-5;
/// Normwise tolerance against the CPU float kernels: the GPU sums the row
/// statistics in f32 (the CPU in f64) in another order; dim <= 13000 terms.
constexpr double kTol = 1e-5;

struct Shape {
  int64_t rows, dim;
};
// Odd dims (scalar path), multiples of 4 (packs), one row, rows spread over
// several rows per backward block (> 512 rows), a dim past the 48 KiB
// shared accumulator, 96 packs (one warp of 3 packs per row).
constexpr Shape kShapes[] = {{1, 1},    {3, 7},     {5, 64},    {4, 1000},
                             {2, 4096}, {17, 3},    {1100, 96}, {3, 13001},
                             {600, 13}, {2, 12800}, {700, 384}};

std::string describe(const Shape &s) {
  std::ostringstream os;
  os << "rows " << s.rows << " dim " << s.dim;
  return os.str();
}

/// The CPU backend's rms_norm_bwd: rstd recomputed, dw overwritten.
void cpuBackward(std::vector<float> &dx, std::vector<float> &dw,
                 const std::vector<float> &dy, const std::vector<float> &x,
                 const std::vector<float> &w, int64_t rows, int64_t dim) {
  std::vector<float> rstd(rows), y(rows * dim);
  cpu::rmsnormForward<float>(y.data(), rstd.data(), x.data(), w.data(), rows,
                             dim, kEps);
  dx.assign(rows * dim, 0.f);
  dw.assign(dim, 0.f);
  cpu::rmsnormBackward<float>(dx.data(), dw.data(), dy.data(), x.data(),
                              w.data(), rstd.data(), rows, dim);
}

// The cached kernels' row layout: no pack slot idle where a whole-warp team
// allows it, 2 packs per thread preferred, the generic kernels past 2048
// packs.
TEST(CudaRMSNormTest, RowLayoutLeavesFewestSlotsIdle) {
  using rmsnorm::cachedLayout;
  struct Expect {
    int64_t dim;
    int width, packs, threads;
  };
  for (const Expect &e :
       {Expect{2048, 8, 2, 128}, Expect{768, 8, 3, 32}, Expect{640, 8, 3, 32},
        Expect{768, 4, 2, 96}, Expect{64, 4, 1, 32}, Expect{4096, 8, 2, 256},
        Expect{16384, 8, 4, 512}, Expect{20480, 8, 0, 0}}) {
    SCOPED_TRACE("dim " + std::to_string(e.dim) + " width " +
                 std::to_string(e.width));
    const rmsnorm::RowLayout layout =
        cachedLayout(e.dim, true, e.width, rmsnorm::kPreferredPacks);
    EXPECT_EQ(layout.packs, e.packs);
    EXPECT_EQ(layout.threads, e.threads);
  }
  EXPECT_EQ(cachedLayout(2048, false, 8, rmsnorm::kPreferredPacks).packs, 0);
}

TEST(CudaRMSNormTest, ForwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(301);
  for (const Shape &s : kShapes) {
    SCOPED_TRACE(describe(s));
    auto x = randomVector<float>(rng, s.rows * s.dim, -2.0, 2.0);
    auto w = randomVector<float>(rng, s.dim, 0.5, 1.5);
    std::vector<float> yRef(s.rows * s.dim), rstdRef(s.rows);
    cpu::rmsnormForward<float>(yRef.data(), rstdRef.data(), x.data(), w.data(),
                               s.rows, s.dim, kEps);
    DeviceBuffer<float> dX(x.size()), dW(w.size()), dY(x.size()), dRstd(s.rows);
    dX.upload(x);
    dW.upload(w);
    ASSERT_TRUE(launchRmsNormFwd(dY.get(), dRstd.get(), dX.get(), dW.get(),
                                 s.rows, s.dim, kEps, 0));
    const std::vector<float> y = dY.download();
    EXPECT_LT(relError(y, yRef), kTol);
    EXPECT_LT(relError(dRstd.download(), rstdRef), kTol);

    // In place, without rstd: the same bits.
    ASSERT_TRUE(launchRmsNormFwd(dX.get(), nullptr, dX.get(), dW.get(), s.rows,
                                 s.dim, kEps, 0));
    EXPECT_EQ(dX.download(), y);
  }
}

TEST(CudaRMSNormTest, BackwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(302);
  for (const Shape &s : kShapes) {
    // With one column dx = rstd * w * dy * (1 - n^2) is a difference of
    // nearly equal terms (n^2 = x^2 / (x^2 + eps)): no relative accuracy.
    if (s.dim == 1)
      continue;
    SCOPED_TRACE(describe(s));
    auto x = randomVector<float>(rng, s.rows * s.dim, -2.0, 2.0);
    auto w = randomVector<float>(rng, s.dim, 0.5, 1.5);
    auto dy = randomVector<float>(rng, s.rows * s.dim);
    std::vector<float> dxRef, dwRef;
    cpuBackward(dxRef, dwRef, dy, x, w, s.rows, s.dim);

    DeviceBuffer<float> dX(x.size()), dW(w.size()), dDy(dy.size()),
        dDx(dy.size()), dDw(s.dim);
    dX.upload(x);
    dW.upload(w);
    dDy.upload(dy);
    // dw is overwritten: start from garbage.
    dDw.upload(randomVector<float>(rng, s.dim));
    const size_t scratchBytes = rmsNormBwdScratchBytes(s.rows, s.dim);
    DeviceBuffer<char> scratch(scratchBytes);
    ASSERT_TRUE(launchRmsNormBwd(dDx.get(), dDw.get(), dDy.get(), dX.get(),
                                 dW.get(), nullptr, s.rows, s.dim, kEps,
                                 scratch.get(), scratchBytes, 0));
    const std::vector<float> dx = dDx.download(), dw = dDw.download();
    EXPECT_LT(relError(dx, dxRef), kTol);
    EXPECT_LT(relError(dw, dwRef), kTol);

    // Again, in place (dx aliases dy): bit-identical results.
    ASSERT_TRUE(launchRmsNormBwd(dDy.get(), dDw.get(), dDy.get(), dX.get(),
                                 dW.get(), nullptr, s.rows, s.dim, kEps,
                                 scratch.get(), scratchBytes, 0));
    EXPECT_EQ(dDy.download(), dx);
    EXPECT_EQ(dDw.download(), dw);
  }
}

// Pointers one float past a 16-byte boundary take the scalar path with dims
// that would otherwise use packs.
TEST(CudaRMSNormTest, MisalignedPointersMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(303);
  const int64_t rows = 9, dim = 256;
  auto x = randomVector<float>(rng, rows * dim + 1, -2.0, 2.0);
  auto w = randomVector<float>(rng, dim + 1, 0.5, 1.5);
  auto dy = randomVector<float>(rng, rows * dim + 1);
  const std::vector<float> xs(x.begin() + 1, x.end()),
      ws(w.begin() + 1, w.end()), dys(dy.begin() + 1, dy.end());
  std::vector<float> yRef(rows * dim), rstdRef(rows), dxRef, dwRef;
  cpu::rmsnormForward<float>(yRef.data(), rstdRef.data(), xs.data(), ws.data(),
                             rows, dim, kEps);
  cpuBackward(dxRef, dwRef, dys, xs, ws, rows, dim);

  DeviceBuffer<float> dX(x.size()), dW(w.size()), dDy(dy.size()),
      dY(rows * dim + 1), dDx(rows * dim + 1), dDw(dim + 1);
  dX.upload(x);
  dW.upload(w);
  dDy.upload(dy);
  ASSERT_TRUE(launchRmsNormFwd(dY.get() + 1, nullptr, dX.get() + 1,
                               dW.get() + 1, rows, dim, kEps, 0));
  const size_t scratchBytes = rmsNormBwdScratchBytes(rows, dim);
  DeviceBuffer<char> scratch(scratchBytes);
  ASSERT_TRUE(launchRmsNormBwd(dDx.get() + 1, dDw.get() + 1, dDy.get() + 1,
                               dX.get() + 1, dW.get() + 1, nullptr, rows, dim,
                               kEps, scratch.get(), scratchBytes, 0));
  const std::vector<float> y = dY.download(), dx = dDx.download(),
                           dw = dDw.download();
  EXPECT_LT(relError(std::vector<float>(y.begin() + 1, y.end()), yRef), kTol);
  EXPECT_LT(relError(std::vector<float>(dx.begin() + 1, dx.end()), dxRef),
            kTol);
  EXPECT_LT(relError(std::vector<float>(dw.begin() + 1, dw.end()), dwRef),
            kTol);
}

// No rows: dw is zeroed and nothing else happens; too little scratch and bad
// shapes are errors.
TEST(CudaRMSNormTest, EdgeCasesAndErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> dDw(5), dX(10), dW(5);
  dDw.upload(std::vector<float>(5, 3.f));
  EXPECT_EQ(rmsNormBwdScratchBytes(0, 5), 0u);
  ASSERT_TRUE(launchRmsNormBwd(dX.get(), dDw.get(), dX.get(), dX.get(),
                               dW.get(), nullptr, 0, 5, kEps, nullptr, 0, 0));
  EXPECT_EQ(dDw.download(), std::vector<float>(5, 0.f));

  Status status =
      launchRmsNormBwd(dX.get(), dDw.get(), dX.get(), dX.get(), dW.get(),
                       nullptr, 2, 5, kEps, nullptr, 0, 0);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("scratch"), std::string::npos)
      << status.message();
  EXPECT_FALSE(
      launchRmsNormFwd(dX.get(), nullptr, dX.get(), dW.get(), 2, 0, kEps, 0));
}

// bf16 storage: y and dx against the CPU float kernels on the same (bf16)
// inputs, within bf16 rounding of the outputs.
TEST(CudaRMSNormTest, BF16MatchesCpuWithinRounding) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(304);
  for (const Shape &s : {Shape{4, 64}, Shape{3, 37}, Shape{700, 24}}) {
    SCOPED_TRACE(describe(s));
    auto round = [](std::vector<float> v) {
      std::vector<uint16_t> bits(v.size());
      cpu::castFloatToBF16(bits.data(), v.data(), int64_t(v.size()));
      cpu::castBF16ToFloat(v.data(), bits.data(), int64_t(v.size()));
      return std::make_pair(bits, v);
    };
    auto [xb, x] = round(randomVector<float>(rng, s.rows * s.dim, -2.0, 2.0));
    auto [wb, w] = round(randomVector<float>(rng, s.dim, 0.5, 1.5));
    auto [dyb, dy] = round(randomVector<float>(rng, s.rows * s.dim));
    std::vector<float> yRef(s.rows * s.dim), rstdRef(s.rows), dxRef, dwRef;
    cpu::rmsnormForward<float>(yRef.data(), rstdRef.data(), x.data(), w.data(),
                               s.rows, s.dim, kEps);
    cpuBackward(dxRef, dwRef, dy, x, w, s.rows, s.dim);

    DeviceBuffer<uint16_t> dX(xb.size()), dW(wb.size()), dDy(dyb.size()),
        dY(xb.size()), dDx(xb.size());
    DeviceBuffer<float> dDw(s.dim); // a parameter's gradient: f32
    dX.upload(xb);
    dW.upload(wb);
    dDy.upload(dyb);
    auto bf = [](uint16_t *p) { return reinterpret_cast<__nv_bfloat16 *>(p); };
    ASSERT_TRUE(launchRmsNormFwd(bf(dY.get()), nullptr, bf(dX.get()),
                                 bf(dW.get()), s.rows, s.dim, kEps, 0));
    const size_t scratchBytes = rmsNormBwdScratchBytes(s.rows, s.dim);
    DeviceBuffer<char> scratch(scratchBytes);
    ASSERT_TRUE(launchRmsNormBwd(bf(dDx.get()), dDw.get(), bf(dDy.get()),
                                 bf(dX.get()), bf(dW.get()), nullptr, s.rows,
                                 s.dim, kEps, scratch.get(), scratchBytes, 0));
    auto widen = [](const std::vector<uint16_t> &bits) {
      std::vector<float> out(bits.size());
      cpu::castBF16ToFloat(out.data(), bits.data(), int64_t(bits.size()));
      return out;
    };
    // bf16 keeps 8 significant bits: 2^-8 relative per rounding, and y
    // rounds twice (x * rstd, then the weight product).
    EXPECT_LT(relError(widen(dY.download()), yRef), 1e-2);
    EXPECT_LT(relError(widen(dDx.download()), dxRef), 1e-2);
    // dw is summed in f64 over f32 partials and rounded once to f32.
    EXPECT_LT(relError(dDw.download(), dwRef), 1e-4);
  }
}

// rms_norm_bwd_add: dx = the backward's dx + addend in one f32 add, so in f32
// the result is bit for bit the unfused dx plus the addend. The addend may
// alias dx, dy, or both.
TEST(CudaRMSNormTest, BackwardWithAddendMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(305);
  for (const Shape &s : kShapes) {
    if (s.dim == 1) // see BackwardMatchesCpu
      continue;
    SCOPED_TRACE(describe(s));
    const int64_t n = s.rows * s.dim;
    auto x = randomVector<float>(rng, n, -2.0, 2.0);
    auto w = randomVector<float>(rng, s.dim, 0.5, 1.5);
    auto dy = randomVector<float>(rng, n);
    auto addend = randomVector<float>(rng, n);
    std::vector<float> dxRef, dwRef;
    cpuBackward(dxRef, dwRef, dy, x, w, s.rows, s.dim);
    std::vector<float> dxAddRef(n);
    for (int64_t i = 0; i < n; ++i)
      dxAddRef[i] = dxRef[i] + addend[i];

    DeviceBuffer<float> dX(n), dW(s.dim), dDy(n), dA(n), dDx(n), dDw(s.dim);
    dX.upload(x);
    dW.upload(w);
    dDy.upload(dy);
    dA.upload(addend);
    const size_t scratchBytes = rmsNormBwdScratchBytes(s.rows, s.dim);
    DeviceBuffer<char> scratch(scratchBytes);
    auto run = [&](float *dx, const float *g, const float *a) {
      ASSERT_TRUE(launchRmsNormBwd(dx, dDw.get(), g, dX.get(), dW.get(), a,
                                   s.rows, s.dim, kEps, scratch.get(),
                                   scratchBytes, 0));
    };
    run(dDx.get(), dDy.get(), nullptr);
    const std::vector<float> dx0 = dDx.download(), dw0 = dDw.download();
    run(dDx.get(), dDy.get(), dA.get());
    const std::vector<float> dx1 = dDx.download();
    EXPECT_LT(relError(dx1, dxAddRef), kTol);
    EXPECT_EQ(dDw.download(), dw0);
    std::vector<float> expected(n), expectedDy(n);
    for (int64_t i = 0; i < n; ++i) {
      expected[i] = dx0[i] + addend[i];
      expectedDy[i] = dx0[i] + dy[i];
    }
    EXPECT_EQ(dx1, expected);

    // The addend in dx's buffer (accumulating into dx).
    dDx.upload(addend);
    run(dDx.get(), dDy.get(), dDx.get());
    EXPECT_EQ(dDx.download(), expected);
    // The addend is dy.
    run(dDx.get(), dDy.get(), dDy.get());
    EXPECT_EQ(dDx.download(), expectedDy);
    // dx, dy and the addend are one buffer.
    run(dDy.get(), dDy.get(), dDy.get());
    EXPECT_EQ(dDy.download(), expectedDy);
    EXPECT_EQ(dDw.download(), dw0);
  }
}

/// A vector of floats rounded to bf16: the bits and their values.
std::pair<std::vector<uint16_t>, std::vector<float>>
roundToBF16(std::vector<float> v) {
  std::vector<uint16_t> bits(v.size());
  cpu::castFloatToBF16(bits.data(), v.data(), int64_t(v.size()));
  cpu::castBF16ToFloat(v.data(), bits.data(), int64_t(v.size()));
  return {bits, v};
}
std::vector<float> widenBF16(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  cpu::castBF16ToFloat(out.data(), bits.data(), int64_t(bits.size()));
  return out;
}
__nv_bfloat16 *asBF16(uint16_t *p) {
  return reinterpret_cast<__nv_bfloat16 *>(p);
}

// bf16 storage at dims that take each kernel: the cached kernels with 1, 2
// and 4 packs per thread (64 columns: 8 teams of one warp per block; 2048:
// teams of 128 threads, as LLaMA's rows; 8192: one team of 512; 16384; 2056:
// a partly idle last warp), the generic 16-byte kernel (20480), the scalar
// one (100, and pointers one element past a 16-byte boundary), with rows
// that leave the last group of rows of a block short (700, 1100 rows). Within
// bf16 rounding of the CPU float kernels, with and without an addend (aliasing
// dy), in place, and the same bits on a second run.
TEST(CudaRMSNormTest, BF16PathsMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(306);
  struct Case {
    int64_t rows, dim, offset;
  };
  // 768 and 640: 96 and 80 packs, one warp of 3 packs per row (the 125m
  // model's hidden size).
  for (const Case &c :
       {Case{700, 64, 0}, Case{1100, 2048, 0}, Case{33, 2056, 0},
        Case{9, 8192, 0}, Case{5, 16384, 0}, Case{3, 20480, 0}, Case{6, 100, 0},
        Case{4, 2048, 1}, Case{1000, 768, 0}, Case{40, 640, 0}}) {
    SCOPED_TRACE(describe(Shape{c.rows, c.dim}) + " offset " +
                 std::to_string(c.offset));
    const int64_t n = c.rows * c.dim;
    auto [xb, x] = roundToBF16(randomVector<float>(rng, n, -2.0, 2.0));
    auto [wb, w] = roundToBF16(randomVector<float>(rng, c.dim, 0.5, 1.5));
    auto [dyb, dy] = roundToBF16(randomVector<float>(rng, n));
    auto [ab, a] = roundToBF16(randomVector<float>(rng, n));
    std::vector<float> yRef(n), rstdRef(c.rows), dxRef, dwRef;
    cpu::rmsnormForward<float>(yRef.data(), rstdRef.data(), x.data(), w.data(),
                               c.rows, c.dim, kEps);
    cpuBackward(dxRef, dwRef, dy, x, w, c.rows, c.dim);
    std::vector<float> dxAddRef(n), dxDyRef(n);
    for (int64_t i = 0; i < n; ++i) {
      dxAddRef[i] = dxRef[i] + a[i];
      dxDyRef[i] = dxRef[i] + dy[i];
    }

    OffsetBuffer<uint16_t> dX(xb, c.offset), dW(wb, c.offset),
        dDy(dyb, c.offset), dA(ab, c.offset), dY(xb, c.offset),
        dDx(xb, c.offset);
    DeviceBuffer<float> dDw(c.dim);
    const size_t scratchBytes = rmsNormBwdScratchBytes(c.rows, c.dim);
    DeviceBuffer<char> scratch(scratchBytes);

    ASSERT_TRUE(launchRmsNormFwd(asBF16(dY.get()), nullptr, asBF16(dX.get()),
                                 asBF16(dW.get()), c.rows, c.dim, kEps, 0));
    const std::vector<uint16_t> y = dY.download();
    // bf16 keeps 8 significant bits: 2^-8 relative per rounding, and y
    // rounds twice (x * rstd, then the weight product).
    EXPECT_LT(relError(widenBF16(y), yRef), 1e-2);

    auto backward = [&](uint16_t *dx, uint16_t *g, uint16_t *add) {
      ASSERT_TRUE(launchRmsNormBwd(asBF16(dx), dDw.get(), asBF16(g),
                                   asBF16(dX.get()), asBF16(dW.get()),
                                   add ? asBF16(add) : nullptr, c.rows, c.dim,
                                   kEps, scratch.get(), scratchBytes, 0));
    };
    backward(dDx.get(), dDy.get(), nullptr);
    const std::vector<uint16_t> dx = dDx.download();
    const std::vector<float> dw = dDw.download();
    EXPECT_LT(relError(widenBF16(dx), dxRef), 1e-2);
    // dw is summed in f64 over f32 partials and rounded once to f32.
    EXPECT_LT(relError(dw, dwRef), 1e-4);
    backward(dDx.get(), dDy.get(), nullptr);
    EXPECT_EQ(dDx.download(), dx);
    EXPECT_EQ(dDw.download(), dw);

    backward(dDx.get(), dDy.get(), dA.get());
    EXPECT_LT(relError(widenBF16(dDx.download()), dxAddRef), 1e-2);
    EXPECT_EQ(dDw.download(), dw);
    backward(dDx.get(), dDy.get(), dDy.get());
    const std::vector<uint16_t> dxDy = dDx.download();
    EXPECT_LT(relError(widenBF16(dxDy), dxDyRef), 1e-2);
    // In place over dy, dy also the addend: the same bits.
    backward(dDy.get(), dDy.get(), dDy.get());
    EXPECT_EQ(dDy.download(), dxDy);

    // The forward in place: the same bits.
    ASSERT_TRUE(launchRmsNormFwd(asBF16(dX.get()), nullptr, asBF16(dX.get()),
                                 asBF16(dW.get()), c.rows, c.dim, kEps, 0));
    EXPECT_EQ(dX.download(), y);
  }
}

//===----------------------------------------------------------------------===//
// The fused amax (FP8 current scaling)
//===----------------------------------------------------------------------===//

/// `n` values uniform in [lo, hi), as S (bf16: rounded).
template <typename S>
std::vector<S> randomStored(std::mt19937 &rng, int64_t n, double lo,
                            double hi) {
  std::vector<float> values = randomVector<float>(rng, n, lo, hi);
  if constexpr (std::is_same_v<S, float>)
    return values;
  else
    return roundToBF16(values).first;
}

struct AmaxCase {
  int64_t rows, dim, offset;
};
// Each kernel path of both types: the cached kernels (dim 200: 50 f32 or 25
// bf16 packs; 64 with 1100 rows: several rows per team and per backward
// block; 768: one warp of 3 bf16 packs), the generic 16-byte kernels
// (20480), the scalar ones (odd dims, and pointers one element past a
// 16-byte boundary), and a dim whose backward dw accumulator does not fit
// shared memory (13001).
constexpr AmaxCase kAmaxCases[] = {{37, 200, 0},  {37, 200, 1},  {37, 203, 0},
                                   {1100, 64, 0}, {3, 20480, 0}, {3, 13001, 0},
                                   {5, 5, 0},     {700, 768, 0}};

std::string describe(const AmaxCase &c) {
  return describe(Shape{c.rows, c.dim}) + " offset " + std::to_string(c.offset);
}

/// The forward with amax: y the same bits as without it, in place too, and
/// the amax that of y as stored.
template <typename S> void checkForwardAmax(const AmaxCase &c, int seed) {
  SCOPED_TRACE(describe(c) + (std::is_same_v<S, float> ? " f32" : " bf16"));
  std::mt19937 rng(seed);
  const int64_t n = c.rows * c.dim;
  const std::vector<S> x = randomStored<S>(rng, n, -2.0, 2.0),
                       w = randomStored<S>(rng, c.dim, 0.5, 1.5);
  OffsetBuffer<S> dX(x, c.offset), dW(w, c.offset), dY(x, c.offset),
      dYAmax(x, c.offset), dInPlace(x, c.offset);
  DeviceBuffer<float> amax(1), rstd(c.rows);
  ASSERT_TRUE(launchRmsNormFwd(onDevice(dY.get()), nullptr, onDevice(dX.get()),
                               onDevice(dW.get()), c.rows, c.dim, kEps, 0));
  const std::vector<S> y = dY.download();

  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormFwd(onDevice(dYAmax.get()), rstd.get(),
                               onDevice(dX.get()), onDevice(dW.get()), c.rows,
                               c.dim, kEps, 0, amax.get()));
  EXPECT_TRUE(sameBits(dYAmax.download(), y));
  expectAmaxOf(amax.get(), onDevice(dYAmax.get()), n);

  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormFwd(onDevice(dInPlace.get()), nullptr,
                               onDevice(dInPlace.get()), onDevice(dW.get()),
                               c.rows, c.dim, kEps, 0, amax.get()));
  EXPECT_TRUE(sameBits(dInPlace.download(), y));
  expectAmaxOf(amax.get(), onDevice(dInPlace.get()), n);
}

TEST(CudaRMSNormTest, ForwardAmaxIsMaxAbsOfY) {
  MLT_REQUIRE_CUDA();
  int seed = 310;
  for (const AmaxCase &c : kAmaxCases) {
    checkForwardAmax<float>(c, ++seed);
    checkForwardAmax<uint16_t>(c, ++seed);
  }
}

/// The backward with amaxDx, without and with an addend: dx and dw the same
/// bits as without it, also with dx over dy, and the amax that of dx as
/// stored (the addend added).
template <typename S> void checkBackwardAmax(const AmaxCase &c, int seed) {
  SCOPED_TRACE(describe(c) + (std::is_same_v<S, float> ? " f32" : " bf16"));
  std::mt19937 rng(seed);
  const int64_t n = c.rows * c.dim;
  const std::vector<S> x = randomStored<S>(rng, n, -2.0, 2.0),
                       w = randomStored<S>(rng, c.dim, 0.5, 1.5),
                       dy = randomStored<S>(rng, n, -1.0, 1.0),
                       addend = randomStored<S>(rng, n, -1.0, 1.0);
  OffsetBuffer<S> dX(x, c.offset), dW(w, c.offset), dDy(dy, c.offset),
      dA(addend, c.offset), dDx(dy, c.offset), dDxAmax(dy, c.offset);
  DeviceBuffer<float> dDw(c.dim), dDwAmax(c.dim), amax(1);
  const size_t scratchBytes = rmsNormBwdScratchBytes(c.rows, c.dim);
  DeviceBuffer<char> scratch(scratchBytes);
  for (bool withAddend : {false, true}) {
    SCOPED_TRACE(withAddend ? "addend" : "no addend");
    const DeviceOf<S> *a = withAddend ? onDevice(dA.get()) : nullptr;
    ASSERT_TRUE(launchRmsNormBwd(onDevice(dDx.get()), dDw.get(),
                                 onDevice(dDy.get()), onDevice(dX.get()),
                                 onDevice(dW.get()), a, c.rows, c.dim, kEps,
                                 scratch.get(), scratchBytes, 0));
    const std::vector<S> dx = dDx.download();
    const std::vector<float> dw = dDw.download();

    amax.upload({kStaleAmax});
    ASSERT_TRUE(launchRmsNormBwd(onDevice(dDxAmax.get()), dDwAmax.get(),
                                 onDevice(dDy.get()), onDevice(dX.get()),
                                 onDevice(dW.get()), a, c.rows, c.dim, kEps,
                                 scratch.get(), scratchBytes, 0, amax.get()));
    EXPECT_TRUE(sameBits(dDxAmax.download(), dx));
    EXPECT_TRUE(sameBits(dDwAmax.download(), dw));
    expectAmaxOf(amax.get(), onDevice(dDxAmax.get()), n);

    // dx over dy (dy also the addend with one): the same bits.
    OffsetBuffer<S> dInPlace(dy, c.offset);
    const std::vector<S> expected = [&] {
      if (!withAddend)
        return dx;
      OffsetBuffer<S> dyCopy(dy, c.offset), out(dy, c.offset);
      EXPECT_TRUE(launchRmsNormBwd(
          onDevice(out.get()), dDw.get(), onDevice(dyCopy.get()),
          onDevice(dX.get()), onDevice(dW.get()), onDevice(dyCopy.get()),
          c.rows, c.dim, kEps, scratch.get(), scratchBytes, 0));
      return out.download();
    }();
    amax.upload({kStaleAmax});
    ASSERT_TRUE(launchRmsNormBwd(
        onDevice(dInPlace.get()), dDwAmax.get(), onDevice(dInPlace.get()),
        onDevice(dX.get()), onDevice(dW.get()),
        withAddend ? onDevice(dInPlace.get()) : nullptr, c.rows, c.dim, kEps,
        scratch.get(), scratchBytes, 0, amax.get()));
    EXPECT_TRUE(sameBits(dInPlace.download(), expected));
    EXPECT_TRUE(sameBits(dDwAmax.download(), dw));
    expectAmaxOf(amax.get(), onDevice(dInPlace.get()), n);
  }
}

TEST(CudaRMSNormTest, BackwardAmaxIsMaxAbsOfDx) {
  MLT_REQUIRE_CUDA();
  int seed = 330;
  for (const AmaxCase &c : kAmaxCases) {
    checkBackwardAmax<float>(c, ++seed);
    checkBackwardAmax<uint16_t>(c, ++seed);
  }
}

/// A NaN in x makes its row of y NaN, and one in dy its row of dx: both
/// amaxes are NaN (bit for bit the host's and launchAbsMax's).
template <typename S> void checkNaNAmax(const AmaxCase &c, int seed) {
  SCOPED_TRACE(describe(c) + (std::is_same_v<S, float> ? " f32" : " bf16"));
  std::mt19937 rng(seed);
  const int64_t n = c.rows * c.dim;
  std::vector<S> x = randomStored<S>(rng, n, -2.0, 2.0),
                 w = randomStored<S>(rng, c.dim, 0.5, 1.5),
                 dy = randomStored<S>(rng, n, -1.0, 1.0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t at = n / 2 + 1;
  if constexpr (std::is_same_v<S, float>) {
    x[at] = nan;
    dy[at] = nan;
  } else {
    x[at] = roundToBF16({nan}).first[0];
    dy[at] = x[at];
  }
  OffsetBuffer<S> dX(x, c.offset), dW(w, c.offset), dDy(dy, c.offset),
      dY(x, c.offset), dDx(dy, c.offset);
  DeviceBuffer<float> amax(1), dDw(c.dim);
  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormFwd(onDevice(dY.get()), nullptr, onDevice(dX.get()),
                               onDevice(dW.get()), c.rows, c.dim, kEps, 0,
                               amax.get()));
  // The amax has no sign: NaN bits are those above infinity's.
  EXPECT_GT(deviceFloatBits(amax.get()), 0x7F800000u);
  expectAmaxOf(amax.get(), onDevice(dY.get()), n);

  // dy's NaN alone (x finite).
  OffsetBuffer<S> dXFinite(randomStored<S>(rng, n, -2.0, 2.0), c.offset);
  const size_t scratchBytes = rmsNormBwdScratchBytes(c.rows, c.dim);
  DeviceBuffer<char> scratch(scratchBytes);
  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormBwd(onDevice(dDx.get()), dDw.get(),
                               onDevice(dDy.get()), onDevice(dXFinite.get()),
                               onDevice(dW.get()), nullptr, c.rows, c.dim, kEps,
                               scratch.get(), scratchBytes, 0, amax.get()));
  EXPECT_GT(deviceFloatBits(amax.get()), 0x7F800000u);
  expectAmaxOf(amax.get(), onDevice(dDx.get()), n);
}

TEST(CudaRMSNormTest, AmaxOfNaNOutputsIsNaN) {
  MLT_REQUIRE_CUDA();
  // The cached, scalar and generic 16-byte paths.
  int seed = 350;
  for (const AmaxCase &c :
       {AmaxCase{37, 200, 0}, AmaxCase{37, 203, 0}, AmaxCase{3, 20480, 0}}) {
    checkNaNAmax<float>(c, ++seed);
    checkNaNAmax<uint16_t>(c, ++seed);
  }
}

// No rows: the amax is 0 (as launchAbsMax gives for no elements); an
// argument error queues nothing, so the amax is left as it was.
TEST(CudaRMSNormTest, AmaxWithoutRowsAndOnErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> dDw(5), dX(10), dW(5), amax(1);
  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormFwd(dX.get(), nullptr, dX.get(), dW.get(), 0, 5,
                               kEps, 0, amax.get()));
  EXPECT_EQ(deviceFloatBits(amax.get()), 0u);
  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchRmsNormBwd(dX.get(), dDw.get(), dX.get(), dX.get(),
                               dW.get(), nullptr, 0, 5, kEps, nullptr, 0, 0,
                               amax.get()));
  EXPECT_EQ(deviceFloatBits(amax.get()), 0u);

  amax.upload({kStaleAmax});
  EXPECT_FALSE(launchRmsNormBwd(dX.get(), dDw.get(), dX.get(), dX.get(),
                                dW.get(), nullptr, 2, 5, kEps, nullptr, 0, 0,
                                amax.get()));
  EXPECT_FALSE(launchRmsNormFwd(dX.get(), nullptr, dX.get(), dW.get(), 2, 0,
                                kEps, 0, amax.get()));
  EXPECT_EQ(amax.download(), std::vector<float>{kStaleAmax});
}

} // namespace
