//===- EmbeddingTest.cpp - tests of the CPU embedding family --------------===//
//
// Part of mlt. Checks the gather against indexing written out, the
// scatter-add against finite differences (with repeated ids, so that
// accumulation is exercised), and that bad ids are reported by position
// without touching the outputs; and the kernels of one vocabulary shard
// against the whole table's: the shards' lookups add up to it, their
// gradients stacked are its gradient.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Embedding.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kVocab = 13, kHidden = 10, kTokens = 2 * 9;

/// embeddingForward of the kTokens `ids` over a [vocab, kHidden] table.
template <typename T>
std::vector<T> lookup(const std::vector<T> &table,
                      const std::vector<int32_t> &ids, int64_t vocab) {
  std::vector<T> out(kTokens * kHidden);
  EXPECT_TRUE(embeddingForward<T>(out.data(), ids.data(), table.data(), kTokens,
                                  vocab, kHidden)
                  .isOk());
  return out;
}

/// `dtable` ([vocab, kHidden]) after embeddingBackward adds the [kTokens,
/// kHidden] `dout` into it at the rows of `ids`.
template <typename T>
std::vector<T> scatterAdd(std::vector<T> dtable,
                          const std::vector<int32_t> &ids,
                          const std::vector<T> &dout, int64_t vocab) {
  EXPECT_TRUE(embeddingBackward<T>(dtable.data(), ids.data(), dout.data(),
                                   kTokens, vocab, kHidden)
                  .isOk());
  return dtable;
}

template <typename T> class EmbeddingTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(EmbeddingTest, FloatTypes);

// Tests that every output row is the table row of its id, exactly.
TYPED_TEST(EmbeddingTest, ForwardGathersRows) {
  using T = TypeParam;
  std::mt19937 rng(21);
  auto table = randomVector<T>(rng, kVocab * kHidden);
  auto ids = randomIds(rng, kTokens, kVocab);
  std::vector<T> out = lookup(table, ids, kVocab);
  for (int64_t p = 0; p < kTokens; ++p)
    for (int64_t j = 0; j < kHidden; ++j)
      ASSERT_EQ(out[p * kHidden + j], table[ids[p] * kHidden + j]);
}

// Tests that the backward adds into dtable (sum over positions sharing an id)
// rather than overwriting it.
TYPED_TEST(EmbeddingTest, BackwardAccumulates) {
  using T = TypeParam;
  std::mt19937 rng(22);
  auto dout = randomVector<T>(rng, kTokens * kHidden);
  std::vector<int32_t> ids = randomIds(rng, kTokens, kVocab);
  ids[3] = ids[7] = ids[11] = 4; // a repeated id
  auto dtable = randomVector<T>(rng, kVocab * kHidden);
  std::vector<double> expected(dtable.begin(), dtable.end());
  for (int64_t p = 0; p < kTokens; ++p)
    for (int64_t j = 0; j < kHidden; ++j)
      expected[ids[p] * kHidden + j] += double(dout[p * kHidden + j]);
  EXPECT_LT(relError(scatterAdd(dtable, ids, dout, kVocab), expected),
            forwardTol<T>());
}

// Tests the backward against central differences of sum(out * G).
TEST(EmbeddingGradTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(23);
  auto table = randomVector<double>(rng, kVocab * kHidden);
  auto ids = randomIds(rng, kTokens, kVocab);
  ids[0] = ids[5] = 2;
  auto weights = randomVector<double>(rng, kTokens * kHidden);
  auto loss = [&] { return weightedSum(lookup(table, ids, kVocab), weights); };
  std::vector<double> dtable = scatterAdd(
      std::vector<double>(kVocab * kHidden, 0.0), ids, weights, kVocab);
  EXPECT_LT(relError(dtable, numericalGradient(loss, table)), kGradTol);
}

// Tests that ids outside [0, vocab) are errors naming the id and position,
// and that nothing is written.
TEST(EmbeddingErrorTest, ReportsOutOfRangeIds) {
  std::mt19937 rng(24);
  auto table = randomVector<float>(rng, kVocab * kHidden);
  for (int32_t badId : {int32_t(kVocab), int32_t(-1), int32_t(1 << 30)}) {
    std::vector<int32_t> ids = randomIds(rng, kTokens, kVocab);
    ids[5] = badId;
    std::vector<float> out(kTokens * kHidden, 7.0f);
    Status status = embeddingForward<float>(
        out.data(), ids.data(), table.data(), kTokens, kVocab, kHidden);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("token id " + std::to_string(badId) +
                                    " at position 5"),
              std::string::npos)
        << status.message();
    for (float x : out)
      ASSERT_EQ(x, 7.0f);

    std::vector<float> dtable(kVocab * kHidden, 3.0f);
    status = embeddingBackward<float>(dtable.data(), ids.data(), out.data(),
                                      kTokens, kVocab, kHidden);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("at position 5"), std::string::npos)
        << status.message();
    for (float x : dtable)
      ASSERT_EQ(x, 3.0f);
  }
}

//===----------------------------------------------------------------------===//
// Vocabulary shards
//===----------------------------------------------------------------------===//

constexpr int64_t kShardedVocab = 12;

template <typename T> class EmbeddingShardTest : public ::testing::Test {};
TYPED_TEST_SUITE(EmbeddingShardTest, FloatTypes);

