//===- EmbeddingTest.cpp - the embedding CUDA kernels vs the CPU ----------===//
//
// Part of mlt. The gather and the scatter-add of the embedding family, whole
// table and vocabulary shards, against cpu/Embedding.cpp on the same random
// inputs. Both are compared bit for bit: the forward copies, and the
// backward sums each row's tokens in position order from zero, as the CPU
// does (small vocabularies make ids repeat many times). Bad ids are
// reported through the device error record with the first bad position.
//
//===----------------------------------------------------------------------===//

#include "kernels/embedding.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Embedding.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

struct Shape {
  int64_t tokens, vocabShard, hidden, shards, shard;
};

/// Forward and backward of one shard (shards == 1: the whole table) against
/// the CPU, with the tables offset by `offset` floats from 16-byte alignment.
void checkShard(const Shape &s, int64_t offset, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message()
               << "tokens " << s.tokens << " vocab_shard " << s.vocabShard
               << " hidden " << s.hidden << " shard " << s.shard << " of "
               << s.shards << " offset " << offset);
  const int64_t vocabTotal = s.vocabShard * s.shards;
  const int64_t vocabOffset = s.shard * s.vocabShard;
  const std::vector<int32_t> ids =
      randomIds(rng, s.tokens, int32_t(vocabTotal));
  const std::vector<float> table = randomFloats(rng, s.vocabShard * s.hidden);
  const std::vector<float> dout = randomFloats(rng, s.tokens * s.hidden);

  DeviceBuffer<int32_t> dids(s.tokens);
  DeviceBuffer<float> dtable(table.size() + offset), dact(dout.size() + offset),
      dgrad(table.size() + offset);
  dids.upload(ids);
  dtable.upload(padFront(table, offset));

  // Forward.
  ASSERT_TRUE(launchEmbeddingForward(dact.get() + offset, dids.get(),
                                     dtable.get() + offset, s.tokens,
                                     s.vocabShard, s.hidden, vocabOffset,
                                     vocabTotal, DeviceErrorSink{}, nullptr));
  std::vector<float> expected(s.tokens * s.hidden);
  if (s.shards == 1)
    ASSERT_TRUE(cpu::embeddingForward(expected.data(), ids.data(), table.data(),
                                      s.tokens, s.vocabShard, s.hidden));
  else
    ASSERT_TRUE(cpu::embeddingForwardShard(expected.data(), ids.data(),
                                           table.data(), s.tokens, s.vocabShard,
                                           s.hidden, vocabOffset, vocabTotal));
  std::vector<float> actual = dact.download();
  EXPECT_EQ(std::vector<float>(actual.begin() + offset, actual.end()),
            expected);

  // Backward, into a gradient full of garbage (it is overwritten).
  dgrad.upload(padFront(randomFloats(rng, table.size()), offset));
  dact.upload(padFront(dout, offset));
  const size_t bytes = embeddingBackwardScratchBytes(s.tokens, s.vocabShard);
  DeviceBuffer<uint8_t> scratch(bytes);
  ASSERT_TRUE(launchEmbeddingBackward(
      dgrad.get() + offset, dids.get(), dact.get() + offset, s.tokens,
      s.vocabShard, s.hidden, vocabOffset, vocabTotal, scratch.get(), bytes,
      DeviceErrorSink{}, nullptr));
  std::vector<float> expectedGrad(table.size(), 0.0f);
  if (s.shards == 1)
    ASSERT_TRUE(cpu::embeddingBackward(expectedGrad.data(), ids.data(),
                                       dout.data(), s.tokens, s.vocabShard,
                                       s.hidden));
  else
    ASSERT_TRUE(cpu::embeddingBackwardShard(expectedGrad.data(), ids.data(),
                                            dout.data(), s.tokens, s.vocabShard,
                                            s.hidden, vocabOffset, vocabTotal));
  actual = dgrad.download();
  EXPECT_EQ(std::vector<float>(actual.begin() + offset, actual.end()),
            expectedGrad);
}

TEST(CudaEmbeddingTest, WholeTableMatchesTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(1);
  for (const Shape &s : {Shape{1, 1, 1, 1, 0}, Shape{7, 5, 3, 1, 0},
                         Shape{513, 5, 128, 1, 0}, Shape{513, 1000, 130, 1, 0},
                         Shape{2048, 300, 64, 1, 0}, Shape{0, 10, 8, 1, 0}})
    for (int64_t offset : {0, 1})
      checkShard(s, offset, rng);
}

TEST(CudaEmbeddingTest, VocabularyShardsMatchTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(2);
  for (int64_t shard : {0, 1, 3}) {
    checkShard({300, 64, 128, 4, shard}, 0, rng);
    checkShard({301, 7, 5, 4, shard}, 1, rng);
  }
}

