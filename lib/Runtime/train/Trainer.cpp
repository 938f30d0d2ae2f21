//===- Trainer.cpp - the training loop over the ranks of a plan -----------===//
//
// Part of mlt. One optimizer step: hyper-parameters, this step's tokens and
// labels (a copy per micro-batch), the plan's step, the losses and the
// gradient norm. The compiler decided everything else, gradient
// accumulation included (it seeds each micro-batch's loss gradient with
// 1 / microbatches, so the sum is the gradient of the mean loss). The host
// draws the step's global batch once; then every rank runs the whole step
// on its own thread (one RankGroup::parallel call per step), reading its
// block of each micro-batch, and the plan's collectives keep the ranks in
// step. With one process per GPU, each process trains its own rank the same
// way, and only plan rank 0 reads the loss and the gradient norm.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/PlanFormat.h"
#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Runtime/train/Training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

using namespace mlt;
using namespace mlt::rt;

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(Executor &executor, const ModelInfo &model, TrainingData &data,
                const TrainingOptions &options) {
  return create(nullptr, {&executor}, model, data, options);
}

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(RankGroup &ranks, const ModelInfo &model, TrainingData &data,
                const TrainingOptions &options) {
  std::vector<Executor *> executors;
  for (uint32_t rank = 0; rank < ranks.size(); ++rank)
    executors.push_back(&ranks.executor(rank));
  return create(&ranks, executors, model, data, options);
}

StatusOr<std::unique_ptr<Trainer>>
Trainer::create(RankGroup *group, const std::vector<Executor *> &executors,
                const ModelInfo &model, TrainingData &data,
                const TrainingOptions &options) {
  if (data.seqLen() != model.seqLen)
    return errorf("the data is cut into sequences of ", data.seqLen(),
                  " tokens, the plan's are ", model.seqLen);
  if (options.steps < 0)
    return errorf("steps must not be negative, got ", options.steps);
  std::unique_ptr<Trainer> trainer(new Trainer(group, model, data, options));

  const std::vector<int64_t> microBatchShape = {model.microBatch, model.seqLen};
  for (size_t r = 0; r < executors.size(); ++r) {
    Executor &executor = *executors[r];
    RankState state;
    state.executor = &executor;
    struct Binding {
      size_t *index;
      const char *name;
    };
    const Binding buffers[] = {
        {&state.tokens, kTokensInput},
        {&state.labels, kLabelsInput},
        {&state.loss, kLossOutput},
        {&state.gradNorm, kGradNormOutput},
        {&state.lr, kHyperLR},
        {&state.beta1, kHyperBeta1},
        {&state.beta2, kHyperBeta2},
        {&state.eps, kHyperEps},
        {&state.weightDecay, kHyperWeightDecay},
        {&state.maxGradNorm, kHyperMaxGradNorm},
        {&state.stepNumber, kHyperStep},
    };
    Status status = Status::ok();
    for (const Binding &binding : buffers) {
      StatusOr<size_t> index = executor.findBuffer(binding.name);
      // (The plan verifier let a pipeline stage that sends its output on
      // have no loss.)
      if (!index && binding.index == &state.loss) {
        state.hasLoss = false;
        continue;
      }
      if (!index) {
        status = index.takeStatus();
        break;
      }
      *binding.index = *index;
    }
    // The blocks the plan verifier checked against [micro_batch, seq_len].
    for (auto [index, block] : {std::pair{state.tokens, &state.tokensBlock},
                                std::pair{state.labels, &state.labelsBlock}}) {
      if (!status)
        break;
      const BufferDesc &buffer = executor.buffer(index);
      if (buffer.tensorShape() != microBatchShape || buffer.shape.size() != 2)
        status = errorf("buffer '", buffer.name, "' holds a block of a ",
                        "tensor other than the [", model.microBatch, ", ",
                        model.seqLen, "] micro-batch");
      else
        *block =
            BlockLayout{microBatchShape, buffer.blockOffset(), buffer.shape};
    }
    if (!status)
      return executors.size() == 1
                 ? status
                 : std::move(status).withContext("rank " + std::to_string(r));
    if (!state.tokensBlock.isWhole())
      state.tokensStaging.resize(executor.buffer(state.tokens).numElements());
    if (!state.labelsBlock.isWhole())
      state.labelsStaging.resize(executor.buffer(state.labels).numElements());
    state.measuredLosses.resize(size_t(model.microbatches));
    trainer->ranks_.push_back(std::move(state));
  }

  for (size_t r = 0; r < trainer->ranks_.size(); ++r)
    if (trainer->ranks_[r].executor->rankPlan().rank ==
        options.reportingRank) {
      if (!trainer->ranks_[r].hasLoss)
        return errorf("rank ", options.reportingRank,
                      " reports the loss, but computes none");
      trainer->reporter_ = r;
    }
  const size_t tokens = size_t(model.globalBatch() * model.seqLen);
  trainer->inputs_.resize(tokens);
  trainer->targets_.resize(tokens);
  return trainer;
}

