//===- RMSNormTest.cpp - tests of the CUDA rmsnorm family -----------------===//
//
// Part of mlt. Checks the CUDA RMSNorm forward and backward against the CPU
// kernels of lib/Runtime/cpu on the same random inputs, as the CPU backend
// drives them (rstd recomputed, dw overwritten): odd dims (scalar path),
// dims that allow 16-byte packs, rows beyond one backward block's share,
// a dim whose dw accumulator does not fit shared memory, misaligned
// pointers, in-place use, zero rows, bit-reproducibility and bf16 storage.
//
//===----------------------------------------------------------------------===//

#include "kernels/rmsnorm.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/RMSNorm.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <sstream>

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
// shared accumulator.
constexpr Shape kShapes[] = {{1, 1},    {3, 7},    {5, 64},    {4, 1000},
                             {2, 4096}, {17, 3},   {1100, 96}, {3, 13001},
                             {600, 13}, {2, 12800}};

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
                                 dW.get(), s.rows, s.dim, kEps, scratch.get(),
                                 scratchBytes, 0));
    const std::vector<float> dx = dDx.download(), dw = dDw.download();
    EXPECT_LT(relError(dx, dxRef), kTol);
    EXPECT_LT(relError(dw, dwRef), kTol);

    // Again, in place (dx aliases dy): bit-identical results.
    ASSERT_TRUE(launchRmsNormBwd(dDy.get(), dDw.get(), dDy.get(), dX.get(),
                                 dW.get(), s.rows, s.dim, kEps, scratch.get(),
                                 scratchBytes, 0));
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
                               dX.get() + 1, dW.get() + 1, rows, dim, kEps,
                               scratch.get(), scratchBytes, 0));
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
                               dW.get(), 0, 5, kEps, nullptr, 0, 0));
  EXPECT_EQ(dDw.download(), std::vector<float>(5, 0.f));

  rt::Status status = launchRmsNormBwd(dX.get(), dDw.get(), dX.get(), dX.get(),
                                       dW.get(), 2, 5, kEps, nullptr, 0, 0);
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
                                 bf(dX.get()), bf(dW.get()), s.rows, s.dim,
                                 kEps, scratch.get(), scratchBytes, 0));
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

} // namespace
