//===- Training.h - the training loop over an executor ----------*- C++ -*-===//
//
// Part of mlt. A Trainer drives a plan's training step through optimizer
// steps: for step s it writes the hyper-parameters (the learning rate from
// the schedule) and the step's tokens and labels (micro-batch k, from
// consecutive row blocks of the step's global batch, into copy k of the
// inputs), runs the plan's step, and reports the mean micro-batch loss
// (copy k of "loss" is micro-batch k's) and the gradient norm before
// clipping. Which programs run, in which order, and how gradients start
// and accumulate is the plan's (the compiler's) to say: the trainer knows
// no program. A step's work is queued whole and waited for once (the
// losses and the norm are read as it completes): on a GPU no
// synchronization interrupts a step. The learning-rate schedule is one
// function, shared by the tool's help text and the tests.
//
// With several ranks (a RankGroup) every rank does all of that, on its own
// thread: each reads its block of every micro-batch (its tokens and labels
// buffers' full_shape and slice_offset), from the same global batch that a
// single-rank run reads, and the plan's collectives do the rest. The loss and
// gradient norm are replicated outputs: the trainer reports rank 0's, and
// checks that the other ranks hold the same bits.
//
// With one process per GPU, each process's trainer drives its own rank (a
// RankGroup created for that rank, or its executor), reading its blocks of
// the same global batch. Only the process of plan rank 0 reads the loss and
// the gradient norm (and stops on a non-finite one); the others' StepMetrics
// hold zeros for them.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAINING_H
#define MLT_RUNTIME_TRAINING_H

#include "mlt/Plan/Blocks.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  /// The step at which the cosine reaches minLR (and stays); 0: the run's
  /// last (`totalSteps`).
  int64_t decaySteps = 0;
};

/// The learning rate of step `step` (1-based) of `totalSteps`:
///   step <= warmup:          lr * step / warmup            (both kinds)
///   constant, after warmup:  lr
///   cosine, after warmup:    minLR + 0.5 * (lr - minLR) * (1 + cos(pi * p))
///                            with p = min(1, (step - warmup) / (D - warmup))
/// (D: decaySteps, or totalSteps where it is 0), so the cosine starts just
/// below lr after the warmup, reaches minLR at step D and stays there.
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
  /// The run's steps: run() takes firstStep..steps (a resumed run starts
  /// after its checkpoint's step, with the data, learning rate and AdamW
  /// step count of its own step numbers); 0: none (a run that only
  /// evaluates).
  int64_t steps = 1;
  int64_t firstStep = 1;
  LRSchedule schedule;
  OptimizerOptions optimizer;
  /// Visit the samples in a seeded permutation per epoch (else in file order).
  bool shuffle = true;
  uint64_t seed = 1234;
  /// With several ranks: check after every step that every rank's loss (of
  /// each micro-batch) and gradient norm equal rank 0's bit for bit, as the
  /// plan promises. One scalar read per rank and program; off saves those
  /// reads (device synchronizations on a GPU) on ranks other than 0.
  bool checkReplicatedOutputs = true;
  /// The plan rank that reads and reports the loss and the gradient norm:
  /// rank 0, or under pipeline parallelism the first rank of the last
  /// stage, which computes the loss (reportingRank(plan) in Plan.h).
  uint32_t reportingRank = 0;
};

/// What one optimizer step measured.
/// One rank's share of a step, as the rank measured it.
struct RankStepTime {
  /// The plan rank.
  uint32_t rank = 0;
  /// Its host's wall time of the step, from the step's inputs to the end of
  /// its wait for the device.
  double seconds = 0.0;
  /// Its time inside collectives and transfer groups, waiting for its
  /// peers among them (RankPosition::waitedSeconds); NaN where unmeasured.
  double waitSeconds = 0.0;
};

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
  /// Whether the step also set a device up on one of this process's ranks
  /// (Executor::stepWasSetUp: its first run, or the CUDA graph's capture):
  /// its time is not the pace of training.
  bool setUp = false;
  /// This process's ranks' times (TrainingRun gathers every process's on
  /// rank 0's), by plan rank.
  std::vector<RankStepTime> ranks;
};

/// What one evaluation measured (Trainer::evaluate).
struct EvalMetrics {
  /// The training step after which it ran (0: before the first).
  int64_t step = 0;
  /// The mean loss over its batches' micro-batches (each of the same
  /// tokens: the mean over every token), and its exponential.
  double loss = 0.0;
  double perplexity = 0.0;
  /// Global batches evaluated, their tokens, and the wall time it took.
  int64_t batches = 0;
  int64_t tokens = 0;
  double seconds = 0.0;
};

class Trainer {
public:
  /// Binds the plan's named inputs and outputs (verifyTrainingContract has
  /// checked they exist). `executor` and `data`
  /// must outlive the trainer; `data` must have the plan's sequence length.
  static StatusOr<std::unique_ptr<Trainer>>
  create(Executor &executor, const ModelInfo &model, TrainingData &data,
         const TrainingOptions &options);

  /// The same over every rank of `ranks`, which must outlive the trainer.
  static StatusOr<std::unique_ptr<Trainer>>
  create(RankGroup &ranks, const ModelInfo &model, TrainingData &data,
         const TrainingOptions &options);

