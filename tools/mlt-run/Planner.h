//===- Planner.h - mlt-run --layout auto ------------------------*- C++ -*-===//
//
// Part of mlt. The planner: every layout of a number of GPUs for a global
// batch (mlt/Analysis/LayoutSpace.h), its exact memory (the largest rank's
// arena) held to the GPU's, the step of those that fit predicted by the
// cost model, and the five fastest printed with what bounds each; the
// fastest is the run's layout. A layout that does not fit is tried again
// with sequence parallelism and recomputation. The layouts the rule book
// refuses for the model (LayoutRules.h) are never compiled: they are
// counted by rule, each rule with its first refusal, worded as mlt-run and
// mlt-opt word it.
//
// In two rounds, so that a 70B model's hundreds of layouts on 64 GPUs are
// planned in seconds:
//   1. Screening. Each layout is compiled shallow: every virtual stage
//      holds its layers of the model's split less m - 2 (m: the fewest
//      layers of a virtual stage), so that the smallest holds 2. Then,
//      fastest first, each is compiled again with one layer more a virtual
//      stage, and each stage's arena and the step are extrapolated along
//      that line to the model's depth (a stage's memory and time grow by
//      the same amount with each layer it holds: LayoutSpace.h's
//      extrapolateDepth). Where the model is no deeper than that (m < 5),
//      a layout is compiled at its depth at once. Two bounds leave layouts
//      out on the way: one slower at the shallow depth than the fifth
//      fastest estimate so far (a deeper model is slower still), and the
//      memory-saving variants of one whose parameters, gradients and
//      optimizer state alone exceed the limit (no variant changes them).
//      Where a layout does not fit, the variant that saves the most is
//      tried first: if it does not fit, none does.
//   2. Confirmation. The layouts that fit, fastest estimate first, are
//      compiled at the model's depth until the five fastest are certain:
//      no layout left has an estimate within kStepMargin of the fifth. A
//      layout whose estimated arena is within kMemoryMargin over the limit
//      is kept for this round, which settles whether it fits.
// Every figure printed for the five is then the exact arena and the cost
// model's prediction of the whole plan; the estimates decide what is
// compiled whole, and the counts of layouts that fit or not beyond the
// five are by them. `--layout exhaustive` compiles every layout at its
// depth (the reference the screening is held to in planner-shallow.test).
// Both rounds' compiles run on every core.
//
// The candidates are compiled into plans of representative ranks (one per
// pipeline stage: rt::isRepresentativePlan), which the cost model predicts
// the whole step from; the chosen layout is compiled whole, every rank
// checked, for the run.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_TOOLS_MLTRUN_PLANNER_H
#define MLT_TOOLS_MLTRUN_PLANNER_H

#include "mlt/Analysis/Calibration.h"
#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Plan/Plan.h"

#include <functional>
#include <string>
#include <vector>

namespace mlt::tool {

struct PlannerRequest {
  /// The options the user chose (precision, overlap, ...), which every
  /// candidate keeps; those the planner chooses at their defaults.
  Layout base;
  /// The model, as the rule book reads it: candidates it refuses are not
  /// compiled.
  ModelShape model;
  int64_t gpus = 1;
  int64_t globalBatch = 1;
  int64_t seqLen = 1;
  /// The bytes a rank's arena may take (the GPU's memory less what the
  /// runtime keeps outside the arena); 0: no limit.
  uint64_t arenaLimit = 0;
  /// How the limit was given, for the report ("80.00 GiB per GPU, 2.00 GiB
  /// kept for the runtime").
  std::string limitText;
  /// Compile every layout at the model's depth (no screening).
  bool exhaustive = false;
};

/// The layout chosen, and its compiled plan.
struct PlannedLayout {
  Layout layout;
  rt::Plan plan;
  std::string bytes;
};

/// The compiler, as the planner calls it.
struct PlannerCompiler {
  /// The model's decoder layers and `layout`'s split of them into virtual
  /// stages (mlt::stageSplitOf).
  std::function<Status(const Layout &layout, int64_t &numLayers,
                       std::vector<int64_t> &split)>
      split;
  /// `layout` compiled into a plan of representative ranks: the model's
  /// first `layers` layers (0: all) in virtual stages of `split` layers
  /// (empty: the compiler's split).
  std::function<StatusOr<rt::Plan>(const Layout &layout, int64_t layers,
                                   const std::vector<int64_t> &split)>
      representatives;
  /// `layout` compiled whole, with its serialized bytes.
  std::function<StatusOr<rt::Plan>(const Layout &layout, std::string &bytes)>
      whole;
};

/// Plans (see the top of this file), printing the ranking to stdout and
/// progress to stderr; fails when no layout fits, naming the closest.
StatusOr<PlannedLayout> planLayout(const PlannerRequest &request,
                                   const cost::Calibration &calibration,
                                   const std::string &calibrationSource,
                                   const PlannerCompiler &compiler);

} // namespace mlt::tool

#endif // MLT_TOOLS_MLTRUN_PLANNER_H
