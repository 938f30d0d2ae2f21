//===- MemoryPlanTest.cpp - tests of the arena planner --------------------===//
//
// Part of mlt. The greedy planner against the naive one and the checker, on
// hand-made and random lifetimes, with and without outputs that may take
// over the memory of a dying input (in place); the indexed planner, the
// sweeping checker and the chain choice against their quadratic references.
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

/// Random lifetimes over `instructions` instructions, some of them empty
/// (0 bytes) or live at one instruction only, with in-place candidates,
/// mostly ones that may be taken over, of sizes that share one range often
/// (a few sizes, so that equal ones tie and stack).
std::vector<BufferLifetime> randomLifetimes(std::mt19937 &rng, int n,
                                            int64_t instructions) {
  std::vector<BufferLifetime> lifetimes;
  const uint64_t sizes[] = {0, 4, 256, 300, 1024, 4096, 5000};
  for (int i = 0; i < n; ++i) {
    int64_t first = rng() % instructions;
    int64_t length = rng() % 4 == 0 ? 0 : int64_t(rng() % 12);
    lifetimes.push_back({sizes[rng() % 7], first, first + length});
  }
  for (int i = 0; i < n; ++i)
    for (int c = rng() % 3; c > 0; --c) {
      size_t donor = rng() % n;
      // Mostly a donor that dies where i is first written.
      for (int tries = 0;
           tries < 8 && lifetimes[donor].lastUse != lifetimes[i].firstUse;
           ++tries)
        donor = rng() % n;
      lifetimes[i].inPlaceOf.push_back(donor);
    }
  return lifetimes;
}

TEST(MemoryPlan, IndexedPlannerPlacesAsTheScan) {
  std::mt19937 rng(20261126);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + int(rng() % (trial < 250 ? 80 : 2000));
    std::vector<BufferLifetime> lifetimes =
        randomLifetimes(rng, n, 1 + int64_t(rng() % (2 * n)));
    EXPECT_EQ(chooseInPlace(lifetimes), chooseInPlaceByPairs(lifetimes));
    for (uint64_t alignment : {uint64_t(1), uint64_t(256)}) {
      MemoryPlan fast = planMemory(lifetimes, alignment);
      MemoryPlan scan = planMemoryByScan(lifetimes, alignment);
      ASSERT_EQ(fast.offsets, scan.offsets) << "trial " << trial;
      ASSERT_EQ(fast.peakBytes, scan.peakBytes) << "trial " << trial;
      std::string why;
      ASSERT_TRUE(fast.verify(lifetimes, alignment, &why)) << why;
    }
  }
}

TEST(MemoryPlan, LongChainsAreChosenAsByPairs) {
  // One output after another taking over the last (a running sum): a chain
  // of hundreds, which chooseInPlaceByPairs compares pair by pair; beside
  // it, buffers live at one instruction only and empty ones that ask for
  // the chain's members or for each other where the chain meets them.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<BufferLifetime> lifetimes = {{256, 0, 1}};
    for (int i = 1; i < 600; ++i) {
      int64_t first = lifetimes.back().lastUse;
      lifetimes.push_back({256, first, first + 1 + int64_t(rng() % 3)});
      if (rng() % 4 == 0)
        lifetimes.back().inPlaceOf.push_back(rng() % i);
      lifetimes.back().inPlaceOf.push_back(size_t(i - 1));
    }
    const size_t chain = lifetimes.size();
    for (int i = 0; i < 300; ++i) {
      size_t member = rng() % chain;
      int64_t t =
          rng() % 2 ? lifetimes[member].lastUse : lifetimes[member].firstUse;
      uint64_t bytes = rng() % 3 == 0 ? 0 : 256;
      lifetimes.push_back({bytes, t, t, {member, rng() % lifetimes.size()}});
    }
    std::vector<int64_t> donorOf = chooseInPlace(lifetimes);
    EXPECT_EQ(donorOf, chooseInPlaceByPairs(lifetimes));
    size_t longest = 0;
    for (size_t tail = 0; tail < lifetimes.size(); ++tail) {
      size_t length = 1;
      for (int64_t m = donorOf[tail]; m >= 0; m = donorOf[m])
        ++length;
      longest = std::max(longest, length);
    }
    EXPECT_GT(longest, 100u);
    MemoryPlan plan = planMemory(lifetimes, 256);
    EXPECT_EQ(plan.offsets, planMemoryByScan(lifetimes, 256).offsets);
    std::string why;
    EXPECT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  }
}

