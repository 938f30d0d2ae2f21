//===- Checkpoint.h - training checkpoints that resume ----------*- C++ -*-===//
//
// Part of mlt. A training checkpoint holds everything a run needs to go on
// as if it had never stopped. Every rank writes the pieces it holds into a
// shard of its own, in parallel, so nothing is gathered on one rank; an
// index names each whole tensor's pieces (CheckpointIndex.h), so the
// checkpoint does not depend on the layout it was saved from: one of tp 2 x
// dp 2 with ZeRO-2 resumes at one rank, and one of one rank at pp 2.
//
//   ROOT/                      --save-checkpoint ROOT
//     step-000006/             one checkpoint, named by its step
//       config.json            the model's HF config
//       index.json             each tensor's shape and pieces
//       rank-00000.safetensors the pieces rank 0 holds: f32 master weights
//       rank-00001.safetensors (HF names) and AdamW's moments
//       ...                    ("exp_avg:<HF name>", "exp_avg_sq:<HF name>")
//       trainer.json           the step, the data order (seed, shuffle),
//                              the data (DataBlend.h's description), the
//                              layout it was saved from, the files an HF
//                              export copies (ExportFiles.h's record)
//     latest                   the name of the newest complete checkpoint
//
// The learning rate and AdamW's step count are functions of the step, and
// the data order of the seed and the step (the samples of step s are a
// seeded permutation's), so these are all the state there is: a resumed
// run computes the same bits as one that never stopped.
//
// Saving is three phases, so that processes (one per GPU) can share it:
// rank 0's process begins (a temporary directory), every process writes its
// ranks' shards, and once all are written rank 0's commits: index, config
// and trainer state, everything flushed, the directory renamed into place,
// `latest` replaced last, by a rename. A process killed at any moment
// leaves `latest` naming a complete checkpoint, and no directory that looks
// complete but is not (an old checkpoint that --keep-last drops is renamed
// to a temporary name before it is removed); beginning a save removes the
// temporary directories that killed processes left behind.
//
// Loading reads the index and every shard's header first, proving that the
// checkpoint is whole (each listed shard present, of the size the index
// says, holding each piece as F32 of its shape) before anything is read
// into the ranks; then each tensor is assembled from its pieces when a
// rank needs it, one at a time.
//
// Every byte is checked against a content hash (XXH3, ContentHash.h), in
// a chain from trainer.json: trainer.json carries its own hash (its last
// field, hashed with its digits zero) and those of index.json and
// config.json; the index those of every shard, its header and each piece
// (CheckpointIndex.h); a shard's metadata names the step. Opening checks
// the small files, the step against the directory's name and the index's,
// each shard's header, that header and pieces span the whole shard, and
// that the tensors are those of the config's LLaMA with both moments;
// reading a piece checks its bytes; verifyFiles reads each shard whole. A
// damaged byte anywhere, a shard of another step, an edited index or a
// changed step is refused, by a line naming the file. (An integrity check,
// not a signature: whoever recomputes every hash can forge a checkpoint.)
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAIN_CHECKPOINT_H
#define MLT_RUNTIME_TRAIN_CHECKPOINT_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/train/CheckpointIndex.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace mlt::rt {

/// A training checkpoint's state besides its tensors.
struct TrainingCheckpoint {
  /// The last optimizer step it holds the result of (1-based).
  int64_t step = 0;
  /// The data order: the seed of the sampler's permutations, and whether
  /// it shuffles.
  uint64_t seed = 0;
  bool shuffle = true;
  /// The data it was trained on, as openTrainingData describes it (JSON
  /// text: datasets, weights, token counts); empty in checkpoints that
  /// predate it.
  std::string data;
  /// The layout it was saved from ("dp=2, tp=2"; "" for one rank), for
  /// messages.
  std::string layout;
  /// The model's HF config.json text.
  std::string config;
  /// The options that set the samples read and the optimizer's trajectory
  /// (global batch, sequence, the learning rate's schedule, AdamW's and
  /// clipping's), a JSON object as the run records them: a resumed run is
  /// held to them. Empty in checkpoints that predate it.
  std::string training;
  /// The files an HF export of it copies beside the weights (the
  /// tokenizer's, generation_config.json), ExportFiles.h's ExportRecord as
  /// JSON text; empty where none is known.
  std::string exportFiles;
};

/// "step-000006": the directory of the checkpoint of step `step`.
std::string checkpointDirName(int64_t step);

/// Saving, phase 1 (one process, rank 0's): creates ROOT if missing (its
/// parent must exist), removes the temporary directories of killed saves,
/// and creates the temporary directory the checkpoint of `step` is written
/// into. Returns its path.
StatusOr<std::string> beginCheckpoint(const std::string &root, int64_t step);

