//===- StepMemoryPlanTest.cpp - tests of the step-level planner ----------===//
//
// Part of mlt. Blocks live in sets of call spans: hand-made cases (a
// GPipe-like step keeps every micro-batch's activations, 1F1B-like reuse),
// and random blocks planned greedily against the naive planner and the
// checker.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepMemoryPlan.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;

namespace {

StepBlock block(uint64_t bytes, std::vector<CallSpan> live) {
  StepBlock b{bytes, std::move(live)};
  b.normalize();
  return b;
}

TEST(StepMemoryPlan, NormalizeMergesTouchingSpans) {
  StepBlock b = block(1, {{5, 6}, {0, 1}, {2, 2}, {8, 9}, {9, 12}});
  ASSERT_EQ(b.live.size(), 3u);
  EXPECT_EQ(b.live[0].first, 0);
  EXPECT_EQ(b.live[0].last, 2);
  EXPECT_EQ(b.live[1].first, 5);
  EXPECT_EQ(b.live[2].last, 12);
  EXPECT_TRUE(b.liveTogether(block(1, {{12, 20}})));
  EXPECT_FALSE(b.liveTogether(block(1, {{3, 4}, {7, 7}, {13, 14}})));
}

// Calls F0 F1 F2 B0 B1 B2 (0..5): the activations of each micro-batch live
// from its F to its B, so all three are live at call 2 and need three
// ranges; a body region live in its own calls reuses nothing of them.
TEST(StepMemoryPlan, GPipeKeepsEverySet) {
  std::vector<StepBlock> blocks = {
      block(1000, {{0, 3}}), block(1000, {{1, 4}}), block(1000, {{2, 5}}),
      // The forward body's region (calls 0-2) and the backward's (3-5).
      block(300, {{0, 2}}), block(300, {{3, 5}})};
  StepMemoryPlan plan = planStepMemory(blocks, 256);
  std::string why;
  ASSERT_TRUE(plan.verify(blocks, 256, &why)) << why;
  // Three sets of 1024 bytes, and one region at a time beside them.
  EXPECT_EQ(plan.peakBytes, 3 * 1024u + 512u);
  EXPECT_EQ(plan.offsets[3], plan.offsets[4]);
}

// Calls F0 B0 F1 B1: one set, reused.
TEST(StepMemoryPlan, OneInFlightReusesOneSet) {
  std::vector<StepBlock> blocks = {block(1000, {{0, 1}}),
                                   block(1000, {{2, 3}}),
                                   block(300, {{0, 0}, {2, 2}}),
                                   block(300, {{1, 1}, {3, 3}})};
  StepMemoryPlan plan = planStepMemory(blocks, 256);
  std::string why;
  ASSERT_TRUE(plan.verify(blocks, 256, &why)) << why;
  EXPECT_EQ(plan.peakBytes, 1024u + 512u);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
}

TEST(StepMemoryPlan, VerifyNamesOverlaps) {
  std::vector<StepBlock> blocks = {block(512, {{0, 3}}), block(512, {{3, 4}})};
  StepMemoryPlan plan{{0, 256}, 1024};
  std::string why;
  EXPECT_FALSE(plan.verify(blocks, 256, &why));
  EXPECT_EQ(why, "blocks 0 and 1 are live in a common call and overlap in "
                 "memory");
  plan = {{0, 0}, 1024};
  blocks[1] = block(512, {{4, 4}});
  EXPECT_TRUE(plan.verify(blocks, 256, &why)) << why;
  plan = {{0, 128}, 1024};
  EXPECT_FALSE(plan.verify(blocks, 256, &why));
  EXPECT_EQ(why, "block 1 is not aligned");
  plan = {{0, 768}, 1024};
  EXPECT_FALSE(plan.verify(blocks, 256, &why));
  EXPECT_EQ(why, "block 1 ends past the peak");
}

TEST(StepMemoryPlan, RandomBlocksBeatOrMatchTheNaivePlan) {
  std::mt19937_64 rng(20261125);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<int> count(1, 30), calls(1, 40);
    const int calls_ = calls(rng);
    std::vector<StepBlock> blocks(static_cast<size_t>(count(rng)));
    for (StepBlock &b : blocks) {
      b.bytes = std::uniform_int_distribution<uint64_t>(1, 5000)(rng);
      const int spans = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int s = 0; s < spans; ++s) {
        int64_t first =
            std::uniform_int_distribution<int64_t>(0, calls_ - 1)(rng);
        int64_t last = std::uniform_int_distribution<int64_t>(
            first, std::min<int64_t>(calls_ - 1, first + 6))(rng);
        b.live.push_back({first, last});
      }
      b.normalize();
    }
    StepMemoryPlan greedy = planStepMemory(blocks, 256);
    StepMemoryPlan naive = planStepMemoryNaive(blocks, 256);
    std::string why;
    ASSERT_TRUE(greedy.verify(blocks, 256, &why)) << why;
    ASSERT_TRUE(naive.verify(blocks, 256, &why)) << why;
    EXPECT_LE(greedy.peakBytes, naive.peakBytes);
    // Never below the largest set of blocks live in one call.
    uint64_t most = 0;
    for (int64_t c = 0; c < calls_; ++c) {
      uint64_t live = 0;
      for (const StepBlock &b : blocks)
        if (b.liveTogether(StepBlock{1, {{c, c}}}))
          live += (b.bytes + 255) / 256 * 256;
      most = std::max(most, live);
    }
    EXPECT_GE(greedy.peakBytes, most);
  }
}

