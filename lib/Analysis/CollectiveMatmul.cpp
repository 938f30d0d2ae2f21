//===- CollectiveMatmul.cpp - whether a collective matmul pays ------------===//
//
// Part of mlt. See CollectiveMatmul.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/CollectiveMatmul.h"

#include <algorithm>

using namespace mlt;
using namespace mlt::cost;

namespace {

/// The seconds of one launch of `product` over 1/`parts` of its rows, its
/// launch gap included.
double productSeconds(const Calibration &calibration,
                      const RowProduct &product, int64_t parts) {
  LaunchClass cls;
  cls.key = product.kernel;
  cls.flops = true;
  cls.work = product.flops / double(parts);
  return calibration.seconds(cls) + calibration.launchGap();
}

/// The gather's seconds on the compute stream, or on a side stream.
double gatherSeconds(const Calibration &calibration,
                     const GatheredProducts &gathered, bool side) {
  LaunchClass cls;
  cls.key = "all_gather/g" + std::to_string(gathered.groupSize) +
            (side ? "/side" : "");
  cls.communication = true;
  cls.work = gathered.gatheredBytes;
  return calibration.seconds(cls);
}

} // namespace

CollectiveMatmulCost
mlt::cost::priceCollectiveMatmul(const Calibration &calibration,
                                 const GatheredProducts &gathered) {
  const int64_t g = std::max<int64_t>(gathered.groupSize, 1);
  CollectiveMatmulCost cost;
  double block = 0.0; // the products on one rank's block
  cost.whole = gatherSeconds(calibration, gathered, /*side=*/false);
  for (const RowProduct &product : gathered.products) {
    cost.whole += productSeconds(calibration, product, 1);
    block += productSeconds(calibration, product, g);
  }
  // The own block's products beside the gather, then the other blocks'.
  cost.split =
      std::max(gatherSeconds(calibration, gathered, /*side=*/true), block) +
      double(g - 1) * block;
  return cost;
}

double mlt::cost::simulateCollectiveMatmul(const Calibration &calibration,
                                           const GatheredProducts &gathered) {
  const int64_t g = std::max<int64_t>(gathered.groupSize, 1);
  // Stream 3: the gather from time 0. Stream 0: every product on the own
  // block, then on each other block in turn, the first of those waiting
  // for the gather.
  const double gatherEnd = gatherSeconds(calibration, gathered, true);
  double now = 0.0;
  for (int64_t shift = 0; shift < g; ++shift)
    for (size_t i = 0; i < gathered.products.size(); ++i) {
      if (shift == 1 && i == 0)
        now = std::max(now, gatherEnd);
      now += productSeconds(calibration, gathered.products[i], g);
    }
  return std::max(now, gatherEnd); // (the schedule ends with the gather)
}
