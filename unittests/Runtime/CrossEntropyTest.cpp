//===- CrossEntropyTest.cpp - tests of the CPU cross_entropy family -------===//
//
// Part of mlt. Checks the loss and lse against the definition written out
// (including logits large enough to overflow a naive exp), the backward
// against finite differences with a loss divisor other than the row count,
// in-place use, float against double, and the reporting of bad labels.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/CrossEntropy.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kRows = 3 * 5, kVocab = 37;

/// sum over rows of (log sum exp(row) - row[label]) / divisor, in long double
/// without the max shift (the test logits are small enough for that).
double referenceLoss(const std::vector<double> &logits,
                     const std::vector<int32_t> &labels, int64_t divisor,
                     std::vector<double> *lse) {
  long double total = 0.0L;
  lse->resize(kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    long double sum = 0.0L;
    for (int64_t j = 0; j < kVocab; ++j)
      sum += std::exp((long double)logits[r * kVocab + j]);
    (*lse)[r] = double(std::log(sum));
    total += std::log(sum) - logits[r * kVocab + labels[r]];
  }
  return double(total / divisor);
}

template <typename T> class CrossEntropyTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CrossEntropyTest, FloatTypes);

// Tests loss and lse against the definition, for the plain mean and for a
// shard's share of a larger batch.
TYPED_TEST(CrossEntropyTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(71);
  auto logits = randomVector<double>(rng, kRows * kVocab, -4.0, 4.0);
  auto labels = randomIds(rng, kRows, kVocab);
  for (int64_t divisor : {kRows, 4 * kRows}) {
    std::vector<double> lseRef;
    const double expected = referenceLoss(logits, labels, divisor, &lseRef);
    auto logitsT = castVector<T>(logits);
    T loss = T(0);
    std::vector<T> lse(kRows);
    ASSERT_TRUE(crossEntropyForward<T>(&loss, lse.data(), logitsT.data(),
                                       labels.data(), kRows, kVocab, divisor)
                    .isOk());
    EXPECT_NEAR(double(loss), expected, forwardTol<T>() * std::abs(expected));
    EXPECT_LT(relError(lse, lseRef), forwardTol<T>());
  }
}

// Tests that logits far beyond exp's range give a finite, shift-invariant
// loss.
TYPED_TEST(CrossEntropyTest, ForwardIsShiftInvariant) {
  using T = TypeParam;
  std::mt19937 rng(72);
  auto logits = randomVector<T>(rng, kRows * kVocab, -4.0, 4.0);
  auto labels = randomIds(rng, kRows, kVocab);
  auto shifted = logits;
  for (T &x : shifted)
    x += T(1000);
  T loss = T(0), lossShifted = T(0);
  std::vector<T> lse(kRows);
  ASSERT_TRUE(crossEntropyForward<T>(&loss, lse.data(), logits.data(),
                                     labels.data(), kRows, kVocab, kRows)
                  .isOk());
  ASSERT_TRUE(crossEntropyForward<T>(&lossShifted, lse.data(), shifted.data(),
                                     labels.data(), kRows, kVocab, kRows)
                  .isOk());
  ASSERT_TRUE(std::isfinite(lossShifted));
  // The shift costs the logits their low bits: 1000 + x keeps ~1e-4 of x in
  // float and ~1e-13 in double.
  const double tol = std::is_same_v<T, float> ? 1e-3 : 1e-11;
  EXPECT_NEAR(double(lossShifted), double(loss), tol);
}

