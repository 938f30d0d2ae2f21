//===- RunOptions.h - what a training run is asked to do --------*- C++ -*-===//
//
// Part of mlt. The options of a run (mlt-run's command line fills them):
// the model or plan and the device, the layout and which of its options
// were given, the data and the run's shape, the optimizer, the outputs
// (logs, checkpoints, plans, traces), profiling and calibration, and what
// --layout auto plans for. Plain values: validate (RunChecks.h) holds them
// to their ranges, and execute (Run.h) runs them.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_RUNOPTIONS_H
#define MLT_RUN_RUNOPTIONS_H

#include "mlt/Layout/Layout.h"
#include "mlt/Runtime/io/DataBlend.h"

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace mlt::run {

struct RunOptions {
  /// A plan file, or (built with the compiler) a .mlir model, an HF
  /// config.json or a directory holding one.
  std::string model;
  /// "cpu" or "cuda".
  std::string device = "cpu";
  /// The layout (--tp, --dp, ..., every option of LayoutOptions.h's table),
  /// and the names of the layout options given on the command line.
  Layout layout;
  std::set<std::string> layoutGiven;
  std::string initFrom;
  uint64_t seed = 1234;
  /// --data: the datasets and their weights; empty: the bundled corpus.
  std::vector<rt::DataSourceSpec> data;
  /// --eval-data: the held-out datasets (and weights) that evaluations
  /// read; or --split: each dataset of --data cut into the part that
  /// trains and the part held out for evaluation (DataBlend.h).
  std::vector<rt::DataSourceSpec> evalData;
  std::optional<rt::DataSplit> split;
  /// --eval-every N: an evaluation every N steps (and at the end, as
  /// without it); --eval-iters K: the global batches each evaluates
  /// (default kDefaultEvalIters).
  std::optional<int64_t> evalEvery, evalIters;
  bool shuffle = true;
  bool allowDataChange = false;
  /// --allow-optimizer-change: with --resume, go on with a learning rate,
  /// schedule or AdamW option other than the checkpoint's.
  bool allowOptimizerChange = false;
  /// --skip-checksums: read a checkpoint's tensors without checking their
  /// bytes' hashes.
  bool skipChecksums = false;
  /// --async-save / --no-async-save: whether --save-checkpoint writes in
  /// the background (unset: yes, unless its host memory is short).
  std::optional<bool> asyncSave;
  std::optional<int64_t> batch, seqLen, steps;
  double lr = 3e-4, minLR = 0.0;
  int64_t warmup = 0;
  std::string schedule = "constant";
  /// --lr-decay-steps: where the cosine reaches --min-lr; unset: --steps,
  /// or on --resume the checkpoint's.
  std::optional<int64_t> lrDecaySteps;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weightDecay = 0.1,
         clipGrad = 1.0;
  std::string logJson, saveHF, emitPlan, dumpGrads, trace;
  /// --tensorboard: the directory of the run's TensorBoard event files.
  std::string tensorboard;
  std::string saveCheckpoint, resume;
  std::optional<int64_t> saveEvery, keepLast, saveHFEvery;
  std::optional<int64_t> profileStep;
  bool printPlan = false;
  bool printSchedule = false;
  bool reportMemory = false;
  bool report = false;
  std::string calibration, calibrate;
  /// --collective-timeout: the seconds a run of several ranks may go
  /// without any rank moving in its plan before each rank's place is
  /// reported and the run ends (HangWatchdog.h); 0: never.
  double collectiveTimeout = 600;
  /// --matmul-algorithms, --tune-matmuls: the CUDA products' algorithms.
  std::string matmulAlgorithms;
  bool tuneMatmuls = false;
  /// --layout auto: the planner picks the layout for --gpus GPUs of
  /// --gpu-memory bytes each (0: no limit).
  std::string layoutSearch;
  std::optional<int64_t> gpus;
  uint64_t gpuMemory = 0;

  /// The batches an evaluation runs without --eval-iters.
  static constexpr int64_t kDefaultEvalIters = 10;

  /// Whether the run evaluates on held-out data (--eval-data or --split),
  /// so that its plan needs the evaluation step.
  bool evaluates() const { return !evalData.empty() || split.has_value(); }
  /// Whether layout option `name` was given.
  bool given(const char *name) const { return layoutGiven.count(name) > 0; }
  /// Whether the run trains (rather than only prints or writes the plan).
  bool trains() const {
    return !printPlan && !printSchedule && !reportMemory && !report &&
           emitPlan.empty();
  }
};

} // namespace mlt::run

#endif // MLT_RUN_RUNOPTIONS_H
