//===- GemmTest.cpp - tests of the CPU gemm family ------------------------===//
//
// Part of mlt. Checks gemm and gemmStridedBatched (all transposes, leading
// dimensions wider than the rows, alpha/beta, shared operands) against a
// plain triple loop, the linear-layer backward recipe of Gemm.h against
// finite differences, the argument checks, and how the pool is shared
// among ranks.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Gemm.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

/// C = alpha * op(A) op(B) + beta * C, row-major, summed in double.
std::vector<double> referenceGemm(bool transA, bool transB, int64_t m,
                                  int64_t n, int64_t k, double alpha,
                                  const std::vector<double> &a, int64_t lda,
                                  const std::vector<double> &b, int64_t ldb,
                                  double beta, std::vector<double> c,
                                  int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        double aip = transA ? a[p * lda + i] : a[i * lda + p];
        double bpj = transB ? b[j * ldb + p] : b[p * ldb + j];
        sum += aip * bpj;
      }
      c[i * ldc + j] = alpha * sum + beta * c[i * ldc + j];
    }
  return c;
}

template <typename T> class GemmTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GemmTest, FloatTypes);

// Tests every transpose combination with padded leading dimensions and
// general alpha and beta.
TYPED_TEST(GemmTest, MatchesReferenceForAllTransposes) {
  using T = TypeParam;
  std::mt19937 rng(11);
  const int64_t m = 5, n = 7, k = 9, pad = 3;
  for (bool transA : {false, true})
    for (bool transB : {false, true}) {
      const int64_t lda = (transA ? m : k) + pad;
      const int64_t ldb = (transB ? k : n) + pad;
      const int64_t ldc = n + pad;
      auto a = randomVector<double>(rng, (transA ? k : m) * lda);
      auto b = randomVector<double>(rng, (transB ? n : k) * ldb);
      auto c = randomVector<double>(rng, m * ldc);
      auto expected = referenceGemm(transA, transB, m, n, k, 0.75, a, lda, b,
                                    ldb, -0.5, c, ldc);
      auto aT = castVector<T>(a), bT = castVector<T>(b), cT = castVector<T>(c);
      ASSERT_TRUE(gemm<T>(transA, transB, m, n, k, T(0.75), aT.data(), lda,
                          bT.data(), ldb, T(-0.5), cT.data(), ldc)
                      .isOk());
      EXPECT_LT(relError(cT, expected), forwardTol<T>())
          << "transA " << transA << " transB " << transB;
      // The padding columns of C are not touched.
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = n; j < ldc; ++j)
          EXPECT_EQ(cT[i * ldc + j], T(c[i * ldc + j]));
    }
}

// Tests that beta = 0 overwrites C without reading it (NaNs do not leak in)
// and that beta = 1 accumulates.
TYPED_TEST(GemmTest, BetaZeroOverwritesAndBetaOneAccumulates) {
  using T = TypeParam;
  std::mt19937 rng(12);
  const int64_t m = 3, n = 6, k = 5;
  auto a = randomVector<double>(rng, m * k);
  auto b = randomVector<double>(rng, k * n);
  auto aT = castVector<T>(a), bT = castVector<T>(b);
  std::vector<T> c(m * n, std::numeric_limits<T>::quiet_NaN());
  ASSERT_TRUE(gemm<T>(false, false, m, n, k, T(1), aT.data(), k, bT.data(), n,
                      T(0), c.data(), n)
                  .isOk());
  auto product = referenceGemm(false, false, m, n, k, 1.0, a, k, b, n, 0.0,
                               std::vector<double>(m * n, 0.0), n);
  EXPECT_LT(relError(c, product), forwardTol<T>());

  ASSERT_TRUE(gemm<T>(false, false, m, n, k, T(1), aT.data(), k, bT.data(), n,
                      T(1), c.data(), n)
                  .isOk());
  for (double &x : product)
    x *= 2.0;
  EXPECT_LT(relError(c, product), forwardTol<T>());
}

// Tests that k = 0 leaves beta * C, the empty product.
TYPED_TEST(GemmTest, EmptyInnerDimensionScalesC) {
  using T = TypeParam;
  std::mt19937 rng(13);
  auto c = randomVector<T>(rng, 4 * 3);
  auto expected = c;
  for (T &x : expected)
    x *= T(0.5);
  T dummy = T(1);
  ASSERT_TRUE(gemm<T>(false, false, 4, 3, 0, T(1), &dummy, 1, &dummy, 3, T(0.5),
                      c.data(), 3)
                  .isOk());
  EXPECT_LT(relError(c, expected), forwardTol<T>());
}

// Tests batched products with per-batch operands and with a shared B
// (stride 0, a weight applied to every batch entry).
TYPED_TEST(GemmTest, StridedBatchedMatchesPerBatchReference) {
  using T = TypeParam;
  std::mt19937 rng(14);
  const int64_t batch = 3, m = 4, n = 5, k = 6;
  for (int64_t strideB : {int64_t(0), n * k}) {
    auto a = randomVector<double>(rng, batch * m * k);
    auto b = randomVector<double>(rng, strideB == 0 ? n * k : batch * n * k);
    auto c = randomVector<double>(rng, batch * m * n);
    std::vector<double> expected;
    for (int64_t i = 0; i < batch; ++i) {
      std::vector<double> ai(a.begin() + i * m * k,
                             a.begin() + (i + 1) * m * k);
      std::vector<double> bi(b.begin() + i * strideB,
                             b.begin() + i * strideB + n * k);
      std::vector<double> ci(c.begin() + i * m * n,
                             c.begin() + (i + 1) * m * n);
      auto ri =
          referenceGemm(false, true, m, n, k, 1.5, ai, k, bi, k, 0.25, ci, n);
      expected.insert(expected.end(), ri.begin(), ri.end());
    }
    auto aT = castVector<T>(a), bT = castVector<T>(b), cT = castVector<T>(c);
    ASSERT_TRUE(gemmStridedBatched<T>(false, true, m, n, k, T(1.5), aT.data(),
                                      k, m * k, bT.data(), k, strideB, T(0.25),
                                      cT.data(), n, m * n, batch)
                    .isOk());
    EXPECT_LT(relError(cT, expected), forwardTol<T>()) << "strideB " << strideB;
  }
}

