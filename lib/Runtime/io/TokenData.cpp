//===- TokenData.cpp - token files and training batches -------------------===//
//
// Part of mlt. Implements TokenDataset: the token file is memory-mapped once
// and validated in one pass at open time (width, length, every id below the
// vocab), so that batches are cut later without I/O and without failing. The
// shuffle is written out by hand (mt19937_64 plus Fisher-Yates with unbiased
// bounded draws) because std::shuffle and std::uniform_int_distribution give
// different orders on different standard libraries, and a run must see the
// same batches wherever it is resumed.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Runtime/Random.h"
#include "mlt/Support/FileKind.h"

#include <cassert>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Token files are little-endian and read with memcpy.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "mlt's token files assume a little-endian host");

#ifndef MLT_DATA_DIR
#error "MLT_DATA_DIR must be defined by the build (see lib/Runtime/io)"
#endif

namespace mlt::rt {

std::string defaultCorpusPath() {
  return std::string(MLT_DATA_DIR) + "/kjv-genesis-exodus.txt";
}

namespace {
/// A uniform draw from [0, bound) by rejection: values below 2^64 mod bound
/// are rejected so that every residue is equally likely.
uint64_t uniformBelow(std::mt19937_64 &rng, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound;
  uint64_t r;
  do
    r = rng();
  while (r < threshold);
  return r % bound;
}

bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

/// Reads token i of a stream of `width`-byte little-endian ids.
uint32_t loadToken(const uint8_t *data, int width, int64_t i) {
  switch (width) {
  case 1:
    return data[i];
  case 2: {
    uint16_t v;
    std::memcpy(&v, data + 2 * i, 2);
    return v;
  }
  default: {
    uint32_t v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  }
  }
}
} // namespace

std::vector<int64_t> shuffledOrder(int64_t numSamples, uint64_t seed,
                                   uint64_t epoch) {
  std::vector<int64_t> order(size_t(numSamples > 0 ? numSamples : 0));
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = int64_t(i);
  std::mt19937_64 rng(splitmix64(seed ^ splitmix64(epoch)));
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = size_t(uniformBelow(rng, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

StatusOr<TokenDataset> TokenDataset::open(const std::string &path,
                                          int64_t seqLen, int64_t vocab) {
  int width;
  const char *what;
  if (endsWith(path, ".u16")) {
    width = 2;
    what = ".u16";
  } else if (endsWith(path, ".u32")) {
    width = 4;
    what = ".u32";
  } else if (endsWith(path, ".txt")) {
    width = 1;
    what = ".txt";
  } else {
    std::string name = path.substr(path.find_last_of('/') + 1);
    size_t dot = name.find_last_of('.');
    return errorf(path, ": unknown token file extension '",
                  dot == std::string::npos ? std::string("(none)")
                                           : name.substr(dot),
                  "' (expected .u16, .u32 or .txt)");
  }
  if (seqLen <= 0)
    return errorf(path, ": seq_len must be positive, got ", seqLen);
  if (vocab <= 0)
    return errorf(path, ": vocab size must be positive, got ", vocab);

  StatusOr<MappedFile> file = MappedFile::open(path);
  if (!file)
    return file.takeStatus();
  const uint64_t size = file->size();
  if (size == 0)
    return errorf(path, ": token file is empty");
  if (size % uint64_t(width) != 0)
    return errorf(path, ": ", size, " bytes is not a multiple of ", width,
                  " (the size of one ", what, " token): truncated file?");
  int64_t numTokens = int64_t(size / uint64_t(width));
  if (numTokens < seqLen + 1)
    return errorf(
        path, ": ", numTokens,
        " tokens, fewer than one sample of seq_len + 1 = ", seqLen + 1);

  TokenDataset dataset;
  dataset.file_ = std::move(*file);
  dataset.data_ = dataset.file_.data();
  dataset.tokenWidth_ = width;
  dataset.numTokens_ = numTokens;
  dataset.seqLen_ = seqLen;

  // Checked once here so that batch() cannot meet an out-of-range id later.
  for (int64_t i = 0; i < numTokens; ++i) {
    uint32_t id = loadToken(dataset.data_, width, i);
    if (uint64_t(id) >= uint64_t(vocab))
      return errorf(path, ": token ", i, " has id ", id,
                    ", not below the vocab size ", vocab);
  }
  return dataset;
}

TokenDataset::TokenDataset(TokenDataset &&other) noexcept {
  *this = std::move(other);
}

TokenDataset &TokenDataset::operator=(TokenDataset &&other) noexcept {
  if (this == &other)
    return *this;
  file_ = std::move(other.file_);
  data_ = std::exchange(other.data_, nullptr);
  tokenWidth_ = other.tokenWidth_;
  numTokens_ = std::exchange(other.numTokens_, 0);
  seqLen_ = other.seqLen_;
  cachedEpoch_ = std::exchange(other.cachedEpoch_, -1);
  cachedSeed_ = other.cachedSeed_;
  cachedOrder_ = std::move(other.cachedOrder_);
  return *this;
}

TokenDataset::~TokenDataset() = default;

int32_t TokenDataset::token(int64_t i) const {
  assert(i >= 0 && i < numTokens_ && "token index out of range");
  return int32_t(loadToken(data_, tokenWidth_, i));
}

void TokenDataset::sample(int64_t k, int32_t *inputs, int32_t *labels) const {
  assert(k >= 0 && k < numSamples() && "sample index out of range");
  int64_t start = k * (seqLen_ + 1);
  for (int64_t t = 0; t < seqLen_; ++t) {
    inputs[t] = token(start + t);
    labels[t] = token(start + t + 1);
  }
}

int64_t TokenDataset::sampleIndex(int64_t step, int64_t row, int64_t batchSize,
                                  bool shuffle, uint64_t seed) {
  assert(step >= 0 && batchSize > 0 && row >= 0 && row < batchSize &&
         "bad step, row or batch size");
  int64_t n = numSamples();
  int64_t position = step * batchSize + row;
  int64_t epoch = position / n;
  int64_t indexInEpoch = position % n;
  if (!shuffle)
    return indexInEpoch;
  if (epoch != cachedEpoch_ || seed != cachedSeed_) {
    cachedOrder_ = shuffledOrder(n, seed, uint64_t(epoch));
    cachedEpoch_ = epoch;
    cachedSeed_ = seed;
  }
  return cachedOrder_[size_t(indexInEpoch)];
}

void TokenDataset::sampleAt(int64_t position, bool shuffle, uint64_t seed,
                            int32_t *inputs, int32_t *labels) {
  sample(sampleIndex(position, 0, 1, shuffle, seed), inputs, labels);
}

TokenSampleRange::TokenSampleRange(std::shared_ptr<TokenDataset> dataset,
                                   int64_t first, int64_t count)
    : dataset_(std::move(dataset)), first_(first), count_(count) {
  assert(first >= 0 && count > 0 && first + count <= dataset_->numSamples() &&
         "a sample range outside the token file");
}

void TokenSampleRange::sampleAt(int64_t position, bool shuffle, uint64_t seed,
                                int32_t *inputs, int32_t *labels) {
  assert(position >= 0 && "negative position");
  const int64_t epoch = position / count_;
  int64_t index = position % count_;
  if (shuffle) {
    if (epoch != cachedEpoch_ || seed != cachedSeed_) {
      cachedOrder_ = shuffledOrder(count_, seed, uint64_t(epoch));
      cachedEpoch_ = epoch;
      cachedSeed_ = seed;
    }
    index = cachedOrder_[size_t(index)];
  }
  dataset_->sample(first_ + index, inputs, labels);
}

} // namespace mlt::rt
