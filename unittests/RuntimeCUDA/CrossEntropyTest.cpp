//===- CrossEntropyTest.cpp - tests of the CUDA cross_entropy family ------===//
//
// Part of mlt. Checks the CUDA cross-entropy kernels against the CPU kernels
// of lib/Runtime/cpu on the same random inputs, as the CPU backend drives
// them: the loss (plain mean and another divisor), the gradient with the lse
// recomputed (also in place), vocabularies that do and do not allow 16-byte
// packs, a LLaMA-sized row; the vocabulary-sharded statistics, combine and
// gradient against the CPU's sharded kernels; the fused forward and
// backward (cross_entropy_fwd_bwd) against the CPU's pair;
// bit-reproducibility; a bad label (reported into the device error record,
// NaN loss) and the argument errors.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "kernels/cross_entropy.h"

#include "mlt/Runtime/cpu/CrossEntropy.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <type_traits>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// Normwise tolerance against the CPU float kernels: the GPU's row
/// statistics are f32 (the CPU's f64) and its exponentials expf; lse ~ 10,
/// so its rounding alone is ~1e-6 relative in the probabilities.
constexpr double kTol = 1e-5;

struct Shape {
  int64_t rows, vocab;
};
// Odd vocabularies (scalar path), multiples of 4 (packs), one row, one
// column, a LLaMA vocabulary.
constexpr Shape kShapes[] = {{15, 37}, {8, 64},    {1, 1},    {3, 1000},
                             {33, 5},  {4, 32000}, {2, 32001}};

std::string describe(const Shape &s) {
  std::ostringstream os;
  os << "rows " << s.rows << " vocab " << s.vocab;
  return os.str();
}

float download1(const DeviceBuffer<float> &b) { return b.download()[0]; }

/// Launches whose labels are valid report nowhere.
const DeviceErrorSink kNoErrors{};

TEST(CudaCrossEntropyTest, ForwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(501);
  for (const Shape &s : kShapes) {
    SCOPED_TRACE(describe(s));
    auto logits = randomVector<float>(rng, s.rows * s.vocab, -8.0, 8.0);
    auto labels = randomIds(rng, s.rows, int32_t(s.vocab));
    DeviceBuffer<float> dLogits(logits.size()), dLoss(1);
    DeviceBuffer<int32_t> dLabels(s.rows);
    dLogits.upload(logits);
    dLabels.upload(labels);
    const size_t scratchBytes = crossEntropyFwdScratchBytes(s.rows);
    DeviceBuffer<char> scratch(scratchBytes);
    for (int64_t divisor : {s.rows, 4 * s.rows + 1}) {
      float ref = 0.f;
      std::vector<float> lse(s.rows);
      ASSERT_TRUE(cpu::crossEntropyForward<float>(&ref, lse.data(),
                                                  logits.data(), labels.data(),
                                                  s.rows, s.vocab, divisor));
      ASSERT_TRUE(launchCrossEntropyFwd(
          dLoss.get(), dLogits.get(), dLabels.get(), s.rows, s.vocab, divisor,
          scratch.get(), scratchBytes, kNoErrors, 0));
      const float loss = download1(dLoss);
      EXPECT_NEAR(loss, ref, kTol * std::abs(ref) + 1e-7);
      // Bit-reproducible.
      ASSERT_TRUE(launchCrossEntropyFwd(
          dLoss.get(), dLogits.get(), dLabels.get(), s.rows, s.vocab, divisor,
          scratch.get(), scratchBytes, kNoErrors, 0));
      EXPECT_EQ(download1(dLoss), loss);
    }
  }
}

