//===- IndexedDataset.cpp - Megatron's indexed datasets -------------------===//
//
// Part of mlt. Implements parseIndex and IndexedDataset. The index is read
// in place (memory-mapped) through memcpy, since its arrays start at byte 34
// and are not aligned; every count it holds is checked against the file's
// size before it is used as a bound, with the arithmetic done so that no
// product or sum can wrap. The .bin is mapped and scanned once for ids
// outside the vocab, so that sampling never meets a bad id.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/IndexedDataset.h"
#include "mlt/Runtime/Random.h"
#include "mlt/Support/FileKind.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "indexed datasets are little-endian; mlt reads them in place");

using namespace mlt;
using namespace mlt::rt;

namespace {

template <typename T> T load(const uint8_t *at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

struct DTypeInfo {
  const char *name;
  int width;
  bool isSigned;
  bool isFloat;
};

/// Megatron's DType codes 1..8; index 0 stands for every unknown code.
constexpr DTypeInfo kDTypes[] = {
    {"unknown", 0, false, false}, {"uint8", 1, false, false},
    {"int8", 1, true, false},     {"int16", 2, true, false},
    {"int32", 4, true, false},    {"int64", 8, true, false},
    {"float64", 8, true, true},   {"float32", 4, true, true},
    {"uint16", 2, false, false},
};

const DTypeInfo &dtypeInfo(uint8_t code) {
  return code < std::size(kDTypes) ? kDTypes[code] : kDTypes[0];
}

/// 34 + 12 S + 8 D (+ S), in decimal, without wrapping.
std::string indexBytesFor(uint64_t sequences, uint64_t documentIndices,
                          bool modes) {
  unsigned __int128 bytes = kIndexHeaderBytes;
  bytes += (unsigned __int128)sequences * (modes ? 13 : 12);
  bytes += (unsigned __int128)documentIndices * 8;
  std::string digits;
  do {
    digits.insert(digits.begin(), char('0' + int(bytes % 10)));
    bytes /= 10;
  } while (bytes != 0);
  return digits;
}

/// Reads element `i` of a `width`-byte little-endian array as an integer.
int64_t loadElement(const uint8_t *data, const DTypeInfo &type, uint64_t i) {
  const uint8_t *at = data + i * uint64_t(type.width);
  switch (type.width) {
  case 1:
    return type.isSigned ? int64_t(load<int8_t>(at)) : int64_t(*at);
  case 2:
    return type.isSigned ? int64_t(load<int16_t>(at))
                         : int64_t(load<uint16_t>(at));
  case 4:
    return int64_t(load<int32_t>(at));
  default:
    return load<int64_t>(at);
  }
}

/// The smallest and largest element of [begin, end).
template <typename T>
std::pair<int64_t, int64_t> elementRange(const uint8_t *data, uint64_t begin,
                                         uint64_t end) {
  T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
  for (uint64_t i = begin; i < end; ++i) {
    T v = load<T>(data + i * sizeof(T));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return {int64_t(lo), int64_t(hi)};
}

std::pair<int64_t, int64_t> elementRange(const uint8_t *data,
                                         const DTypeInfo &type, uint64_t begin,
                                         uint64_t end) {
  switch (type.width) {
  case 1:
    return type.isSigned ? elementRange<int8_t>(data, begin, end)
                         : elementRange<uint8_t>(data, begin, end);
  case 2:
    return type.isSigned ? elementRange<int16_t>(data, begin, end)
                         : elementRange<uint16_t>(data, begin, end);
  case 4:
    return elementRange<int32_t>(data, begin, end);
  default:
    return elementRange<int64_t>(data, begin, end);
  }
}

} // namespace

int32_t IndexLayout::sequenceLength(uint64_t i) const {
  assert(i < sequenceCount && "sequence out of range");
  return load<int32_t>(lengths + 4 * i);
}

int64_t IndexLayout::sequencePointer(uint64_t i) const {
  assert(i < sequenceCount && "sequence out of range");
  return load<int64_t>(pointers + 8 * i);
}

int64_t IndexLayout::documentIndex(uint64_t i) const {
  assert(i < documentIndexCount && "document index out of range");
  return load<int64_t>(documentIndices + 8 * i);
}

uint64_t IndexLayout::documentStart(uint64_t d) const {
  const uint64_t sequence = uint64_t(documentIndex(d));
  return sequence == sequenceCount
             ? numTokens
             : uint64_t(sequencePointer(sequence)) / uint64_t(tokenWidth);
}

const char *mlt::rt::indexDTypeName(uint8_t code) {
  return dtypeInfo(code).name;
}

StatusOr<IndexLayout> mlt::rt::parseIndex(const uint8_t *bytes, size_t size,
                                          uint64_t binBytes) {
  if (size < sizeof(kIndexMagic) ||
      std::memcmp(bytes, kIndexMagic, sizeof(kIndexMagic)) != 0)
    return errorf(size < sizeof(kIndexMagic) ? "too short for" : "no",
                  " index magic (a Megatron indexed dataset's .idx starts "
                  "with MMIDIDX\\x00\\x00)");
  if (size < kIndexHeaderBytes)
    return errorf(size, " bytes, shorter than the ", kIndexHeaderBytes,
                  "-byte header of an index: truncated file?");
  const uint64_t version = load<uint64_t>(bytes + 9);
  if (version != kIndexVersion)
    return errorf("index format version ", version, ", mlt reads version ",
                  kIndexVersion);
  IndexLayout layout;
  layout.dtypeCode = bytes[17];
  const DTypeInfo &type = dtypeInfo(layout.dtypeCode);
  if (type.width == 0)
    return errorf("unknown dtype code ", int(layout.dtypeCode),
                  " (Megatron's codes are 1 to 8)");
  if (type.isFloat)
    return errorf("dtype ", type.name, " (code ", int(layout.dtypeCode),
                  "): the .bin holds floats, not token ids");
  layout.tokenWidth = type.width;
  layout.tokenSigned = type.isSigned;
  layout.sequenceCount = load<uint64_t>(bytes + 18);
  layout.documentIndexCount = load<uint64_t>(bytes + 26);
  const uint64_t sequences = layout.sequenceCount;
  const uint64_t documentIndices = layout.documentIndexCount;

  // The arrays must fill the rest of the file exactly, with or without the
  // modes; the divisions keep the products below 2^64.
  const uint64_t arrays = uint64_t(size) - kIndexHeaderBytes;
  uint64_t tail = 0;
  bool fits = sequences <= arrays / 12;
  if (fits) {
    const uint64_t rest = arrays - 12 * sequences;
    fits = documentIndices <= rest / 8;
    if (fits) {
      tail = rest - 8 * documentIndices;
      fits = tail == 0 || tail == sequences;
    }
  }
  if (!fits)
    return errorf("the header counts ", sequences, " sequences and ",
                  documentIndices, " document indices, which take ",
                  indexBytesFor(sequences, documentIndices, false), " bytes (",
                  indexBytesFor(sequences, documentIndices, true),
                  " with sequence modes); the file has ", size,
                  ": truncated file or a corrupt header");
  layout.hasModes = tail != 0;
  if (documentIndices == 0)
    return errorf("no document indices (an index has at least the "
                  "leading 0)");
  layout.lengths = bytes + kIndexHeaderBytes;
  layout.pointers = layout.lengths + 4 * sequences;
  layout.documentIndices = layout.pointers + 8 * sequences;

  // Sequences lie back to back from byte 0 of the .bin to its end. `end`
  // grows by at most 2^31 * 8 per sequence and is checked against the .bin's
  // size after each, so it cannot wrap.
  const uint64_t width = uint64_t(type.width);
  uint64_t end = 0;
  for (uint64_t i = 0; i < sequences; ++i) {
    const int32_t length = layout.sequenceLength(i);
    if (length < 0)
      return errorf("sequence ", i, " has length ", length);
    const int64_t pointer = layout.sequencePointer(i);
    if (pointer < 0 || uint64_t(pointer) != end)
      return errorf("sequence ", i, " starts at byte ", pointer,
                    " of the .bin, but the sequences before it end at byte ",
                    end, " (each starts where the one before ends)");
    end += uint64_t(length) * width;
    if (end > binBytes)
      return errorf("sequence ", i, " ends at byte ", end,
                    ", past the end of the .bin (", binBytes,
                    " bytes): the .idx does not match its .bin");
  }
  if (end != binBytes)
    return errorf("the sequences end at byte ", end, ", but the .bin has ",
                  binBytes, " bytes: the .idx does not match its .bin");
  layout.numTokens = end / width;

  if (layout.documentIndex(0) != 0)
    return errorf("document index 0 is ", layout.documentIndex(0), ", not 0");
  for (uint64_t i = 1; i < documentIndices; ++i) {
    const int64_t index = layout.documentIndex(i);
    const int64_t previous = layout.documentIndex(i - 1);
    if (index < previous)
      return errorf("document index ", i, " is ", index,
                    ", below the one before it (", previous,
                    "): document indices never decrease");
    if (uint64_t(index) > sequences)
      return errorf("document index ", i, " is ", index, ", past the ",
                    sequences, " sequences");
  }
  const int64_t last = layout.documentIndex(documentIndices - 1);
  if (uint64_t(last) != sequences)
    return errorf("the last document index is ", last,
                  ", not the sequence count ", sequences,
                  ": the documents do not cover the sequences");
  return layout;
}

StatusOr<IndexedDataset> IndexedDataset::open(const std::string &prefix,
                                              int64_t vocab,
                                              const ScanProgress &progress) {
  if (vocab <= 0)
    return errorf(prefix, ": vocab size must be positive, got ", vocab);
  const std::string indexPath = prefix + ".idx", binPath = prefix + ".bin";
  IndexedDataset dataset;
  dataset.prefix_ = prefix;
  StatusOr<MappedFile> index = MappedFile::open(indexPath);
  if (!index)
    return index.takeStatus();
  StatusOr<MappedFile> bin = MappedFile::open(binPath);
  if (!bin)
    return bin.takeStatus();
  dataset.index_ = std::move(*index);
  dataset.binFile_ = std::move(*bin);
  dataset.bin_ = dataset.binFile_.data();

  static const uint8_t kNoBytes[1] = {0};
  const uint8_t *indexBytes =
      dataset.index_.data() ? dataset.index_.data() : kNoBytes;
  const size_t indexSize = dataset.index_.size();
  StatusOr<IndexLayout> layout =
      parseIndex(indexBytes, indexSize, uint64_t(dataset.binFile_.size()));
  if (!layout)
    return layout.takeStatus().withContext(indexPath);
  dataset.layout_ = *layout;

  // One pass over the index's words for its hash (8 bytes at a time; the
  // tail, fewer than 8 bytes, zero-padded).
  uint64_t hash = splitmix64(indexSize);
  for (size_t at = 0; at < indexSize; at += 8) {
    uint64_t word = 0;
    std::memcpy(&word, indexBytes + at, std::min<size_t>(8, indexSize - at));
    hash = splitmix64(hash ^ word);
  }
  dataset.indexHash_ = hash;

  // Every id in [0, vocab), checked in chunks by range, so that the rare bad
  // id is located exactly without slowing the common case.
  const DTypeInfo &type = dtypeInfo(dataset.layout_.dtypeCode);
  const uint64_t total = dataset.layout_.numTokens;
  const uint64_t chunk = (uint64_t(64) << 20) / uint64_t(type.width);
  for (uint64_t begin = 0; begin < total; begin += chunk) {
    const uint64_t end = std::min(total, begin + chunk);
    auto [lo, hi] = elementRange(dataset.bin_, type, begin, end);
    if (lo < 0 || hi >= vocab) {
      for (uint64_t i = begin; i < end; ++i) {
        const int64_t id = loadElement(dataset.bin_, type, i);
        if (id >= 0 && id < vocab)
          continue;
        // The document holding token i: the last that starts at or before it.
        uint64_t lowDoc = 0, highDoc = dataset.numDocuments();
        while (highDoc - lowDoc > 1) {
          uint64_t mid = lowDoc + (highDoc - lowDoc) / 2;
          (dataset.documentStart(mid) <= i ? lowDoc : highDoc) = mid;
        }
        return errorf(
            binPath, ": token ", i, " (document ", lowDoc, ") has id ", id,
            id < 0 ? ", negative"
                   : ", not below the vocab size " + std::to_string(vocab));
      }
    }
    if (progress)
      progress(end * uint64_t(type.width), total * uint64_t(type.width));
  }
  return dataset;
}

IndexedDataset::IndexedDataset(IndexedDataset &&other) noexcept {
  *this = std::move(other);
}

IndexedDataset &IndexedDataset::operator=(IndexedDataset &&other) noexcept {
  if (this == &other)
    return *this;
  prefix_ = std::move(other.prefix_);
  index_ = std::move(other.index_);
  binFile_ = std::move(other.binFile_);
  bin_ = std::exchange(other.bin_, nullptr);
  layout_ = std::exchange(other.layout_, IndexLayout());
  indexHash_ = other.indexHash_;
  return *this;
}

IndexedDataset::~IndexedDataset() = default;

Status IndexedDataset::checkUnchanged() const {
  MLT_RETURN_IF_ERROR(index_.checkUnchanged());
  return binFile_.checkUnchanged();
}

int32_t IndexedDataset::token(uint64_t i) const {
  assert(i < layout_.numTokens && "token out of range");
  return int32_t(loadElement(bin_, dtypeInfo(layout_.dtypeCode), i));
}

void IndexedDataset::copyTokens(uint64_t start, uint64_t count,
                                int32_t *out) const {
  assert(start <= layout_.numTokens && count <= layout_.numTokens - start &&
         "token range out of range");
  const DTypeInfo &type = dtypeInfo(layout_.dtypeCode);
  if (type.width == 2 && !type.isSigned) {
    for (uint64_t i = 0; i < count; ++i)
      out[i] = int32_t(load<uint16_t>(bin_ + 2 * (start + i)));
    return;
  }
  if (type.width == 4) {
    std::memcpy(out, bin_ + 4 * start, 4 * count);
    return;
  }
  for (uint64_t i = 0; i < count; ++i)
    out[i] = int32_t(loadElement(bin_, type, start + i));
}
