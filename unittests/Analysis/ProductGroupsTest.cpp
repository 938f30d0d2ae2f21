//===- ProductGroupsTest.cpp - tests of groupLaunches ---------------------===//
//
// Part of mlt. groupLaunches on a layer's attention backward (the weight
// gradients of v, k and q come together past the input gradients they do
// not touch; the input gradients, which accumulate into one buffer, do
// not), at barriers and windows, and on random programs against the naive
// reference check (checkGrouping: every pair of items).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/ProductGroups.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt::analysis;

namespace {

constexpr uint64_t kWeightGrad = 7, kInputGrad = 9;

TEST(ProductGroupsTest, WeightGradientsComeTogether) {
  // Buffers: 1 x (the normalized input), 2/3/4 dv/dk/dq, 5/6/7 the weights,
  // 10 dx, 11/12/13 the weight gradients.
  const std::vector<GroupItem> items = {
      {kWeightGrad, {2, 1}, {11}, false}, // 0: dW_v = dv^T x
      {kInputGrad, {2, 5}, {10}, false},  // 1: dx = dv W_v
      {kWeightGrad, {3, 1}, {12}, false}, // 2: dW_k
      {0, {3, 6, 10}, {10}, false},       // 3: dx += dk W_k (matmul_add)
      {kWeightGrad, {4, 1}, {13}, false}, // 4: dW_q
      {0, {4, 7, 10}, {10}, false},       // 5: dx += dq W_q
  };
  const LaunchGrouping grouping = groupLaunches(items, 64);
  EXPECT_EQ(checkGrouping(items, grouping), "");
  ASSERT_EQ(grouping.groups.size(), 1u);
  EXPECT_EQ(grouping.groups[0], (std::vector<size_t>{0, 2, 4}));
  EXPECT_EQ(grouping.order, (std::vector<size_t>{0, 2, 4, 1, 3, 5}));
}

TEST(ProductGroupsTest, DependentLaunchesStayApart) {
  // Item 1 reads buffer 2, which item 0 writes: not a group. Item 2 writes
  // buffer 2 too (what item 1 reads, what item 0 writes): it joins neither.
  const std::vector<GroupItem> items = {
      {kWeightGrad, {1}, {2}, false},
      {kWeightGrad, {2}, {3}, false},
      {kWeightGrad, {4}, {2}, false},
  };
  const LaunchGrouping grouping = groupLaunches(items, 64);
  EXPECT_EQ(checkGrouping(items, grouping), "");
  EXPECT_TRUE(grouping.groups.empty());
  EXPECT_EQ(grouping.order, (std::vector<size_t>{0, 1, 2}));
}

TEST(ProductGroupsTest, NothingCrossesABarrierOrLeavesTheWindow) {
  const std::vector<GroupItem> items = {
      {kWeightGrad, {1}, {2}, false},
      {0, {2}, {2}, true}, // a collective on the gradient's stream
      {kWeightGrad, {1}, {3}, false},
      {0, {}, {9}, false},
      {kWeightGrad, {1}, {4}, false},
  };
  LaunchGrouping grouping = groupLaunches(items, 64);
  EXPECT_EQ(checkGrouping(items, grouping), "");
  ASSERT_EQ(grouping.groups.size(), 1u);
  EXPECT_EQ(grouping.groups[0], (std::vector<size_t>{2, 4}));
  grouping = groupLaunches(items, 1);
  EXPECT_EQ(checkGrouping(items, grouping), "");
  EXPECT_TRUE(grouping.groups.empty());
}

TEST(ProductGroupsTest, RandomProgramsKeepTheirDependences) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const size_t n = 1 + rng() % 40;
    const int buffers = 2 + int(rng() % 12);
    std::vector<GroupItem> items(n);
    for (GroupItem &item : items) {
      item.kind = rng() % 4; // 0: never grouped
      item.barrier = rng() % 15 == 0;
      for (int r = 0, reads = int(rng() % 3); r < reads; ++r)
        item.reads.push_back(int64_t(rng() % buffers));
      for (int w = 0, writes = 1 + int(rng() % 2); w < writes; ++w)
        item.writes.push_back(int64_t(rng() % buffers));
    }
    const size_t window = 1 + rng() % 50;
    const LaunchGrouping grouping = groupLaunches(items, window);
    ASSERT_EQ(checkGrouping(items, grouping), "")
        << "trial " << trial << ", " << n << " items, window " << window;
  }
}

TEST(ProductGroupsTest, TheCheckFindsBrokenGroupings) {
  const std::vector<GroupItem> items = {
      {kWeightGrad, {1}, {2}, false},
      {0, {2}, {3}, false},
      {kWeightGrad, {1}, {4}, false},
  };
  EXPECT_NE(checkGrouping(items, {{1, 0, 2}, {}}), ""); // 0 writes what 1 reads
  EXPECT_NE(checkGrouping(items, {{0, 1, 2}, {{0, 2}}}), ""); // not adjacent
  EXPECT_NE(checkGrouping(items, {{0, 2, 1}, {{0, 1}}}), ""); // mixed kinds
  EXPECT_NE(checkGrouping(items, {{0, 1}, {}}), "");          // not all items
  EXPECT_EQ(checkGrouping(items, {{0, 2, 1}, {{0, 2}}}), "");
}

} // namespace
