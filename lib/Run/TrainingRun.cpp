//===- TrainingRun.cpp - a plan trained -----------------------------------===//
//
// Part of mlt. See TrainingRun.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/TrainingRun.h"

#include "CheckpointSaver.h"
#include "Distributed.h"
#include "HangWatch.h"
#include "mlt/Analysis/StepReport.h"
#include "mlt/Run/PlanSource.h"
#include "mlt/Run/Prediction.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/HostMemory.h"
#include "mlt/Runtime/exec/Profile.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/exec/Trace.h"
#include "mlt/Runtime/io/DataBlend.h"
#include "mlt/Runtime/io/EventFile.h"
#include "mlt/Runtime/io/ExportFiles.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Runtime/train/CheckpointStaging.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"
#include "mlt/Support/AtomicFile.h"
#include "mlt/Support/FileKind.h"
#include "mlt/Support/FormatBytes.h"
#include "mlt/Support/HFModelDirectory.h"

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/cuda/CudaBackend.h"
#include "mlt/Runtime/cuda/NcclCommunicator.h"
#endif

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

/// Fails when `path` could not be written later (its folder missing or
/// read-only, or a folder in its place), before the work that writes it.
Status checkWritable(const std::string &path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error))
    return errorf(path, ": cannot write (a directory is in its place)");
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out)
    return errorf(path, ": cannot write (", std::strerror(errno), ")");
  out.close();
  std::remove(temporary.c_str());
  return Status::ok();
}

/// MLT_FAULT_SLOW=RANK:MS (tests): plan rank RANK's host sleeps MS
/// milliseconds before each training step, a straggler that the others
/// wait for.
struct FaultSlow {
  uint32_t rank = 0;
  std::chrono::milliseconds delay{0};
};

StatusOr<FaultSlow> parseFaultSlow(const std::string &text, const Plan &plan) {
  unsigned long long rank = 0, milliseconds = 0;
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%llu:%llu%n", &rank, &milliseconds,
                  &consumed) != 2 ||
      size_t(consumed) != text.size() || milliseconds == 0 ||
      milliseconds > 3600 * 1000)
    return errorf("MLT_FAULT_SLOW: expected RANK:MS (a rank and a delay of 1 "
                  "to 3600000 milliseconds before each of its steps), got '",
                  text, "'");
  if (rank >= plan.ranks.size())
    return errorf("MLT_FAULT_SLOW: the plan has no rank ", rank, " (it has ",
                  plan.ranks.size(), ")");
  return FaultSlow{uint32_t(rank), std::chrono::milliseconds(milliseconds)};
}

/// "fp32", or "bf16 (f32 master weights)" for a mixed-precision plan (one
/// whose parameters have compute copies).
std::string describePrecision(const Plan &plan) {
  for (const BufferDesc &buffer : plan.ranks.front().buffers)
    if (buffer.kind == BufferKind::ParameterCopy)
      return std::string(elementTypeName(buffer.dtype)) +
             " (f32 master weights)";
  return "fp32";
}

/// The signal that asked the run to stop (SIGINT, SIGTERM, SIGHUP,
/// SIGUSR1), or 0.
std::atomic<int> stopSignal{0};

extern "C" void askToStop(int signal) {
  stopSignal.store(signal);
  // A second one ends the process at once.
  std::signal(signal, SIG_DFL);
}

/// "SIGTERM" for messages.
const char *signalName(int signal) {
  switch (signal) {
  case SIGINT:
    return "SIGINT";
  case SIGTERM:
    return "SIGTERM";
  case SIGHUP:
    return "SIGHUP";
  case SIGUSR1:
    return "SIGUSR1";
  }
  return "a signal";
}

/// What a run holds in host memory besides what it reads and writes a
/// tensor at a time: on the CPU, the arenas of its ranks (every rank is in
/// this process) and OpenBLAS's buffers; on either device, what saving
/// holds at once (counted now, so that a run that could not save is
/// refused before its first step rather than after its last): a
/// checkpoint, the f32 state of this process's ranks, read whole before it
/// is written (one rank per process under mpirun); an HF export, the whole
/// model's weights in f32, gathered before they are written.
std::vector<HostMemoryUse> hostMemoryUses(const RunOptions &o,
                                          const Plan &plan, bool oneRank) {
  auto add = [](uint64_t a, uint64_t b) { // (saturating: sizes may be absurd)
    return a + b < a ? UINT64_MAX : a + b;
  };
  std::vector<HostMemoryUse> uses;
  if (o.device != "cuda") {
    uint64_t arenas = 0;
    for (const RankPlan &rank : plan.ranks)
      arenas = add(arenas, rank.arenaBytes);
    uses.push_back(
        {plan.ranks.size() == 1
             ? std::string("the arena")
             : "the arenas of " + std::to_string(plan.ranks.size()) + " ranks",
         arenas});
    uses.push_back(cpuBackendHostMemory());
  }
  if (!o.saveCheckpoint.empty())
    // (what a background save stages, CheckpointStaging, or a save while
    // training waits reads)
    if (auto byRank = CheckpointStaging::bytesByRank(plan)) {
      uint64_t largest = 0, all = 0;
      for (const auto &[rank, bytes] : *byRank) {
        largest = std::max(largest, bytes);
        all = add(all, bytes);
      }
      uses.push_back({"a checkpoint's state (--save-checkpoint)",
                      oneRank ? largest : all});
    }
  if (!o.saveHF.empty()) {
    uint64_t elements = 0;
    for (const ExpectedTensor &parameter : planParameters(plan)) {
      uint64_t count = 1;
      for (int64_t dim : parameter.shape)
        count = count * uint64_t(std::max<int64_t>(dim, 0));
      elements = add(elements, count);
    }
    uses.push_back({"the weights --save-hf gathers (f32)",
                    elements > UINT64_MAX / 4 ? UINT64_MAX : elements * 4});
  }
  return uses;
}

/// One call of `train`: its phases, which `train` calls in order, and the
/// state they hand on to each other. With one process per GPU, every phase
/// up to training ends with all processes agreeing on whether it succeeded
/// (agree), and rank 0's process prints, logs and saves (`reports`); the
/// others only train.
class TrainingSession {
public:
  TrainingSession(const RunOptions &o, const Plan &plan, RunObserver &observer,
                  Distributed *dist)
      : o(o), plan(plan), model(plan.model), observer(observer), dist(dist),
        reports(!dist || dist->reports()) {}

  /// --save-checkpoint, --save-hf: fails when the plan carries no HF
  /// config.json to save with the weights (or, for --save-hf, one that is
  /// not JSON), before any work.
  Status checkHFConfig() const;

  /// --data (or the default corpus): the data, every token id checked.
  Status openData();

  /// Fails when the run would not fit in the host's memory.
  Status checkHostMemory();

  /// --device (--matmul-algorithms, --tune-matmuls): the backend and this
  /// process's ranks (every rank, or with one process per GPU its one rank,
  /// connected to the others).
  Status createRanks();

  /// --calibrate: checks its file; else --calibration (or the calibration
  /// built in for this device): the calibration and the step it predicts.
  Status chooseCalibration();

  /// --init-from (a training checkpoint's weights or an HF checkpoint's),
  /// or weights initialized from --seed; none with --resume, which loads
  /// them.
  Status loadWeights();

  /// How --resume and --init-from read a training checkpoint.
  CheckpointReadOptions readOptions() const {
    CheckpointReadOptions options;
    options.checkPieces = !o.skipChecksums;
    return options;
  }

  /// --resume: checks the checkpoint against this run (the model, the data
  /// order of --shuffle and --seed, the data unless --allow-data-change,
  /// --steps), then loads its weights and AdamW's moments.
  Status resume();