TEST(MemoryPlan, SweepingCheckerAgreesWithAllPairs) {
  // Valid plans, and the same plans with one buffer moved (often onto
  // another's offset, where only a donor and its recipient may be): the
  // checker accepts exactly what verifyAllPairs accepts, and names the
  // same failure.
  std::mt19937 rng(1126);
  int refused = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const int n = 1 + int(rng() % 60);
    std::vector<BufferLifetime> lifetimes =
        randomLifetimes(rng, n, 1 + int64_t(rng() % (2 * n)));
    MemoryPlan plan = planMemory(lifetimes, 256);
    if (trial % 3 != 0) {
      size_t moved = rng() % n;
      plan.offsets[moved] = rng() % 2 == 0
                                ? plan.offsets[rng() % n]
                                : plan.offsets[moved] + 256 * (rng() % 5);
      if (rng() % 10 == 0)
        plan.offsets[moved] += 128;
      if (rng() % 10 == 0)
        plan.peakBytes -= 256;
    }
    std::string why, reference;
    const bool valid = plan.verify(lifetimes, 256, &why);
    ASSERT_EQ(valid, plan.verifyAllPairs(lifetimes, 256, &reference))
        << "trial " << trial << ": " << reference;
    EXPECT_EQ(why, reference);
    refused += !valid;
  }
  EXPECT_GT(refused, 100); // the perturbations do break plans
}

TEST(MemoryPlan, LifetimesOutsideTheContractTakeTheReferences) {
  // A lifetime that ends before it begins: no program has one, but the
  // planner, the choice and the checker answer as their references do.
  std::vector<BufferLifetime> lifetimes = {
      {512, 5, 3}, {512, 2, 6}, {512, 4, 4, {0}}, {256, 3, 8, {1}}};
  EXPECT_EQ(chooseInPlace(lifetimes), chooseInPlaceByPairs(lifetimes));
  MemoryPlan plan = planMemory(lifetimes, 256);
  EXPECT_EQ(plan.offsets, planMemoryByScan(lifetimes, 256).offsets);
  std::string why, reference;
  EXPECT_EQ(plan.verify(lifetimes, 256, &why),
            plan.verifyAllPairs(lifetimes, 256, &reference));
  EXPECT_EQ(why, reference);
}

TEST(MemoryPlan, ManyActivationsPlanInLinearishTime) {
  // The shape of a deep model's training program: each layer's activations
  // live from its forward to its backward (nested lifetimes, all live
  // together at the turn), and many small scalars live together at the
  // end; 20,000 buffers, placed as the scan would place them.
  const int layers = 2000;
  std::vector<BufferLifetime> lifetimes;
  for (int l = 0; l < layers; ++l)
    for (int k = 0; k < 4; ++k)
      lifetimes.push_back({uint64_t(k == 0 ? 90112 : 32768), 4 * l + k,
                           int64_t(16 * layers) - 4 * l - k});
  for (int i = 0; i < 12000; ++i)
    lifetimes.push_back({4, 16 * layers + 1, 16 * layers + 2});
  MemoryPlan plan = planMemory(lifetimes, 256);
  std::string why;
  ASSERT_TRUE(plan.verify(lifetimes, 256, &why)) << why;
  EXPECT_EQ(plan.peakBytes, uint64_t(layers) * (90112 + 3 * 32768));
  // The scalars stack once the activations are gone.
  EXPECT_EQ(plan.offsets.back(), 11999u * 256u);
}

} // namespace
