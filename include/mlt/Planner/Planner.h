//===- Planner.h - the layout planner (mlt-run --layout auto) ---*- C++ -*-===//
//
// Part of mlt. The planner: every layout of a number of GPUs for a global
// batch (mlt/Analysis/LayoutSpace.h), its exact memory (the largest rank's
// arena and its kernels' scratch beside it) held to the GPU's, the step of those that fit predicted by the
// cost model, and the five fastest reported with what bounds each (a
// PlannerReport, which formatPlannerReport words as mlt-run prints it);
// the fastest is the run's layout. A layout that does not fit is tried
// again with sequence parallelism and recomputation. The layouts the rule
// book refuses for the model (LayoutRules.h) are never compiled: they are
// counted by rule, each rule with its first refusal, worded as mlt-run and
// mlt-opt word it.
//
// In two rounds, so that a 70B model's hundreds of layouts on 64 GPUs are
// planned in seconds:
//   1. Screening. Each layout is compiled shallow: every virtual stage
//      holds its layers of the model's split less m - 2 (m: the fewest
//      layers of a virtual stage), so that the smallest holds 2. Then,
//      fastest first, each is compiled again with one layer more a virtual
//      stage (k more where every k-th layer is recomputed whole, a period
//      of its layers' cost), and each stage's arena and the step are
//      extrapolated along
//      that line to the model's depth (a stage's memory and time grow by
//      the same amount with each layer it holds: LayoutSpace.h's
//      extrapolateDepth). Where the model is no deeper than that (m < 5),
//      a layout is compiled at its depth at once. Two bounds leave layouts
//      out on the way: one slower at the shallow depth than the fifth
//      fastest estimate so far (a deeper model is slower still), and the
//      memory-saving variants of one whose parameters, gradients and
//      optimizer state alone exceed the limit (no variant changes them).
//      Where a layout does not fit, the variant that saves the most is
//      tried first: if it does not fit, none does; then the others, least
//      costly first, until one fits, passing over those slower than the
//      fifth fastest: at their shallowest depth, or known so by their
//      counterpart that recomputes nothing (recomputing only adds to a
//      step). A layout running more micro-batches than two counts of them
//      past its pipeline's warm-up together ((vp + 1) x pp and a pp more)
//      is compiled, at each depth, with those two counts of the same size,
//      and extrapolated along that line to its own
//      (extrapolateMicrobatches): its compile and prediction grow with its
//      micro-batches (a 64-stage pipeline of 1,024 is 3.5 million launches).
//      A pipeline compiled at its depth (a virtual stage of fewer than 5
//      layers) that runs at least four times the fewest micro-batches its
//      schedule takes from 3 on is first compiled with those alone, and
//      the cost model's lower bound of its step read from them
//      (StepLowerBound.h: the stages' work, the warm-up and the drain); it
//      is left out unless that bound is within kStepMargin of the fifth
//      fastest, and compiled as above otherwise. Among 4,096 GPUs' layouts
//      of a 70B model, pipelines of 32 and 64 stages of one to three
//      layers and hundreds of micro-batches are most of the compiling, and
//      none is among the fastest.
//   2. Confirmation. The layouts that fit, fastest estimate first, are
//      compiled at the model's depth until the five fastest are certain:
//      no layout left has an estimate within kStepMargin of the fifth. A
//      layout whose estimated arena is within kMemoryMargin over the limit
//      is kept for this round, which settles whether it fits.
// Every figure reported for the five is then the exact arena and the cost
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

#ifndef MLT_PLANNER_PLANNER_H
#define MLT_PLANNER_PLANNER_H

#include "mlt/Analysis/Calibration.h"
#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Layout/LayoutRules.h"
#include "mlt/Plan/Plan.h"

#include <functional>
#include <string>
#include <vector>

