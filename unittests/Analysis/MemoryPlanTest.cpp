//===- MemoryPlanTest.cpp - tests of the arena planner --------------------===//
//
// Part of mlt. The greedy planner against the naive one and the checker, on
// hand-made and random lifetimes, with and without outputs that may take
// over the memory of a dying input (in place).
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

TEST(MemoryPlan, OutputTakesOverTheInputThatDiesWhereItIsWritten) {
  // b is written by the instruction that reads a for the last time (2), and
  // may overwrite it: b gets a's offset, and the two need one range.
  std::vector<BufferLifetime> lifetimes = {{1000, 0, 2}, {1000, 2, 4, {0}}};
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.peakBytes, 1024u);
  EXPECT_EQ(chooseInPlace(lifetimes), (std::vector<int64_t>{-1, 0}));
  // The naive reference shares in place too, and nothing else.
  MemoryPlan naive = planMemoryNaive(lifetimes, 256);
  EXPECT_TRUE(naive.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(naive.peakBytes, 1024u);
  // Without the candidate, both are live at 2 and need their own ranges.
  lifetimes[1].inPlaceOf.clear();
  EXPECT_EQ(planMemory(lifetimes, 256).peakBytes, 2048u);
}

TEST(MemoryPlan, IgnoresCandidatesThatCannotBeTakenOver) {
  // A donor still live after the recipient's first write, a donor smaller
  // than the recipient, a donor out of range and the buffer itself: none is
  // taken over, and every buffer gets its own range.
  std::vector<BufferLifetime> lifetimes = {
      {1000, 0, 3}, {1000, 2, 4, {0, 1, 7}}, {512, 0, 5}, {1000, 5, 6, {2}}};
  EXPECT_EQ(chooseInPlace(lifetimes), (std::vector<int64_t>{-1, -1, -1, -1}));
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_NE(plan.offsets[1], plan.offsets[0]);
  EXPECT_NE(plan.offsets[3], plan.offsets[2]);
}

TEST(MemoryPlan, ADonorGoesToOneOutputAndChainsFollow) {
  // Two outputs of instruction 2 may both take over a: the first in order of
  // first use (then index) gets it, the other gets its second choice, c.
  // Then d takes over b, so a, b and d share one range.
  std::vector<BufferLifetime> lifetimes = {{512, 0, 2},         // a
                                           {512, 2, 4, {0}},    // b
                                           {512, 2, 5, {0, 3}}, // b2
                                           {512, 1, 2},         // c
                                           {512, 4, 6, {1}}};   // d
  EXPECT_EQ(chooseInPlace(lifetimes), (std::vector<int64_t>{-1, 0, 3, -1, 1}));
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(plan.offsets[1], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[4], plan.offsets[0]);
  EXPECT_EQ(plan.offsets[2], plan.offsets[3]);
  EXPECT_EQ(plan.peakBytes, 1024u);
  EXPECT_EQ(planMemoryNaive(lifetimes, 256).peakBytes, 1024u);
}

TEST(MemoryPlan, AChainNeverHoldsTwoBuffersLiveTogether) {
  // b lives only in instruction 2 (written, never read), taking over a; c,
  // first written at 2 too, may take over b, but would then share a's range
  // while a is still read at 2. The link is refused.
  std::vector<BufferLifetime> lifetimes = {
      {256, 0, 2}, {256, 2, 2, {0}}, {256, 2, 5, {1}}};
  EXPECT_EQ(chooseInPlace(lifetimes), (std::vector<int64_t>{-1, 0, -1}));
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(plan.peakBytes, 512u);
}

