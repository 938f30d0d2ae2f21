//===- CrossEntropyTest.cpp - tests of the CPU cross_entropy family -------===//
//
// Part of mlt. Checks the loss and lse against the definition written out
// (including logits large enough to overflow a naive exp), the backward
// against finite differences with a loss divisor other than the row count,
// in-place use, float against double, and the reporting of bad labels; and
// the vocabulary-sharded kernels (stats per shard, combine, backward per
// shard) against the unsharded ones, with the rows split too.
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
    Status status = crossEntropyForward<float>(
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

//===----------------------------------------------------------------------===//
// Vocabulary shards
//===----------------------------------------------------------------------===//

constexpr int64_t kShardedVocab = 36;

/// The columns [offset, offset + width) of the [rows, vocab] matrix `x`.
template <typename T>
std::vector<T> columns(const std::vector<T> &x, int64_t rows, int64_t vocab,
                       int64_t offset, int64_t width) {
  std::vector<T> block;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < width; ++j)
      block.push_back(x[r * vocab + offset + j]);
  return block;
}

/// What the kernels of a vocabulary-parallel cross-entropy give for `rows`
/// rows of [*, vocab] logits split into `shards` column blocks: every
/// shard's stats, the targets added up over the shards (all_reduce_sum) and
/// the parts concatenated (all_gather), then combined.
template <typename T> struct ShardedLoss {
  std::vector<std::vector<T>> shardLse, shardTarget;
  std::vector<T> lse, target;
  T loss = T(0);
};

template <typename T>
ShardedLoss<T> shardedLoss(const std::vector<T> &logits,
                           const std::vector<int32_t> &labels, int64_t rows,
                           int64_t vocab, int64_t shards, int64_t divisor) {
  ShardedLoss<T> result;
  const int64_t width = vocab / shards;
  std::vector<T> parts;
  result.target.assign(rows, T(0));
  for (int64_t g = 0; g < shards; ++g) {
    std::vector<T> shard = columns(logits, rows, vocab, g * width, width);
    std::vector<T> lse(rows, T(9)), target(rows, T(9));
    EXPECT_TRUE(crossEntropyStats<T>(lse.data(), target.data(), shard.data(),
                                     labels.data(), rows, width, g * width,
                                     vocab)
                    .isOk());
    parts.insert(parts.end(), lse.begin(), lse.end());
    for (int64_t r = 0; r < rows; ++r)
      result.target[r] += target[r];
    result.shardLse.push_back(lse);
    result.shardTarget.push_back(target);
  }
  result.lse.assign(rows, T(9));
  EXPECT_TRUE(crossEntropyCombine<T>(result.lse.data(), &result.loss,
                                     parts.data(), result.target.data(), rows,
                                     shards, divisor)
                  .isOk());
  return result;
}

/// Random logits in [-4, 4) of kRows rows over kShardedVocab and their
/// labels, with crossEntropyForward's loss and lse of them for `divisor`: the
/// unsharded results the sharded kernels are checked against.
template <typename T> struct UnshardedLoss {
  std::vector<T> logits;
  std::vector<int32_t> labels;
  T loss = T(0);
  std::vector<T> lse;
};

template <typename T>
UnshardedLoss<T> unshardedLoss(std::mt19937 &rng, int64_t divisor) {
  UnshardedLoss<T> result;
  result.logits = randomVector<T>(rng, kRows * kShardedVocab, -4.0, 4.0);
  result.labels = randomIds(rng, kRows, kShardedVocab);
  result.lse.resize(kRows);
  EXPECT_TRUE(crossEntropyForward<T>(&result.loss, result.lse.data(),
                                     result.logits.data(), result.labels.data(),
                                     kRows, kShardedVocab, divisor)
                  .isOk());
  return result;
}

template <typename T> class CrossEntropyShardTest : public ::testing::Test {};
TYPED_TEST_SUITE(CrossEntropyShardTest, FloatTypes);