// Logits far beyond exp's range are fine (max shifted).
TEST(CudaCrossEntropyTest, LargeLogitsDoNotOverflow) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(502);
  const int64_t rows = 6, vocab = 40;
  auto logits = randomVector<float>(rng, rows * vocab, 500.0, 1000.0);
  auto labels = randomIds(rng, rows, int32_t(vocab));
  float ref = 0.f;
  std::vector<float> lse(rows);
  ASSERT_TRUE(cpu::crossEntropyForward<float>(
      &ref, lse.data(), logits.data(), labels.data(), rows, vocab, rows));
  DeviceBuffer<float> dLogits(logits.size()), dLoss(1);
  DeviceBuffer<int32_t> dLabels(rows);
  dLogits.upload(logits);
  dLabels.upload(labels);
  DeviceBuffer<char> scratch(crossEntropyFwdScratchBytes(rows));
  ASSERT_TRUE(launchCrossEntropyFwd(
      dLoss.get(), dLogits.get(), dLabels.get(), rows, vocab, rows,
      scratch.get(), crossEntropyFwdScratchBytes(rows), kNoErrors, 0));
  const float loss = download1(dLoss);
  ASSERT_TRUE(std::isfinite(loss));
  // lse ~ 1000: its f32 rounding is ~6e-5 absolute.
  EXPECT_NEAR(loss, ref, 2e-4 * std::abs(ref) + 1e-3);
}

TEST(CudaCrossEntropyTest, BackwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(503);
  for (const Shape &s : kShapes) {
    SCOPED_TRACE(describe(s));
    auto logits = randomVector<float>(rng, s.rows * s.vocab, -8.0, 8.0);
    auto labels = randomIds(rng, s.rows, int32_t(s.vocab));
    const float dloss = 0.75f;
    // The CPU backend's cross_entropy_bwd: lse recomputed by the forward.
    std::vector<float> lse(s.rows), ref(logits.size());
    float unused = 0.f;
    ASSERT_TRUE(cpu::crossEntropyForward<float>(&unused, lse.data(),
                                                logits.data(), labels.data(),
                                                s.rows, s.vocab, s.rows));
    ASSERT_TRUE(cpu::crossEntropyBackward<float>(
        ref.data(), logits.data(), lse.data(), labels.data(), dloss, s.rows,
        s.vocab, s.rows));
    DeviceBuffer<float> dLogits(logits.size()), dGrad(logits.size()), dDloss(1);
    DeviceBuffer<int32_t> dLabels(s.rows);
    dLogits.upload(logits);
    dLabels.upload(labels);
    dDloss.upload({dloss});
    ASSERT_TRUE(launchCrossEntropyBwd(dGrad.get(), dDloss.get(), dLogits.get(),
                                      dLabels.get(), s.rows, s.vocab, s.rows,
                                      kNoErrors, 0));
    const std::vector<float> grad = dGrad.download();
    EXPECT_LT(relError(grad, ref), kTol);
    // In place (dlogits aliases logits): the same bits.
    ASSERT_TRUE(launchCrossEntropyBwd(dLogits.get(), dDloss.get(),
                                      dLogits.get(), dLabels.get(), s.rows,
                                      s.vocab, s.rows, kNoErrors, 0));
    EXPECT_EQ(dLogits.download(), grad);
  }
}

