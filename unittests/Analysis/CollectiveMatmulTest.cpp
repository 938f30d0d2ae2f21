//===- CollectiveMatmulTest.cpp - whether a collective matmul pays --------===//
//
// Part of mlt. Tests the cost rule of mlt-overlap-tp-comm's collective
// matmuls (CollectiveMatmul.h): the closed form against the two streams
// simulated launch by launch on random calibrations and shapes, and the
// decisions a user would check (a long gather beside large products pays;
// small products whose extra launches cost more than the gather do not).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/CollectiveMatmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace mlt;
using namespace mlt::cost;

namespace {

/// A device with products at `flopRate` (one point, far above the latency
/// floor), gathers at `busRate` on the compute stream and half that beside
/// compute, and launches `gap` seconds apart.
Calibration device(double flopRate, double busRate, double gap) {
  Calibration c;
  c.device = "test";
  c.backend = "cuda";
  c.launchGaps = {gap};
  const double flops = 1e12, bytes = 1e9;
  c.curves["matmul"].points = {{1e6, 1e6 / flopRate}, {flops, flops / flopRate}};
  c.curves["matmul_group"].points = {{1e6, 1e6 / flopRate},
                                     {flops, flops / flopRate}};
  for (int g : {2, 4, 8}) {
    const std::string key = "all_gather/g" + std::to_string(g);
    c.curves[key].points = {{1e3, 1e3 / busRate}, {bytes, bytes / busRate}};
    c.curves[key + "/side"].points = {{1e3, 2e3 / busRate},
                                      {bytes, 2 * bytes / busRate}};
  }
  return c;
}

// Tests the closed form against the simulated streams on random devices,
// groups and products.
TEST(CollectiveMatmulTest, ClosedFormIsTheSimulatedSchedule) {
  std::mt19937_64 rng(20261130);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int trial = 0; trial < 500; ++trial) {
    const Calibration c =
        device(1e12 * (1 + 999 * unit(rng)), 1e9 * (1 + 499 * unit(rng)),
               1e-6 * 20 * unit(rng));
    GatheredProducts gathered;
    gathered.groupSize = int64_t(1) << (rng() % 4); // 1, 2, 4, 8
    gathered.gatheredBytes = 1e3 + 1e9 * unit(rng);
    const int products = 1 + int(rng() % 3);
    for (int p = 0; p < products; ++p)
      gathered.products.push_back({p % 2 ? "matmul_group" : "matmul",
                                   1e6 + 1e12 * unit(rng) * unit(rng)});
    const CollectiveMatmulCost cost = priceCollectiveMatmul(c, gathered);
    const double simulated = simulateCollectiveMatmul(c, gathered);
    EXPECT_NEAR(cost.split, simulated, 1e-12 * std::max(1.0, simulated))
        << "trial " << trial;
    EXPECT_GT(cost.whole, 0.0);
  }
}

// Tests the decisions: TinyLlama-sized products (a 2 x 2048-token micro-
// batch of 2,048 wide, 4 MiB gathered at tp 2) beside a gather that takes
// longer than their own block's share pay; the same with a launch gap of a
// millisecond (each extra launch dearer than the gather) and with products
// so small that launches dominate do not.
TEST(CollectiveMatmulTest, SplitsWhereTheGatherHidesUnderTheProducts) {
  GatheredProducts gathered;
  gathered.groupSize = 2;
  gathered.gatheredBytes = 2.0 * 2048 * 2048 * 2; // bf16 rows
  gathered.products = {{"matmul_group", 2.0 * 4096 * 2048 * 2 * 5632},
                       {"matmul", 2.0 * 4096 * 2048 * 2048}};
  const Calibration h100ish = device(6e14, 1.5e11, 4e-6);
  CollectiveMatmulCost cost = priceCollectiveMatmul(h100ish, gathered);
  EXPECT_TRUE(cost.pays()) << cost.split << " against " << cost.whole;

  const Calibration slowLaunches = device(6e14, 1.5e11, 1e-3);
  cost = priceCollectiveMatmul(slowLaunches, gathered);
  EXPECT_FALSE(cost.pays()) << cost.split << " against " << cost.whole;

  GatheredProducts tiny = gathered;
  tiny.gatheredBytes = 2.0 * 16 * 64 * 2;
  tiny.products = {{"matmul", 2.0 * 32 * 64 * 64}};
  cost = priceCollectiveMatmul(h100ish, tiny);
  EXPECT_FALSE(cost.pays()) << cost.split << " against " << cost.whole;
}

} // namespace