// Tests the linear-layer recipe of Gemm.h against finite differences: for
// y = x W^T and L = sum(y * G), dx = G W and dW accumulates G^T x.
TEST(GemmGradTest, LinearLayerBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(15);
  const int64_t rows = 6, in = 5, out = 7;
  auto x = randomVector<double>(rng, rows * in);
  auto w = randomVector<double>(rng, out * in);
  auto weights = randomVector<double>(rng, rows * out);
  auto loss = [&] {
    std::vector<double> y(rows * out);
    EXPECT_TRUE(gemm<double>(false, true, rows, out, in, 1.0, x.data(), in,
                             w.data(), in, 0.0, y.data(), out)
                    .isOk());
    return weightedSum(y, weights);
  };
  std::vector<double> dx(rows * in);
  ASSERT_TRUE(gemm<double>(false, false, rows, in, out, 1.0, weights.data(),
                           out, w.data(), in, 0.0, dx.data(), in)
                  .isOk());
  auto dwInitial = randomVector<double>(rng, out * in);
  auto dw = dwInitial;
  ASSERT_TRUE(gemm<double>(true, false, out, in, rows, 1.0, weights.data(), out,
                           x.data(), in, 1.0, dw.data(), in)
                  .isOk());
  for (int64_t i = 0; i < out * in; ++i)
    dw[i] -= dwInitial[i];
  EXPECT_LT(relError(dx, numericalGradient(loss, x)), kGradTol);
  EXPECT_LT(relError(dw, numericalGradient(loss, w)), kGradTol);
}

// Tests that float and double products of the same inputs agree to float
// precision for a longer inner dimension.
TEST(GemmPrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(16);
  const int64_t m = 17, n = 23, k = 129;
  auto a = randomVector<float>(rng, m * k);
  auto b = randomVector<float>(rng, n * k);
  std::vector<float> cf(m * n);
  std::vector<double> cd(m * n);
  auto ad = castVector<double>(a), bd = castVector<double>(b);
  ASSERT_TRUE(gemm<float>(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k,
                          0.0f, cf.data(), n)
                  .isOk());
  ASSERT_TRUE(gemm<double>(false, true, m, n, k, 1.0, ad.data(), k, bd.data(),
                           k, 0.0, cd.data(), n)
                  .isOk());
  // Float accumulation over k = 129 terms: a few times sqrt(k) * 6e-8.
  EXPECT_LT(relError(cf, cd), 5e-6);
}

// Tests that bad sizes and leading dimensions are errors, not BLAS aborts.
TEST(GemmErrorTest, RejectsBadArguments) {
  std::vector<float> buf(64, 1.0f);
  auto status = gemm<float>(false, false, 4, 4, 4, 1.0f, buf.data(), 3,
                            buf.data(), 4, 0.0f, buf.data(), 4);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("lda = 3"), std::string::npos)
      << status.message();
  status = gemm<float>(false, true, 4, 4, 5, 1.0f, buf.data(), 5, buf.data(), 4,
                       0.0f, buf.data(), 4);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("ldb = 4"), std::string::npos)
      << status.message();
  status = gemm<float>(false, false, -1, 4, 4, 1.0f, buf.data(), 4, buf.data(),
                       4, 0.0f, buf.data(), 4);
  EXPECT_FALSE(status.isOk());
  status =
      gemmStridedBatched<float>(false, false, 2, 2, 2, 1.0f, buf.data(), 2, 4,
                                buf.data(), 2, 4, 0.0f, buf.data(), 2, 4, -1);
  EXPECT_FALSE(status.isOk());
}

// Tests that the pool is shared among the ranks of a process: the cores
// OpenBLAS started with divided among them, at least one each, and back
// again for one; a thread count the user chose is kept.
TEST(GemmThreadsTest, SharesThePoolAmongRanks) {
  const int started = gemmThreads();
  bool chosen = false;
  for (const char *name :
       {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"})
    chosen = chosen || (std::getenv(name) && *std::getenv(name));
  for (unsigned ranks : {4u, 2u, 3u, 1u, 1000u, 1u}) {
    const int threads = shareGemmThreads(ranks);
    EXPECT_EQ(threads, chosen ? started : std::max(1, started / int(ranks)))
        << ranks << " ranks, a pool of " << started;
    EXPECT_EQ(gemmThreads(), threads);
    // The products are right on the shared pool.
    std::vector<float> a(96 * 80, 0.5f), b(80 * 72, 2.0f), c(96 * 72, 7.0f);
    ASSERT_TRUE(gemm<float>(false, false, 96, 72, 80, 1.0f, a.data(), 80,
                            b.data(), 72, 0.0f, c.data(), 72)
                    .isOk());
    EXPECT_EQ(c.front(), 80.0f);
    EXPECT_EQ(c.back(), 80.0f);
  }
}

} // namespace
