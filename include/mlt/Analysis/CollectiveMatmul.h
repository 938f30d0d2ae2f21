//===- CollectiveMatmul.h - whether a collective matmul pays ----*- C++ -*-===//
//
// Part of mlt. The cost rule of mlt-overlap-tp-comm's collective matmuls
// (issue 33): with sequence parallelism, an all-gather over tp of a
// micro-batch's rows feeds the column-parallel products. Whole, the gather
// runs on the compute stream and the products after it. Split (XLA's
// collective matmul, Megatron's all-gather overlap), the gather runs on a
// stream of its own beside the products on the rank's own block, then the
// products run on each other rank's block: G times as many launches, each
// 1/G as tall, so a split pays only where the gather is long against what
// the smaller products and their extra launches cost. Both are priced on a
// device's calibration (Calibration.h): the products on their kernels'
// curves, the gather on the compute stream's curve whole and on the side
// stream's (slower beside compute) split, and a launch gap per launch.
//
// priceCollectiveMatmul is the closed form; simulateCollectiveMatmul runs
// the split's two streams launch by launch, as the pass emits them (the
// naive reference the tests hold the closed form to).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_COLLECTIVEMATMUL_H
#define MLT_ANALYSIS_COLLECTIVEMATMUL_H

#include "mlt/Analysis/Calibration.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlt::cost {

/// One product of the gathered rows, whole: its kernel ("matmul",
/// "matmul_group") and its FLOPs over all the rows.
struct RowProduct {
  std::string kernel;
  double flops = 0.0;
};

/// A gather of `gatheredBytes` (the whole gathered buffer) over a group of
/// `groupSize` ranks, feeding `products` in order.
struct GatheredProducts {
  double gatheredBytes = 0.0;
  int64_t groupSize = 1;
  std::vector<RowProduct> products;
};

/// The two schedules' predicted seconds, from the gather's start to the
/// last product's end.
struct CollectiveMatmulCost {
  double whole = 0.0;
  double split = 0.0;
  /// Whether splitting is predicted faster.
  bool pays() const { return split < whole; }
};

CollectiveMatmulCost priceCollectiveMatmul(const Calibration &calibration,
                                           const GatheredProducts &gathered);

/// The split schedule's seconds, simulated launch by launch on its two
/// streams.
double simulateCollectiveMatmul(const Calibration &calibration,
                                const GatheredProducts &gathered);

} // namespace mlt::cost

#endif // MLT_ANALYSIS_COLLECTIVEMATMUL_H