// Vocabulary shards: each shard's statistics, the combine of their gathered
// lse parts and summed targets, and each shard's gradient from the global
// lse, against the CPU's sharded kernels; rows split too (divisor larger
// than rows).
TEST(CudaCrossEntropyTest, ShardedKernelsMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(504);
  struct Case {
    int64_t rows, vocabLocal, shards, divisor;
  };
  for (const Case &c : {Case{15, 12, 3, 15}, Case{7, 64, 2, 28},
                        Case{1, 5, 1, 1}, Case{40, 1000, 4, 80}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " vocab_local " +
                 std::to_string(c.vocabLocal) + " shards " +
                 std::to_string(c.shards));
    const int64_t vocabTotal = c.vocabLocal * c.shards;
    auto full = randomVector<float>(rng, c.rows * vocabTotal, -8.0, 8.0);
    auto labels = randomIds(rng, c.rows, int32_t(vocabTotal));
    DeviceBuffer<int32_t> dLabels(c.rows);
    dLabels.upload(labels);
    std::vector<float> partsRef(c.shards * c.rows), targetRef(c.rows, 0.f);
    std::vector<float> partsGpu(c.shards * c.rows), targetGpu(c.rows, 0.f);
    std::vector<std::vector<float>> shardLogits(c.shards);
    for (int64_t g = 0; g < c.shards; ++g) {
      std::vector<float> &shard = shardLogits[g];
      shard.resize(c.rows * c.vocabLocal);
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t j = 0; j < c.vocabLocal; ++j)
          shard[r * c.vocabLocal + j] =
              full[r * vocabTotal + g * c.vocabLocal + j];
      std::vector<float> target(c.rows);
      ASSERT_TRUE(cpu::crossEntropyStats<float>(
          partsRef.data() + g * c.rows, target.data(), shard.data(),
          labels.data(), c.rows, c.vocabLocal, g * c.vocabLocal, vocabTotal));
      DeviceBuffer<float> dShard(shard.size()), dLse(c.rows), dTarget(c.rows);
      dShard.upload(shard);
      ASSERT_TRUE(launchCrossEntropyStats(
          dLse.get(), dTarget.get(), dShard.get(), dLabels.get(), c.rows,
          c.vocabLocal, g * c.vocabLocal, vocabTotal, kNoErrors, 0));
      const std::vector<float> lse = dLse.download(), tgt = dTarget.download();
      EXPECT_LT(relError(lse, std::vector<float>(partsRef.begin() + g * c.rows,
                                                 partsRef.begin() +
                                                     (g + 1) * c.rows)),
                kTol);
      // The target is a copy of a logit (or 0): exact.
      EXPECT_EQ(tgt, target);
      std::copy(lse.begin(), lse.end(), partsGpu.begin() + g * c.rows);
      for (int64_t r = 0; r < c.rows; ++r) {
        targetRef[r] += target[r];
        targetGpu[r] += tgt[r];
      }
    }
    // Combine the CPU's parts on both sides.
    std::vector<float> lseRef(c.rows);
    float lossRef = 0.f;
    ASSERT_TRUE(cpu::crossEntropyCombine<float>(
        lseRef.data(), &lossRef, partsRef.data(), targetRef.data(), c.rows,
        c.shards, c.divisor));
    DeviceBuffer<float> dParts(partsRef.size()), dTarget(c.rows), dLse(c.rows),
        dLoss(1);
    dParts.upload(partsRef);
    dTarget.upload(targetRef);
    ASSERT_TRUE(launchCrossEntropyCombine(dLse.get(), dLoss.get(), dParts.get(),
                                          dTarget.get(), c.rows, c.shards,
                                          c.divisor, 0));
    // Both combine in f64 from the same parts: rounding of the result only.
    EXPECT_LT(relError(dLse.download(), lseRef), 1e-6);
    EXPECT_NEAR(download1(dLoss), lossRef, 1e-6 * std::abs(lossRef) + 1e-7);

    // Each shard's gradient from the global lse.
    const float dloss = 1.25f;
    DeviceBuffer<float> dDloss(1);
    dDloss.upload({dloss});
    for (int64_t g = 0; g < c.shards; ++g) {
      const std::vector<float> &shard = shardLogits[g];
      std::vector<float> ref(shard.size());
      ASSERT_TRUE(cpu::crossEntropyStatsBackward<float>(
          ref.data(), shard.data(), lseRef.data(), labels.data(), dloss, c.rows,
          c.vocabLocal, g * c.vocabLocal, vocabTotal, c.divisor));
      DeviceBuffer<float> dShard(shard.size()), dGrad(shard.size());
      dShard.upload(shard);
      ASSERT_TRUE(launchCrossEntropyBwdStats(
          dGrad.get(), dDloss.get(), dShard.get(), dLabels.get(), dLse.get(),
          c.rows, c.vocabLocal, g * c.vocabLocal, vocabTotal, c.divisor,
          kNoErrors, 0));
      EXPECT_LT(relError(dGrad.download(), ref), kTol);
    }
  }
}