  /// --save-hf, --save-checkpoint (rank 0's process): the files an HF
  /// export copies beside the weights (ExportFiles.h), chosen from the data
  /// and the model directory (else the resumed checkpoint's); with
  /// --save-hf, read and checked now, once for every save. A file left out
  /// is a warning, not a failure.
  void prepareExport();

  /// The options a checkpoint records and a resumed run is held to
  /// (TrainingCheckpoint::training).
  nlohmann::json trainingRecord() const;

  /// --resume: holds this run to the options the checkpoint of `step`
  /// recorded (`saved`), but for those --allow-data-change and
  /// --allow-optimizer-change allow; takes its cosine's end unless
  /// --lr-decay-steps moves it.
  Status holdToCheckpoint(const nlohmann::json &saved, int64_t step);

  /// Where the cosine reaches --min-lr: --lr-decay-steps, the resumed
  /// checkpoint's, or --steps.
  int64_t cosineEnd() const {
    return o.lrDecaySteps ? *o.lrDecaySteps
           : decaySteps   ? decaySteps
                          : *o.steps;
  }

  /// --log-json: opens the JSON log (appended to on --resume);
  /// --tensorboard: starts an event file; --trace: checks it can be
  /// written.
  Status openOutputs();

  /// The trainer, with the steps after the resumed one up to --steps, the
  /// learning rate's schedule, AdamW's options, --shuffle and --seed.
  Status createTrainer();

  /// Tells the observer what the run trains and, with a calibration, the
  /// step it predicts (rank 0's process).
  void reportStart();

  /// --profile-step, --trace, --calibrate: which executors are profiled,
  /// and their profiles begun when step 1 is the profiled one.
  Status setUpProfiles();

  /// --collective-timeout (a plan of several ranks): the hang watchdog over
  /// this process's ranks, from the first step to the last; and
  /// MLT_FAULT_STALL's rank held where it says, MLT_FAULT_SLOW's slowed
  /// (tests).
  Status watchForHangs();

  /// Runs the steps, each followed by afterStep; a signal stops the run
  /// after the current step. A hang the watchdog reports is the run's
  /// failure (with one process per GPU, the watchdog ends the job).
  Status runSteps();

  /// Whether a signal stopped the run (which runSteps reported); there is
  /// then nothing left to do.
  bool stopped() const { return stoppedBySignal; }

  /// Tells the observer the measured step's time beside the predicted one.
  void compareStepTime() const;

  /// Tells the observer what the run came to (rank 0's process), last.
  void reportTotals() const {
    // (a run of no step, which only evaluated, trained nothing to sum)
    if (reports && pace->totals().steps > 0)
      observer.finished(pace->totals());
  }

  /// --calibrate: writes the calibration measured on the profiled step.
  Status finishCalibration();

  /// --save-hf: writes the trained weights as an HF checkpoint.
  Status saveHF();

private:
  /// `status`, agreed on by every process when there are several: a
  /// failure on one rank stops all of them before any waits for it
  /// (MpiBootstrap.h).
  Status agree(Status status);

  /// Each process's ranks take theirs from a source of the whole plan's
  /// tensors (one process per GPU: every process reads it).
  Status loadFrom(const TensorSource &source, bool moments);

  /// Whole tensors of the parameters or gradients: on rank 0 (gathered from
  /// the other processes when there are some); empty on other processes.
  StatusOr<TensorMap> wholeTensors(BufferKind kind);

  /// What follows each step, in order: the loss to the reporting process,
  /// --dump-grads, the report and the log, the checkpoints, the HF
  /// checkpoints, a stop, the profiles.
  Status afterStep(const StepMetrics &measured);

  /// With one process per GPU, every rank's times (StepMetrics::ranks)
  /// gathered into rank 0's process's `m`.
  Status gatherRankTimes(StepMetrics &m);

  /// Appends one event of `scalars` at step `step` to --tensorboard's file.
  Status writeEvents(int64_t step,
                     const std::vector<std::pair<std::string, double>> &scalars);

  /// Under pipeline parallelism the loss (a step's, an evaluation's) is the
  /// last stage's: its first rank's process sends it to rank 0's, which
  /// reports.
  Status forwardLoss(double &loss);

  /// --eval-data, --split: whether an evaluation follows step `step`
  /// (every --eval-every steps, and the last).
  bool evaluatesAfter(int64_t step) const;

  /// Evaluates the loss after step `step` (0: before training) on
  /// --eval-iters batches of the evaluation data, and reports it.
  Status evaluate(int64_t step);

  /// Reports an evaluation and appends it to the JSON log and TensorBoard.
  Status logEvaluation(const EvalMetrics &m);

  /// --dump-grads: the gradients of step 1, whole, written by rank 0's
  /// process.
  Status dumpGradsAt(int64_t step);

  /// Reports the step and appends it to the JSON log (--log-json); keeps its
  /// time to compare with the prediction.
  Status logStep(const StepMetrics &m);

  /// With one process per GPU: takes the signal that reached any process
  /// as this one's, so that all stop after the same step (see runSteps).
  Status agreeOnStop();

  /// --save-checkpoint: a checkpoint every --save-every steps (keeping
  /// --keep-last), at the end, and where a signal stops the run.
  Status saveCheckpointsAt(int64_t step, bool stopping);

  /// --save-hf-every: the weights as an HF checkpoint (the end's is written
  /// by saveHF, after the last step).
  Status saveHFAt(int64_t step);

  /// Begins the profiles of the profiled executors.
  Status beginProfiles();

  /// Ends the profiles: --profile-step's profile reported, --trace's trace
  /// written, --calibrate's launches measured (every process takes part;
  /// rank 0's process gathers the others' events and launches).
  Status endProfiles();

  /// The measured step: the median over the steps but the run's first
  /// (which sets libraries up and captures graphs) and the profiled one.
  std::vector<double> measuredStepTimes() const;

  const RunOptions &o;
  const Plan &plan;
  const ModelInfo &model;
  RunObserver &observer;
  Distributed *dist;
  /// Whether this process reports (rank 0's, or the only one).
  const bool reports;

  // (Declared so that each is destroyed before what it holds: the trainer
  // holds the ranks and the data, and the ranks the backend.)
  std::optional<OpenedData> data;
  /// --eval-data, opened (with --split, the held-out part is data's); the
  /// data evaluations read (null: none), and its summary.
  std::optional<OpenedData> evalData;
  TrainingData *evaluation = nullptr;
  std::string evaluationSummary;
  /// The step of the last evaluation (-1: none yet).
  int64_t evaluatedAt = -1;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<RankGroup> ranks;
  std::string deviceName;
  /// chooseCalibration's calibration and the step it predicts (none with
  /// --calibrate).
  std::optional<ChosenCalibration> calibration;
  std::optional<Prediction> prediction;
  int64_t resumedStep = 0;
  /// The resumed checkpoint's cosine end (0: none recorded).
  int64_t decaySteps = 0;
  /// The resumed checkpoint's record of what HF exports copy (empty: none).
  std::string resumedExportFiles;
  /// prepareExport's record (kept in checkpoints) and the files --save-hf
  /// writes beside the weights.
  ExportRecord exportRecord;
  ExtraFiles exportFiles;
  std::ofstream log;
  std::unique_ptr<EventFileWriter> events;
  /// The run's pace (rank 0's process), from the start of training.
  std::optional<ProgressMeter> pace;
  std::chrono::steady_clock::time_point trainingStart;
  TrainingOptions options;
  std::unique_ptr<Trainer> trainer;
  /// watchForHangs' watch, until the steps end (destroyed before the ranks
  /// whose positions it reads).
  std::unique_ptr<HangWatch> hangWatch;
  int64_t profiledStep = 0;
  std::vector<Executor *> profiled;
  /// --calibrate: the profiled step's launches of every rank, measured
  /// (rank 0's process).
  std::optional<cost::Calibration> measuredCalibration;
  /// Each reported step's time, to compare with the prediction.
  std::vector<std::pair<int64_t, double>> stepTimes;
  /// The step after which a signal stopped the run, the last checkpoint
  /// written (empty: none), and whether runSteps reported the stop.
  int64_t stoppedAfter = 0;
  std::string stoppedCheckpoint;
  /// --save-checkpoint's saves, and whether they are written in the
  /// background (--async-save; decided by checkHostMemory).
  std::optional<CheckpointSaver> saver;
  bool asyncSave = true;
  bool stoppedBySignal = false;
};

