//===- Training.h - the training loop over an executor ----------*- C++ -*-===//
//
// Part of mlt. A Trainer drives a plan's two programs through optimizer
// steps: for step s it writes the hyper-parameters (the learning rate from the
// schedule), zeroes the gradients, runs `micro_step` once per micro-batch on
// consecutive row blocks of the step's global batch, then `optimizer_step`,
// and reports the mean micro-batch loss and the gradient norm before
// clipping. The learning-rate schedule is one function, shared by the tool's
// help text and the tests.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAINING_H
#define MLT_RUNTIME_TRAINING_H

#include "mlt/Runtime/Executor.h"
#include "mlt/Runtime/IO/TokenData.h"
#include "mlt/Runtime/Plan.h"
#include "mlt/Runtime/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mlt::rt {

enum class LRScheduleKind { Constant, Cosine };

struct LRSchedule {
  LRScheduleKind kind = LRScheduleKind::Constant;
  /// The peak learning rate.
  double lr = 3e-4;
  /// Where the cosine ends, at the last step.
  double minLR = 0.0;
  /// Steps of linear warmup (both kinds).
  int64_t warmup = 0;
};

/// The learning rate of step `step` (1-based) of `totalSteps`:
///   step <= warmup:          lr * step / warmup            (both kinds)
///   constant, after warmup:  lr
///   cosine, after warmup:    minLR + 0.5 * (lr - minLR) * (1 + cos(pi * p))
///                            with p = (step - warmup) / (totalSteps - warmup)
/// so the cosine starts just below lr after the warmup and reaches minLR at
/// the last step.
double learningRate(const LRSchedule &schedule, int64_t step,
                    int64_t totalSteps);

/// AdamW and clipping hyper-parameters (PyTorch's names).
struct OptimizerOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.1;
  /// Clip the global gradient norm to this; 0 turns clipping off.
  double maxGradNorm = 1.0;
};

struct TrainingOptions {
  int64_t steps = 1;
  LRSchedule schedule;
  OptimizerOptions optimizer;
  /// Visit the samples in a seeded permutation per epoch (else in file order).
  bool shuffle = true;
  uint64_t seed = 1234;
};

/// What one optimizer step measured.
struct StepMetrics {
  int64_t step = 0;
  /// Mean of the micro-batch losses.
  double loss = 0.0;
  /// Global gradient norm before clipping.
  double gradNorm = 0.0;
  double lr = 0.0;
  /// Wall time of the step, and tokens (global batch * seq_len) per second.
  double seconds = 0.0;
  int64_t tokens = 0;
  double tokensPerSecond = 0.0;
};

class Trainer {
public:
  /// Binds the plan's named inputs, outputs and programs
  /// (verifyTrainingContract has checked they exist). `executor` and `data`
  /// must outlive the trainer; `data` must have the plan's sequence length.
  static StatusOr<std::unique_ptr<Trainer>>
  create(Executor &executor, const ModelInfo &model, TokenDataset &data,
         const TrainingOptions &options);

  /// Runs optimizer step `step` (1-based; the data of step index step - 1).
  /// A non-finite loss or gradient norm is an error ("loss is NaN at step 3").
  StatusOr<StepMetrics> step(int64_t step);

  /// Runs steps 1..options.steps, calling `onStep` after each; stops at the
  /// first error, of a step or of `onStep`.
  Status run(const std::function<Status(const StepMetrics &)> &onStep);

  const TrainingOptions &options() const { return options_; }

private:
  Trainer(Executor &executor, const ModelInfo &model, TokenDataset &data,
          const TrainingOptions &options)
      : executor_(executor), model_(model), data_(data), options_(options) {}

  Executor &executor_;
  ModelInfo model_;
  TokenDataset &data_;
  TrainingOptions options_;

  size_t microStep_ = 0, optimizerStep_ = 0;
  size_t tokens_ = 0, labels_ = 0, loss_ = 0, gradNorm_ = 0;
  size_t lr_ = 0, beta1_ = 0, beta2_ = 0, eps_ = 0, weightDecay_ = 0,
         maxGradNorm_ = 0, stepNumber_ = 0;
  /// The step's global batch, [globalBatch, seqLen] each.
  std::vector<int32_t> inputs_, targets_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAINING_H