TEST(MemoryPlan, CheckerAcceptsExactlyTheAllowedInPlaceOverlaps) {
  std::vector<BufferLifetime> lifetimes = {{512, 0, 2}, {512, 2, 4, {0}}};
  std::string why;
  // Same offset: allowed, whichever order the two are listed in.
  EXPECT_TRUE((MemoryPlan{{256, 256}, 768}).verify(lifetimes, 256, &why))
      << why;
  std::vector<BufferLifetime> swapped = {{512, 2, 4, {1}}, {512, 0, 2}};
  EXPECT_TRUE((MemoryPlan{{0, 0}, 512}).verify(swapped, 256, &why)) << why;
  // Shifted: the output would not overwrite the input element for element.
  EXPECT_FALSE((MemoryPlan{{0, 256}, 768}).verify(lifetimes, 256, &why));
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
  // No candidate, a donor live past the write, or a smaller donor: refused.
  std::vector<BufferLifetime> unlisted = {{512, 0, 2}, {512, 2, 4}};
  EXPECT_FALSE((MemoryPlan{{0, 0}, 512}).verify(unlisted, 256));
  std::vector<BufferLifetime> stillLive = {{512, 0, 3}, {512, 2, 4, {0}}};
  EXPECT_FALSE((MemoryPlan{{0, 0}, 512}).verify(stillLive, 256));
  std::vector<BufferLifetime> smaller = {{256, 0, 2}, {512, 2, 4, {0}}};
  EXPECT_FALSE((MemoryPlan{{0, 0}, 512}).verify(smaller, 256));
  // Two outputs taking over one donor overlap each other.
  std::vector<BufferLifetime> twice = {
      {512, 0, 2}, {512, 2, 4, {0}}, {512, 2, 4, {0}}};
  EXPECT_FALSE((MemoryPlan{{0, 0, 0}, 512}).verify(twice, 256));
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

TEST(MemoryPlan, RandomInPlaceCandidatesAreValidAndNoWorseThanNaive) {
  std::mt19937 rng(4321);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<BufferLifetime> lifetimes;
    int n = 1 + rng() % 60;
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 40;
      lifetimes.push_back(
          {1 + rng() % 5000, first, first + int64_t(rng() % 10)});
    }
    // Candidates: mostly buffers that die where the output is written (the
    // ones the planner may use), some that do not.
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (i != j &&
            (lifetimes[j].lastUse == lifetimes[i].firstUse ? rng() % 2 == 0
                                                           : rng() % 20 == 0))
          lifetimes[i].inPlaceOf.push_back(j);
    MemoryPlan plan = planMemory(lifetimes, 256);
    MemoryPlan naive = planMemoryNaive(lifetimes, 256);
    std::string why;
    ASSERT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
    ASSERT_TRUE(naive.verify(lifetimes, 256, &why)) << why;
    EXPECT_LE(plan.peakBytes, naive.peakBytes);
    // Never below what the chains hold at one instant: each chain at least
    // its largest live member.
    std::vector<int64_t> donorOf = chooseInPlace(lifetimes);
    std::vector<int> chain(n);
    for (int i = 0; i < n; ++i) {
      int head = i;
      while (donorOf[head] >= 0)
        head = int(donorOf[head]);
      chain[i] = head;
      if (donorOf[i] >= 0) {
        const BufferLifetime &donor = lifetimes[donorOf[i]];
        EXPECT_TRUE(lifetimes[i].mayTakeOver(size_t(donorOf[i]), donor));
        EXPECT_EQ(plan.offsets[i], plan.offsets[donorOf[i]]);
      }
    }
    uint64_t maxLive = 0;
    for (int64_t t = 0; t < 50; ++t) {
      std::vector<uint64_t> perChain(n, 0);
      for (int i = 0; i < n; ++i)
        if (lifetimes[i].firstUse <= t && t <= lifetimes[i].lastUse)
          perChain[chain[i]] = std::max(perChain[chain[i]], lifetimes[i].bytes);
      uint64_t live = 0;
      for (uint64_t bytes : perChain)
        live += bytes;
      maxLive = std::max(maxLive, live);
    }
    EXPECT_GE(plan.peakBytes, maxLive);
  }
}

} // namespace