Status Trainer::stepOnRank(RankState &rank, int64_t step, double lr) {
  const auto start = std::chrono::steady_clock::now();
  Executor &executor = *rank.executor;
  // From the step's inputs to the end of its wait: what the hang watchdog
  // times (Position.h).
  StepScope inStep(executor.position(), step);
  // The reporting rank reads the replicated outputs (and other local
  // ranks, to check them). In a process that holds another rank alone (one
  // process per GPU), nothing is read: rank 0's process reports.
  const bool isFirst = executor.rankPlan().rank == options_.reportingRank;
  const OptimizerOptions &opt = options_.optimizer;
  const std::pair<size_t, double> hyper[] = {
      {rank.lr, lr},
      {rank.beta1, opt.beta1},
      {rank.beta2, opt.beta2},
      {rank.eps, opt.eps},
      {rank.weightDecay, opt.weightDecay},
      {rank.maxGradNorm, opt.maxGradNorm},
      {rank.stepNumber, double(step)},
  };
  for (const auto &[index, value] : hyper)
    MLT_RETURN_IF_ERROR(executor.writeScalar(index, value));
  MLT_RETURN_IF_ERROR(feedBatch(rank));
  // The step is queued whole, its outputs read as it completes, and waited
  // for once (no device synchronization inside a step).
  MLT_RETURN_IF_ERROR(executor.runStep(/*wait=*/false));
  MLT_RETURN_IF_ERROR(readLosses(rank));
  // Rank 0 reads the gradient norm (every rank has it) where another
  // rank reports the loss: the process holding rank 0 reports the step.
  if (readsOutputs(rank) || executor.rankPlan().rank == 0)
    MLT_RETURN_IF_ERROR(
        executor.readScalarAtSync(rank.gradNorm, &rank.measuredGradNorm));
  MLT_RETURN_IF_ERROR(executor.synchronize());
  rank.time.rank = executor.rankPlan().rank;
  rank.time.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  rank.time.waitSeconds =
      executor.position().waitedSeconds().value_or(std::nan(""));
  // Rank 0 stops the run (and, through the rank group, every rank).
  return isFirst ? checkFiniteLosses(rank, "loss",
                                     "at step " + std::to_string(step), "")
                 : Status::ok();
}

bool Trainer::readsOutputs(const RankState &rank) const {
  return rank.executor->rankPlan().rank == options_.reportingRank ||
         (options_.checkReplicatedOutputs && ranks_.size() > 1);
}

Status Trainer::checkFiniteLosses(const RankState &rank,
                                  const std::string &name,
                                  const std::string &when,
                                  const std::string &batch) const {
  for (int64_t mb = 0; mb < model_.microbatches; ++mb)
    if (double loss = rank.measuredLosses[mb]; !std::isfinite(loss)) {
      std::string where = batch;
      if (model_.microbatches > 1)
        where += (where.empty() ? "" : ", ") + std::string("micro-batch ") +
                 std::to_string(mb + 1);
      return errorf(name, " is ", std::isnan(loss) ? "NaN" : "infinite", " ",
                    when, where.empty() ? "" : " (" + where + ")");
    }
  return Status::ok();
}

