//===- TokenDataTest.cpp - token files and batches tests ------------------===//
//
// Part of mlt. Tests TokenDataset: the three file kinds, the windowing of
// samples (boundaries, labels = inputs shifted by one), the step-to-sample
// mapping with its epoch wrap, the seeded shuffle (deterministic, a
// permutation per epoch, pinned to values computed independently), the
// reference fixture's batches, the bundled corpus, and every data error.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/TokenData.h"

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

using namespace mlt;
using namespace mlt::rt;
using mlt::rt::testing::readBytes;
using mlt::rt::testing::ScratchDirTest;
using mlt::rt::testing::writeBytes;
using ::testing::HasSubstr;

namespace {

template <typename T> std::string tokenBytes(const std::vector<T> &tokens) {
  std::string bytes(tokens.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), tokens.data(), bytes.size());
  return bytes;
}

std::string errorOf(const StatusOr<TokenDataset> &result) {
  EXPECT_FALSE(result.isOk()) << "expected an error";
  return result.isOk() ? "" : result.status().message();
}

#define ASSERT_OPEN(dataset)                                                   \
  ASSERT_TRUE(dataset.isOk()) << dataset.status().message()

using TokenDataTest = ScratchDirTest;

//===----------------------------------------------------------------------===//
// Files and windows
//===----------------------------------------------------------------------===//

TEST_F(TokenDataTest, U16WindowsAreConsecutiveAndLabelsShiftByOne) {
  // 23 tokens, seq_len 4: samples of 5 tokens at 0, 5, 10, 15; 3 left over.
  std::vector<uint16_t> tokens(23);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = uint16_t(1000 + 7 * i);
  writeBytes(path("t.u16"), tokenBytes(tokens));
  StatusOr<TokenDataset> data = TokenDataset::open(path("t.u16"), 4, 2000);
  ASSERT_OPEN(data);
  EXPECT_EQ(data->numTokens(), 23);
  EXPECT_EQ(data->numSamples(), 4);
  EXPECT_EQ(data->seqLen(), 4);
  for (int64_t k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    int32_t inputs[4], labels[4];
    data->sample(k, inputs, labels);
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(inputs[t], tokens[size_t(k * 5 + t)]);
      EXPECT_EQ(labels[t], tokens[size_t(k * 5 + t + 1)]);
    }
    for (int t = 0; t + 1 < 4; ++t)
      EXPECT_EQ(labels[t], inputs[t + 1]);
  }
  // Sample 1 is exactly tokens[5:10]; no window shares a token.
  int32_t inputs[4], labels[4];
  data->sample(1, inputs, labels);
  EXPECT_EQ(inputs[0], 1035);
  EXPECT_EQ(labels[3], 1063);
}

TEST_F(TokenDataTest, U32TokensBeyond16Bits) {
  std::vector<uint32_t> tokens = {70000, 1, 99999, 65536, 3, 4};
  writeBytes(path("t.u32"), tokenBytes(tokens));
  StatusOr<TokenDataset> data = TokenDataset::open(path("t.u32"), 2, 100000);
  ASSERT_OPEN(data);
  EXPECT_EQ(data->numSamples(), 2);
  int32_t inputs[2], labels[2];
  data->sample(0, inputs, labels);
  EXPECT_EQ(inputs[0], 70000);
  EXPECT_EQ(inputs[1], 1);
  EXPECT_EQ(labels[1], 99999);
  data->sample(1, inputs, labels);
  EXPECT_EQ(inputs[0], 65536);
  EXPECT_EQ(labels[1], 4);
}

TEST_F(TokenDataTest, TextIsReadAsBytes) {
  writeBytes(path("t.txt"), "In the beginning\n\xff");
  StatusOr<TokenDataset> data = TokenDataset::open(path("t.txt"), 5, 256);
  ASSERT_OPEN(data);
  EXPECT_EQ(data->numTokens(), 18);
  EXPECT_EQ(data->numSamples(), 3);
  int32_t inputs[5], labels[5];
  data->sample(0, inputs, labels);
  EXPECT_EQ(std::string(inputs, inputs + 5), "In th");
  EXPECT_EQ(std::string(labels, labels + 5), "n the");
  data->sample(2, inputs, labels);
  EXPECT_EQ(std::string(inputs, inputs + 5), "ning\n");
  EXPECT_EQ(std::string(labels, labels + 4), "ing\n");
  EXPECT_EQ(labels[4], 255) << "bytes are unsigned token ids";
}

