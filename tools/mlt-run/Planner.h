//===- Planner.h - mlt-run --layout auto ------------------------*- C++ -*-===//
//
// Part of mlt. The planner: every layout of a number of GPUs for a global
// batch (mlt/Analysis/LayoutSpace.h) compiled, its exact memory (the
// largest rank's arena) held to the GPU's, the step of those that fit
// predicted by the cost model, and the five fastest printed with what
// bounds each; the fastest is the run's layout. A layout that does not fit
// is tried again with sequence parallelism and recomputation; one the
// compiler refuses is dropped, its reason counted.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_TOOLS_MLTRUN_PLANNER_H
#define MLT_TOOLS_MLTRUN_PLANNER_H

#include "mlt/Analysis/Calibration.h"
#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Runtime/plan/Plan.h"

#include <functional>
#include <string>

namespace mlt::tool {

struct PlannerRequest {
  int64_t gpus = 1;
  int64_t globalBatch = 1;
  int64_t seqLen = 1;
  /// The bytes a rank's arena may take (the GPU's memory less what the
  /// runtime keeps outside the arena); 0: no limit.
  uint64_t arenaLimit = 0;
  /// How the limit was given, for the report ("80.00 GiB per GPU, 2.00 GiB
  /// kept for the runtime").
  std::string limitText;
};

/// The layout chosen, and its compiled plan.
struct PlannedLayout {
  cost::Layout layout;
  rt::Plan plan;
  std::string bytes;
};

/// Compiles `layout` into a plan (and its serialized bytes).
using CompileLayout = std::function<rt::StatusOr<rt::Plan>(
    const cost::Layout &layout, std::string &bytes)>;

/// Plans (see the top of this file), printing the ranking to stdout and
/// progress to stderr; fails when no layout fits, naming the closest.
rt::StatusOr<PlannedLayout> planLayout(const PlannerRequest &request,
                                       const cost::Calibration &calibration,
                                       const std::string &calibrationSource,
                                       const CompileLayout &compile);

} // namespace mlt::tool

#endif // MLT_TOOLS_MLTRUN_PLANNER_H