Status Trainer::feedBatch(RankState &rank) {
  Executor &executor = *rank.executor;
  // This rank's block of every micro-batch, each into its copy of the
  // inputs.
  const int64_t microbatches = model_.microbatches;
  const size_t microBatchElements = size_t(model_.microBatch * model_.seqLen);
  auto feed = [&](size_t buffer, const std::vector<int32_t> &batch,
                  const BlockLayout &block, std::vector<int32_t> &staging,
                  int64_t mb) {
    const int32_t *microBatch = batch.data() + mb * microBatchElements;
    if (block.isWhole())
      return executor.writeRaw(buffer, microBatch,
                               microBatchElements * sizeof(int32_t),
                               uint32_t(mb));
    extractBlock(microBatch, block, sizeof(int32_t), staging.data());
    return executor.writeRaw(buffer, staging.data(),
                             staging.size() * sizeof(int32_t), uint32_t(mb));
  };
  for (int64_t mb = 0; mb < microbatches; ++mb) {
    MLT_RETURN_IF_ERROR(
        feed(rank.tokens, inputs_, rank.tokensBlock, rank.tokensStaging, mb));
    MLT_RETURN_IF_ERROR(
        feed(rank.labels, targets_, rank.labelsBlock, rank.labelsStaging, mb));
  }
  return Status::ok();
}

Status Trainer::readLosses(RankState &rank) {
  // The reporting rank reads them (and other local ranks, to check them).
  // In a process that holds another rank alone (one process per GPU),
  // nothing is read: rank 0's process reports.
  Executor &executor = *rank.executor;
  const bool reads = readsOutputs(rank);
  for (int64_t mb = 0; mb < model_.microbatches && rank.hasLoss && reads;
       ++mb)
    MLT_RETURN_IF_ERROR(executor.readScalarAtSync(
        rank.loss, &rank.measuredLosses[mb], uint32_t(mb)));
  return Status::ok();
}

Status Trainer::evaluateOnRank(RankState &rank, int64_t step) {
  Executor &executor = *rank.executor;
  // The evaluation after training step `step`, as the hang watchdog times
  // it (Position.h).
  StepScope inEvaluation(executor.position(), step, /*evaluation=*/true);
  MLT_RETURN_IF_ERROR(feedBatch(rank));
  MLT_RETURN_IF_ERROR(executor.runEvalStep(/*wait=*/false));
  MLT_RETURN_IF_ERROR(readLosses(rank));
  return executor.synchronize();
}

StatusOr<EvalMetrics> Trainer::evaluate(TrainingData &data, int64_t batches,
                                        int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  if (data.seqLen() != model_.seqLen)
    return errorf("the evaluation data is cut into sequences of ",
                  data.seqLen(), " tokens, the plan's are ", model_.seqLen);
  if (batches < 1)
    return errorf("an evaluation needs a batch at least, got ", batches);
  const std::string when =
      step == 0 ? std::string("at the evaluation before training")
                : "at the evaluation after step " + std::to_string(step);
  EvalMetrics metrics;
  metrics.step = step;
  metrics.batches = batches;
  double lossSum = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    MLT_RETURN_IF_ERROR(data.checkUnchanged().withContext("evaluation data"));
    MLT_RETURN_IF_ERROR(runBatch(data, b, /*shuffle=*/false, /*seed=*/0,
                                 [&](RankState &rank) {
                                   return evaluateOnRank(rank, step);
                                 }));
    const RankState &first = ranks_[reporter_];
    if (first.executor->rankPlan().rank == options_.reportingRank)
      MLT_RETURN_IF_ERROR(checkFiniteLosses(first, "eval_loss", when,
                                            "batch " + std::to_string(b + 1)));
    for (double loss : first.measuredLosses)
      lossSum += loss;
    if (options_.checkReplicatedOutputs && ranks_.size() > 1)
      MLT_RETURN_IF_ERROR(checkReplicated(when, /*gradNorm=*/false));
  }
  metrics.loss = lossSum / double(batches * model_.microbatches);
  metrics.perplexity = std::exp(metrics.loss);
  metrics.tokens = batches * model_.globalBatch() * model_.seqLen;
  metrics.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return metrics;
}

