//===- RMSNormTest.cpp - tests of the CPU rmsnorm family ------------------===//
//
// Part of mlt. Checks the forward against LlamaRMSNorm's formula written out
// in double, the backward against finite differences, dweight accumulation,
// in-place use, and float against double.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/RMSNorm.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kRows = 2 * 7, kCols = 22;
constexpr double kEps = 1e-5;

/// out = x / sqrt(mean(x^2) + eps) * w, row by row, in double.
std::vector<double> referenceRMSNorm(const std::vector<double> &x,
                                     const std::vector<double> &w,
                                     std::vector<double> *rstd) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double meanSq = 0.0;
    for (int64_t j = 0; j < kCols; ++j)
      meanSq += x[r * kCols + j] * x[r * kCols + j];
    meanSq /= kCols;
    const double rs = 1.0 / std::sqrt(meanSq + kEps);
    (*rstd)[r] = rs;
    for (int64_t j = 0; j < kCols; ++j)
      out[r * kCols + j] = x[r * kCols + j] * rs * w[j];
  }
  return out;
}

template <typename T> class RMSNormTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RMSNormTest, FloatTypes);

// Tests the output and the saved rstd against the formula.
TYPED_TEST(RMSNormTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(31);
  auto x = randomVector<double>(rng, kRows * kCols, -2.0, 2.0);
  auto w = randomVector<double>(rng, kCols, 0.5, 1.5);
  std::vector<double> rstdRef(kRows);
  auto expected = referenceRMSNorm(x, w, &rstdRef);
  auto xT = castVector<T>(x), wT = castVector<T>(w);
  std::vector<T> out(kRows * kCols), rstd(kRows);
  rmsnormForward<T>(out.data(), rstd.data(), xT.data(), wT.data(), kRows, kCols,
                    kEps);
  EXPECT_LT(relError(out, expected), forwardTol<T>());
  EXPECT_LT(relError(rstd, rstdRef), forwardTol<T>());

  // In place: out aliases x.
  rmsnormForward<T>(xT.data(), rstd.data(), xT.data(), wT.data(), kRows, kCols,
                    kEps);
  EXPECT_EQ(xT, out);
}

// Tests dx and dweight against central differences of sum(out * G), with
// dweight accumulating onto a non-zero buffer.
TEST(RMSNormGradTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(32);
  auto x = randomVector<double>(rng, kRows * kCols, -2.0, 2.0);
  auto w = randomVector<double>(rng, kCols, 0.5, 1.5);
  auto weights = randomVector<double>(rng, kRows * kCols);
  std::vector<double> rstd(kRows);
  auto loss = [&] {
    std::vector<double> out(kRows * kCols), r(kRows);
    rmsnormForward<double>(out.data(), r.data(), x.data(), w.data(), kRows,
                           kCols, kEps);
    return weightedSum(out, weights);
  };
  std::vector<double> out(kRows * kCols);
  rmsnormForward<double>(out.data(), rstd.data(), x.data(), w.data(), kRows,
                         kCols, kEps);
  std::vector<double> dx(kRows * kCols);
  auto dwInitial = randomVector<double>(rng, kCols);
  auto dw = dwInitial;
  rmsnormBackward<double>(dx.data(), dw.data(), weights.data(), x.data(),
                          w.data(), rstd.data(), kRows, kCols);
  for (int64_t j = 0; j < kCols; ++j)
    dw[j] -= dwInitial[j];
  EXPECT_LT(relError(dx, numericalGradient(loss, x)), kGradTol);
  EXPECT_LT(relError(dw, numericalGradient(loss, w)), kGradTol);

  // In place: dx aliases dout.
  auto dxInPlace = weights;
  std::vector<double> dwUnused(kCols, 0.0);
  rmsnormBackward<double>(dxInPlace.data(), dwUnused.data(), dxInPlace.data(),
                          x.data(), w.data(), rstd.data(), kRows, kCols);
  EXPECT_EQ(dxInPlace, dx);
}

// Tests that the float kernels agree with the double kernels on the same
// (float-representable) inputs.
TEST(RMSNormPrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(33);
  auto xf = randomVector<float>(rng, kRows * kCols, -2.0, 2.0);
  auto wf = randomVector<float>(rng, kCols, 0.5, 1.5);
  auto gf = randomVector<float>(rng, kRows * kCols);
  auto xd = castVector<double>(xf), wd = castVector<double>(wf),
       gd = castVector<double>(gf);
  std::vector<float> outf(kRows * kCols), rf(kRows), dxf(kRows * kCols),
      dwf(kCols, 0.0f);
  std::vector<double> outd(kRows * kCols), rd(kRows), dxd(kRows * kCols),
      dwd(kCols, 0.0);
  rmsnormForward<float>(outf.data(), rf.data(), xf.data(), wf.data(), kRows,
                        kCols, kEps);
  rmsnormForward<double>(outd.data(), rd.data(), xd.data(), wd.data(), kRows,
                         kCols, kEps);
  rmsnormBackward<float>(dxf.data(), dwf.data(), gf.data(), xf.data(),
                         wf.data(), rf.data(), kRows, kCols);
  rmsnormBackward<double>(dxd.data(), dwd.data(), gd.data(), xd.data(),
                          wd.data(), rd.data(), kRows, kCols);
  EXPECT_LT(relError(outf, outd), kFloatTol);
  EXPECT_LT(relError(dxf, dxd), kFloatTol);
  EXPECT_LT(relError(dwf, dwd), kFloatTol);
}

} // namespace