Status TrainingSession::agree(Status status) {
#ifdef MLT_HAVE_CUDA
  if (dist)
    return dist->session.agree(status);
#endif
  return status;
}

Status TrainingSession::checkHFConfig() const {
  if (!o.saveCheckpoint.empty() && model.hfConfig.empty())
    return errorf("--save-checkpoint: the plan carries no HF config.json to "
                  "save with the weights");
  if (!o.saveHF.empty()) {
    // Fail before training, not after it, when the checkpoint cannot be saved.
    if (model.hfConfig.empty())
      return errorf("--save-hf: the plan carries no HF config.json to save "
                    "with the weights");
    if (!nlohmann::json::accept(model.hfConfig))
      return errorf("--save-hf: the plan's HF config is not valid JSON");
  }
  // Room on the disk for one save (an older checkpoint that --keep-last
  // drops goes only after the new one is written), where it can be told.
  uint64_t elements = 0;
  for (const ExpectedTensor &parameter : planParameters(plan)) {
    uint64_t count = 1;
    for (int64_t dim : parameter.shape)
      count *= uint64_t(std::max<int64_t>(dim, 0));
    elements += count;
  }
  if (!o.saveCheckpoint.empty())
    MLT_RETURN_IF_ERROR(checkFreeSpace(o.saveCheckpoint, true, elements * 12,
                                       "a checkpoint (f32 weights and AdamW's "
                                       "two moments)")
                            .withContext("--save-checkpoint"));
  if (!o.saveHF.empty())
    MLT_RETURN_IF_ERROR(checkFreeSpace(o.saveHF, true, elements * 4,
                                       "an HF export (f32 weights)")
                            .withContext("--save-hf"));
  return Status::ok();
}

Status TrainingSession::openData() {
  // The data, every token id checked; a check of more than a few seconds
  // (a large indexed dataset) says how far it is, every few seconds.
  const auto openStart = std::chrono::steady_clock::now();
  double lastProgress = 0;
  auto progress = [&](const std::string &file, uint64_t done, uint64_t total) {
    const double elapsed = std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - openStart)
                               .count();
    if (!reports || elapsed < 2 || (elapsed - lastProgress < 5 && done < total))
      return;
    lastProgress = elapsed;
    char figures[96];
    std::snprintf(figures, sizeof figures, ": %.0f%% of %.2f GiB, %.0f s",
                  100.0 * double(done) / double(total),
                  double(total) / double(1ull << 30), elapsed);
    observer.progress("checking the token ids of " + file + figures);
  };
  // The bundled corpus is bytes: only a model of 256 tokens reads it as
  // its own (another would train on bytes it does not tokenize so).
  if (o.data.empty() && model.vocabSize != kBundledCorpusVocab)
    return agree(errorf(
        "no --data: the bundled corpus is bytes (", kBundledCorpusVocab,
        " tokens), and the model's vocabulary is ", model.vocabSize,
        " tokens; pass --data DATASET (mlt-tokenize makes one)"));
  StatusOr<OpenedData> opened = openTrainingData(
      o.data.empty() ? std::vector<DataSourceSpec>{{1.0, defaultCorpusPath()}}
                     : o.data,
      model.seqLen, model.vocabSize, progress, o.split);
  MLT_RETURN_IF_ERROR(agree(opened ? Status::ok() : opened.takeStatus()));
  data = std::move(*opened);
  // The held-out data: --eval-data, or --split's part of --data.
  if (!o.evalData.empty()) {
    StatusOr<OpenedData> held =
        openTrainingData(o.evalData, model.seqLen, model.vocabSize, progress);
    MLT_RETURN_IF_ERROR(agree(
        held ? Status::ok() : held.takeStatus().withContext("--eval-data")));
    evalData = std::move(*held);
    evaluation = evalData->data.get();
    evaluationSummary = evalData->summary;
  } else if (o.split) {
    evaluation = data->heldOut.get();
    evaluationSummary = data->heldOutSummary;
  }
  if (evaluation) {
    // The same batches at every evaluation, each sample read once.
    const int64_t batches = o.evalIters.value_or(RunOptions::kDefaultEvalIters);
    const int64_t wanted = batches * model.globalBatch();
    const int64_t distinct = evaluation->distinctSamples(wanted);
    if (distinct < wanted)
      return agree(errorf(
          "--eval-iters ", batches, ": an evaluation reads ", batches,
          " batches of ", model.globalBatch(), " sequences (", wanted,
          " samples of seq_len + 1 = ", model.seqLen + 1,
          " tokens), but the evaluation data (", evaluationSummary,
          ") holds ", distinct, " before it repeats one; lower --eval-iters "
          "or hold out more data"));
  }
  return Status::ok();
}

Status TrainingSession::checkHostMemory() {
  // On the CPU every rank is a thread of this process, each calling
  // OpenBLAS: its pool is shared among them (and so are its buffers, which
  // the check below counts).
  if (o.device != "cuda")
    rt::shareCpuCores(unsigned(plan.ranks.size()));
  // Host memory, before the arenas take theirs (see HostMemory.h for what
  // running short does instead of failing; the data is mapped, and counts
  // against an address-space limit by now).
  MLT_RETURN_IF_ERROR(
      agree(rt::checkHostMemory(hostMemoryUses(o, plan, dist != nullptr))));
  asyncSave = o.asyncSave.value_or(true);
  if (!o.saveCheckpoint.empty() && !o.asyncSave) {
    // By default in the background, unless the state it keeps for that
    // (page-locked on GPUs, for the whole run) would take more than half
    // of the host memory left.
    std::vector<uint32_t> local;
#ifdef MLT_HAVE_CUDA
    if (dist)
      local.push_back(uint32_t(dist->rank()));
#endif
    if (!dist)
      for (const RankPlan &rank : plan.ranks)
        local.push_back(rank.rank);
    StatusOr<uint64_t> staged = CheckpointStaging::bytesFor(plan, local);
    std::optional<HostMemoryLimit> limit = hostMemoryLimit();
    if (staged && limit && *staged > limit->availableBytes / 2) {
      asyncSave = false;
      if (reports)
        observer.progress("checkpoints are written while training waits: the " +
                      formatBytes(*staged) +
                      " of state a background save keeps in host memory is "
                      "more than half of the " +
                      formatBytes(limit->availableBytes) + " free (" +
                      limit->source + ")");
    }
  }
  return Status::ok();
}

