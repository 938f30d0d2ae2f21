//===- RunObserver.h - what a run tells as it goes --------------*- C++ -*-===//
//
// Part of mlt. A run prints nothing itself: it tells an observer what
// happens (the plan's reports, the run's summary and predicted step, each
// step's metrics, the checkpoints and traces written, a stop by a signal,
// the measured step against the prediction), and the tool (mlt-run)
// prints it. With one process per GPU only rank 0's process tells, but for
// `aborting`, which the failing rank's process tells.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_RUNOBSERVER_H
#define MLT_RUN_RUNOBSERVER_H

#include "mlt/Planner/Planner.h"
#include "mlt/Run/Prediction.h"
#include "mlt/Run/Progress.h"
#include "mlt/Runtime/exec/HangReport.h"
#include "mlt/Runtime/train/Training.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlt::run {

/// A training run as it starts: the model, its size and the step's shape,
/// the memory, the ranks and how they run, the backend and precision, the
/// steps and the data.
struct RunSummary {
  /// The model or plan the run was given (a path).
  std::string model;
  int64_t parameters = 0;
  /// Sequences per optimizer step, tokens per sequence, and the
  /// micro-batches a step is cut into and their sequences.
  int64_t globalBatch = 0;
  int64_t seqLen = 0;
  int64_t microbatches = 0;
  int64_t microBatch = 0;
  /// The arena of the largest rank of the plan's `ranks`, and the largest
  /// rank's kernel scratch beside it (Backend::scratchBytes: 0 where the
  /// backend keeps none on the device).
  uint64_t arenaBytes = 0;
  uint64_t scratchBytes = 0;
  size_t ranks = 1;
  /// The plan's mesh ("dp=2, tp=2", empty without one) and ranks.
  std::string mesh;
  int64_t worldSize = 1;
  /// With one process per GPU, NCCL's version; empty while every rank is a
  /// thread of this process.
  std::string ncclVersion;
  /// The backend ("cpu", "cuda") and the precision ("fp32", "bf16 (f32
  /// master weights)").
  std::string backend;
  std::string precision;
  int64_t steps = 0;
  /// The data, as the run opened it (TokenData.h's summary).
  std::string data;
  /// With --eval-data or --split: the evaluation data's summary, the
  /// batches each evaluation reads, and how often one runs (0: after the
  /// last step only).
  std::string evaluation;
  int64_t evalIters = 0, evalEvery = 0;
};

/// A training checkpoint saved (--save-checkpoint).
struct SavedCheckpoint {
  /// Its directory (ROOT/step-NNNNNN) and step.
  std::string dir;
  int64_t step = 0;
  /// The bytes of this process's shards.
  uint64_t bytes = 0;
  /// How long training stopped for it: the whole save when synchronous;
  /// the copy into host memory when written in the background.
  double pausedSeconds = 0;
  /// Written in the background (--async-save): how long the write took.
  std::optional<double> backgroundSeconds;
};

/// What a run tells as it goes (see the top of this file), in the order it
/// happens, from the thread that runs it. Ignored unless overridden.
class RunObserver {
public:
  virtual ~RunObserver();

  /// A line on a long phase's progress, every few seconds (checking a
  /// large dataset's token ids, planning the layout).
  virtual void progress(const std::string &line);
  /// --layout auto's ranking, before the chosen layout is compiled whole
  /// (and before the failure when none fits).
  virtual void layoutsRanked(const PlannerReport &report);
  /// The plan's reports of a run that does not train (--print-plan,
  /// --print-schedule, --report-memory, --report), as text.
  virtual void planReported(const std::string &text);
  /// --allow-data-change: how this run's data differs from the
  /// checkpoint's.
  virtual void dataChanged(const std::string &difference);
  /// --resume: a line on what the run keeps of the checkpoint's options,
  /// or changes with --allow-optimizer-change.
  virtual void resumeNote(const std::string &line);
  /// --resume: the run goes on from `checkpoint` after `step`; `layout`
  /// saved it ("dp=2, tp=2"; empty: one rank).
  virtual void resumed(const std::string &checkpoint, int64_t step,
                       const std::string &layout);
  /// Training starts.
  virtual void started(const RunSummary &summary);
  /// The step the cost model predicts, priced by the calibration of
  /// `calibrationSource`.
  virtual void predicted(double stepSeconds, double tokensPerSecond,
                         const std::string &calibrationSource);
  /// --profile-step: where the profiled step's time went (formatProfile).
  virtual void profiled(const std::string &profile);
  /// --trace: the trace of `step` written to `path`.
  virtual void traceWritten(int64_t step, const std::string &path);
  /// A step ended, of the run's `steps`, at the run's `pace` so far.
  virtual void step(const rt::StepMetrics &metrics, const StepProgress &pace,
                    int64_t steps);
  /// An evaluation of the loss on held-out data ran (--eval-data,
  /// --split), after step `metrics.step` (0: before training).
  virtual void evaluated(const rt::EvalMetrics &metrics);
  /// The run trained every step: what it came to.
  virtual void finished(const RunTotals &totals);
  /// --save-checkpoint: a checkpoint written and committed.
  virtual void checkpointSaved(const SavedCheckpoint &saved);
  /// --save-hf: the weights written to `dir` at `step` (--save-hf-every),
  /// or after the last step (no step), with the `files` of the directory
  /// (config.json, model.safetensors, and those copied beside them).
  virtual void hfSaved(const std::string &dir, std::optional<int64_t> step,
                       const std::vector<std::string> &files);
  /// Something the run leaves out without stopping (a tokenizer that an
  /// HF export cannot copy, and why), in one line.
  virtual void warning(const std::string &line);
  /// `signal` ("SIGTERM") stopped the run after `step` of `steps`; the run
  /// goes on with --resume `resumeFrom` (empty: nothing was saved).
  virtual void stopped(const std::string &signal, int64_t step, int64_t steps,
                       const std::string &resumeFrom);
  /// The measured step (the median of `measuredSteps` steps) against the
  /// predicted one, in seconds.
  virtual void stepTimeCompared(double measured, size_t measuredSteps,
                                double predicted);
  /// --calibrate: the calibration written.
  virtual void calibrationWritten(const CalibrationWritten &written);
  /// One process of several fails once collectives run: the job is
  /// aborted after this, `message` reported by this process alone.
  virtual void aborting(int rank, const std::string &message);

  /// --collective-timeout: no rank moved for the timeout, and `report` says
  /// where each rank is in its plan (rank 0's process tells, from the
  /// watchdog's thread where the run ends with it). `endsRun`: nothing
  /// reports the summary after this (the job is aborted, or the process
  /// ends); otherwise the run fails with it.
  virtual void hangReported(const rt::HangReport &report, bool endsRun);
};

} // namespace mlt::run

#endif // MLT_RUN_RUNOBSERVER_H
