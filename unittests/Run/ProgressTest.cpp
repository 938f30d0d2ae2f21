//===- ProgressTest.cpp - a run's pace ------------------------------------===//
//
// Part of mlt. Tests Progress.h: the FLOPs per token against the PyTorch
// references' formula (../shared/bench/hf_llama_bench.py), the window of
// tokens/s without the warm-up step, the time left, MFU, and the totals.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/Progress.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::run;

namespace {

rt::StepMetrics stepOf(int64_t step, double seconds, int64_t tokens) {
  rt::StepMetrics m;
  m.step = step;
  m.seconds = seconds;
  m.tokens = tokens;
  m.tokensPerSecond = double(tokens) / seconds;
  return m;
}

// Tests the FLOPs of a token against the references' formula, written out
// for TinyLlama-1.1B's shape (hf_llama_bench.py's llama-1b): 6 x (22 x
// (2 d^2 + 2 d kv + 3 d f) + d V) + 12 x 22 x d x seq.
TEST(ProgressTest, FlopsPerTokenFollowTheReferences) {
  const std::string tinyLlama = R"({"hidden_size": 2048, "num_hidden_layers": 22,
      "num_attention_heads": 32, "num_key_value_heads": 4,
      "intermediate_size": 5632, "vocab_size": 32000})";
  const double d = 2048, kv = 4 * 64, f = 5632, V = 32000, L = 22;
  const double expected =
      6 * (L * (2 * d * d + 2 * d * kv + 3 * d * f) + d * V) +
      12 * L * d * 2048;
  ASSERT_TRUE(trainingFlopsPerToken(tinyLlama, 2048));
  EXPECT_DOUBLE_EQ(*trainingFlopsPerToken(tinyLlama, 2048), expected);
  // A head_dim that is not hidden / heads widens the queries (Gemma-like).
  const std::string wide = R"({"hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 2, "head_dim": 48, "intermediate_size": 96,
      "vocab_size": 10})";
  EXPECT_DOUBLE_EQ(*trainingFlopsPerToken(wide, 8),
                   6 * (2 * 64 * 96 + 2 * 64 * 96 + 3 * 64 * 96 + 64 * 10) +
                       12 * 96 * 8);
  EXPECT_FALSE(trainingFlopsPerToken(R"({"hidden_size": 64})", 8));
  EXPECT_FALSE(trainingFlopsPerToken("not json", 8));
}