  /// Runs optimizer step `step` (1-based; the data of step index step - 1).
  /// A non-finite loss or gradient norm is an error ("loss is NaN at step 3";
  /// with several ranks, a failure on a rank is prefixed with it: "rank 1:
  /// ...", and so is a non-finite loss, which rank 0 detects).
  StatusOr<StepMetrics> step(int64_t step);

  /// Runs steps options.firstStep..options.steps, calling `onStep` after
  /// each; stops at the first error, of a step or of `onStep`.
  Status run(const std::function<Status(const StepMetrics &)> &onStep);

  /// Evaluates the loss on `batches` global batches of `data` (the
  /// plan's sequence length) through the plan's evaluation step, after
  /// training step `step`: batch b takes positions b * globalBatch ... of
  /// its visiting order unshuffled, so every evaluation reads the same
  /// samples, from the start of the data. Each batch is fed as a step's
  /// (a copy per micro-batch, each rank its block) and its losses read as
  /// a step's (on the reporting rank, checked replicated); the training
  /// state is left as it was (the evaluation step writes none of it).
  /// Fails on a plan without an evaluation step and on a non-finite loss.
  StatusOr<EvalMetrics> evaluate(TrainingData &data, int64_t batches,
                                 int64_t step);

  const TrainingOptions &options() const { return options_; }

private:
  /// One rank's input and output buffers, where its inputs come from, and what
  /// it measured in the current step.
  struct RankState {
    Executor *executor = nullptr;
    size_t tokens = 0, labels = 0, loss = 0, gradNorm = 0;
    /// Whether the rank computes the loss (a pipeline stage before the
    /// last does not).
    bool hasLoss = true;
    size_t lr = 0, beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0,
           maxGradNorm = 0, stepNumber = 0;
    /// The blocks of the [microBatch, seqLen] micro-batch that the tokens and
    /// labels buffers hold, and staging for them when they are not whole.
    BlockLayout tokensBlock, labelsBlock;
    std::vector<int32_t> tokensStaging, labelsStaging;
    /// The loss of each micro-batch (read on rank 0, and on every rank when
    /// checking replication) and the gradient norm.
    std::vector<double> measuredLosses;
    double measuredGradNorm = 0.0;
    /// The rank's time of the last step (RankStepTime).
    RankStepTime time;
  };

  Trainer(RankGroup *group, const ModelInfo &model, TrainingData &data,
          const TrainingOptions &options)
      : group_(group), model_(model), data_(data), options_(options) {}

  static StatusOr<std::unique_ptr<Trainer>>
  create(RankGroup *group, const std::vector<Executor *> &executors,
         const ModelInfo &model, TrainingData &data,
         const TrainingOptions &options);

  /// One rank's part of step `step`.
  Status stepOnRank(RankState &rank, int64_t step, double lr);
  /// Writes this rank's block of every micro-batch of inputs_ and targets_
  /// into its copies of the tokens and labels.
  Status feedBatch(RankState &rank);
  /// Queues the reads of the loss of every micro-batch (where this rank
  /// reads them: see stepOnRank).
  Status readLosses(RankState &rank);
  /// Whether `rank` reads the replicated outputs: the reporting rank, and
  /// every local rank when checking replication.
  bool readsOutputs(const RankState &rank) const;
  /// Fails when a micro-batch's loss `rank` read is NaN or infinite: "NAME
  /// is NaN WHEN (BATCH, micro-batch M)".
  Status checkFiniteLosses(const RankState &rank, const std::string &name,
                           const std::string &when,
                           const std::string &batch) const;
  /// One rank's part of an evaluation batch (inputs_, targets_), in the
  /// evaluation after training step `step`.
  Status evaluateOnRank(RankState &rank, int64_t step);
  /// Reads batch `batch` of `data` into inputs_ and targets_ (in the
  /// load-balanced order under context parallelism), then runs
  /// `onRank` on every rank of this process, in parallel.
  Status runBatch(TrainingData &data, int64_t batch, bool shuffle,
                  uint64_t seed,
                  const std::function<Status(RankState &)> &onRank);
  /// Fails when a rank's replicated outputs differ from the reporting
  /// rank's: the losses, and with `gradNorm` the gradient norm; `when`
  /// says where ("at step 3").
  Status checkReplicated(const std::string &when, bool gradNorm) const;

  /// Null when training one executor alone (ranks_ has one entry).
  RankGroup *group_;
  ModelInfo model_;
  TrainingData &data_;
  TrainingOptions options_;
  std::vector<RankState> ranks_;
  /// The entry of ranks_ of options.reportingRank (the first entry where
  /// this process does not hold that rank).
  size_t reporter_ = 0;

  /// The step's global batch, [globalBatch, seqLen] each.
  std::vector<int32_t> inputs_, targets_;
  /// Puts each sequence of `sequences` (the step's, seq_len tokens each) in
  /// the plan's load-balanced order (ModelInfo::sequenceChunks).
  void loadBalance(std::vector<int32_t> &sequences);
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAINING_H