namespace mlt {

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
  /// The bytes a rank's arena and kernel scratch may take (the GPU's memory
  /// less what the runtime's libraries keep); 0: no limit.
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
  /// (empty: the compiler's split), running `microbatches` micro-batches a
  /// step (0: the layout's) of the layout's size (the global batch scaled
  /// with them).
  std::function<StatusOr<rt::Plan>(const Layout &layout, int64_t layers,
                                   const std::vector<int64_t> &split,
                                   int64_t microbatches)>
      representatives;
  /// `layout` compiled whole, with its serialized bytes.
  std::function<StatusOr<rt::Plan>(const Layout &layout, std::string &bytes)>
      whole;
  /// Each rank's kernel scratch beside its arena on the device planned for
  /// (Backend::scratchBytes), in the plan's rank order: held to the limit
  /// with the arena. None, or empty: none.
  std::function<std::vector<uint64_t>(const rt::Plan &plan)> scratch;
};

/// What the planner found: the counts of the layouts weighed, the rule
/// book's refusals by rule, and the fastest layouts that fit.
struct PlannerReport {
  /// The request: GPUs, global batch and sequence, and the memory limit
  /// (PlannerRequest's arenaLimit, 0: none, and limitText).
  int64_t gpus = 1;
  int64_t globalBatch = 1;
  int64_t seqLen = 1;
  uint64_t arenaLimit = 0;
  std::string limitText;
  /// Where the calibration that priced the layouts comes from.
  std::string calibrationSource;
  /// Every layout enumerated; those the rule book refused; those compiled
  /// (of them shallow, extrapolated to the model's depth), and how long
  /// planning took.
  size_t layouts = 0;
  size_t refusedByRules = 0;
  size_t compiled = 0;
  size_t shallow = 0;
  /// Of the compiles, those of fewer micro-batches than the layout runs,
  /// extrapolated to its (some of them shallow too); and those of a deep
  /// pipeline's fewest, its step bounded from them.
  size_t fewerMicrobatches = 0;
  size_t bounded = 0;
  double seconds = 0.0;
  /// The layouts the rule book accepted: those that fit, do not fit, the
  /// compiler refused, and those left out as slower than the fifth fastest.
  size_t fit = 0;
  size_t tooLarge = 0;
  size_t refusedByCompiler = 0;
  size_t slower = 0;
  /// A rule of the rule book: the layouts it refused first, and the first
  /// of them with its refusal ("--tp 8 ...: <the refusal>").
  struct RuleRefusals {
    std::string rule;
    size_t count = 0;
    std::string first;
  };
  /// In the order the rules were first broken.
  std::vector<RuleRefusals> rules;
  /// A layout that fits, at the model's depth: its step (exact, or
  /// estimated), largest arena, and what bounds its step.
  struct Ranked {
    Layout layout;
    double step = 0.0;
    bool exact = false;
    uint64_t arena = 0;
    cost::StepBound bound;
  };
  /// The fastest (at most five), fastest first: the first is the layout
  /// chosen; empty when none fits.
  std::vector<Ranked> fastest;
  /// The other layouts that fit (confirmed or estimated), and the slowest
  /// of them.
  size_t more = 0;
  Ranked slowest;
};

/// The report as mlt-run prints it: a line on the request, one on the
/// counts, one per rule that refused layouts, then (when a layout fits)
/// the fastest as a table, the others' count and "chose <layout>".
std::string formatPlannerReport(const PlannerReport &report);

/// What the planner tells as it goes.
struct PlannerObserver {
  /// A line on its progress, every few seconds ("planning: weighing, 8 of
  /// 40 layouts, 5 s").
  std::function<void(const std::string &line)> progress;
  /// The report, once the layouts are ranked: before the chosen one is
  /// compiled whole, and before the failure when none fits.
  std::function<void(const PlannerReport &report)> ranked;
};

/// Plans (see the top of this file), telling `observer` its progress and
/// its report; fails when no layout fits, naming the closest.
StatusOr<PlannedLayout> planLayout(const PlannerRequest &request,
                                   const cost::Calibration &calibration,
                                   const std::string &calibrationSource,
                                   const PlannerCompiler &compiler,
                                   const PlannerObserver &observer);

} // namespace mlt

#endif // MLT_PLANNER_PLANNER_H