TEST(ProgressTest, PeaksOfKnownGpus) {
  EXPECT_DOUBLE_EQ(*peakFlops("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_DOUBLE_EQ(*peakFlops("NVIDIA H200"), 989.4e12);
  EXPECT_DOUBLE_EQ(*peakFlops("NVIDIA H100 PCIe"), 756e12);
  EXPECT_DOUBLE_EQ(*peakFlops("NVIDIA A100-SXM4-80GB"), 312e12);
  EXPECT_FALSE(peakFlops("cpu"));
  EXPECT_FALSE(peakFlops("NVIDIA GeForce RTX 4090"));
}

// Tests the window: the warm-up step left out once another is in, the last
// kWindow steps after that, the time left at the window's pace, and the
// rates per GPU.
TEST(ProgressTest, PaceOverTheWindow) {
  ProgressMeter meter(/*lastStep=*/20, /*gpus=*/2, /*flopsPerToken=*/1e9,
                      /*peak=*/1e12);
  StepProgress first = meter.add(stepOf(1, 10.0, 1000), 11.0);
  EXPECT_EQ(first.window, 1);
  EXPECT_DOUBLE_EQ(first.tokensPerSecond, 100.0);
  EXPECT_DOUBLE_EQ(first.remaining, 19 * 10.0);
  StepProgress second = meter.add(stepOf(2, 1.0, 1000), 12.0);
  EXPECT_EQ(second.window, 1);
  EXPECT_DOUBLE_EQ(second.tokensPerSecond, 1000.0);
  EXPECT_DOUBLE_EQ(second.remaining, 18 * 1.0);
  EXPECT_DOUBLE_EQ(second.elapsed, 12.0);
  // 1000 tokens/s x 1e9 FLOPs over 2 GPUs: 0.5 TFLOP/s each, half the peak.
  EXPECT_DOUBLE_EQ(*second.tflopsPerGpu, 0.5);
  EXPECT_DOUBLE_EQ(*second.mfu, 0.5);
  StepProgress p;
  for (int64_t step = 3; step <= 14; ++step)
    p = meter.add(stepOf(step, step % 2 ? 2.0 : 1.0, 1000), 12.0 + step);
  EXPECT_EQ(p.window, int64_t(ProgressMeter::kWindow));
  // Steps 5-14: five of 1 s and five of 2 s.
  EXPECT_DOUBLE_EQ(p.tokensPerSecond, 10000.0 / 15.0);
  EXPECT_DOUBLE_EQ(p.remaining, 6 * 1.5);
  const RunTotals t = meter.totals();
  EXPECT_EQ(t.steps, 14);
  EXPECT_EQ(t.tokens, 14000);
  EXPECT_DOUBLE_EQ(t.seconds, 26.0);
  // Steps 2-14: 13,000 tokens in 1 + 6 x 2 + 6 x 1 seconds.
  EXPECT_DOUBLE_EQ(t.tokensPerSecond, 13000.0 / 19.0);
  EXPECT_EQ(t.warmupSteps, 1);
  // Without FLOPs or a peak: no rates.
  ProgressMeter plain(5, 1, std::nullopt, std::nullopt);
  EXPECT_FALSE(plain.add(stepOf(1, 1.0, 10), 1.0).tflopsPerGpu);
  ProgressMeter noPeak(5, 1, 1e9, std::nullopt);
  StepProgress q = noPeak.add(stepOf(1, 1.0, 10), 1.0);
  EXPECT_TRUE(q.tflopsPerGpu);
  EXPECT_FALSE(q.mfu);
}

// Tests the warm-up on a GPU: the first step sets the device up, the second
// is captured as a graph (StepMetrics::setUp); the totals and the window
// leave both out once a step of the pace follows, and only the first where
// none does (a run of two steps).
TEST(ProgressTest, SetUpStepsLeaveThePace) {
  ProgressMeter meter(/*lastStep=*/6, /*gpus=*/1, std::nullopt, std::nullopt);
  rt::StepMetrics first = stepOf(1, 10.0, 1000), captured = stepOf(2, 4.0, 1000);
  first.setUp = captured.setUp = true;
  first.ranks = {{0, 10.0, 0.0}};
  captured.ranks = {{0, 4.0, 0.0}};
  meter.add(first, 10.0);
  StepProgress p = meter.add(captured, 14.0);
  EXPECT_EQ(p.window, 1);
  EXPECT_DOUBLE_EQ(p.tokensPerSecond, 250.0);
  RunTotals t = meter.totals();
  EXPECT_EQ(t.warmupSteps, 1);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond, 250.0);
  for (int64_t step = 3; step <= 6; ++step) {
    rt::StepMetrics m = stepOf(step, step == 3 ? 1.0 : 2.0, 1000);
    m.ranks = {{0, m.seconds, 0.0}};
    p = meter.add(m, 14.0 + 2.0 * double(step - 2));
  }
  // Steps 3-6: 4,000 tokens in 1 + 3 x 2 seconds, in the window too.
  EXPECT_EQ(p.window, 4);
  EXPECT_DOUBLE_EQ(p.tokensPerSecond, 4000.0 / 7.0);
  t = meter.totals();
  EXPECT_EQ(t.warmupSteps, 2);
  EXPECT_DOUBLE_EQ(t.tokensPerSecond, 4000.0 / 7.0);
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_DOUBLE_EQ(t.ranks[0].seconds, 7.0 / 4.0);
}

TEST(ProgressTest, Durations) {
  EXPECT_EQ(formatDuration(0), "0:00:00");
  EXPECT_EQ(formatDuration(187.4), "0:03:07");
  EXPECT_EQ(formatDuration(43200), "12:00:00");
  EXPECT_EQ(formatDuration(-1), "0:00:00");
}

} // namespace