// A label outside the vocabulary is reported into the device error record
// (the first bad row and its label, the vocabulary size) and makes the loss
// NaN and its gradient row NaN, while the other rows stay finite.
TEST(CudaCrossEntropyTest, BadLabelIsReportedAndGivesNaN) {
  MLT_REQUIRE_CUDA();
  const int64_t rows = 4, vocab = 8;
  std::mt19937 rng(505);
  auto logits = randomVector<float>(rng, rows * vocab);
  DeviceBuffer<float> dLogits(logits.size()), dLoss(1), dGrad(logits.size()),
      dDloss(1);
  DeviceBuffer<int32_t> dLabels(rows);
  DeviceBuffer<DeviceErrorRecord> record(1);
  dLogits.upload(logits);
  dLabels.upload({1, 8, 2, -3});
  dDloss.upload({1.f});
  auto checkRecord = [&](unsigned tag) {
    const DeviceErrorRecord r = record.download()[0];
    EXPECT_EQ(r.owner, tag);
    EXPECT_EQ(r.code, unsigned(kDeviceErrorIdOutOfRange));
    EXPECT_EQ(r.limit, vocab);
    const unsigned long long packed = ~r.where;
    EXPECT_EQ(packed >> 32, 1u); // the first bad row
    EXPECT_EQ(int32_t(uint32_t(packed)), 8);
  };
  auto clearRecord = [&] {
    ASSERT_EQ(cudaMemset(record.get(), 0, sizeof(DeviceErrorRecord)),
              cudaSuccess);
  };

  clearRecord();
  DeviceBuffer<char> scratch(crossEntropyFwdScratchBytes(rows));
  ASSERT_TRUE(launchCrossEntropyFwd(dLoss.get(), dLogits.get(), dLabels.get(),
                                    rows, vocab, rows, scratch.get(),
                                    crossEntropyFwdScratchBytes(rows),
                                    DeviceErrorSink{record.get(), 3}, 0));
  EXPECT_TRUE(std::isnan(download1(dLoss)));
  checkRecord(3);

  clearRecord();
  ASSERT_TRUE(launchCrossEntropyBwd(dGrad.get(), dDloss.get(), dLogits.get(),
                                    dLabels.get(), rows, vocab, rows,
                                    DeviceErrorSink{record.get(), 5}, 0));
  const std::vector<float> grad = dGrad.download();
  EXPECT_FALSE(std::isnan(grad[0]));
  EXPECT_TRUE(std::isnan(grad[vocab]));
  EXPECT_FALSE(std::isnan(grad[2 * vocab]));
  EXPECT_TRUE(std::isnan(grad[3 * vocab]));
  checkRecord(5);

  // The sharded statistics check labels against the global vocabulary.
  clearRecord();
  DeviceBuffer<float> dLse(rows), dTarget(rows);
  ASSERT_TRUE(launchCrossEntropyStats(dLse.get(), dTarget.get(), dLogits.get(),
                                      dLabels.get(), rows, vocab, 0, vocab,
                                      DeviceErrorSink{record.get(), 7}, 0));
  const std::vector<float> lse = dLse.download();
  EXPECT_FALSE(std::isnan(lse[0]));
  EXPECT_TRUE(std::isnan(lse[1]));
  checkRecord(7);
}

/// bf16 bits of `values`, and `values` rounded to them.
std::vector<uint16_t> roundToBF16(std::vector<float> &values) {
  std::vector<uint16_t> bits(values.size());
  cpu::castFloatToBF16(bits.data(), values.data(), int64_t(values.size()));
  cpu::castBF16ToFloat(values.data(), bits.data(), int64_t(values.size()));
  return bits;
}