//===----------------------------------------------------------------------===//
// Steps, epochs and shuffling
//===----------------------------------------------------------------------===//

/// A .u16 file whose sample k starts with token 100 + k, so a row names its
/// sample.
class BatchTest : public ScratchDirTest {
protected:
  static constexpr int64_t kSeqLen = 3, kSamples = 7;
  void SetUp() override {
    ScratchDirTest::SetUp();
    std::vector<uint16_t> tokens;
    for (int64_t k = 0; k < kSamples; ++k)
      for (int64_t t = 0; t <= kSeqLen; ++t)
        tokens.push_back(uint16_t(t == 0 ? 100 + k : 10 * k + t));
    writeBytes(path("b.u16"), tokenBytes(tokens));
    StatusOr<TokenDataset> data =
        TokenDataset::open(path("b.u16"), kSeqLen, 256);
    ASSERT_OPEN(data);
    data_.emplace(std::move(*data));
  }

  /// The samples of step `step`'s rows, read back from the batch.
  std::vector<int64_t> rows(int64_t step, int64_t batchSize, bool shuffle,
                            uint64_t seed = 0) {
    std::vector<int32_t> inputs(size_t(batchSize * kSeqLen), -1);
    std::vector<int32_t> labels(size_t(batchSize * kSeqLen), -1);
    data_->batch(step, batchSize, shuffle, seed, inputs.data(), labels.data());
    std::vector<int64_t> samples;
    for (int64_t b = 0; b < batchSize; ++b) {
      int64_t k = inputs[size_t(b * kSeqLen)] - 100;
      samples.push_back(k);
      // The rest of the row is that sample's, labels shifted by one.
      for (int64_t t = 1; t < kSeqLen; ++t)
        EXPECT_EQ(inputs[size_t(b * kSeqLen + t)], 10 * k + t);
      for (int64_t t = 0; t < kSeqLen; ++t)
        EXPECT_EQ(labels[size_t(b * kSeqLen + t)], 10 * k + t + 1);
    }
    return samples;
  }

  std::optional<TokenDataset> data_;
};

TEST_F(BatchTest, StepsTakeConsecutiveSamplesAndWrapAround) {
  ASSERT_EQ(data_->numSamples(), kSamples);
  EXPECT_EQ(rows(0, 3, false), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(rows(1, 3, false), (std::vector<int64_t>{3, 4, 5}));
  // Step 2 runs out after sample 6 and continues with the next epoch.
  EXPECT_EQ(rows(2, 3, false), (std::vector<int64_t>{6, 0, 1}));
  EXPECT_EQ(rows(7, 3, false), (std::vector<int64_t>{0, 1, 2})); // 21 = 3 * 7
  // A batch larger than the data set wraps within the batch.
  EXPECT_EQ(rows(0, 9, false),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 0, 1}));
  EXPECT_EQ(data_->sampleIndex(5, 1, 4, false, 0), (5 * 4 + 1) % kSamples);
}

TEST_F(BatchTest, ShuffleVisitsEverySampleOncePerEpoch) {
  // Batch 7 = one epoch per step.
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> seen = rows(epoch, 7, true, 42);
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 7u)
        << "epoch " << epoch;
    EXPECT_EQ(seen, shuffledOrder(kSamples, 42, uint64_t(epoch)));
  }
  EXPECT_NE(rows(0, 7, true, 42), rows(1, 7, true, 42))
      << "each epoch has its own order";

  // Batch 3 straddles epochs: positions 0..20 are epochs 0, 1, 2 in turn.
  std::vector<int64_t> visited;
  for (int64_t step = 0; step < 7; ++step)
    for (int64_t k : rows(step, 3, true, 42))
      visited.push_back(k);
  for (int64_t epoch = 0; epoch < 3; ++epoch)
    EXPECT_EQ(std::vector<int64_t>(visited.begin() + epoch * 7,
                                   visited.begin() + epoch * 7 + 7),
              shuffledOrder(kSamples, 42, uint64_t(epoch)));
}