// Tests that each shard's lookup is its table rows for the ids it holds and
// zeros elsewhere, so that the lookups of 1, 2, 3 and 4 shards add up to the
// whole table's exactly.
TYPED_TEST(EmbeddingShardTest, ForwardShardsAddUpToWholeLookup) {
  using T = TypeParam;
  std::mt19937 rng(25);
  auto table = randomVector<T>(rng, kShardedVocab * kHidden);
  auto ids = randomIds(rng, kTokens, kShardedVocab);
  ids[2] = 0;
  ids[4] = kShardedVocab - 1; // both ends of the vocabulary
  const std::vector<T> whole = lookup(table, ids, kShardedVocab);
  for (int64_t shards : {1, 2, 3, 4}) {
    const int64_t rows = kShardedVocab / shards;
    std::vector<T> sum(kTokens * kHidden, T(0));
    for (int64_t g = 0; g < shards; ++g) {
      std::vector<T> block(table.begin() + g * rows * kHidden,
                           table.begin() + (g + 1) * rows * kHidden);
      std::vector<T> out(kTokens * kHidden, T(7)); // garbage: overwritten
      ASSERT_TRUE(embeddingForwardShard<T>(out.data(), ids.data(), block.data(),
                                           kTokens, rows, kHidden, g * rows,
                                           kShardedVocab)
                      .isOk());
      for (int64_t p = 0; p < kTokens; ++p) {
        const bool inShard = ids[p] >= g * rows && ids[p] < (g + 1) * rows;
        for (int64_t j = 0; j < kHidden; ++j)
          ASSERT_EQ(out[p * kHidden + j],
                    inShard ? table[ids[p] * kHidden + j] : T(0))
              << shards << " shards, shard " << g << ", position " << p;
      }
      for (size_t i = 0; i < sum.size(); ++i)
        sum[i] += out[i];
    }
    EXPECT_EQ(sum, whole) << shards << " shards";
  }
}

// Tests that the shards' gradients, stacked, are the whole table's gradient
// (repeated ids included), and that each shard accumulates into its dtable.
TYPED_TEST(EmbeddingShardTest, BackwardShardsStackToWholeGradient) {
  using T = TypeParam;
  std::mt19937 rng(26);
  auto dout = randomVector<T>(rng, kTokens * kHidden);
  auto ids = randomIds(rng, kTokens, kShardedVocab);
  ids[1] = ids[9] = ids[13] = 7; // a repeated id
  auto initial = randomVector<T>(rng, kShardedVocab * kHidden);
  const std::vector<T> whole = scatterAdd(initial, ids, dout, kShardedVocab);
  for (int64_t shards : {1, 2, 3, 4}) {
    const int64_t rows = kShardedVocab / shards;
    std::vector<T> stacked;
    for (int64_t g = 0; g < shards; ++g) {
      std::vector<T> dblock(initial.begin() + g * rows * kHidden,
                            initial.begin() + (g + 1) * rows * kHidden);
      ASSERT_TRUE(embeddingBackwardShard<T>(dblock.data(), ids.data(),
                                            dout.data(), kTokens, rows, kHidden,
                                            g * rows, kShardedVocab)
                      .isOk());
      stacked.insert(stacked.end(), dblock.begin(), dblock.end());
    }
    EXPECT_EQ(stacked, whole) << shards << " shards";
  }
}

// Tests that ids outside the global vocabulary (not just the shard) are
// errors naming the id and position, with nothing written, and that a shard
// outside the vocabulary is an error.
TEST(EmbeddingShardErrorTest, ReportsBadIdsAndShards) {
  std::mt19937 rng(27);
  const int64_t rows = kShardedVocab / 3;
  auto block = randomVector<float>(rng, rows * kHidden);
  for (int32_t badId : {int32_t(kShardedVocab), int32_t(-1)}) {
    std::vector<int32_t> ids = randomIds(rng, kTokens, kShardedVocab);
    ids[5] = badId;
    std::vector<float> out(kTokens * kHidden, 7.0f);
    Status status = embeddingForwardShard<float>(out.data(), ids.data(),
                                                 block.data(), kTokens, rows,
                                                 kHidden, rows, kShardedVocab);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("token id " + std::to_string(badId) +
                                    " at position 5 is outside the "
                                    "vocabulary [0, 12)"),
              std::string::npos)
        << status.message();
    for (float x : out)
      ASSERT_EQ(x, 7.0f);

    std::vector<float> dblock(rows * kHidden, 3.0f);
    status = embeddingBackwardShard<float>(dblock.data(), ids.data(),
                                           out.data(), kTokens, rows, kHidden,
                                           rows, kShardedVocab);
    ASSERT_FALSE(status.isOk());
    EXPECT_NE(status.message().find("at position 5"), std::string::npos)
        << status.message();
    for (float x : dblock)
      ASSERT_EQ(x, 3.0f);
  }

  std::vector<int32_t> ids = randomIds(rng, kTokens, kShardedVocab);
  std::vector<float> out(kTokens * kHidden);
  Status status =
      embeddingForwardShard<float>(out.data(), ids.data(), block.data(),
                                   kTokens, rows, kHidden, 9, kShardedVocab);
  ASSERT_FALSE(status.isOk());
  EXPECT_EQ(status.message(), "embedding shard: the shard [9, 13) is not "
                              "inside the vocabulary [0, 12)");
}

} // namespace
