//===- StagePartition.h - a model's layers split into pipeline stages -*- C++ -*-===//
//
// Part of mlt. Splits the decoder layers of a model into the contiguous
// virtual stages of a pipeline: P stages of V model chunks each, P x V
// virtual stages, chunk c of rank r holding virtual stage c * P + r (as
// Megatron assigns them). The embedding goes with the first virtual stage,
// the final norm, LM head and loss with the last; every layer is placed
// exactly once. mlt-partition-pipeline takes a split from here: balanced
// by predicted time (balanceStages) or set by hand (`--pp-layers`,
// checkStageLayers). Plain C++: neither MLIR nor the runtime.
//
// The balanced split minimizes the most predicted time of any virtual
// stage (the pipeline's pace is its slowest stage's); among splits with
// that most, it takes the one whose earlier stages hold the fewest layers
// (under 1F1B an earlier stage keeps more micro-batches' activations in
// flight; and a fixed choice, so a model and its costs always give the
// same plan).
// `balanceStagesNaive` tries every split: the reference the tests hold the
// dynamic program to.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_STAGEPARTITION_H
#define MLT_ANALYSIS_STAGEPARTITION_H

#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// What a split is balanced on: each layer's predicted time (forward and
/// backward of one micro-batch), and what the first and the last virtual
/// stage do besides their layers.
struct StageCosts {
  std::vector<double> layers;
  double first = 0.0; // the embedding
  double last = 0.0;  // the final norm, the LM head and the loss
};

/// A split: the number of layers of each virtual stage, in order, and the
/// predicted time of each.
struct StageSplit {
  std::vector<int64_t> layers;
  std::vector<double> times;
  /// The most of `times`: the pipeline's pace.
  double slowest() const;
};

/// The predicted time of each virtual stage of `layers` (layer counts).
std::vector<double> stageTimes(const StageCosts &costs,
                               const std::vector<int64_t> &layers);

/// Checks a split of `numLayers` layers into `stages` x `chunks` virtual
/// stages: one count per virtual stage, each at least 1, summing to the
/// layers. The message names the constraint ("--pp-layers 5,6,6 places 17
/// layers, the model has 22").
bool checkStageLayers(const std::vector<int64_t> &layers, int64_t numLayers,
                      int64_t stages, int64_t chunks, std::string *why);

/// The balanced split of `costs.layers` into `stages` x `chunks` virtual
/// stages (see the file comment), or an empty split with the reason in
/// `why` when there are fewer layers than virtual stages.
StageSplit balanceStages(const StageCosts &costs, int64_t stages,
                         int64_t chunks, std::string *why = nullptr);

/// The same by trying every split (exponential: tests only).
StageSplit balanceStagesNaive(const StageCosts &costs, int64_t stages,
                              int64_t chunks);

} // namespace mlt

#endif // MLT_ANALYSIS_STAGEPARTITION_H