/// Saving, phase 2 (every process): writes the shards of this process's
/// ranks `local` of `plan` into `dir`, each rank's on a thread of its own,
/// each flushed to disk. Returns the bytes written.
StatusOr<uint64_t> writeCheckpointShards(RankGroup &local, const Plan &plan,
                                         const std::string &dir, int64_t step);

/// Saving, phase 3 (rank 0's process, once every shard is written): writes
/// the index (with each shard's size), config.json and trainer.json into
/// `dir`, renames it to ROOT/step-NNNNNN, points ROOT/latest at it, and
/// with `keepLast` > 0 removes the older checkpoints beyond the newest
/// `keepLast`: each renamed away at once (a temporary name, which a later
/// save removes if this process dies first), then removed, or with
/// `retired` its temporary name appended there for the caller to remove
/// (removeRetired: deleting a checkpoint of 12 GiB takes seconds, which a
/// background save keeps off the training thread). Returns the
/// checkpoint's directory.
StatusOr<std::string> commitCheckpoint(const std::string &root,
                                       const std::string &dir,
                                       const Plan &plan,
                                       const TrainingCheckpoint &state,
                                       int64_t keepLast = 0,
                                       std::vector<std::string> *retired =
                                           nullptr);

/// Removes the checkpoints commitCheckpoint retired (best effort).
void removeRetired(const std::vector<std::string> &retired);

/// trainer.json's text for a checkpoint of `state` saved by `ranks` ranks
/// whose index.json is `indexText`: the state, the hashes of the index and
/// of the config, and its own hash.
std::string trainerStateJson(const TrainingCheckpoint &state, uint64_t ranks,
                             const std::string &indexText);

/// Fills the hashes and sizes of `index`'s files and pieces from the
/// shards in `dir`, reading each whole: what a save records as it writes
/// (commitCheckpoint), for checkpoints made otherwise (the checkpoint
/// fuzzer's).
Status hashCheckpointShards(CheckpointIndex &index, const std::string &dir);

/// Removes a save's temporary directory after a failure.
void abandonCheckpoint(const std::string &dir);

/// The three phases in one process whose ranks are the whole plan's.
StatusOr<std::string> saveTrainingCheckpoint(const std::string &root,
                                             RankGroup &ranks, const Plan &plan,
                                             const TrainingCheckpoint &state,
                                             int64_t keepLast = 0);

/// How a checkpoint is read.
struct CheckpointReadOptions {
  /// Check each piece's bytes against its hash as it is read (about 20
  /// GB/s on one core); off only where the user asks (--skip-checksums).
  bool checkPieces = true;
};

/// An opened training checkpoint: its state, and its tensors as sources
/// that assemble each whole tensor from its pieces when asked.
class CheckpointReader {
public:
  /// Opens the checkpoint `path` names: a ROOT (its `latest`), or one
  /// checkpoint's directory; checks it whole (see the file comment). Each
  /// failure is one line naming the file and what is wrong with it.
  static StatusOr<std::unique_ptr<CheckpointReader>>
  open(const std::string &path, const CheckpointReadOptions &options = {});

  ~CheckpointReader();

  /// The checkpoint's directory (ROOT/step-NNNNNN).
  const std::string &directory() const { return directory_; }
  const TrainingCheckpoint &state() const { return state_; }
  const CheckpointIndex &index() const { return index_; }
  /// The parameters by HF name, and AdamW's moments.
  const TensorSource &parameters() const;
  const TensorSource &optimizerState() const;
  /// The bytes of its shards.
  uint64_t shardBytes() const;
  /// Whether it carries content hashes (false for one saved by an mlt of
  /// format 2, which is read unchecked).
  bool checked() const { return checked_; }
  /// Reads the pieces of AdamW's moments and checks them against their
  /// hashes: what a reader of the parameters alone (--init-from, an HF
  /// export) does so that a damaged byte anywhere is refused. Nothing
  /// without piece checks (CheckpointReadOptions).
  Status verifyOptimizerState() const;
  /// Reads every shard whole and checks it against its hash (opening
  /// checked the rest); `progress(i, bytes)` after shard i.
  Status verifyFiles(
      const std::function<void(size_t, uint64_t)> &progress = {}) const;

private:
  CheckpointReader() = default;
  class Shards;
  class Source;
  std::string directory_;
  bool checked_ = false;
  TrainingCheckpoint state_;
  CheckpointIndex index_;
  std::unique_ptr<Shards> shards_;
  std::unique_ptr<Source> parameters_, optimizerState_;
};

/// Whether `path` is a training checkpoint (a ROOT with `latest`, or a
/// directory with trainer.json), as opposed to an HF checkpoint.
bool isTrainingCheckpoint(const std::string &path);

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAIN_CHECKPOINT_H