Status TrainingSession::createRanks() {
#ifdef MLT_HAVE_CUDA
  backend = o.device == "cuda"
                ? createCudaBackend({o.matmulAlgorithms, o.tuneMatmuls})
                : createCpuBackend();
#else
  backend = createCpuBackend();
#endif
  StatusOr<std::unique_ptr<RankGroup>> created =
      errorf("no ranks were created");
  if (!dist) {
    created = RankGroup::create(plan, *backend);
  } else {
#ifdef MLT_HAVE_CUDA
    // Every rank's communicators over the plan's mesh on its node-local GPU
    // (Distributed.h). A rank whose init fails while others wait inside it
    // cannot agree with them: after a while it gives up and aborts the job.
    Status status = dist->connect(plan);
    if (dist->session.timedOut())
      dist->fatal(status);
    MLT_RETURN_IF_ERROR(status);
    created = RankGroup::createForRank(plan, uint32_t(dist->rank()), *backend,
                                       dist->communicator.get());
#endif
  }
  MLT_RETURN_IF_ERROR(agree(created ? Status::ok() : created.takeStatus()));
  ranks = std::move(*created);
  return Status::ok();
}

Status TrainingSession::chooseCalibration() {
  // The calibration that prices this run's launches (--calibration, or the
  // one built in for this device), and the step it predicts; none while
  // --calibrate measures the device.
  deviceName = ranks->executor(0).device().deviceName();
  // --calibrate: its file writable and, when there is one, of this device
  // (rank 0's process writes it; every process agrees).
  if (!o.calibrate.empty()) {
    Status target = Status::ok();
    if (reports)
      target = checkCalibrationTarget(o.calibrate, std::string(backend->name()),
                                      deviceName);
    if (target && reports)
      target = checkWritable(o.calibrate);
    MLT_RETURN_IF_ERROR(agree(target));
  }
  if (o.calibrate.empty()) {
    StatusOr<std::optional<ChosenCalibration>> found = run::chooseCalibration(
        o.calibration, std::string(backend->name()), deviceName);
    Status chosen = found ? Status::ok() : found.takeStatus();
    if (chosen && *found) {
      StatusOr<Prediction> predicted = predictStep(plan, (*found)->calibration);
      if (!predicted) {
        chosen = predicted.takeStatus();
      } else {
        calibration = std::move(**found);
        prediction = std::move(*predicted);
      }
    }
    MLT_RETURN_IF_ERROR(agree(chosen));
  }
  return Status::ok();
}

Status TrainingSession::loadFrom(const TensorSource &source, bool moments) {
  if (moments)
    return dist ? loadOptimizerState(*ranks, plan, source)
                : loadOptimizerState(*ranks, source);
  return dist ? loadParameters(*ranks, plan, source)
              : loadParameters(*ranks, source);
}

Status TrainingSession::loadWeights() {
  Status loaded = Status::ok();
  if (!o.initFrom.empty() && isTrainingCheckpoint(o.initFrom)) {
    // A training checkpoint's weights (not its moments or step): whatever
    // layout saved it.
    StatusOr<std::unique_ptr<CheckpointReader>> checkpoint =
        CheckpointReader::open(o.initFrom, readOptions());
    loaded = checkpoint ? loadFrom((*checkpoint)->parameters(), false)
                              .withContext(o.initFrom)
                        : checkpoint.takeStatus();
    // (the moments it does not load are checked too, by one process: a
    // damaged checkpoint is refused whatever part is damaged)
    if (loaded && reports)
      loaded = (*checkpoint)->verifyOptimizerState().withContext(o.initFrom);
  } else if (!o.initFrom.empty()) {
    StatusOr<TensorMap> tensors = readCheckpoint(o.initFrom);
    if (!tensors)
      loaded = tensors.takeStatus();
    else
      loaded =
          loadFrom(TensorMapSource(*tensors), false).withContext(o.initFrom);
  } else if (o.resume.empty()) { // (--resume loads them below)
    loaded = initializeParameters(*ranks, o.seed);
  }
  return agree(loaded);
}

Status TrainingSession::resume() {
  // --resume: the checkpoint's weights and moments, in this plan's layout.
  if (o.resume.empty())
    return Status::ok();
  StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::open(o.resume, readOptions());
  MLT_RETURN_IF_ERROR(agree(
      reader ? Status::ok() : reader.takeStatus().withContext("--resume")));
  const TrainingCheckpoint *checkpoint = &(*reader)->state();
  // The model: its config but the special-token ids, which train nothing
  // (and which checkpoints saved before the importer kept them lack).
  auto modelOf = [](const std::string &config) {
    nlohmann::json parsed = nlohmann::json::parse(config, nullptr, false);
    if (parsed.is_object())
      for (const char *key : {"bos_token_id", "eos_token_id", "pad_token_id"})
        parsed.erase(key);
    return parsed;
  };
  if (!model.hfConfig.empty() &&
      modelOf(checkpoint->config) != modelOf(model.hfConfig))
    return errorf("--resume ", o.resume,
                  ": the checkpoint is of another "
                  "model (its config.json differs from the plan's)");
  // (without shuffling the seed orders nothing)
  if (checkpoint->shuffle != o.shuffle ||
      (o.shuffle && checkpoint->seed != o.seed))
    return errorf("--resume ", o.resume, ": the checkpoint's data order is ",
                  checkpoint->shuffle ? "shuffled with --seed " +
                                            std::to_string(checkpoint->seed)
                                      : std::string("--no-shuffle"),
                  ", this run's ",
                  o.shuffle ? "shuffled with --seed " + std::to_string(o.seed)
                            : std::string("--no-shuffle"),
                  "; pass the same to go on with the same data");
  // (checkpoints that predate the data's description are not checked)
  if (!checkpoint->data.empty()) {
    Status same = checkSameData(checkpoint->data, data->description);
    if (!same && !o.allowDataChange)
      return errorf(
          "--resume ", o.resume,
          ": the checkpoint was trained on other data: ", same.message(),
          "; pass its --data, or --allow-data-change to go on with this "
          "data");
    if (!same && reports)
      observer.dataChanged(same.message());
  }
  // (checkpoints that predate the record are not held to it)
  if (!checkpoint->training.empty())
    MLT_RETURN_IF_ERROR(holdToCheckpoint(
        nlohmann::json::parse(checkpoint->training, nullptr, false),
        checkpoint->step));
  if (checkpoint->step >= *o.steps)
    return errorf("--resume ", o.resume, ": the checkpoint is at step ",
                  checkpoint->step, ", --steps is ", *o.steps,
                  ": nothing left to train");
  // (With one process per GPU, every process reads the checkpoint and
  // its ranks take theirs.)
  Status resumed = loadFrom((*reader)->parameters(), false);
  if (resumed)
    resumed = loadFrom((*reader)->optimizerState(), true);
  MLT_RETURN_IF_ERROR(
      agree(std::move(resumed).withContext("--resume " + o.resume)));
  resumedStep = checkpoint->step;
  resumedExportFiles = checkpoint->exportFiles;
  if (reports)
    // (The checkpoint directory itself: a root's names the step taken.)
    observer.resumed((*reader)->directory(), resumedStep, checkpoint->layout);
  return Status::ok();
}