// Tests dlogits against central differences of dloss * loss, with a divisor
// that is not the row count, and in place.
TEST(CrossEntropyGradTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(73);
  auto logits = randomVector<double>(rng, kRows * kVocab, -4.0, 4.0);
  auto labels = randomIds(rng, kRows, kVocab);
  const int64_t divisor = 2 * kRows + 3;
  const double dloss = 0.7;
  std::vector<double> lse(kRows);
  auto loss = [&] {
    double value = 0.0;
    std::vector<double> l(kRows);
    EXPECT_TRUE(crossEntropyForward<double>(&value, l.data(), logits.data(),
                                            labels.data(), kRows, kVocab,
                                            divisor)
                    .isOk());
    return dloss * value;
  };
  double value = 0.0;
  ASSERT_TRUE(crossEntropyForward<double>(&value, lse.data(), logits.data(),
                                          labels.data(), kRows, kVocab, divisor)
                  .isOk());
  std::vector<double> dlogits(kRows * kVocab);
  ASSERT_TRUE(crossEntropyBackward<double>(dlogits.data(), logits.data(),
                                           lse.data(), labels.data(), dloss,
                                           kRows, kVocab, divisor)
                  .isOk());
  EXPECT_LT(relError(dlogits, numericalGradient(loss, logits)), kGradTol);

  auto inPlace = logits;
  ASSERT_TRUE(crossEntropyBackward<double>(inPlace.data(), inPlace.data(),
                                           lse.data(), labels.data(), dloss,
                                           kRows, kVocab, divisor)
                  .isOk());
  EXPECT_EQ(inPlace, dlogits);
}

// Tests that float and double agree on the loss and its gradient.
TEST(CrossEntropyPrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(74);
  auto lf = randomVector<float>(rng, kRows * kVocab, -4.0, 4.0);
  auto ld = castVector<double>(lf);
  auto labels = randomIds(rng, kRows, kVocab);
  float lossF = 0.0f;
  double lossD = 0.0;
  std::vector<float> lseF(kRows), dF(kRows * kVocab);
  std::vector<double> lseD(kRows), dD(kRows * kVocab);
  ASSERT_TRUE(crossEntropyForward<float>(&lossF, lseF.data(), lf.data(),
                                         labels.data(), kRows, kVocab, kRows)
                  .isOk());
  ASSERT_TRUE(crossEntropyForward<double>(&lossD, lseD.data(), ld.data(),
                                          labels.data(), kRows, kVocab, kRows)
                  .isOk());
  ASSERT_TRUE(crossEntropyBackward<float>(dF.data(), lf.data(), lseF.data(),
                                          labels.data(), 1.0f, kRows, kVocab,
                                          kRows)
                  .isOk());
  ASSERT_TRUE(crossEntropyBackward<double>(dD.data(), ld.data(), lseD.data(),
                                           labels.data(), 1.0, kRows, kVocab,
                                           kRows)
                  .isOk());
  EXPECT_NEAR(lossF, lossD, kFloatTol * std::abs(lossD));
  EXPECT_LT(relError(dF, dD), kFloatTol);
}

// Tests that labels outside [0, vocab) are errors naming the label and its
// position, in both directions, and that nothing is written.
TEST(CrossEntropyErrorTest, ReportsOutOfRangeLabels) {
  std::mt19937 rng(75);
  auto logits = randomVector<float>(rng, kRows * kVocab);
  for (int32_t bad : {int32_t(kVocab), int32_t(-100)}) {
    auto labels = randomIds(rng, kRows, kVocab);
    labels[9] = bad;
    float loss = 5.0f;
    std::vector<float> lse(kRows, 5.0f);
    rt::Status status = crossEntropyForward<float>(
        &loss, lse.data(), logits.data(), labels.data(), kRows, kVocab, kRows);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("label " + std::to_string(bad) +
                                    " at position 9"),
              std::string::npos)
        << status.message();
    EXPECT_EQ(loss, 5.0f);
    for (float x : lse)
      ASSERT_EQ(x, 5.0f);

    std::vector<float> dlogits(kRows * kVocab, 5.0f);
    status =
        crossEntropyBackward<float>(dlogits.data(), logits.data(), lse.data(),
                                    labels.data(), 1.0f, kRows, kVocab, kRows);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("at position 9"), std::string::npos)
        << status.message();
    for (float x : dlogits)
      ASSERT_EQ(x, 5.0f);
  }
}

} // namespace
