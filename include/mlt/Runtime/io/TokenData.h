//===- TokenData.h - token files and training batches -----------*- C++ -*-===//
//
// Part of mlt. Opens a training corpus as one stream of token ids and cuts it
// into samples and batches. Supported files: raw little-endian `*.u16` and
// `*.u32` token ids, and plain `*.txt` text read with a byte-level tokenizer
// (token id = byte value, vocab 256). Sample k is the window
// tokens[k*(S+1) : (k+1)*(S+1)] of seq_len+1 = S+1 tokens (inputs its first S,
// labels its last S); step s takes the samples s*B .. s*B+B-1 of the visiting
// order, which runs through the samples epoch after epoch, each epoch either in
// file order or in a seeded permutation. This is the layout the reference
// fixtures use, so an unshuffled token file reproduces their batches exactly.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_TOKENDATA_H
#define MLT_RUNTIME_IO_TOKENDATA_H

#include "mlt/Runtime/io/TrainingData.h"
#include "mlt/Runtime/io/MappedFile.h"
#include "mlt/Support/Status.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlt::rt {

/// The absolute path of the bundled default corpus,
/// `data/kjv-genesis-exodus.txt` in the source tree (Genesis and Exodus of the
/// King James Version), and its vocabulary: its bytes are its tokens.
std::string defaultCorpusPath();
inline constexpr int64_t kBundledCorpusVocab = 256;

/// The visiting order of `numSamples` samples in epoch `epoch` when shuffling
/// with `seed`: a Fisher-Yates shuffle driven by std::mt19937_64, with its own
/// unbiased bounded draws so that the order is the same with every standard
/// library. The generator is seeded with splitmix64(seed ^ splitmix64(epoch)).
std::vector<int64_t> shuffledOrder(int64_t numSamples, uint64_t seed,
                                   uint64_t epoch);

/// A read-only token stream (the file is memory-mapped once) and the batches
/// cut from it (TrainingData::batch).
class TokenDataset : public TrainingData {
public:
  /// Opens `path` (`.u16`, `.u32` or `.txt`) for samples of `seqLen` + 1
  /// tokens. Fails, naming the file, when it is missing, empty, truncated (its
  /// size is not a multiple of the token width), shorter than one sample, or
  /// holds a token id >= `vocab` (naming its index and value).
  static StatusOr<TokenDataset> open(const std::string &path, int64_t seqLen,
                                     int64_t vocab);

  TokenDataset(TokenDataset &&other) noexcept;
  TokenDataset &operator=(TokenDataset &&other) noexcept;
  TokenDataset(const TokenDataset &) = delete;
  TokenDataset &operator=(const TokenDataset &) = delete;
  ~TokenDataset() override;

  /// Tokens in the file.
  int64_t numTokens() const { return numTokens_; }
  /// Whole samples of seqLen + 1 tokens; a shorter tail is never used.
  int64_t numSamples() const { return numTokens_ / (seqLen_ + 1); }
  int64_t seqLen() const override { return seqLen_; }
  /// Token id at position `i` of the stream.
  int32_t token(int64_t i) const;

  /// Writes sample `k`'s inputs (its first seqLen tokens) and labels (its
  /// last seqLen tokens) to `inputs` and `labels`, seqLen int32 each.
  void sample(int64_t k, int32_t *inputs, int32_t *labels) const;

  /// The sample that row `row` of step `step` takes, for batches of
  /// `batchSize` sequences: position g = step * batchSize + row of the visiting
  /// order, i.e. index g % numSamples() of epoch g / numSamples().
  int64_t sampleIndex(int64_t step, int64_t row, int64_t batchSize,
                      bool shuffle, uint64_t seed);

  /// The sample at position `position` of the visiting order (that of
  /// sampleIndex). Not thread-safe: it caches the current epoch's
  /// permutation.
  void sampleAt(int64_t position, bool shuffle, uint64_t seed, int32_t *inputs,
                int32_t *labels) override;

  Status checkUnchanged() const override { return file_.checkUnchanged(); }
  int64_t distinctSamples(int64_t limit) const override {
    return std::min(limit, numSamples());
  }

private:
  TokenDataset() = default;

  MappedFile file_;
  const uint8_t *data_ = nullptr;
  int tokenWidth_ = 0;
  int64_t numTokens_ = 0;
  int64_t seqLen_ = 0;

  // The permutation of one epoch, kept so that consecutive steps do not
  // reshuffle; -1 means none is cached.
  int64_t cachedEpoch_ = -1;
  uint64_t cachedSeed_ = 0;
  std::vector<int64_t> cachedOrder_;
};

/// Samples [first, first + count) of a token file, visited as a token file
/// of those samples alone is (epoch after epoch, each in file order or in a
/// seeded permutation of its own): a part of a dataset (--split), which the
/// other part's samples never meet. `dataset` is shared by the parts.
class TokenSampleRange : public TrainingData {
public:
  TokenSampleRange(std::shared_ptr<TokenDataset> dataset, int64_t first,
                   int64_t count);

  int64_t seqLen() const override { return dataset_->seqLen(); }
  void sampleAt(int64_t position, bool shuffle, uint64_t seed, int32_t *inputs,
                int32_t *labels) override;
  int64_t distinctSamples(int64_t limit) const override {
    return std::min(limit, count_);
  }
  Status checkUnchanged() const override { return dataset_->checkUnchanged(); }

private:
  std::shared_ptr<TokenDataset> dataset_;
  int64_t first_, count_;
  int64_t cachedEpoch_ = -1;
  uint64_t cachedSeed_ = 0;
  std::vector<int64_t> cachedOrder_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_TOKENDATA_H