namespace {

/// The files of an HF export: config.json, model.safetensors and `extra`.
std::vector<std::string> exportedNames(const ExtraFiles &extra) {
  std::vector<std::string> names = {kHFConfigFile, "model.safetensors"};
  for (const auto &[name, bytes] : extra)
    names.push_back(name);
  return names;
}

/// An option that a checkpoint records (TrainingCheckpoint::training), in
/// the order a resumed run's changes are named.
struct RecordedOption {
  /// Its key in the record, and its flag.
  const char *key;
  const char *flag;
  /// Whether it changes the samples read (--allow-data-change allows it),
  /// else the optimizer's trajectory (--allow-optimizer-change).
  bool data;
};

constexpr RecordedOption kRecordedOptions[] = {
    {"global_batch", "--batch", true},
    {"seq_len", "--seq-len", true},
    {"lr_schedule", "--lr-schedule", false},
    {"lr", "--lr", false},
    {"min_lr", "--min-lr", false},
    {"warmup", "--warmup", false},
    {"lr_decay_steps", "--lr-decay-steps", false},
    {"adam_beta1", "--adam-beta1", false},
    {"adam_beta2", "--adam-beta2", false},
    {"adam_eps", "--adam-eps", false},
    {"weight_decay", "--weight-decay", false},
    {"clip_grad", "--clip-grad", false},
};

/// A recorded value as the option is written ("cosine", 0.001), or
/// "unset" where a record lacks it.
std::string optionText(const nlohmann::json &record, const char *key) {
  auto it = record.find(key);
  if (it == record.end())
    return "unset";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

} // namespace

nlohmann::json TrainingSession::trainingRecord() const {
  nlohmann::json record = {{"global_batch", model.globalBatch()},
                           {"seq_len", model.seqLen},
                           {"lr_schedule", o.schedule},
                           {"lr", o.lr},
                           {"warmup", o.warmup},
                           {"adam_beta1", o.beta1},
                           {"adam_beta2", o.beta2},
                           {"adam_eps", o.eps},
                           {"weight_decay", o.weightDecay},
                           {"clip_grad", o.clipGrad}};
  // (the constant schedule has neither)
  if (o.schedule == "cosine") {
    record["min_lr"] = o.minLR;
    record["lr_decay_steps"] = cosineEnd();
  }
  return record;
}

Status TrainingSession::holdToCheckpoint(const nlohmann::json &saved,
                                         int64_t step) {
  if (!saved.is_object())
    return errorf("--resume ", o.resume,
                  ": trainer.json's \"training\" is not an object");
  if (auto end = saved.find("lr_decay_steps");
      end != saved.end() && end->is_number_integer())
    decaySteps = end->get<int64_t>();
  const nlohmann::json now = trainingRecord();
  for (const RecordedOption &option : kRecordedOptions) {
    auto was = saved.find(option.key), is = now.find(option.key);
    if (was == saved.end() && is == now.end())
      continue;
    if (was != saved.end() && is != now.end() && *was == *is)
      continue;
    const std::string before = optionText(saved, option.key),
                      after = optionText(now, option.key);
    const char *allowance =
        option.data ? "--allow-data-change" : "--allow-optimizer-change";
    if (!(option.data ? o.allowDataChange : o.allowOptimizerChange))
      return errorf("--resume ", o.resume, ": the checkpoint was trained with ",
                    option.flag, " ", before, ", this run's is ", after,
                    option.data ? " (which reads other samples)" : "",
                    "; pass ", option.flag, " ", before, ", or ", allowance,
                    " to go on with ", after, " from step ", step + 1);
    if (reports)
      observer.resumeNote(std::string(allowance) + ": " + option.flag + " " +
                          before + " -> " + after + " from step " +
                          std::to_string(step + 1));
  }
  if (reports && o.schedule == "cosine" && !o.lrDecaySteps && decaySteps &&
      decaySteps != *o.steps)
    observer.resumeNote(
        "the cosine reaches --min-lr at step " + std::to_string(decaySteps) +
        " as the checkpoint's does, --steps is " + std::to_string(*o.steps) +
        " (--lr-decay-steps N with --allow-optimizer-change moves it)");
  return Status::ok();
}

Status TrainingSession::openOutputs() {
  Status logOpened = Status::ok();
  if (!o.logJson.empty() && reports) {
    // (a resumed run's steps go on where the log's left off)
    log.open(o.logJson, o.resume.empty() ? std::ios::trunc : std::ios::app);
    if (!log)
      logOpened = errorf(o.logJson, ": cannot write the JSON log (",
                         std::strerror(errno), ")");
  }
  if (logOpened && !o.tensorboard.empty() && reports) {
    StatusOr<std::unique_ptr<EventFileWriter>> opened =
        EventFileWriter::open(o.tensorboard);
    if (opened)
      events = std::move(*opened);
    else
      logOpened = opened.takeStatus().withContext("--tensorboard");
  }
  MLT_RETURN_IF_ERROR(agree(logOpened));
  // Fail before training, not after it, when the trace cannot be written.
  return agree(o.trace.empty() || !reports ? Status::ok()
                                           : checkWritable(o.trace));
}

Status TrainingSession::createTrainer() {
  options.steps = *o.steps;
  options.schedule.kind = o.schedule == "cosine" ? LRScheduleKind::Cosine
                                                 : LRScheduleKind::Constant;
  options.schedule.lr = o.lr;
  options.schedule.minLR = o.minLR;
  options.schedule.warmup = o.warmup;
  options.schedule.decaySteps = cosineEnd();
  options.optimizer.beta1 = o.beta1;
  options.optimizer.beta2 = o.beta2;
  options.optimizer.eps = o.eps;
  options.optimizer.weightDecay = o.weightDecay;
  options.optimizer.maxGradNorm = o.clipGrad;
  options.shuffle = o.shuffle;
  options.seed = o.seed;
  options.firstStep = resumedStep + 1;
  options.reportingRank = reportingRank(plan);
  StatusOr<std::unique_ptr<Trainer>> created =
      Trainer::create(*ranks, model, *data->data, options);
  MLT_RETURN_IF_ERROR(agree(created ? Status::ok() : created.takeStatus()));
  trainer = std::move(*created);
  if (!o.saveCheckpoint.empty()) {
    saver.emplace(o.saveCheckpoint, o.keepLast.value_or(0), asyncSave, plan,
                  *ranks, dist, observer, reports);
    saver->prepare();
  }
  return Status::ok();
}

void TrainingSession::reportStart() {
  if (reports) {
    uint64_t arenaBytes = 0, scratchBytes = 0; // the largest rank's
    for (const RankPlan &rank : plan.ranks) {
      arenaBytes = std::max(arenaBytes, rank.arenaBytes);
      scratchBytes =
          std::max(scratchBytes, backend->scratchBytes(rank, plan.mesh));
    }
    RunSummary summary;
    summary.model = o.model;
    summary.parameters = countParameters(plan);
    summary.globalBatch = model.globalBatch();
    summary.seqLen = model.seqLen;
    summary.microbatches = model.microbatches;
    summary.microBatch = model.microBatch;
    summary.arenaBytes = arenaBytes;
    summary.scratchBytes = scratchBytes;
    summary.ranks = plan.ranks.size();
    summary.mesh = describeMesh(plan);
    summary.worldSize = plan.worldSize;
#ifdef MLT_HAVE_CUDA
    if (dist)
      summary.ncclVersion = ncclLibraryVersion();
#endif
    summary.backend = std::string(backend->name());
    summary.precision = describePrecision(plan);
    summary.steps = options.steps;
    summary.data = data->summary;
    if (evaluation) {
      summary.evaluation = evaluationSummary;
      summary.evalIters = o.evalIters.value_or(RunOptions::kDefaultEvalIters);
      summary.evalEvery = o.evalEvery.value_or(0);
    }
    observer.started(summary);
  }
  if (reports && prediction)
    observer.predicted(prediction->timeline.seconds(),
                       cost::tokensPerStep(plan) /
                           prediction->timeline.seconds(),
                       calibration->source);
}

Status TrainingSession::setUpProfiles() {
  // A profile (--profile-step) is of this process's first rank, and only the
  // reporting process (rank 0's) takes one; a trace (--trace) is of every
  // rank, in every process.
  profiledStep =
      o.profileStep ? *o.profileStep : std::min<int64_t>(2, options.steps);
  if (!o.trace.empty() || !o.calibrate.empty()) {
    for (uint32_t i = 0; i < ranks->size(); ++i)
      profiled.push_back(&ranks->executor(i));
  } else if (o.profileStep && reports) {
    profiled.push_back(&ranks->executor(0));
  }
  if (!profiled.empty() && profiledStep == 1)
    MLT_RETURN_IF_ERROR(beginProfiles());
  return Status::ok();
}

Status TrainingSession::beginProfiles() {
  for (Executor *executor : profiled)
    MLT_RETURN_IF_ERROR(executor->beginProfile());
  return Status::ok();
}

Status TrainingSession::endProfiles() {
  // Each local rank's trace events (a JSON array each) and launches.
  std::vector<std::string> events, launchTexts;
  for (Executor *executor : profiled) {
    StatusOr<std::vector<Executor::LaunchTime>> launches =
        executor->endProfile();
    if (!launches)
      return launches.takeStatus();
    if (o.profileStep && reports && executor == profiled.front())
      observer.profiled(formatProfile(executor->rankPlan(), *launches));
    if (!o.trace.empty())
      events.push_back(traceEvents(executor->rankPlan(), *launches));
    if (!o.calibrate.empty())
      launchTexts.push_back(
          launchesToText(executor->rankPlan().rank, *launches));
  }
#ifdef MLT_HAVE_CUDA
  // One process per rank: rank 0's process gathers the others' events
  // and launches.
  if (dist) {
    for (std::vector<std::string> *texts : {&events, &launchTexts}) {
      if (texts->empty())
        continue;
      StatusOr<std::vector<std::string>> gathered =
          dist->session.gather(texts->at(0), 0);
      if (!gathered)
        return gathered.takeStatus();
      *texts = std::move(*gathered);
    }
  }
#endif
  if (!reports)
    return Status::ok();
  if (!o.calibrate.empty()) {
    std::vector<std::vector<cost::MeasuredLaunch>> measured(plan.ranks.size());
    for (const std::string &text : launchTexts)
      MLT_RETURN_IF_ERROR(launchesFromText(text, measured));
    StatusOr<cost::Calibration> measuredHere = cost::measureCalibration(
        plan, measured, deviceName, std::string(backend->name()));
    if (!measuredHere)
      return measuredHere.takeStatus().withContext("--calibrate");
    measuredCalibration = std::move(*measuredHere);
  }
  if (o.trace.empty())
    return Status::ok();
  // The prediction's tracks below the measured ones.
  if (prediction)
    for (const RankPlan &rank : plan.ranks)
      events.push_back(predictedTraceEvents(
          rank, asLaunchTimes(prediction->timeline.ranks[rank.rank]),
          plan.worldSize));
  StatusOr<std::string> text = formatTrace(events);
  if (!text)
    return text.takeStatus();
  MLT_RETURN_IF_ERROR(writeFileAtomically(o.trace, *text));
  observer.traceWritten(profiledStep, o.trace);
  return Status::ok();
}

StatusOr<TensorMap> TrainingSession::wholeTensors(BufferKind kind) {
  try {
#ifdef MLT_HAVE_CUDA
    if (dist)
      return gatherParameterTensors(*ranks, plan, *dist->communicator, kind);
#endif
    return parameterTensors(*ranks, kind);
  } catch (const std::bad_alloc &) {
    // The whole model in f32 on one process: more than the host has.
    return errorf("out of host memory assembling the whole ",
                  kind == BufferKind::Parameter ? "weights" : "gradients", " (",
                  formatBytes(uint64_t(countParameters(plan)) * 4),
                  " of f32) on one process",
                  o.saveCheckpoint.empty()
                      ? ""
                      : "; the training checkpoint under " + o.saveCheckpoint +
                            " holds them (mlt-checkpoint to-hf writes an "
                            "HF checkpoint a tensor at a time)");
  }
}

Status TrainingSession::watchForHangs() {
  const bool watched = o.collectiveTimeout > 0 && plan.ranks.size() > 1;
  Status stalled = Status::ok();
  if (const char *text = std::getenv("MLT_FAULT_STALL"); text && *text) {
    StatusOr<FaultStall> fault = parseFaultStall(
        text, plan, options.firstStep, options.steps, watched,
        [&](int64_t step) { return evaluatesAfter(step); });
    if (fault) {
      for (uint32_t i = 0; i < ranks->size(); ++i)
        if (ranks->executor(i).rankPlan().rank == fault->rank)
          ranks->executor(i).stallAt(
              {fault->step, fault->launch, fault->evaluation});
    } else {
      stalled = fault.takeStatus();
    }
  }
  if (const char *text = std::getenv("MLT_FAULT_SLOW"); text && *text) {
    StatusOr<FaultSlow> fault = parseFaultSlow(text, plan);
    if (fault) {
      for (uint32_t i = 0; i < ranks->size(); ++i)
        if (ranks->executor(i).rankPlan().rank == fault->rank)
          ranks->executor(i).delayEachStep(fault->delay);
    } else if (stalled) {
      stalled = fault.takeStatus();
    }
  }
  MLT_RETURN_IF_ERROR(agree(stalled));
  if (!watched)
    return Status::ok();
  StatusOr<std::unique_ptr<HangWatch>> started = HangWatch::start(
      plan, *ranks,
      std::chrono::milliseconds(std::llround(o.collectiveTimeout * 1000)),
      observer, dist);
  MLT_RETURN_IF_ERROR(agree(started ? Status::ok() : started.takeStatus()));
  hangWatch = std::move(*started);
  return Status::ok();
}

Status TrainingSession::runSteps() {
  // SIGINT, SIGTERM (a scheduler's time limit), SIGHUP, SIGUSR1: the
  // current step ends, a checkpoint is written (with --save-checkpoint),
  // and the run stops with a line saying so. With one process per GPU, a
  // signal that reaches any process stops them all after the same step:
  // they agree on it after every step. (Open MPI's mpirun answers SIGTERM
  // by killing them at once: the ranks are to be signalled.)
  for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1})
    std::signal(signal, askToStop);
  if (reports) {
    // (on GPUs: the model's FLOP/s per GPU, and MFU where the GPU's peak
    // is known)
    const bool gpus = backend->name() == "cuda";
    pace.emplace(options.steps, int64_t(plan.worldSize),
                 gpus ? trainingFlopsPerToken(model.hfConfig, model.seqLen)
                      : std::nullopt,
                 gpus ? peakFlops(deviceName) : std::nullopt);
    trainingStart = std::chrono::steady_clock::now();
  }
  Status status = trainer->run(
      [this](const StepMetrics &measured) { return afterStep(measured); });
  // A run of no step (--steps 0) evaluates the weights it starts from,
  // watched as the steps' evaluations are.
  if (status && evaluation && evaluatedAt != options.steps)
    status = evaluate(options.steps);
  // A hang: the watchdog's report, not the failures that ending it caused
  // (with one process per GPU, the watchdog's thread ends the job).
  const bool hung = hangWatch && hangWatch->tripped();
  if (hung && dist)
    hangWatch->awaitEnd();
  if (hung)
    status = hangWatch->failure();
  // From here on the ranks are in collectives: a failing rank ends the job.
  if (!status && dist && stoppedAfter == 0)
    dist->fatal(status);
  // A step that failed after a save began in the background: that save
  // holds an earlier step's state, whole; it is committed before the run
  // ends with the failure.
  if (!status && stoppedAfter == 0 && saver && saver->inFlight())
    (void)saver->finish();
  // The watch ends with the steps (with one process per GPU collectively:
  // every process gets here, or the job is aborted).
  hangWatch.reset();
  if (hung)
    return status;
  if (!status && stoppedAfter > 0) {
    stoppedBySignal = true;
    if (!reports)
      return Status::ok();
    observer.stopped(signalName(stopSignal.load()), stoppedAfter, options.steps,
                     stoppedCheckpoint.empty() ? "" : o.saveCheckpoint);
    return Status::ok();
  }
  return status;
}

