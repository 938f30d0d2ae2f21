//===- IndexedDataset.h - Megatron's indexed datasets -----------*- C++ -*-===//
//
// Part of mlt. Reads Megatron-Core's MMapIndexedDataset: a pair PREFIX.bin
// (token ids of every sequence, back to back) and PREFIX.idx (where each
// sequence lies and which sequences make each document), the format
// Megatron's tools/preprocess_data.py and mlt-tokenize write. The index, all
// little-endian, packed (no padding, so its arrays are unaligned):
//
//   offset 0   9 bytes   magic "MMIDIDX\0\0"
//          9   u64       version, 1
//         17   u8        dtype code of the .bin's elements (Megatron's DType:
//                        1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//                        6 float64, 7 float32, 8 uint16)
//         18   u64       S, the number of sequences
//         26   u64       D, the number of document indices
//         34   int32[S]  sequence lengths, in elements
//              int64[S]  sequence pointers, byte offsets into the .bin
//              int64[D]  document indices: document d is the sequences
//                        [doc[d], doc[d+1]); doc[0] = 0, doc[D-1] = S
//              int8[S]   sequence modes (multimodal datasets only)
//
// Invariants that the reader proves before any token is read, so that
// nothing later can index out of range: the header is whole and its counts
// fit the file exactly; each pointer is where the previous sequence ends
// (the writer lays sequences back to back, so the pointers follow from the
// lengths); the .bin is exactly as long as the sequences; document indices
// start at 0, never decrease and end at S (a document may be empty: Megatron
// keeps documents that tokenize to nothing); every token id is in
// [0, vocab). The index is validated by parseIndex over a byte span, with no
// file, so that a fuzzer can drive it directly.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_INDEXEDDATASET_H
#define MLT_RUNTIME_IO_INDEXEDDATASET_H

#include "mlt/Runtime/io/MappedFile.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mlt::rt {

/// The 9 bytes an index file starts with.
inline constexpr char kIndexMagic[9] = {'M', 'M', 'I',  'D', 'I',
                                        'D', 'X', '\0', '\0'};
/// The index format version mlt reads and writes.
inline constexpr uint64_t kIndexVersion = 1;
/// The bytes before the index's arrays.
inline constexpr size_t kIndexHeaderBytes = 34;

/// A validated index: counts, the token type, and views of its arrays into
/// the bytes parseIndex was given (which must outlive it). Every accessor's
/// argument must be in range; parseIndex proved the values consistent.
struct IndexLayout {
  /// Megatron's dtype code, the element's width in bytes and signedness.
  uint8_t dtypeCode = 0;
  int tokenWidth = 0;
  bool tokenSigned = false;
  /// S and D of the header; documents are D - 1.
  uint64_t sequenceCount = 0;
  uint64_t documentIndexCount = 0;
  /// Whether the index ends with the multimodal sequence modes.
  bool hasModes = false;
  /// Elements in the .bin (its bytes / tokenWidth).
  uint64_t numTokens = 0;

  const uint8_t *lengths = nullptr;         // int32[S]
  const uint8_t *pointers = nullptr;        // int64[S]
  const uint8_t *documentIndices = nullptr; // int64[D]

  uint64_t numDocuments() const { return documentIndexCount - 1; }
  int32_t sequenceLength(uint64_t i) const;
  int64_t sequencePointer(uint64_t i) const;
  int64_t documentIndex(uint64_t i) const;
  /// The element offset in the .bin where document `d` starts, for d in
  /// [0, numDocuments()]; numDocuments() gives numTokens.
  uint64_t documentStart(uint64_t d) const;
};

/// "uint16", "int32", ...: the name of Megatron dtype code `code`, or
/// "unknown" for a code that is none.
const char *indexDTypeName(uint8_t code);

/// Validates the `size` bytes of an index (see the file comment) against a
/// .bin of `binBytes` bytes and returns its layout; fails with one line
/// naming the first problem (the caller prefixes the file's name). Reads
/// nothing outside [bytes, bytes + size) and never allocates in proportion
/// to the counts it reads, whatever the bytes are.
StatusOr<IndexLayout> parseIndex(const uint8_t *bytes, size_t size,
                                 uint64_t binBytes);

/// Progress of a long check: bytes done and bytes in all.
using ScanProgress = std::function<void(uint64_t done, uint64_t total)>;

/// An opened indexed dataset: both files memory-mapped, the index validated
/// and every token id checked once, so that reading tokens later needs no
/// I/O and cannot fail.
class IndexedDataset {
public:
  /// Opens PREFIX.idx and PREFIX.bin for a model of `vocab` token ids.
  /// Fails with one line naming the file and the problem: a file that is
  /// missing or not a regular file, an index that parseIndex refuses, a
  /// .bin of another length than its index says, a float dtype, a token id
  /// outside [0, vocab) (naming its position and value). `progress`, when
  /// given, is called every 64 MiB of the token check.
  static StatusOr<IndexedDataset> open(const std::string &prefix, int64_t vocab,
                                       const ScanProgress &progress = {});

  IndexedDataset(IndexedDataset &&other) noexcept;
  IndexedDataset &operator=(IndexedDataset &&other) noexcept;
  IndexedDataset(const IndexedDataset &) = delete;
  IndexedDataset &operator=(const IndexedDataset &) = delete;
  ~IndexedDataset();

  const std::string &prefix() const { return prefix_; }
  const IndexLayout &layout() const { return layout_; }
  uint64_t numTokens() const { return layout_.numTokens; }
  uint64_t numDocuments() const { return layout_.numDocuments(); }
  uint64_t documentStart(uint64_t d) const { return layout_.documentStart(d); }
  /// A 64-bit hash of the index's bytes: equal for the same tokenization
  /// of the same documents, for telling datasets apart in checkpoints.
  uint64_t indexHash() const { return indexHash_; }

  /// Whether PREFIX.idx and PREFIX.bin are as they were when opened
  /// (MappedFile::checkUnchanged).
  Status checkUnchanged() const;

  /// Token `i` of the .bin, as an id.
  int32_t token(uint64_t i) const;
  /// Copies tokens [start, start + count) to `out`.
  void copyTokens(uint64_t start, uint64_t count, int32_t *out) const;

private:
  IndexedDataset() = default;

  std::string prefix_;
  MappedFile index_, binFile_;
  const uint8_t *bin_ = nullptr;
  IndexLayout layout_;
  uint64_t indexHash_ = 0;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_INDEXEDDATASET_H
