//===- Checkpoint.h - training checkpoints that resume ----------*- C++ -*-===//
//
// Part of mlt. A training checkpoint holds everything a run needs to go on
// as if it had never stopped, in whole tensors by HF name, so that it does
// not depend on the layout it was saved from: a checkpoint of tp 2 x dp 2
// with ZeRO-2 resumes at one rank, and one of one rank at pp 2.
//
//   ROOT/                      --save-checkpoint ROOT
//     step-000006/             one checkpoint, named by its step
//       config.json            the model's HF config
//       model.safetensors      the f32 master weights (HF names): the
//                              directory is an HF checkpoint as well
//       optimizer.safetensors  AdamW's moments, "exp_avg:<HF name>" and
//                              "exp_avg_sq:<HF name>"
//       trainer.json           the step, the data order (seed, shuffle),
//                              the layout it was saved from
//     latest                   the name of the newest complete checkpoint
//
// The learning rate and AdamW's step count are functions of the step, and
// the data order of the seed and the step (the samples of step s are a
// seeded permutation's), so these are all the state there is: a resumed
// run computes the same bits as one that never stopped.
//
// Atomic: a checkpoint is written into a temporary directory, flushed, and
// renamed into place (writeCheckpointDir); `latest` is replaced last, by a
// rename. A process killed at any moment leaves `latest` naming a complete
// checkpoint, and no directory that looks complete but is not (an old
// checkpoint that --keep-last drops is renamed to a temporary name before
// it is removed); saving removes the temporary directories that killed
// processes left behind.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAIN_CHECKPOINT_H
#define MLT_RUNTIME_TRAIN_CHECKPOINT_H

#include "mlt/Runtime/Status.h"
#include "mlt/Runtime/io/SafeTensors.h"

#include <cstdint>
#include <string>

namespace mlt::rt {

/// A training checkpoint's contents.
struct TrainingCheckpoint {
  /// The last optimizer step it holds the result of (1-based).
  int64_t step = 0;
  /// The data order: the seed of the sampler's permutations, and whether
  /// it shuffles.
  uint64_t seed = 0;
  bool shuffle = true;
  /// The layout it was saved from ("dp=2, tp=2"; "" for one rank), for
  /// messages.
  std::string layout;
  /// The model's HF config.json text.
  std::string config;
  /// The f32 master weights by HF name, and the moments
  /// ("exp_avg:<name>", "exp_avg_sq:<name>").
  TensorMap parameters, optimizerState;
};

/// "step-000006": the directory of the checkpoint of step `step`.
std::string checkpointDirName(int64_t step);

/// Writes `checkpoint` as ROOT/step-NNNNNN (see the file comment; ROOT is
/// created if missing, its parent must exist), then points ROOT/latest at
/// it; with `keepLast` > 0 removes the older checkpoints beyond the newest
/// `keepLast`. Returns the checkpoint's directory.
StatusOr<std::string> saveTrainingCheckpoint(const std::string &root,
                                             const TrainingCheckpoint &checkpoint,
                                             int64_t keepLast = 0);

/// Reads the checkpoint `path` names: a ROOT (its `latest`), or one
/// checkpoint's directory. Each failure is one line naming the file and
/// what is wrong with it (a missing or truncated file, another format).
StatusOr<TrainingCheckpoint> loadTrainingCheckpoint(const std::string &path);

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAIN_CHECKPOINT_H