Status TrainingSession::afterStep(const StepMetrics &measured) {
  StepMetrics m = measured;
  MLT_RETURN_IF_ERROR(forwardLoss(m.loss));
  MLT_RETURN_IF_ERROR(gatherRankTimes(m));
  MLT_RETURN_IF_ERROR(dumpGradsAt(m.step));
  if (reports)
    MLT_RETURN_IF_ERROR(logStep(m));
  MLT_RETURN_IF_ERROR(agreeOnStop());
  const bool stopping = stopSignal.load() && m.step < options.steps;
  MLT_RETURN_IF_ERROR(saveCheckpointsAt(m.step, stopping));
  MLT_RETURN_IF_ERROR(saveHFAt(m.step));
  if (stopping) {
    stoppedAfter = m.step;
    return errorf("stopped by ", signalName(stopSignal.load()));
  }
  // Every process takes part in a trace (the events are gathered). An
  // evaluation runs outside the profiled step: after its end, before the
  // next one's start.
  if (!profiled.empty() && m.step == profiledStep)
    MLT_RETURN_IF_ERROR(endProfiles());
  if (evaluatesAfter(m.step))
    MLT_RETURN_IF_ERROR(evaluate(m.step));
  if (!profiled.empty() && m.step + 1 == profiledStep)
    return beginProfiles();
  return Status::ok();
}

