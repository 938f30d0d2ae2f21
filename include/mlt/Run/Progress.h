//===- Progress.h - a run's progress line and end-of-run summary -*- C++ -*-===//
//
// Part of mlt. What a training run says about its pace as it goes and at its
// end, beside each step's own figures (StepMetrics):
// - tokens/s over the last kWindow steps (a step's own rate moves with the
//   host's noise; the run's first step, which warms up, is left out once
//   there are others), the time since training began, and the time left at
//   that pace;
// - the model's FLOP/s per GPU and the share of the GPU's peak it is (MFU),
//   by the convention of the PyTorch references (../shared/bench: 6 FLOPs
//   per parameter of the products and the LM head per token, plus 12 x
//   layers x query width x sequence for attention's scores and values, the
//   causal half not subtracted) over the dense bf16 tensor peak of the GPUs
//   whose peak is known (NVIDIA's data sheets);
// - at the end, the steps, tokens and time, and the mean rate after the
//   first step.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUN_PROGRESS_H
#define MLT_RUN_PROGRESS_H

#include "mlt/Runtime/train/Training.h"

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace mlt::run {

/// The pace after a step (ProgressMeter::add).
struct StepProgress {
  /// Tokens/s over `window` steps up to this one.
  double tokensPerSecond = 0.0;
  int64_t window = 0;
  /// Seconds since training began, and left at this pace.
  double elapsed = 0.0;
  double remaining = 0.0;
  /// The model's TFLOP/s per GPU and its share of the GPU's peak, where
  /// known.
  std::optional<double> tflopsPerGpu, mfu;
};

/// The whole run's (ProgressMeter::totals).
/// The rank the others wait for: of ranks that each measured their wait
/// in collectives (RankPosition::waitedSeconds), the one that waited least.
struct SlowestRank {
  uint32_t rank = 0;
  /// Its wait and step time (a step's, or the mean over steps).
  double waitSeconds = 0.0, stepSeconds = 0.0;
  /// The least and most the other ranks waited.
  double othersLeast = 0.0, othersMost = 0.0;
};

/// The slowest of `ranks` (a step's, or means over steps); none for fewer
/// than two ranks, or where a rank's wait is unmeasured (NaN).
std::optional<SlowestRank>
slowestRank(const std::vector<rt::RankStepTime> &ranks);

struct RunTotals {
  int64_t steps = 0;
  int64_t tokens = 0;
  double seconds = 0.0;
  /// Tokens/s of the steps after the run's first `warmupSteps` (all of them
  /// when it ran one), and the TFLOP/s per GPU and MFU at that rate, where
  /// known. The warm-up is the first step, and the steps after it that set
  /// a device up (StepMetrics::setUp: the CUDA graph's capture, the second
  /// step on a GPU), where others follow them.
  double tokensPerSecond = 0.0;
  int64_t warmupSteps = 0;
  std::optional<double> tflopsPerGpu, mfu;
  /// Over the same steps, each rank's mean time (RankStepTime), and the
  /// slowest rank by them.
  std::vector<rt::RankStepTime> ranks;
  std::optional<SlowestRank> slowest;
};

/// The model FLOPs of training on one token of a sequence of `seqLen`
/// (forward and backward), by the references' convention (see the top of
/// this file), from the model's HF config.json text; none where it lacks a
/// dimension.
std::optional<double> trainingFlopsPerToken(const std::string &hfConfig,
                                            int64_t seqLen);

/// The dense bf16 tensor-core peak FLOP/s of the GPU named `device` (as
/// CUDA names it: "NVIDIA H100 80GB HBM3"); none for another device.
std::optional<double> peakFlops(const std::string &device);

class ProgressMeter {
public:
  static constexpr size_t kWindow = 10;

  /// A run up to step `lastStep` on `gpus` GPUs, each token costing
  /// `flopsPerToken` (none: unknown) of a GPU of `peak` FLOP/s (none:
  /// unknown).
  ProgressMeter(int64_t lastStep, int64_t gpus,
                std::optional<double> flopsPerToken,
                std::optional<double> peak);

  /// The pace after step `m`, `elapsed` seconds into training; m.ranks
  /// are every rank's times.
  StepProgress add(const rt::StepMetrics &m, double elapsed);

  RunTotals totals() const;

private:
  /// The model's TFLOP/s per GPU and MFU at `tokensPerSecond`.
  void rates(double tokensPerSecond, std::optional<double> &tflops,
             std::optional<double> &mfu) const;

  int64_t lastStep_, gpus_;
  std::optional<double> flopsPerToken_, peak_;
  /// The window's (seconds, tokens), oldest first.
  std::deque<std::pair<double, int64_t>> window_;
  int64_t steps_ = 0, tokens_ = 0;
  /// The steps after the first, and of those the ones that set no device
  /// up (the pace): their seconds and tokens.
  double laterSeconds_ = 0.0, paceSeconds_ = 0.0;
  int64_t laterTokens_ = 0, paceTokens_ = 0, paceSteps_ = 0;
  double firstSeconds_ = 0.0, elapsed_ = 0.0;
  /// Each rank's times summed over the steps the window restarted with (the
  /// first while there is no other, then those after it, then the pace's
  /// once it began after a set-up step), by plan rank, and their count.
  std::map<uint32_t, rt::RankStepTime> rankSums_;
  int64_t rankSteps_ = 0;
  /// Whether a set-up step is in the window and the sums.
  bool setUpInWindow_ = false;
};

/// "0:03:07", "12:00:00": `seconds` as hours, minutes and seconds.
std::string formatDuration(double seconds);

} // namespace mlt::run

#endif // MLT_RUN_PROGRESS_H