// Mixed precision: bf16 logits (the LM head's output) with f32 statistics,
// loss and dloss, and a bf16 gradient. Against the CPU float kernels on the
// same (bf16) logits: the loss and the shard statistics as closely as in
// f32, the gradient within its one bf16 rounding.
TEST(CudaCrossEntropyTest, BF16LogitsMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(506);
  for (const Shape &s : kShapes) {
    SCOPED_TRACE(describe(s));
    std::vector<float> logits =
        randomVector<float>(rng, s.rows * s.vocab, -8.0, 8.0);
    const std::vector<uint16_t> bits = roundToBF16(logits);
    auto labels = randomIds(rng, s.rows, int32_t(s.vocab));
    const float dloss = 0.75f;
    float refLoss = 0.f;
    std::vector<float> lse(s.rows), refGrad(logits.size());
    ASSERT_TRUE(cpu::crossEntropyForward<float>(&refLoss, lse.data(),
                                                logits.data(), labels.data(),
                                                s.rows, s.vocab, s.rows));
    ASSERT_TRUE(cpu::crossEntropyBackward<float>(
        refGrad.data(), logits.data(), lse.data(), labels.data(), dloss, s.rows,
        s.vocab, s.rows));

    DeviceBuffer<uint16_t> dLogits(bits.size()), dGrad(bits.size());
    DeviceBuffer<float> dLoss(1), dDloss(1), dLse(s.rows), dTarget(s.rows);
    DeviceBuffer<int32_t> dLabels(s.rows);
    dLogits.upload(bits);
    dLabels.upload(labels);
    dDloss.upload({dloss});
    auto bf = [](uint16_t *p) { return reinterpret_cast<__nv_bfloat16 *>(p); };
    const size_t scratchBytes = crossEntropyFwdScratchBytes(s.rows);
    DeviceBuffer<char> scratch(scratchBytes);
    ASSERT_TRUE(launchCrossEntropyFwd(
        dLoss.get(), bf(dLogits.get()), dLabels.get(), s.rows, s.vocab, s.rows,
        scratch.get(), scratchBytes, kNoErrors, 0));
    EXPECT_NEAR(download1(dLoss), refLoss, kTol * std::abs(refLoss) + 1e-7);
    ASSERT_TRUE(launchCrossEntropyBwd(bf(dGrad.get()), dDloss.get(),
                                      bf(dLogits.get()), dLabels.get(), s.rows,
                                      s.vocab, s.rows, kNoErrors, 0));
    std::vector<float> grad(bits.size());
    const std::vector<uint16_t> gradBits = dGrad.download();
    cpu::castBF16ToFloat(grad.data(), gradBits.data(), int64_t(grad.size()));
    EXPECT_LT(relError(grad, refGrad), 8e-3);
    // The statistics of the whole vocabulary as one shard: lse and target.
    ASSERT_TRUE(launchCrossEntropyStats(
        dLse.get(), dTarget.get(), bf(dLogits.get()), dLabels.get(), s.rows,
        s.vocab, 0, s.vocab, kNoErrors, 0));
    EXPECT_LT(relError(dLse.download(), lse), kTol);
    std::vector<float> target(s.rows);
    for (int64_t r = 0; r < s.rows; ++r)
      target[r] = logits[r * s.vocab + labels[r]];
    EXPECT_EQ(dTarget.download(), target);
  }
}