bool TrainingSession::evaluatesAfter(int64_t step) const {
  // (the last step's, or with no step to take the weights the run starts
  // from; and every --eval-every steps of those it takes)
  return evaluation &&
         (step == options.steps || (step >= options.firstStep && o.evalEvery &&
                                    step % *o.evalEvery == 0));
}

Status TrainingSession::evaluate(int64_t step) {
  StatusOr<EvalMetrics> measured = trainer->evaluate(
      *evaluation, o.evalIters.value_or(RunOptions::kDefaultEvalIters), step);
  if (!measured)
    return measured.takeStatus();
  evaluatedAt = step;
  EvalMetrics m = *measured;
  MLT_RETURN_IF_ERROR(forwardLoss(m.loss));
  m.perplexity = std::exp(m.loss);
  return reports ? logEvaluation(m) : Status::ok();
}

Status TrainingSession::logEvaluation(const EvalMetrics &m) {
  observer.evaluated(m);
  // Records of their own beside the steps', named alike in TensorBoard.
  const std::vector<std::pair<std::string, double>> scalars = {
      {"eval_loss", m.loss}, {"eval_perplexity", m.perplexity}};
  if (log.is_open()) {
    nlohmann::json line = {{"step", m.step}};
    for (const auto &[name, value] : scalars)
      line[name] = value;
    line["eval_tokens"] = m.tokens;
    line["eval_time_s"] = m.seconds;
    log << line.dump() << "\n";
    log.flush();
    if (!log)
      return errorf(o.logJson, ": write failed");
  }
  return writeEvents(m.step, scalars);
}

Status TrainingSession::writeEvents(
    int64_t step, const std::vector<std::pair<std::string, double>> &scalars) {
  if (!events)
    return Status::ok();
  const double now = std::chrono::duration<double>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  return events->scalars(step, now, scalars).withContext("--tensorboard");
}

Status TrainingSession::gatherRankTimes(StepMetrics &m) {
#ifdef MLT_HAVE_CUDA
  if (!dist)
    return Status::ok();
  // (plain data, the same build in every process)
  const std::string mine(reinterpret_cast<const char *>(m.ranks.data()),
                         m.ranks.size() * sizeof(RankStepTime));
  StatusOr<std::vector<std::string>> all = dist->session.gather(mine, 0);
  if (!all)
    return all.takeStatus();
  m.ranks.clear();
  for (const std::string &bytes : *all)
    for (size_t at = 0; at + sizeof(RankStepTime) <= bytes.size();
         at += sizeof(RankStepTime)) {
      RankStepTime time;
      std::memcpy(&time, bytes.data() + at, sizeof time);
      m.ranks.push_back(time);
    }
#else
  (void)m;
#endif
  return Status::ok();
}

Status TrainingSession::forwardLoss(double &loss) {
#ifdef MLT_HAVE_CUDA
  if (dist && options.reportingRank != 0) {
    if (dist->rank() == int(options.reportingRank))
      MLT_RETURN_IF_ERROR(dist->communicator->send(0, &loss, sizeof(loss)));
    else if (reports)
      MLT_RETURN_IF_ERROR(dist->communicator->receive(
          int(options.reportingRank), &loss, sizeof(loss)));
  }
#else
  (void)loss;
#endif
  return Status::ok();
}

Status TrainingSession::dumpGradsAt(int64_t step) {
  if (step == 1 && !o.dumpGrads.empty()) {
    StatusOr<TensorMap> grads = wholeTensors(BufferKind::Gradient);
    if (!grads)
      return grads.takeStatus();
    if (reports)
      MLT_RETURN_IF_ERROR(writeSafeTensors(o.dumpGrads, *grads));
  }
  return Status::ok();
}

Status TrainingSession::logStep(const StepMetrics &m) {
  stepTimes.emplace_back(m.step, m.seconds);
  const StepProgress progress = pace->add(
      m, std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       trainingStart)
             .count());
  observer.step(m, progress, options.steps);
  // The step's scalars, named alike in the JSON log and TensorBoard.
  std::vector<std::pair<std::string, double>> scalars = {
      {"loss", m.loss},
      {"grad_norm", m.gradNorm},
      {"lr", m.lr},
      {"tokens_per_s", m.tokensPerSecond},
      {"step_time_s", m.seconds}};
  // The reporting rank's memory: its GPU's in use (what nvidia-smi shows),
  // or on the CPU its arena.
  const Executor &reporting = ranks->executor(0);
  const std::optional<uint64_t> inUse = reporting.device().memoryInUse();
  scalars.push_back({"memory_gib",
                     double(inUse ? *inUse : reporting.rankPlan().arenaBytes) /
                         double(uint64_t(1) << 30)});
  // Several ranks: each one's step time and wait in collectives, by plan
  // rank (up to kRanksLogged of them), and the slowest.
  std::vector<RankStepTime> byRank = m.ranks;
  std::sort(byRank.begin(), byRank.end(),
            [](const RankStepTime &a, const RankStepTime &b) {
              return a.rank < b.rank;
            });
  const std::optional<SlowestRank> slowest = slowestRank(byRank);
  constexpr size_t kRanksLogged = 64;
  const bool perRank = byRank.size() > 1 && byRank.size() <= kRanksLogged;
  if (log.is_open()) {
    nlohmann::json line = {{"step", m.step}, {"tokens", m.tokens}};
    for (const auto &[name, value] : scalars)
      line[name] = value;
    // (wall time since training began: with step_time_s, what went on
    // between steps, such as a save)
    line["elapsed_s"] = progress.elapsed;
    if (perRank) {
      nlohmann::json seconds = nlohmann::json::array(),
                     waits = nlohmann::json::array();
      for (const RankStepTime &rank : byRank) {
        seconds.push_back(rank.seconds);
        // (null where unmeasured)
        waits.push_back(std::isfinite(rank.waitSeconds)
                            ? nlohmann::json(rank.waitSeconds)
                            : nlohmann::json());
      }
      line["rank_step_time_s"] = seconds;
      line["rank_wait_s"] = waits;
    }
    if (slowest)
      line["slowest_rank"] = slowest->rank;
    log << line.dump() << "\n";
    log.flush();
    if (!log)
      return errorf(o.logJson, ": write failed");
  }
  if (!events)
    return Status::ok();
  // (on GPUs, at the rate over the progress line's window)
  if (progress.tflopsPerGpu)
    scalars.push_back({"tflops_per_gpu", *progress.tflopsPerGpu});
  if (progress.mfu)
    scalars.push_back({"mfu", *progress.mfu});
  if (perRank)
    for (const RankStepTime &rank : byRank) {
      const std::string name = "rank " + std::to_string(rank.rank);
      scalars.push_back({"rank_step_time_s/" + name, rank.seconds});
      if (std::isfinite(rank.waitSeconds))
        scalars.push_back({"rank_wait_s/" + name, rank.waitSeconds});
    }
  if (slowest)
    scalars.push_back({"slowest_rank", double(slowest->rank)});
  return writeEvents(m.step, scalars);
}