TEST_F(BatchTest, ShuffleIsDeterministicPerSeed) {
  std::vector<int64_t> first = rows(3, 5, true, 7);
  // Other steps and seeds in between must not disturb the order.
  (void)rows(0, 5, true, 8);
  (void)rows(9, 5, true, 7);
  EXPECT_EQ(rows(3, 5, true, 7), first);

  // A fresh data set gives the same batches.
  StatusOr<TokenDataset> again =
      TokenDataset::open(path("b.u16"), kSeqLen, 256);
  ASSERT_OPEN(again);
  std::vector<int32_t> a(15), b(15), la(15), lb(15);
  data_->batch(3, 5, true, 7, a.data(), la.data());
  again->batch(3, 5, true, 7, b.data(), lb.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(la, lb);

  EXPECT_NE(shuffledOrder(1000, 1, 0), shuffledOrder(1000, 2, 0));
  EXPECT_NE(shuffledOrder(1000, 1, 0), shuffledOrder(1000, 1, 1));
  EXPECT_EQ(shuffledOrder(1000, 1, 5), shuffledOrder(1000, 1, 5));
}

TEST(ShuffleOrderTest, MatchesTheSpecifiedAlgorithm) {
  // The standard fixes mt19937_64's output: its 10000th value from the
  // default seed is 9981545732273789042.
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
  // Computed by an independent Python implementation of the documented
  // algorithm (splitmix64 seeding, mt19937_64, rejection-sampled Fisher-Yates).
  EXPECT_EQ(shuffledOrder(10, 1234, 0),
            (std::vector<int64_t>{2, 0, 3, 5, 9, 1, 7, 6, 4, 8}));
  EXPECT_EQ(shuffledOrder(10, 1234, 1),
            (std::vector<int64_t>{9, 4, 7, 5, 1, 6, 2, 8, 3, 0}));
  EXPECT_EQ(shuffledOrder(10, 99, 0),
            (std::vector<int64_t>{0, 5, 7, 4, 1, 3, 8, 9, 2, 6}));
  std::vector<int64_t> big = shuffledOrder(10007, 3, 2);
  std::sort(big.begin(), big.end());
  for (int64_t i = 0; i < 10007; ++i)
    ASSERT_EQ(big[size_t(i)], i);
}

//===----------------------------------------------------------------------===//
// Reference data
//===----------------------------------------------------------------------===//

// The fixture README: rows of all steps concatenated, read unshuffled in
// windows of seq_len + 1, reproduce the batches of train.json.
TEST_F(TokenDataTest, ReproducesTheFixtureBatches) {
  std::string fixture =
      MLT_SOURCE_DIR "/../shared/fixtures/llama-ref-a/train.json";
  if (!std::filesystem::exists(fixture))
    GTEST_SKIP() << fixture << " is absent";
  nlohmann::json train = nlohmann::json::parse(readBytes(fixture));
  int64_t batch = train["batch"], seqLen = train["seq_len"];
  std::vector<uint16_t> stream;
  for (const auto &step : train["tokens"])
    for (const auto &row : step)
      for (const auto &token : row)
        stream.push_back(token.get<uint16_t>());
  writeBytes(path("fixture.u16"), tokenBytes(stream));
  StatusOr<TokenDataset> data =
      TokenDataset::open(path("fixture.u16"), seqLen, 256);
  ASSERT_OPEN(data);
  std::vector<int32_t> inputs(size_t(batch * seqLen)),
      labels(size_t(batch * seqLen));
  for (size_t s = 0; s < train["tokens"].size(); ++s) {
    data->batch(int64_t(s), batch, false, 0, inputs.data(), labels.data());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seqLen; ++t) {
        const auto &row = train["tokens"][s][size_t(b)];
        ASSERT_EQ(inputs[size_t(b * seqLen + t)], row[size_t(t)].get<int>());
        ASSERT_EQ(labels[size_t(b * seqLen + t)],
                  row[size_t(t + 1)].get<int>());
      }
  }
}