// Tests that the stats of 1, 2, 3 and 4 vocabulary shards, combined, give
// crossEntropyForward's loss and lse, that each shard's target is the
// label's logit exactly where the label is in the shard and 0 elsewhere, and
// each shard's lse that of its columns.
TYPED_TEST(CrossEntropyShardTest, StatsAndCombineMatchForward) {
  using T = TypeParam;
  std::mt19937 rng(76);
  const auto [logits, labels, loss, lse] = unshardedLoss<T>(rng, kRows);
  for (int64_t shards : {1, 2, 3, 4}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    const int64_t width = kShardedVocab / shards;
    ShardedLoss<T> sharded =
        shardedLoss(logits, labels, kRows, kShardedVocab, shards, kRows);
    EXPECT_NEAR(double(sharded.loss), double(loss),
                forwardTol<T>() * std::abs(double(loss)));
    EXPECT_LT(relError(sharded.lse, lse), forwardTol<T>());
    for (int64_t g = 0; g < shards; ++g) {
      std::vector<T> shard =
          columns(logits, kRows, kShardedVocab, g * width, width);
      for (int64_t r = 0; r < kRows; ++r) {
        const bool inShard =
            labels[r] >= g * width && labels[r] < (g + 1) * width;
        ASSERT_EQ(sharded.shardTarget[g][r],
                  inShard ? logits[r * kShardedVocab + labels[r]] : T(0))
            << "shard " << g << " row " << r;
        // The shard's lse is that of its columns, checked against the
        // whole-row kernel on them (with an in-range label).
        T unused;
        std::vector<T> rowLse(1);
        int32_t label = 0;
        ASSERT_TRUE(crossEntropyForward<T>(&unused, rowLse.data(),
                                           shard.data() + r * width, &label, 1,
                                           width, 1)
                        .isOk());
        ASSERT_EQ(sharded.shardLse[g][r], rowLse[0]);
      }
    }
    // One nonzero term per row: the summed targets are the label logits.
    for (int64_t r = 0; r < kRows; ++r)
      ASSERT_EQ(sharded.target[r], logits[r * kShardedVocab + labels[r]]);
  }
}

// Tests that the rows split over two ranks, each combining with the global
// row count, give losses that add up to the whole batch's mean.
TYPED_TEST(CrossEntropyShardTest, RowSplitSharesAddUp) {
  using T = TypeParam;
  std::mt19937 rng(77);
  const auto [logits, labels, loss, lse] = unshardedLoss<T>(rng, kRows);
  const int64_t firstRows = 7; // an uneven split: 7 and 8 rows
  double total = 0.0;
  for (int64_t part = 0; part < 2; ++part) {
    const int64_t begin = part ? firstRows : 0;
    const int64_t rows = part ? kRows - firstRows : firstRows;
    std::vector<T> partLogits(logits.begin() + begin * kShardedVocab,
                              logits.begin() + (begin + rows) * kShardedVocab);
    std::vector<int32_t> partLabels(labels.begin() + begin,
                                    labels.begin() + begin + rows);
    ShardedLoss<T> sharded =
        shardedLoss(partLogits, partLabels, rows, kShardedVocab, 3, kRows);
    // Each part is its share of the mean, not the mean of its own rows.
    double partSum = 0.0;
    for (int64_t r = 0; r < rows; ++r)
      partSum += double(lse[begin + r]) -
                 double(logits[(begin + r) * kShardedVocab + partLabels[r]]);
    EXPECT_NEAR(double(sharded.loss), partSum / kRows,
                forwardTol<T>() * std::abs(double(loss)));
    total += double(sharded.loss);
  }
  EXPECT_NEAR(total, double(loss), forwardTol<T>() * std::abs(double(loss)));
}

