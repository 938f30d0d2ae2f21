//===- MemoryPlanTest.cpp - tests of the arena planner --------------------===//
//
// Part of mlt. The greedy planner against the naive one and the checker, on
// hand-made and random lifetimes.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;

namespace {

TEST(MemoryPlan, ReusesMemoryOfDeadBuffers) {
  // a and b are live together; c starts after both died and can reuse a's range.
  std::vector<BufferLifetime> lifetimes = {
      {1000, 0, 2}, {500, 1, 3}, {1000, 4, 5}};
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(plan.peakBytes, 1024u + 512u);
  EXPECT_EQ(plan.offsets[2], plan.offsets[0]);
  EXPECT_EQ(planMemoryNaive(lifetimes, 256).peakBytes, 1024u + 512u + 1024u);
}

TEST(MemoryPlan, FillsGapsBetweenLiveBuffers) {
  // x and z are live throughout; y dies early, so w fits in y's hole.
  std::vector<BufferLifetime> lifetimes = {
      {256, 0, 9}, {256, 0, 1}, {256, 0, 9}, {256, 5, 6}};
  MemoryPlan plan = planMemory(lifetimes, 256);
  EXPECT_TRUE(plan.verify(lifetimes, 256));
  EXPECT_EQ(plan.peakBytes, 768u);
}

TEST(MemoryPlan, CheckerRejectsOverlap) {
  std::vector<BufferLifetime> lifetimes = {{512, 0, 3}, {512, 2, 4}};
  MemoryPlan bad{{0, 256}, 768};
  std::string why;
  EXPECT_FALSE(bad.verify(lifetimes, 256, &why));
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
  MemoryPlan unaligned{{0, 600}, 1200};
  EXPECT_FALSE(unaligned.verify(lifetimes, 256, &why));
}

TEST(MemoryPlan, RandomLifetimesAreValidAndNoWorseThanNaive) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferLifetime> lifetimes;
    int n = 1 + rng() % 60;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 100;
      lifetimes.push_back({1 + rng() % 5000, first, first + int64_t(rng() % 20)});
    }
    MemoryPlan plan = planMemory(lifetimes, 256);
    std::string why;
    ASSERT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
    EXPECT_LE(plan.peakBytes, planMemoryNaive(lifetimes, 256).peakBytes);
    // Never below the largest set of buffers live at one instant.
    uint64_t maxLive = 0;
    for (int64_t t = 0; t < 130; ++t) {
      uint64_t live = 0;
      for (const BufferLifetime &b : lifetimes)
        if (b.firstUse <= t && t <= b.lastUse)
          live += b.bytes;
      maxLive = std::max(maxLive, live);
    }
    EXPECT_GE(plan.peakBytes, maxLive);
  }
}

} // namespace