Status Trainer::checkReplicated(const std::string &when, bool gradNorm) const {
  auto same = [](double a, double b) {
    return std::memcmp(&a, &b, sizeof(double)) == 0;
  };
  const RankState &first = ranks_[reporter_];
  auto differ = [&](const std::string &what, uint32_t r, double here,
                    double there) {
    std::ostringstream os;
    os << std::setprecision(17) << what << " " << when
       << " differs between ranks: rank "
       << first.executor->rankPlan().rank << " has " << there << ", rank "
       << ranks_[r].executor->rankPlan().rank << " has " << here
       << " (the plan must compute it replicated)";
    return Status::error(os.str());
  };
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    const RankState &rank = ranks_[r];
    if (&rank == &first)
      continue;
    for (int64_t mb = 0; mb < model_.microbatches && rank.hasLoss; ++mb)
      if (!same(rank.measuredLosses[mb], first.measuredLosses[mb]))
        return differ(model_.microbatches > 1
                          ? "the loss of micro-batch " + std::to_string(mb + 1)
                          : std::string("the loss"),
                      r, rank.measuredLosses[mb], first.measuredLosses[mb]);
    if (gradNorm && !same(rank.measuredGradNorm, first.measuredGradNorm))
      return differ("the gradient norm", r, rank.measuredGradNorm,
                    first.measuredGradNorm);
  }
  return Status::ok();
}

void Trainer::loadBalance(std::vector<int32_t> &sequences) {
  const int64_t seqLen = model_.seqLen;
  const int64_t chunk = seqLen / model_.sequenceChunks;
  const int64_t ranks = model_.sequenceChunks / 2;
  std::vector<int32_t> natural(size_t(seqLen), 0);
  for (size_t begin = 0; begin < sequences.size(); begin += size_t(seqLen)) {
    std::copy_n(sequences.begin() + begin, seqLen, natural.begin());
    for (int64_t index = 0; index < seqLen; ++index)
      sequences[begin + size_t(index)] =
          natural[size_t(loadBalancedPosition(index, chunk, ranks))];
  }
}

Status Trainer::runBatch(TrainingData &data, int64_t batch, bool shuffle,
                         uint64_t seed,
                         const std::function<Status(RankState &)> &onRank) {
  data.batch(batch, model_.globalBatch(), shuffle, seed, inputs_.data(),
             targets_.data());
  // (Context parallelism: the ranks' blocks split the load-balanced order.)
  if (model_.sequenceChunks > 0) {
    loadBalance(inputs_);
    loadBalance(targets_);
  }
  if (!group_)
    return onRank(ranks_.front());
  return group_->parallel([&](Executor &executor) {
    for (RankState &rank : ranks_)
      if (rank.executor == &executor)
        return onRank(rank);
    return errorf("rank ", executor.rankPlan().rank, " is not trained here");
  });
}

StatusOr<StepMetrics> Trainer::step(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  StepMetrics metrics;
  metrics.step = step;
  metrics.lr = learningRate(options_.schedule, step, options_.steps);

  // (a data file rewritten or truncated since it was opened: one line,
  // rather than other samples or a SIGBUS)
  MLT_RETURN_IF_ERROR(data_.checkUnchanged().withContext("--data"));
  MLT_RETURN_IF_ERROR(runBatch(data_, step - 1, options_.shuffle,
                               options_.seed, [&](RankState &rank) {
                                 return stepOnRank(rank, step, metrics.lr);
                               }));
  for (const RankState &rank : ranks_) {
    metrics.ranks.push_back(rank.time);
    metrics.setUp |= rank.executor->stepWasSetUp();
  }

  const RankState &first = ranks_[reporter_];
  double lossSum = 0.0;
  for (double loss : first.measuredLosses)
    lossSum += loss;
  metrics.loss = lossSum / double(model_.microbatches);
  if (!std::isfinite(first.measuredGradNorm))
    return errorf("gradient norm is ",
                  std::isnan(first.measuredGradNorm) ? "NaN" : "infinite",
                  " at step ", step);
  metrics.gradNorm = first.measuredGradNorm;
  if (options_.checkReplicatedOutputs && ranks_.size() > 1)
    MLT_RETURN_IF_ERROR(
        checkReplicated("at step " + std::to_string(step), /*gradNorm=*/true));

  metrics.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  metrics.tokens = model_.globalBatch() * model_.seqLen;
  metrics.tokensPerSecond =
      metrics.seconds > 0 ? double(metrics.tokens) / metrics.seconds : 0.0;
  return metrics;
}

Status Trainer::run(const std::function<Status(const StepMetrics &)> &onStep) {
  for (int64_t s = options_.firstStep; s <= options_.steps; ++s) {
    StatusOr<StepMetrics> metrics = step(s);
    if (!metrics)
      return metrics.takeStatus();
    if (onStep)
      MLT_RETURN_IF_ERROR(onStep(*metrics));
  }
  return Status::ok();
}