Status TrainingSession::agreeOnStop() {
#ifdef MLT_HAVE_CUDA
  if (dist) {
    StatusOr<int> anyStop = dist->session.maxOf(stopSignal.load());
    if (!anyStop)
      return anyStop.takeStatus();
    if (*anyStop && !stopSignal.load())
      stopSignal.store(*anyStop);
  }
#endif
  return Status::ok();
}

Status TrainingSession::saveCheckpointsAt(int64_t step, bool stopping) {
  if (!saver)
    return Status::ok();
  const bool last = stopping || step == options.steps;
  if (last || (o.saveEvery && step % *o.saveEvery == 0)) {
    TrainingCheckpoint checkpoint;
    checkpoint.step = step;
    checkpoint.seed = o.seed;
    checkpoint.shuffle = o.shuffle;
    checkpoint.data = data->description;
    checkpoint.layout = plan.mesh.empty() ? "" : describeMesh(plan);
    checkpoint.config = model.hfConfig;
    checkpoint.training = trainingRecord().dump();
    if (!exportRecord.empty())
      checkpoint.exportFiles = exportRecord.toJson();
    // (the last waits for its write: the run ends with it committed)
    StatusOr<std::string> saved = saver->save(checkpoint, /*wait=*/last);
    if (!saved)
      return saved.takeStatus();
    if (!saved->empty())
      stoppedCheckpoint = *saved;
    return Status::ok();
  }
  // Between saves: the one in flight committed once written everywhere.
  StatusOr<std::string> saved = saver->poll();
  if (!saved)
    return saved.takeStatus();
  if (!saved->empty())
    stoppedCheckpoint = *saved;
  return Status::ok();
}

void TrainingSession::prepareExport() {
  if (!reports || (o.saveHF.empty() && o.saveCheckpoint.empty()))
    return;
  std::vector<std::string> prefixes;
  for (const ResolvedDataPath &source : data->sources)
    if (source.kind == ResolvedDataPath::Kind::Indexed)
      prefixes.push_back(source.path);
  // (a plan file has no model directory; a model, the one holding it)
  StatusOr<InputKind> input = classifyInput(o.model);
  std::optional<std::string> modelDirectory;
  if (input && *input == InputKind::Model)
    modelDirectory = hfModelDirectory(o.model);
  std::vector<std::string> warnings;
  exportRecord = chooseExportRecord(prefixes, modelDirectory, warnings);
  if (exportRecord.empty() && !resumedExportFiles.empty()) {
    StatusOr<ExportRecord> resumed = ExportRecord::fromJson(resumedExportFiles);
    if (resumed)
      exportRecord = std::move(*resumed);
    else
      warnings.push_back("--resume " + o.resume + ": its record of the files "
                         "HF exports copy: " + resumed.status().message());
  }
  for (const std::string &line : warnings)
    observer.warning(line);
  if (!o.saveHF.empty()) {
    ExportContents contents = loadExportFiles(exportRecord, model.hfConfig);
    for (const std::string &line : contents.warnings)
      observer.warning("--save-hf: " + line);
    exportFiles = std::move(contents.files);
  }
}

Status TrainingSession::saveHFAt(int64_t step) {
  if (o.saveHFEvery && step % *o.saveHFEvery == 0 && step < options.steps) {
    StatusOr<TensorMap> tensors = wholeTensors(BufferKind::Parameter);
    if (!tensors)
      return tensors.takeStatus();
    if (reports) {
      MLT_RETURN_IF_ERROR(
          writeCheckpointDir(o.saveHF, model.hfConfig, *tensors, exportFiles)
              .withContext("--save-hf"));
      observer.hfSaved(o.saveHF, step, exportedNames(exportFiles));
    }
  }
  return Status::ok();
}

std::vector<double> TrainingSession::measuredStepTimes() const {
  std::vector<double> measuredSteps;
  for (const auto &[step, seconds] : stepTimes)
    if (step != options.firstStep &&
        !(!profiled.empty() && step == profiledStep))
      measuredSteps.push_back(seconds);
  return measuredSteps;
}

void TrainingSession::compareStepTime() const {
  std::vector<double> measuredSteps = measuredStepTimes();
  if (reports && prediction && !measuredSteps.empty()) {
    const double measured = cost::median(measuredSteps);
    const double predicted = prediction->timeline.seconds();
    observer.stepTimeCompared(measured, measuredSteps.size(), predicted);
  }
}

Status TrainingSession::finishCalibration() {
  std::vector<double> measuredSteps = measuredStepTimes();
  if (reports && !o.calibrate.empty()) {
    if (!measuredCalibration || measuredSteps.empty())
      return errorf("--calibrate: no step was profiled, or none measured "
                    "besides the first and the profiled one (steps ",
                    options.firstStep, " to ", options.steps, ", step ",
                    profiledStep, " profiled)");
    StatusOr<CalibrationWritten> written = run::finishCalibration(
        plan, std::move(*measuredCalibration), cost::median(measuredSteps),
        o.calibrate, writeFileAtomically);
    if (!written)
      return written.takeStatus();
    observer.calibrationWritten(*written);
  }
  return Status::ok();
}

Status TrainingSession::saveHF() {
  if (!o.saveHF.empty()) {
    StatusOr<TensorMap> tensors = wholeTensors(BufferKind::Parameter);
    if (!tensors && dist)
      dist->fatal(tensors.status());
    if (!tensors)
      return tensors.takeStatus();
    // Only rank 0 writes; the processes agree on the result when they end.
    if (reports) {
      MLT_RETURN_IF_ERROR(writeCheckpointDir(o.saveHF, model.hfConfig,
                                             *tensors, exportFiles));
      observer.hfSaved(o.saveHF, std::nullopt, exportedNames(exportFiles));
    }
  }
  return Status::ok();
}

} // namespace

Status mlt::run::train(const RunOptions &o, const Plan &plan,
                       RunObserver &observer, Distributed *dist) {
  TrainingSession session(o, plan, observer, dist);
  MLT_RETURN_IF_ERROR(session.checkHFConfig());
  MLT_RETURN_IF_ERROR(session.openData());
  MLT_RETURN_IF_ERROR(session.checkHostMemory());
  MLT_RETURN_IF_ERROR(session.createRanks());
  MLT_RETURN_IF_ERROR(session.chooseCalibration());
  MLT_RETURN_IF_ERROR(session.loadWeights());
  MLT_RETURN_IF_ERROR(session.resume());
  session.prepareExport();
  MLT_RETURN_IF_ERROR(session.openOutputs());
  MLT_RETURN_IF_ERROR(session.createTrainer());
  MLT_RETURN_IF_ERROR(session.watchForHangs());
  session.reportStart();
  MLT_RETURN_IF_ERROR(session.setUpProfiles());
  MLT_RETURN_IF_ERROR(session.runSteps());
  if (session.stopped())
    return Status::ok();
  session.compareStepTime();
  MLT_RETURN_IF_ERROR(session.finishCalibration());
  MLT_RETURN_IF_ERROR(session.saveHF());
  session.reportTotals();
  return Status::ok();
}