TEST(DefaultCorpusTest, IsTheKingJamesGenesisAndExodus) {
  std::string corpus = defaultCorpusPath();
  EXPECT_EQ(corpus.front(), '/') << "an absolute path";
  StatusOr<TokenDataset> data = TokenDataset::open(corpus, 64, 256);
  ASSERT_OPEN(data);
  EXPECT_GT(data->numTokens(), 300000);
  EXPECT_EQ(data->numTokens(), int64_t(std::filesystem::file_size(corpus)));
  int32_t inputs[64], labels[64];
  data->sample(0, inputs, labels);
  EXPECT_EQ(std::string(inputs, inputs + 16), "In the beginning");
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST_F(TokenDataTest, MissingFile) {
  std::string error = errorOf(TokenDataset::open(path("none.u16"), 4, 256));
  EXPECT_EQ(error, path("none.u16") + ": does not exist");
}

TEST_F(TokenDataTest, UnknownExtension) {
  writeBytes(path("t.bin"), "abcd");
  std::string error = errorOf(TokenDataset::open(path("t.bin"), 1, 256));
  EXPECT_THAT(error, HasSubstr("unknown token file extension '.bin'"));
  writeBytes(path("tokens"), "abcd");
  EXPECT_THAT(errorOf(TokenDataset::open(path("tokens"), 1, 256)),
              HasSubstr("'(none)'"));
}

TEST_F(TokenDataTest, EmptyFile) {
  for (const char *name : {"e.u16", "e.u32", "e.txt"}) {
    writeBytes(path(name), "");
    EXPECT_THAT(errorOf(TokenDataset::open(path(name), 4, 256)),
                HasSubstr("token file is empty"))
        << name;
  }
}

TEST_F(TokenDataTest, TruncatedFile) {
  writeBytes(path("t.u16"), std::string(11, '\0'));
  std::string error = errorOf(TokenDataset::open(path("t.u16"), 2, 256));
  EXPECT_THAT(error, HasSubstr("11 bytes is not a multiple of 2"));
  EXPECT_THAT(error, HasSubstr("truncated"));
  writeBytes(path("t.u32"), std::string(10, '\0'));
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.u32"), 1, 256)),
              HasSubstr("10 bytes is not a multiple of 4 (the size of one "
                        ".u32 token)"));
}

TEST_F(TokenDataTest, FewerTokensThanOneSample) {
  writeBytes(path("t.u16"), tokenBytes(std::vector<uint16_t>(8, 1)));
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.u16"), 8, 256)),
              HasSubstr("8 tokens, fewer than one sample of seq_len + 1 = 9"));
  StatusOr<TokenDataset> exact = TokenDataset::open(path("t.u16"), 7, 256);
  ASSERT_OPEN(exact);
  EXPECT_EQ(exact->numSamples(), 1);
}

TEST_F(TokenDataTest, TokenOutsideTheVocab) {
  std::vector<uint16_t> tokens(20, 3);
  tokens[13] = 300;
  writeBytes(path("t.u16"), tokenBytes(tokens));
  std::string error = errorOf(TokenDataset::open(path("t.u16"), 4, 256));
  EXPECT_THAT(error, HasSubstr("token 13 has id 300"));
  EXPECT_THAT(error, HasSubstr("vocab size 256"));

  std::vector<uint32_t> wide(5, 0);
  wide[4] = 0xFFFFFFFFu; // would be negative as int32
  writeBytes(path("t.u32"), tokenBytes(wide));
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.u32"), 4, 1 << 20)),
              HasSubstr("token 4 has id 4294967295"));

  writeBytes(path("t.txt"), "abc~z");
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.txt"), 2, 100)),
              HasSubstr("token 3 has id 126, not below the vocab size 100"));
}

TEST_F(TokenDataTest, BadParameters) {
  writeBytes(path("t.txt"), "abcdef");
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.txt"), 0, 256)),
              HasSubstr("seq_len must be positive"));
  EXPECT_THAT(errorOf(TokenDataset::open(path("t.txt"), 2, 0)),
              HasSubstr("vocab size must be positive"));
}

} // namespace
