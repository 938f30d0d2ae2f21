//===- Trainer.cpp - the training loop over an executor -------------------===//
//
// Part of mlt. One optimizer step: hyper-parameters, zeroed gradients,
// micro_step per micro-batch (accumulating gradients; the compiler seeds each
// micro-batch's loss gradient with 1 / microbatches, so the sum is the
// gradient of the mean loss), then optimizer_step.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/PlanFormat.h"
#include "mlt/Runtime/Training.h"

#include <chrono>
#include <cmath>

using namespace mlt;
using namespace mlt::rt;

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(Executor &executor, const ModelInfo &model, TokenDataset &data,
                const TrainingOptions &options) {
  if (data.seqLen() != model.seqLen)
    return errorf("the data is cut into sequences of ", data.seqLen(),
                  " tokens, the plan's are ", model.seqLen);
  if (options.steps < 1)
    return errorf("steps must be at least 1, got ", options.steps);
  std::unique_ptr<Trainer> trainer(new Trainer(executor, model, data, options));

  struct Binding {
    size_t *index;
    const char *name;
  };
  const Binding buffers[] = {
      {&trainer->tokens_, kTokensInput},
      {&trainer->labels_, kLabelsInput},
      {&trainer->loss_, kLossOutput},
      {&trainer->gradNorm_, kGradNormOutput},
      {&trainer->lr_, kHyperLR},
      {&trainer->beta1_, kHyperBeta1},
      {&trainer->beta2_, kHyperBeta2},
      {&trainer->eps_, kHyperEps},
      {&trainer->weightDecay_, kHyperWeightDecay},
      {&trainer->maxGradNorm_, kHyperMaxGradNorm},
      {&trainer->stepNumber_, kHyperStep},
  };
  for (const Binding &binding : buffers) {
    StatusOr<size_t> index = executor.findBuffer(binding.name);
    if (!index)
      return index.takeStatus();
    *binding.index = *index;
  }
  StatusOr<size_t> micro = executor.findProgram(kMicroStepProgram);
  if (!micro)
    return micro.takeStatus();
  trainer->microStep_ = *micro;
  StatusOr<size_t> optimizer = executor.findProgram(kOptimizerStepProgram);
  if (!optimizer)
    return optimizer.takeStatus();
  trainer->optimizerStep_ = *optimizer;

  const size_t tokens = size_t(model.globalBatch() * model.seqLen);
  trainer->inputs_.resize(tokens);
  trainer->targets_.resize(tokens);
  return trainer;
}

StatusOr<StepMetrics> Trainer::step(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  StepMetrics metrics;
  metrics.step = step;
  metrics.lr = learningRate(options_.schedule, step, options_.steps);

  const OptimizerOptions &opt = options_.optimizer;
  const std::pair<size_t, double> hyper[] = {
      {lr_, metrics.lr},
      {beta1_, opt.beta1},
      {beta2_, opt.beta2},
      {eps_, opt.eps},
      {weightDecay_, opt.weightDecay},
      {maxGradNorm_, opt.maxGradNorm},
      {stepNumber_, double(step)},
  };
  for (const auto &[index, value] : hyper)
    MLT_RETURN_IF_ERROR(executor_.writeScalar(index, value));
  MLT_RETURN_IF_ERROR(executor_.zeroBuffers(BufferKind::Gradient));

  data_.batch(step - 1, model_.globalBatch(), options_.shuffle, options_.seed,
              inputs_.data(), targets_.data());
  const size_t rowsBytes =
      size_t(model_.microBatch * model_.seqLen) * sizeof(int32_t);
  const size_t rowsElements = size_t(model_.microBatch * model_.seqLen);
  double lossSum = 0.0;
  for (int64_t mb = 0; mb < model_.microbatches; ++mb) {
    MLT_RETURN_IF_ERROR(executor_.writeRaw(
        tokens_, inputs_.data() + mb * rowsElements, rowsBytes));
    MLT_RETURN_IF_ERROR(executor_.writeRaw(
        labels_, targets_.data() + mb * rowsElements, rowsBytes));
    MLT_RETURN_IF_ERROR(executor_.run(microStep_));
    StatusOr<double> loss = executor_.readScalar(loss_);
    if (!loss)
      return loss.takeStatus();
    if (!std::isfinite(*loss))
      return errorf("loss is ", std::isnan(*loss) ? "NaN" : "infinite",
                    " at step ", step,
                    model_.microbatches > 1
                        ? " (micro-batch " + std::to_string(mb + 1) + ")"
                        : std::string());
    lossSum += *loss;
  }
  metrics.loss = lossSum / double(model_.microbatches);

  MLT_RETURN_IF_ERROR(executor_.run(optimizerStep_));
  StatusOr<double> gradNorm = executor_.readScalar(gradNorm_);
  if (!gradNorm)
    return gradNorm.takeStatus();
  if (!std::isfinite(*gradNorm))
    return errorf("gradient norm is ",
                  std::isnan(*gradNorm) ? "NaN" : "infinite", " at step ",
                  step);
  metrics.gradNorm = *gradNorm;

  metrics.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  metrics.tokens = model_.globalBatch() * model_.seqLen;
  metrics.tokensPerSecond =
      metrics.seconds > 0 ? double(metrics.tokens) / metrics.seconds : 0.0;
  return metrics;
}

Status Trainer::run(const std::function<Status(const StepMetrics &)> &onStep) {
  for (int64_t s = 1; s <= options_.steps; ++s) {
    StatusOr<StepMetrics> metrics = step(s);
    if (!metrics)
      return metrics.takeStatus();
    if (onStep)
      MLT_RETURN_IF_ERROR(onStep(*metrics));
  }
  return Status::ok();
}