TEST(CudaEmbeddingTest, BadIdsAreReportedWithTheFirstPosition) {
  MLT_REQUIRE_CUDA();
  const int64_t tokens = 12, vocab = 10, hidden = 8;
  std::vector<int32_t> ids(tokens, 3);
  ids[9] = -1;
  ids[5] = 10;
  ids[11] = 1 << 30;
  DeviceBuffer<int32_t> dids(tokens);
  dids.upload(ids);
  DeviceBuffer<float> table(vocab * hidden), act(tokens * hidden),
      grad(vocab * hidden);
  table.upload(std::vector<float>(vocab * hidden, 1.0f));
  DeviceBuffer<DeviceErrorRecord> record(1);
  for (bool backward : {false, true}) {
    SCOPED_TRACE(backward ? "backward" : "forward");
    ASSERT_EQ(cudaMemset(record.get(), 0, sizeof(DeviceErrorRecord)),
              cudaSuccess);
    DeviceErrorSink sink;
    sink.record = record.get();
    sink.tag = 3;
    if (backward) {
      const size_t bytes = embeddingBackwardScratchBytes(tokens, vocab);
      DeviceBuffer<uint8_t> scratch(bytes);
      ASSERT_TRUE(launchEmbeddingBackward(grad.get(), dids.get(), act.get(),
                                          tokens, vocab, hidden, 0, vocab,
                                          scratch.get(), bytes, sink, nullptr));
    } else {
      ASSERT_TRUE(launchEmbeddingForward(act.get(), dids.get(), table.get(),
                                         tokens, vocab, hidden, 0, vocab, sink,
                                         nullptr));
    }
    const DeviceErrorRecord r = record.download()[0];
    EXPECT_EQ(r.owner, 3u);
    EXPECT_EQ(r.code, unsigned(kDeviceErrorIdOutOfRange));
    const unsigned long long packed = ~r.where;
    EXPECT_EQ(packed >> 32, 5u);
    EXPECT_EQ(int32_t(packed & 0xFFFFFFFFu), 10);
    EXPECT_EQ(r.limit, vocab);
  }
}

// A mixed-precision plan: a bf16 table copy (moved as it is) and a bf16 dout
// summed into the f32 gradient. Widened to f32, the bf16 values are the
// CPU's inputs, so both directions still match bit for bit.
TEST(CudaEmbeddingTest, BF16MatchesTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(7);
  for (const Shape &s : {Shape{7, 5, 3, 1, 0}, Shape{513, 300, 128, 1, 0},
                         Shape{100, 64, 36, 2, 1}})
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(testing::Message()
                   << "tokens " << s.tokens << " hidden " << s.hidden
                   << " shard " << s.shard << " offset " << offset);
      const int64_t vocabTotal = s.vocabShard * s.shards;
      const int64_t vocabOffset = s.shard * s.vocabShard;
      auto bf16 = [](const std::vector<float> &x) {
        std::vector<uint16_t> bits(x.size());
        cpu::castFloatToBF16(bits.data(), x.data(), int64_t(x.size()));
        std::vector<float> widened(x.size());
        cpu::castBF16ToFloat(widened.data(), bits.data(), int64_t(x.size()));
        return std::make_pair(bits, widened);
      };
      const std::vector<int32_t> ids =
          randomIds(rng, s.tokens, int32_t(vocabTotal));
      const auto [tableBits, table] =
          bf16(randomFloats(rng, s.vocabShard * s.hidden));
      const auto [doutBits, dout] =
          bf16(randomFloats(rng, s.tokens * s.hidden));
      DeviceBuffer<int32_t> dids(s.tokens);
      DeviceBuffer<uint16_t> dtable(tableBits.size() + offset),
          dact(doutBits.size() + offset);
      DeviceBuffer<float> dgrad(table.size() + offset);
      dids.upload(ids);
      dtable.upload(padFront(tableBits, offset));
      auto bf = [](uint16_t *p) {
        return reinterpret_cast<__nv_bfloat16 *>(p);
      };

      ASSERT_TRUE(launchEmbeddingForward(
          bf(dact.get() + offset), dids.get(), bf(dtable.get() + offset),
          s.tokens, s.vocabShard, s.hidden, vocabOffset, vocabTotal,
          DeviceErrorSink{}, nullptr));
      std::vector<float> expected(s.tokens * s.hidden);
      ASSERT_TRUE(cpu::embeddingForwardShard(
          expected.data(), ids.data(), table.data(), s.tokens, s.vocabShard,
          s.hidden, vocabOffset, vocabTotal));
      const std::vector<uint16_t> out = dact.download();
      EXPECT_EQ(std::vector<uint16_t>(out.begin() + offset, out.end()),
                bf16(expected).first);

      dgrad.upload(padFront(randomFloats(rng, table.size()), offset));
      dact.upload(padFront(doutBits, offset));
      const size_t bytes =
          embeddingBackwardScratchBytes(s.tokens, s.vocabShard);
      DeviceBuffer<uint8_t> scratch(bytes);
      ASSERT_TRUE(launchEmbeddingBackward(
          dgrad.get() + offset, dids.get(), bf(dact.get() + offset), s.tokens,
          s.vocabShard, s.hidden, vocabOffset, vocabTotal, scratch.get(), bytes,
          DeviceErrorSink{}, nullptr));
      std::vector<float> expectedGrad(table.size(), 0.0f);
      ASSERT_TRUE(cpu::embeddingBackwardShard(
          expectedGrad.data(), ids.data(), dout.data(), s.tokens, s.vocabShard,
          s.hidden, vocabOffset, vocabTotal));
      const std::vector<float> grad = dgrad.download();
      EXPECT_EQ(std::vector<float>(grad.begin() + offset, grad.end()),
                expectedGrad);
    }
}

TEST(CudaEmbeddingTest, RejectsAShardOutsideTheVocabulary) {
  Status status =
      launchEmbeddingForward(static_cast<float *>(nullptr), nullptr,
                             static_cast<const float *>(nullptr), 4, 8, 2, 4,
                             10, DeviceErrorSink{}, nullptr);
  ASSERT_FALSE(status);
  EXPECT_EQ(
      status.message(),
      "embedding: the shard [4, 12) is not inside the vocabulary [0, 10)");
}

} // namespace
