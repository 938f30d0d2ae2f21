//===- RankListTest.cpp - sets of ranks in messages -----------------------===//
//
// Part of mlt. formatRankList (RankList.h): runs of three or more as
// ranges, shorter runs rank by rank, in increasing order, once each.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/RankList.h"

#include <gtest/gtest.h>

using namespace mlt;

namespace {

TEST(RankListTest, RunsOfThreeOrMoreAreRanges) {
  EXPECT_EQ(formatRankList({0, 1, 2, 3, 4, 6, 7}), "0-4,6,7");
  EXPECT_EQ(formatRankList({0, 1, 2, 3, 4, 5, 6, 7}), "0-7");
  EXPECT_EQ(formatRankList({5}), "5");
  EXPECT_EQ(formatRankList({0, 2}), "0,2");
  EXPECT_EQ(formatRankList({1, 3, 5, 6, 7, 9, 10}), "1,3,5-7,9,10");
  EXPECT_EQ(formatRankList({1022, 1023, 1024, 4095}), "1022-1024,4095");
}

TEST(RankListTest, SortsAndDropsDuplicates) {
  EXPECT_EQ(formatRankList({7, 6, 4, 3, 2, 1, 0, 4}), "0-4,6,7");
  EXPECT_EQ(formatRankList({3, 3, 3}), "3");
  EXPECT_EQ(formatRankList({2, 1, 1, 0}), "0-2");
}

TEST(RankListTest, NoRanksIsEmpty) { EXPECT_EQ(formatRankList({}), ""); }

} // namespace
