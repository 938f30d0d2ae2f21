//===- DocumentSampler.h - GPT samples over documents -----------*- C++ -*-===//
//
// Part of mlt. Cuts a corpus of documents into training samples the way
// Megatron-Core's GPTDataset does, as a pure function of (seed, position):
//
//   - epoch e visits every document once, in a seeded shuffled order
//     (shuffle off: file order); the documents, each ending with the EOD
//     token its tokenizer appended, are concatenated into one stream of the
//     corpus's T tokens;
//   - the stream is cut into N = (T - 1) / S samples of S + 1 tokens, sample
//     j being stream[j*S .. j*S + S]: consecutive samples share one token
//     (the last label of one is the first input of the next), and a sample
//     runs across document boundaries, as in Megatron;
//   - the N samples of the epoch are visited in a seeded shuffled order
//     (shuffle off: in order), and position p of the run is sample p % N of
//     epoch p / N.
//
// Unlike Megatron, which draws one document order for all epochs and cuts
// the epochs' streams as one, each epoch here is drawn and cut on its own
// (its last (T - 1) % S tokens are left out), so that any epoch is built
// without the ones before it: resuming at step s costs one epoch's
// shuffles, not s's history. The two orders are std::mt19937_64
// Fisher-Yates shuffles (shuffledOrder in TokenData.h) of independent
// streams derived from the seed.
//
// Cost: one epoch's orders are kept (8 bytes per document twice, 8 per
// sample); a sample is found by binary search over the documents' offsets in
// the epoch's stream.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_DOCUMENTSAMPLER_H
#define MLT_RUNTIME_IO_DOCUMENTSAMPLER_H

#include "mlt/Runtime/io/IndexedDataset.h"
#include "mlt/Runtime/io/TrainingData.h"
#include "mlt/Support/Status.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mlt::rt {

/// Tokens [start, start + count) of a corpus, in its file order.
struct TokenSpan {
  uint64_t start = 0;
  uint64_t count = 0;
  bool operator==(const TokenSpan &other) const {
    return start == other.start && count == other.count;
  }
};

/// Where document d starts in a corpus, for d in [0, numDocuments]:
/// non-decreasing, 0 for d = 0 and the corpus's tokens for d = numDocuments.
using DocumentStarts = std::function<uint64_t(uint64_t)>;

/// The samples of a corpus of documents; see the file comment.
class DocumentSampler {
public:
  /// A corpus of `numDocuments` documents holding `numTokens` tokens, cut
  /// into samples of `seqLen` + 1 tokens; needs numTokens > seqLen > 0.
  DocumentSampler(uint64_t numDocuments, uint64_t numTokens, int64_t seqLen);

  /// N, the samples of one epoch.
  int64_t samplesPerEpoch() const { return samplesPerEpoch_; }

  /// Sets `spans` to the spans of the corpus whose concatenation is the
  /// sample at `position` of the visiting order (seqLen + 1 tokens; empty
  /// documents give no span). `starts` describes the corpus.
  void locate(int64_t position, bool shuffle, uint64_t seed,
              const DocumentStarts &starts, std::vector<TokenSpan> &spans);

  /// The seeds of the document and sample orders, derived from the run's
  /// seed; exposed for the reference implementation of the tests.
  static uint64_t documentOrderSeed(uint64_t seed);
  static uint64_t sampleOrderSeed(uint64_t seed);

private:
  /// Draws epoch `epoch`'s shuffled orders.
  void buildEpoch(int64_t epoch, uint64_t seed, const DocumentStarts &starts);

  uint64_t numDocuments_;
  uint64_t numTokens_;
  int64_t seqLen_;
  int64_t samplesPerEpoch_;

  // The epoch whose orders are kept (-1: none), and those orders: for the
  // k-th document of the epoch's stream, where it starts in the stream
  // (k = numDocuments: the end) and where in the corpus; the epoch's
  // sample order.
  int64_t cachedEpoch_ = -1;
  uint64_t cachedSeed_ = 0;
  std::vector<uint64_t> streamStart_;
  std::vector<uint64_t> corpusStart_;
  std::vector<int64_t> sampleOrder_;
};

/// Documents [begin, end) of a corpus: a part of it (--split).
struct DocumentRange {
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// An indexed dataset's samples (DocumentSampler over its documents, or
/// over a range of them: the corpus the sampler sees is then those
/// documents alone, so that two parts of one dataset, --split's, never
/// share a token).
class IndexedData : public TrainingData {
public:
  /// Fails when the dataset holds fewer than seqLen + 1 tokens.
  static StatusOr<std::unique_ptr<IndexedData>> create(IndexedDataset dataset,
                                                       int64_t seqLen);
  /// The samples of documents `range` of `dataset` (which the parts of
  /// one dataset share); fails when they hold fewer than seqLen + 1
  /// tokens.
  static StatusOr<std::unique_ptr<IndexedData>>
  create(std::shared_ptr<const IndexedDataset> dataset, int64_t seqLen,
         DocumentRange range);

  int64_t seqLen() const override { return seqLen_; }
  void sampleAt(int64_t position, bool shuffle, uint64_t seed, int32_t *inputs,
                int32_t *labels) override;
  int64_t samplesPerEpoch() const { return sampler_.samplesPerEpoch(); }
  int64_t distinctSamples(int64_t limit) const override {
    return std::min(limit, samplesPerEpoch());
  }
  const IndexedDataset &dataset() const { return *dataset_; }
  Status checkUnchanged() const override { return dataset_->checkUnchanged(); }

private:
  IndexedData(std::shared_ptr<const IndexedDataset> dataset, int64_t seqLen,
              DocumentRange range, uint64_t tokens);

  std::shared_ptr<const IndexedDataset> dataset_;
  int64_t seqLen_;
  DocumentRange range_;
  /// Where the range starts in the corpus.
  uint64_t first_;
  DocumentSampler sampler_;
  std::vector<TokenSpan> spans_;
  std::vector<int32_t> sample_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_DOCUMENTSAMPLER_H
