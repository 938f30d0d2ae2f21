//===- DocumentSampler.cpp - GPT samples over documents -------------------===//
//
// Part of mlt. Implements DocumentSampler (the algorithm is in the header's
// comment) and IndexedData, which copies the spans it locates out of an
// indexed dataset's memory-mapped .bin.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/DocumentSampler.h"
#include "mlt/Runtime/Random.h"
#include "mlt/Runtime/io/TokenData.h"

#include <algorithm>
#include <cassert>

using namespace mlt;
using namespace mlt::rt;

namespace {
// Tags that set the two orders' random streams apart from each other and
// from the token files' sample order (which uses the seed itself).
constexpr uint64_t kDocumentOrderStream = 0x646f63756d656e74ull; // "document"
constexpr uint64_t kSampleOrderStream = 0x73616d706c657321ull;   // "samples!"
} // namespace

uint64_t DocumentSampler::documentOrderSeed(uint64_t seed) {
  return seed ^ kDocumentOrderStream;
}

uint64_t DocumentSampler::sampleOrderSeed(uint64_t seed) {
  return seed ^ kSampleOrderStream;
}

DocumentSampler::DocumentSampler(uint64_t numDocuments, uint64_t numTokens,
                                 int64_t seqLen)
    : numDocuments_(numDocuments), numTokens_(numTokens), seqLen_(seqLen),
      samplesPerEpoch_(seqLen > 0 && numTokens > 0
                           ? int64_t((numTokens - 1) / uint64_t(seqLen))
                           : 0) {
  assert(seqLen > 0 && numTokens > uint64_t(seqLen) &&
         "a corpus needs more tokens than a sequence");
}

void DocumentSampler::buildEpoch(int64_t epoch, uint64_t seed,
                                 const DocumentStarts &starts) {
  std::vector<int64_t> order = shuffledOrder(
      int64_t(numDocuments_), documentOrderSeed(seed), uint64_t(epoch));
  streamStart_.assign(numDocuments_ + 1, 0);
  corpusStart_.assign(numDocuments_, 0);
  uint64_t at = 0;
  for (uint64_t k = 0; k < numDocuments_; ++k) {
    const uint64_t d = uint64_t(order[k]);
    const uint64_t start = starts(d);
    streamStart_[k] = at;
    corpusStart_[k] = start;
    at += starts(d + 1) - start;
  }
  streamStart_[numDocuments_] = at;
  assert(at == numTokens_ && "the documents do not cover the corpus");
  sampleOrder_ =
      shuffledOrder(samplesPerEpoch_, sampleOrderSeed(seed), uint64_t(epoch));
  cachedEpoch_ = epoch;
  cachedSeed_ = seed;
}

void DocumentSampler::locate(int64_t position, bool shuffle, uint64_t seed,
                             const DocumentStarts &starts,
                             std::vector<TokenSpan> &spans) {
  assert(position >= 0 && "negative position");
  spans.clear();
  const int64_t epoch = position / samplesPerEpoch_;
  int64_t sample = position % samplesPerEpoch_;
  const uint64_t tokens = uint64_t(seqLen_) + 1;
  if (!shuffle) {
    // In file order the epoch's stream is the corpus itself.
    spans.push_back({uint64_t(sample) * uint64_t(seqLen_), tokens});
    return;
  }
  if (epoch != cachedEpoch_ || seed != cachedSeed_)
    buildEpoch(epoch, seed, starts);
  sample = sampleOrder_[size_t(sample)];
  const uint64_t begin = uint64_t(sample) * uint64_t(seqLen_);
  // The last document of the stream that starts at or before `begin` (it is
  // not empty, since the next one starts after `begin`).
  size_t k =
      size_t(std::upper_bound(streamStart_.begin(), streamStart_.end(), begin) -
             streamStart_.begin()) -
      1;
  uint64_t offset = begin - streamStart_[k];
  uint64_t remaining = tokens;
  while (remaining > 0) {
    assert(k < numDocuments_ && "a sample runs past the epoch's stream");
    const uint64_t length = streamStart_[k + 1] - streamStart_[k];
    const uint64_t take = std::min(remaining, length - offset);
    if (take > 0)
      spans.push_back({corpusStart_[k] + offset, take});
    remaining -= take;
    offset = 0;
    ++k;
  }
}

StatusOr<std::unique_ptr<IndexedData>>
IndexedData::create(IndexedDataset dataset, int64_t seqLen) {
  const uint64_t documents = dataset.numDocuments();
  return create(std::make_shared<const IndexedDataset>(std::move(dataset)),
                seqLen, {0, documents});
}

StatusOr<std::unique_ptr<IndexedData>>
IndexedData::create(std::shared_ptr<const IndexedDataset> dataset,
                    int64_t seqLen, DocumentRange range) {
  if (seqLen <= 0)
    return errorf(dataset->prefix(), ": seq_len must be positive, got ",
                  seqLen);
  assert(range.begin <= range.end && range.end <= dataset->numDocuments() &&
         "a document range outside the dataset");
  const uint64_t tokens = dataset->documentStart(range.end) -
                          dataset->documentStart(range.begin);
  const bool whole = range.begin == 0 && range.end == dataset->numDocuments();
  if (tokens < uint64_t(seqLen) + 1)
    return errorf(dataset->prefix(), ": ", tokens, " tokens in ",
                  range.end - range.begin, " documents",
                  whole ? std::string()
                        : " (documents " + std::to_string(range.begin) +
                              " to " + std::to_string(range.end - 1) + " of " +
                              std::to_string(dataset->numDocuments()) + ")",
                  ", fewer than one sample of seq_len + 1 = ", seqLen + 1);
  return std::unique_ptr<IndexedData>(
      new IndexedData(std::move(dataset), seqLen, range, tokens));
}

IndexedData::IndexedData(std::shared_ptr<const IndexedDataset> dataset,
                         int64_t seqLen, DocumentRange range, uint64_t tokens)
    : dataset_(std::move(dataset)), seqLen_(seqLen), range_(range),
      first_(dataset_->documentStart(range.begin)),
      sampler_(range.end - range.begin, tokens, seqLen),
      sample_(size_t(seqLen) + 1) {}

void IndexedData::sampleAt(int64_t position, bool shuffle, uint64_t seed,
                           int32_t *inputs, int32_t *labels) {
  // The sampler sees the range's documents as a corpus of their own.
  sampler_.locate(
      position, shuffle, seed,
      [this](uint64_t d) {
        return dataset_->documentStart(range_.begin + d) - first_;
      },
      spans_);
  int32_t *out = sample_.data();
  for (const TokenSpan &span : spans_) {
    dataset_->copyTokens(first_ + span.start, span.count, out);
    out += span.count;
  }
  assert(out == sample_.data() + sample_.size() && "a sample of wrong size");
  std::copy(sample_.begin(), sample_.end() - 1, inputs);
  std::copy(sample_.begin() + 1, sample_.end(), labels);
}