/// cross_entropy_fwd_bwd of T (float, or uint16_t bits of bf16) on the
/// device: the loss and the gradient as floats, out of place or over the
/// logits.
template <typename T>
std::pair<float, std::vector<float>>
fusedOnDevice(const std::vector<T> &logits, const std::vector<int32_t> &labels,
              float dloss, int64_t rows, int64_t vocab, int64_t divisor,
              bool inPlace, DeviceErrorSink errors = kNoErrors) {
  DeviceBuffer<T> dLogits(logits.size()), dGrad(logits.size());
  DeviceBuffer<float> dLoss(1), dDloss(1);
  DeviceBuffer<int32_t> dLabels(rows);
  dLogits.upload(logits);
  dLabels.upload(labels);
  dDloss.upload({dloss});
  const size_t scratchBytes = crossEntropyFwdScratchBytes(rows);
  DeviceBuffer<char> scratch(scratchBytes);
  T *grad = inPlace ? dLogits.get() : dGrad.get();
  Status status;
  if constexpr (std::is_same_v<T, float>) {
    status = launchCrossEntropyFwdBwd(
        dLoss.get(), grad, dDloss.get(), dLogits.get(), dLabels.get(), rows,
        vocab, divisor, scratch.get(), scratchBytes, errors, 0);
  } else {
    auto bf = [](uint16_t *p) { return reinterpret_cast<__nv_bfloat16 *>(p); };
    status = launchCrossEntropyFwdBwd(
        dLoss.get(), bf(grad), dDloss.get(), bf(dLogits.get()), dLabels.get(),
        rows, vocab, divisor, scratch.get(), scratchBytes, errors, 0);
  }
  EXPECT_TRUE(status) << status.message();
  const std::vector<T> out = (inPlace ? dLogits : dGrad).download();
  std::vector<float> values(out.size());
  if constexpr (std::is_same_v<T, float>)
    values = out;
  else
    cpu::castBF16ToFloat(values.data(), out.data(), int64_t(out.size()));
  return {download1(dLoss), values};
}

// cross_entropy_fwd_bwd against the CPU forward and backward (lse from the
// forward) on the same random logits, f32 and bf16, with a divisor other
// than rows: rows in shared memory (up to 72 KiB: LLaMA-2's 32,000 bf16,
// 4,096 f32), rows beyond it (32,000 f32, 40,000 and 70,000) or not in
// 16-byte packs (read twice); the same bits again and in place over the
// logits.
TEST(CudaCrossEntropyTest, FusedForwardBackwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(507);
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({3, 40000}); // beyond shared memory, f32 and bf16
  shapes.push_back({2, 70000});
  shapes.push_back({5, 4096});
  for (const Shape &s : shapes) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(describe(s) + (bf16 ? " bf16" : " f32"));
      std::vector<float> logits =
          randomVector<float>(rng, s.rows * s.vocab, -8.0, 8.0);
      std::vector<uint16_t> bits;
      if (bf16)
        bits = roundToBF16(logits);
      auto labels = randomIds(rng, s.rows, int32_t(s.vocab));
      const float dloss = 0.75f;
      const int64_t divisor = 3 * s.rows + 1;
      float refLoss = 0.f;
      std::vector<float> lse(s.rows), refGrad(logits.size());
      ASSERT_TRUE(cpu::crossEntropyForward<float>(&refLoss, lse.data(),
                                                  logits.data(), labels.data(),
                                                  s.rows, s.vocab, divisor));
      ASSERT_TRUE(cpu::crossEntropyBackward<float>(
          refGrad.data(), logits.data(), lse.data(), labels.data(), dloss,
          s.rows, s.vocab, divisor));
      auto run = [&](bool inPlace) {
        return bf16 ? fusedOnDevice(bits, labels, dloss, s.rows, s.vocab,
                                    divisor, inPlace)
                    : fusedOnDevice(logits, labels, dloss, s.rows, s.vocab,
                                    divisor, inPlace);
      };
      const auto [loss, grad] = run(false);
      EXPECT_NEAR(loss, refLoss, kTol * std::abs(refLoss) + 1e-7);
      EXPECT_LT(relError(grad, refGrad), bf16 ? 8e-3 : kTol);
      const auto [againLoss, againGrad] = run(false);
      EXPECT_EQ(againLoss, loss);
      EXPECT_EQ(againGrad, grad);
      const auto [inPlaceLoss, inPlaceGrad] = run(true);
      EXPECT_EQ(inPlaceLoss, loss);
      EXPECT_EQ(inPlaceGrad, grad);
    }
  }
}