TEST(StepMemoryPlan, IndexedPlannerAndSweepingCheckerAgreeWithTheScans) {
  // Random normalized blocks (some empty, some never live): the planner
  // places as the scan does; plans with a block moved are accepted and
  // refused, with the same words, as by verifyAllPairs.
  std::mt19937_64 rng(26112026);
  int refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int calls = 1 + int(rng() % 60);
    std::vector<StepBlock> blocks(1 + rng() % (trial < 350 ? 40 : 1500));
    for (StepBlock &b : blocks) {
      b.bytes = rng() % 8 == 0 ? 0 : 1 + rng() % 5000;
      for (int s = int(rng() % 5); s > 0; --s) {
        int64_t first = int64_t(rng() % calls);
        b.live.push_back(
            {first, std::min<int64_t>(calls - 1, first + rng() % 7)});
      }
      b.normalize();
    }
    StepMemoryPlan plan = planStepMemory(blocks, 256);
    StepMemoryPlan scan = planStepMemoryByScan(blocks, 256);
    ASSERT_EQ(plan.offsets, scan.offsets) << "trial " << trial;
    ASSERT_EQ(plan.peakBytes, scan.peakBytes) << "trial " << trial;
    if (trial % 3 != 0) {
      size_t moved = rng() % blocks.size();
      plan.offsets[moved] = rng() % 2 == 0
                                ? plan.offsets[rng() % blocks.size()]
                                : plan.offsets[moved] + 256 * (rng() % 5);
      if (rng() % 10 == 0)
        plan.offsets[moved] += 128;
    }
    std::string why, reference;
    const bool valid = plan.verify(blocks, 256, &why);
    ASSERT_EQ(valid, plan.verifyAllPairs(blocks, 256, &reference))
        << "trial " << trial << ": " << reference;
    EXPECT_EQ(why, reference);
    refused += !valid;
  }
  EXPECT_GT(refused, 50);
}

TEST(StepMemoryPlan, BlocksNotNormalizedTakeTheScan) {
  // Spans out of order, overlapping and touching: outside the planner's
  // contract, answered as the scan and verifyAllPairs answer.
  std::vector<StepBlock> blocks = {StepBlock{512, {{5, 9}, {0, 2}}},
                                   StepBlock{512, {{1, 3}, {3, 4}}},
                                   StepBlock{256, {{2, 6}}}};
  StepMemoryPlan plan = planStepMemory(blocks, 256);
  EXPECT_EQ(plan.offsets, planStepMemoryByScan(blocks, 256).offsets);
  std::string why, reference;
  EXPECT_EQ(plan.verify(blocks, 256, &why),
            plan.verifyAllPairs(blocks, 256, &reference));
  EXPECT_EQ(why, reference);
}

} // namespace
