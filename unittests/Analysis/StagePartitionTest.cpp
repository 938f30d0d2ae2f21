//===- StagePartitionTest.cpp - tests of the pipeline stage split ---------===//
//
// Part of mlt. The balanced split against the naive reference on random
// costs, worked examples with the embedding and the head counted, and the
// checks of a split set by hand.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StagePartition.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mlt;

namespace {

TEST(StagePartition, EqualLayersSplitEvenly) {
  StageCosts costs{std::vector<double>(8, 1.0), 0.0, 0.0};
  StageSplit split = balanceStages(costs, 4, 1);
  EXPECT_EQ(split.layers, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(split.times, (std::vector<double>{2, 2, 2, 2}));
  // Interleaved: 4 x 2 virtual stages of one layer.
  EXPECT_EQ(balanceStages(costs, 4, 2).layers, std::vector<int64_t>(8, 1));
}

TEST(StagePartition, TheEmbeddingAndTheHeadCount) {
  // A head and loss of 2.5 layers' time and an embedding of 1.5: the last
  // stage takes one layer (3.5), and no split does better; among the splits
  // as fast (2,3,2,1 / 2,2,3,1 / 1,3,3,1), the earlier stages hold the
  // fewest layers.
  StageCosts costs{std::vector<double>(8, 1.0), 1.5, 2.5};
  std::string why;
  StageSplit split = balanceStages(costs, 4, 1, &why);
  EXPECT_EQ(split.layers, (std::vector<int64_t>{1, 3, 3, 1})) << why;
  EXPECT_DOUBLE_EQ(split.slowest(), 3.5);
  EXPECT_DOUBLE_EQ(balanceStagesNaive(costs, 4, 1).slowest(), 3.5);
  // TinyLlama's 22 layers over 4 stages, the head costing two layers: the
  // last stage holds fewer.
  StageCosts tiny{std::vector<double>(22, 1.0), 0.1, 2.0};
  EXPECT_EQ(balanceStages(tiny, 4, 1).layers,
            (std::vector<int64_t>{6, 6, 6, 4}));
}

TEST(StagePartition, MatchesTheNaiveReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.2, 3.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + int64_t(rng() % 10);
    StageCosts costs;
    for (int64_t i = 0; i < n; ++i)
      costs.layers.push_back(cost(rng));
    costs.first = rng() % 2 ? cost(rng) : 0.0;
    costs.last = rng() % 2 ? cost(rng) : 0.0;
    const int64_t stages = 1 + int64_t(rng() % 4);
    const int64_t chunks = 1 + int64_t(rng() % 2);
    std::string why;
    StageSplit split = balanceStages(costs, stages, chunks, &why);
    if (n < stages * chunks) {
      EXPECT_TRUE(split.layers.empty());
      EXPECT_FALSE(why.empty());
      continue;
    }
    ASSERT_TRUE(checkStageLayers(split.layers, n, stages, chunks, &why))
        << why;
    EXPECT_EQ(split.times, stageTimes(costs, split.layers));
    const double reference = balanceStagesNaive(costs, stages, chunks).slowest();
    EXPECT_NEAR(split.slowest(), reference, 1e-9 * reference)
        << "trial " << trial << ": n=" << n << " P=" << stages
        << " V=" << chunks;
  }
}

TEST(StagePartition, RefusesWhatCannotBePlaced) {
  std::string why;
  EXPECT_TRUE(
      balanceStages({std::vector<double>(3, 1.0), 0, 0}, 4, 1, &why)
          .layers.empty());
  EXPECT_EQ(why, "the model's 3 layers cannot fill 4 pipeline stages: each "
                 "needs at least one layer");
  EXPECT_TRUE(
      balanceStages({std::vector<double>(6, 1.0), 0, 0}, 2, 4, &why)
          .layers.empty());
  EXPECT_EQ(why, "the model's 6 layers cannot fill 8 pipeline stages (pp 2 x "
                 "vp 4): each needs at least one layer");

  EXPECT_TRUE(checkStageLayers({5, 6, 6, 5}, 22, 4, 1, &why)) << why;
  EXPECT_FALSE(checkStageLayers({5, 6, 6}, 22, 4, 1, &why));
  EXPECT_EQ(why, "--pp-layers 5,6,6 gives 3 stages, the layout has 4");
  EXPECT_FALSE(checkStageLayers({5, 6, 6, 4}, 22, 4, 1, &why));
  EXPECT_EQ(why, "--pp-layers 5,6,6,4 places 21 layers, the model has 22");
  EXPECT_FALSE(checkStageLayers({11, 0, 11, 0}, 22, 2, 2, &why));
  EXPECT_EQ(why, "--pp-layers 11,0,11,0: every stage needs at least one "
                 "layer");
  EXPECT_FALSE(checkStageLayers({11, 11}, 22, 2, 2, &why));
  EXPECT_EQ(why, "--pp-layers 11,11 gives 2 stages, the layout has 4 (pp 2 x "
                 "vp 2)");
}

} // namespace