// cross_entropy_fwd_bwd with labels outside the vocabulary, rows in shared
// memory and beyond: reported (the first bad row and its label), the loss NaN,
// the bad rows' gradients NaN and the others finite.
TEST(CudaCrossEntropyTest, FusedBadLabelIsReportedAndGivesNaN) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(508);
  DeviceBuffer<DeviceErrorRecord> record(1);
  for (int64_t vocab : {int64_t(64), int64_t(40000)}) {
    SCOPED_TRACE(vocab);
    const int64_t rows = 4;
    auto logits = randomVector<float>(rng, rows * vocab);
    const std::vector<int32_t> labels = {1, int32_t(vocab), 2, -3};
    ASSERT_EQ(cudaMemset(record.get(), 0, sizeof(DeviceErrorRecord)),
              cudaSuccess);
    const auto [loss, grad] =
        fusedOnDevice(logits, labels, 1.f, rows, vocab, rows, false,
                      DeviceErrorSink{record.get(), 9});
    EXPECT_TRUE(std::isnan(loss));
    EXPECT_FALSE(std::isnan(grad[0]));
    EXPECT_TRUE(std::isnan(grad[vocab]));
    EXPECT_FALSE(std::isnan(grad[2 * vocab]));
    EXPECT_TRUE(std::isnan(grad[3 * vocab + vocab - 1]));
    const DeviceErrorRecord r = record.download()[0];
    EXPECT_EQ(r.owner, 9u);
    EXPECT_EQ(r.code, unsigned(kDeviceErrorIdOutOfRange));
    EXPECT_EQ(r.limit, vocab);
    const unsigned long long packed = ~r.where;
    EXPECT_EQ(packed >> 32, 1u);
    EXPECT_EQ(int32_t(uint32_t(packed)), int32_t(vocab));
  }
}

TEST(CudaCrossEntropyTest, BadArgumentsAreErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> d(64), loss(1);
  DeviceBuffer<int32_t> labels(4);
  Status scratch = launchCrossEntropyFwd(loss.get(), d.get(), labels.get(), 4,
                                         8, 4, nullptr, 0, kNoErrors, 0);
  ASSERT_FALSE(scratch);
  EXPECT_NE(scratch.message().find("scratch"), std::string::npos);
  Status divisor = launchCrossEntropyBwd(d.get(), loss.get(), d.get(),
                                         labels.get(), 4, 8, 0, kNoErrors, 0);
  ASSERT_FALSE(divisor);
  EXPECT_NE(divisor.message().find("loss divisor 0"), std::string::npos);
  Status shard = launchCrossEntropyStats(
      d.get(), d.get(), d.get(), labels.get(), 4, 8, 8, 12, kNoErrors, 0);
  ASSERT_FALSE(shard);
  EXPECT_NE(shard.message().find("not inside the vocabulary"),
            std::string::npos)
      << shard.message();
  Status fused =
      launchCrossEntropyFwdBwd(loss.get(), d.get(), loss.get(), d.get(),
                               labels.get(), 4, 8, 4, nullptr, 0, kNoErrors, 0);
  ASSERT_FALSE(fused);
  EXPECT_NE(fused.message().find("scratch"), std::string::npos);
  Status fusedDivisor = launchCrossEntropyFwdBwd(
      loss.get(), d.get(), loss.get(), d.get(), labels.get(), 0, 8, -1, nullptr,
      0, kNoErrors, 0);
  ASSERT_FALSE(fusedDivisor);
  EXPECT_NE(fusedDivisor.message().find("loss divisor -1"), std::string::npos);
  Status parts = launchCrossEntropyCombine(d.get(), loss.get(), d.get(),
                                           d.get(), 4, 0, 4, 0);
  ASSERT_FALSE(parts);
  EXPECT_NE(parts.message().find("0 parts"), std::string::npos);
}

} // namespace