// Tests that the shards' gradients from the combined lse, side by side, are
// crossEntropyBackward's from that lse exactly, and from the forward's lse
// up to rounding; with a divisor other than the row count, and in place.
TYPED_TEST(CrossEntropyShardTest, BackwardMatchesUnsharded) {
  using T = TypeParam;
  std::mt19937 rng(78);
  const int64_t divisor = 2 * kRows + 3;
  const T dloss = T(0.7);
  const auto [logits, labels, loss, forwardLse] =
      unshardedLoss<T>(rng, divisor);
  std::vector<T> reference(kRows * kShardedVocab);
  ASSERT_TRUE(crossEntropyBackward<T>(reference.data(), logits.data(),
                                      forwardLse.data(), labels.data(), dloss,
                                      kRows, kShardedVocab, divisor)
                  .isOk());
  for (int64_t shards : {1, 2, 4}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    const int64_t width = kShardedVocab / shards;
    ShardedLoss<T> sharded =
        shardedLoss(logits, labels, kRows, kShardedVocab, shards, divisor);
    std::vector<T> exact(kRows * kShardedVocab);
    ASSERT_TRUE(crossEntropyBackward<T>(exact.data(), logits.data(),
                                        sharded.lse.data(), labels.data(),
                                        dloss, kRows, kShardedVocab, divisor)
                    .isOk());
    std::vector<T> joined(kRows * kShardedVocab, T(9));
    for (int64_t g = 0; g < shards; ++g) {
      std::vector<T> shard =
          columns(logits, kRows, kShardedVocab, g * width, width);
      std::vector<T> dshard(kRows * width, T(9));
      ASSERT_TRUE(crossEntropyStatsBackward<T>(
                      dshard.data(), shard.data(), sharded.lse.data(),
                      labels.data(), dloss, kRows, width, g * width,
                      kShardedVocab, divisor)
                      .isOk());
      // In place, over the shard's logits: the same values.
      ASSERT_TRUE(crossEntropyStatsBackward<T>(
                      shard.data(), shard.data(), sharded.lse.data(),
                      labels.data(), dloss, kRows, width, g * width,
                      kShardedVocab, divisor)
                      .isOk());
      EXPECT_EQ(shard, dshard);
      for (int64_t r = 0; r < kRows; ++r)
        for (int64_t j = 0; j < width; ++j)
          joined[r * kShardedVocab + g * width + j] = dshard[r * width + j];
    }
    EXPECT_EQ(joined, exact);
    EXPECT_LT(relError(joined, reference), forwardTol<T>());
  }
}

// Tests labels outside the global vocabulary (an error naming the label and
// its position, nothing written), shards outside it, and bad divisors.
TEST(CrossEntropyShardErrorTest, ReportsBadLabelsAndShapes) {
  std::mt19937 rng(79);
  const int64_t width = kShardedVocab / 2;
  auto logits = randomVector<float>(rng, kRows * width);
  for (int32_t bad : {int32_t(kShardedVocab), int32_t(-1)}) {
    auto labels = randomIds(rng, kRows, kShardedVocab);
    labels[6] = bad;
    std::vector<float> lse(kRows, 5.0f), target(kRows, 5.0f);
    Status status = crossEntropyStats<float>(
        lse.data(), target.data(), logits.data(), labels.data(), kRows, width,
        width, kShardedVocab);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("label " + std::to_string(bad) +
                                    " at position 6 is outside the "
                                    "vocabulary [0, 36)"),
              std::string::npos)
        << status.message();
    for (size_t r = 0; r < lse.size(); ++r)
      ASSERT_TRUE(lse[r] == 5.0f && target[r] == 5.0f);

    std::vector<float> dlogits(kRows * width, 5.0f);
    status = crossEntropyStatsBackward<float>(
        dlogits.data(), logits.data(), lse.data(), labels.data(), 1.0f, kRows,
        width, 0, kShardedVocab, kRows);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("at position 6"), std::string::npos)
        << status.message();
    for (float x : dlogits)
      ASSERT_EQ(x, 5.0f);
  }

  auto labels = randomIds(rng, kRows, kShardedVocab);
  std::vector<float> lse(kRows), target(kRows);
  Status status = crossEntropyStats<float>(lse.data(), target.data(),
                                           logits.data(), labels.data(), kRows,
                                           width, width + 1, kShardedVocab);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "cross_entropy_stats: the shard [19, 37) is not "
                              "inside the vocabulary [0, 36)");

  float loss = 5.0f;
  status = crossEntropyCombine<float>(lse.data(), &loss, lse.data(),
                                      target.data(), kRows, 2, 0);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(),
            "cross_entropy_combine: loss divisor 0 must be positive");
  EXPECT_EQ(loss, 5.0f);
}

} // namespace
