//===- TrainingData.h - what the trainer reads its batches from -*- C++ -*-===//
//
// Part of mlt. The interface between the training loop and the data: a
// source of samples of seq_len + 1 token ids (inputs the first seq_len,
// labels the last seq_len), visited in an order that is a pure function of
// (position, shuffle, seed). Step s of a run of global batch B takes the
// positions s*B .. s*B+B-1, so a run resumed at any step takes the same
// samples as one that never stopped, whatever happened before. Implemented
// by token files (TokenData.h), Megatron indexed datasets (DocumentSampler.h)
// and weighted blends of either (DataBlend.h).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_TRAININGDATA_H
#define MLT_RUNTIME_IO_TRAININGDATA_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::rt {

/// A source of training samples; see the file comment.
class TrainingData {
public:
  virtual ~TrainingData() = default;

  /// Tokens per sequence (each sample holds one more).
  virtual int64_t seqLen() const = 0;

  /// Writes the sample at `position` (0-based) of the visiting order when
  /// shuffling (or not) with `seed`: its first seqLen tokens to `inputs`,
  /// its last seqLen tokens to `labels`. Not thread-safe: implementations
  /// cache what they derive per epoch.
  virtual void sampleAt(int64_t position, bool shuffle, uint64_t seed,
                        int32_t *inputs, int32_t *labels) = 0;

  /// How many positions from 0 read distinct samples, `limit` at most:
  /// the positions of the first epoch (of every dataset of a blend). What
  /// an evaluation on the first batches of its data checks (a batch that
  /// repeats a sample weighs it twice).
  virtual int64_t distinctSamples(int64_t limit) const = 0;

  /// Whether the files it reads are as they were when opened (size and
  /// modification time, MappedFile.h); else one line naming the file. The
  /// trainer asks before each step.
  virtual Status checkUnchanged() const { return Status::ok(); }

  /// Fills `inputs` and `labels`, each [batchSize, seqLen] row-major, with
  /// the samples of step `step` (0-based): positions step * batchSize + row.
  void batch(int64_t step, int64_t batchSize, bool shuffle, uint64_t seed,
             int32_t *inputs, int32_t *labels) {
    const int64_t s = seqLen();
    for (int64_t row = 0; row < batchSize; ++row)
      sampleAt(step * batchSize + row, shuffle, seed, inputs + row * s,
               labels + row * s);
  }
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_TRAININGDATA_H
