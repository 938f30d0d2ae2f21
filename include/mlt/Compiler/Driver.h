//===- Driver.h - compile a model into a plan, in process ------*- C++ -*-===//
//
// Part of mlt. The one entry point through which a tool that links the
// compiler (mlt-run built with MLT_ENABLE_COMPILER) turns a model into plan
// bytes: a `.mlir` model file, or an HF model directory / config.json, goes
// through the same pass pipeline as `mlt-opt` and the plan exporter. The
// header has no MLIR types so the runtime-side tool can include it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_COMPILER_DRIVER_H
#define MLT_COMPILER_DRIVER_H

#include "mlt/Layout/LayoutRules.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlt {
namespace cost {
struct Calibration;
} // namespace cost
namespace rt {
struct Plan;
} // namespace rt

/// How a training program is compiled: the step and its layout, the one
/// set of options of the pass pipeline (buildTrainPipeline in Pipeline.h),
/// which `mlt-run` fills from its flags and `mlt-opt
/// --mlt-train-pipeline="..."` from its pipeline options. Plain values, so
/// that the runtime-side tool can include it.
struct TrainOptions {
  /// Every axis and choice of the layout (mlt/Layout/Layout.h).
  Layout layout;
  /// Compile the model's first `layers` decoder layers (mlt-truncate-layers;
  /// 0: all of them): the planner's shallow compiles.
  int64_t layers = 0;
  /// Sequences per optimizer step (over every micro-batch and data-parallel
  /// rank) and tokens per sequence.
  int64_t batch = 0;
  int64_t seqLen = 0;
  /// Compile the evaluation body beside the training step
  /// (mlt-attach-evaluation): `eval_forward` and each rank's evaluation
  /// step, which `mlt-run --eval-data` and `--split` run.
  bool evaluation = false;
  /// Print the stage split with each stage's predicted share (stderr).
  bool printStageSplit = false;
  /// The device costs that the compiler's choices weigh where it has one
  /// (which collective matmuls mlt-overlap-tp-comm splits; mlt-run passes
  /// --calibration's); none: the choices made without costs (every
  /// collective matmul split).
  std::shared_ptr<const cost::Calibration> costs;

  /// Sequences per micro-batch, over the data-parallel ranks (which share
  /// it).
  int64_t microBatch() const {
    return layout.microbatches > 0 ? batch / layout.microbatches : batch;
  }
  /// The step as the rule book reads it.
  StepShape step() const { return {batch, seqLen}; }
};

/// What a training plan is compiled from and for.
struct CompileOptions : TrainOptions {
  /// A `.mlir` model, an HF `config.json`, or a directory holding one.
  std::string model;
  /// The GPU architecture the plan is for ("sm_90"), recorded in the plan
  /// so that a device of another architecture refuses it; empty: any.
  std::string target;
  /// Export one rank per pipeline stage (rt::isRepresentativePlan), from
  /// which the cost model predicts the whole step: how the planner compiles
  /// its candidates. Not a plan to run.
  bool representatives = false;
  /// Compile a pipeline's stages on the context's threads (MLIR's
  /// multithreading); off where the caller runs compiles side by side.
  bool threads = true;
  /// Verify the IR after every pass (the planner's candidates skip it: the
  /// layout it chooses is compiled again with it).
  bool verifyPasses = true;
};

/// Compiles `options.model` into a serialized plan. On failure returns false
/// and sets `error` to one line naming the problem (diagnostics of the IR
/// carry their file location; a layout the rule book refuses, the first
/// rule it breaks). The exporter reads the plan back with the
/// runtime's checks (parsePlan); that plan goes into `plan` when given.
bool compileToPlan(const CompileOptions &options, std::string &planBytes,
                   std::string &error, rt::Plan *plan = nullptr);

/// The shape of the model `model` names (a `.mlir` model, an HF
/// config.json, or a directory holding one), as the layout rule book reads
/// it (verify(options.layout, shape, options.step())). On failure returns
/// false and sets `error` to one line.
bool readModelShape(const std::string &model, ModelShape &shape,
                    std::string &error);

/// The model's decoder layers and their split into layout.pp x layout.vp
/// virtual stages as compileToPlan takes it (layout.ppLayers, else the
/// balanced split of mlt-partition-pipeline; one count without pp): what
/// the planner's shallow compiles keep the shape of. On failure returns
/// false and sets `error` to one line.
bool stageSplitOf(const CompileOptions &options, int64_t &numLayers,
                  std::vector<int64_t> &split, std::string &error);

} // namespace mlt

#endif // MLT_COMPILER_DRIVER_H
