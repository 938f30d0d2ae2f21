//===- PlanSource.h - the plan a run trains ---------------------*- C++ -*-===//
//
// Part of mlt. Where a run's plan comes from: a plan file (recognized by
// its identifier, whatever its name), read and verified; or, in a build
// with the compiler, a model (.mlir, an HF config.json, or a directory
// holding one) whose layout the rule book verifies (LayoutRules.h) before
// it is compiled in process for the run's batch, sequence and layout. A
// plan file's programs are fixed: the layout options it records must
// agree with the run's (checkAgainstPlan), the others are refused.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_PLANSOURCE_H
#define MLT_RUN_PLANSOURCE_H

#include "mlt/Plan/Plan.h"
#include "mlt/Run/RunOptions.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlt::cost {
struct Calibration;
} // namespace mlt::cost

namespace mlt::run {

enum class InputKind { Plan, Model };

/// Plans are recognized by their identifier; a .mlir, a .json or a directory
/// is a model; anything else is read as a plan (and rejected by name).
StatusOr<InputKind> classifyInput(const std::string &path);

/// How the planner's compiles of its candidates differ from a run's own
/// (the defaults).
struct CandidateCompile {
  /// Without the stage split's lines.
  bool quiet = false;
  /// The model's first `layers` layers (0: all), into a plan of
  /// representative ranks (CompileOptions in mlt/Compiler/Driver.h).
  int64_t layers = 0;
  bool representatives = false;
  /// The costs the compiler's choices weigh, read once for many candidates
  /// (the planner's); null: the run's --calibration, read for this compile.
  std::shared_ptr<const cost::Calibration> costs;
};

/// Loads or compiles the plan of `options`; `bytes` receives the plan
/// file's bytes.
StatusOr<rt::Plan> obtainPlan(const RunOptions &options, std::string &bytes,
                              const CandidateCompile &candidate = {});

/// The model's decoder layers and their split into the virtual stages of
/// `options`' layout, as the compiler splits them (mlt::stageSplitOf).
Status stageSplit(const RunOptions &options, const CandidateCompile &candidate,
                  int64_t &numLayers, std::vector<int64_t> &split);

/// The run options must agree with the plan's shape and layout.
Status checkAgainstPlan(const RunOptions &options, const rt::Plan &plan);

/// "dp=2, tp=2": the plan's mesh, for messages.
std::string describeMesh(const rt::Plan &plan);

/// Each rank's kernel scratch (Backend::scratchBytes) on `device`, in the
/// plan's rank order: the CUDA backend's where the run is on the GPU and
/// this build has it; empty otherwise (the CPU backend's scratch is host
/// memory).
std::vector<uint64_t> kernelScratch(const rt::Plan &plan,
                                    const std::string &device);

} // namespace mlt::run

#endif // MLT_RUN_PLANSOURCE_H
