//===- IndexedDatasetFuzzer.cpp - libFuzzer target: Megatron .idx files ---===//
//
// Part of mlt. Reads each input as the size of a .bin (its first 8 bytes,
// little-endian, modulo 2^40) and the bytes of its .idx (the rest), and
// validates them with parseIndex, what IndexedDataset::open runs on a
// mapped index. An index that passes must keep parseIndex's promise:
// every sequence inside the .bin, back to back, and every document's
// tokens a range inside it that the next document's starts where it ends;
// reading them all touches no byte outside the input. Any crash, hang, leak,
// undefined behaviour or allocation past -malloc_limit_mb is a bug in the
// reader.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/IndexedDataset.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace mlt;
using namespace mlt::rt;

namespace {

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "mlt-fuzz-indexed-dataset: %s\n", what.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 8)
    return 0;
  uint64_t binBytes;
  std::memcpy(&binBytes, data, 8);
  binBytes %= uint64_t(1) << 40;
  StatusOr<IndexLayout> parsed = parseIndex(data + 8, size - 8, binBytes);
  if (!parsed)
    return 0;
  const IndexLayout &index = *parsed;
  if (index.tokenWidth <= 0 || binBytes % uint64_t(index.tokenWidth) != 0 ||
      index.numTokens != binBytes / uint64_t(index.tokenWidth) ||
      index.documentIndexCount == 0)
    fail("an accepted index does not describe its .bin");
  uint64_t next = 0;
  for (uint64_t s = 0; s < index.sequenceCount; ++s) {
    if (index.sequenceLength(s) < 0 ||
        uint64_t(index.sequencePointer(s)) != next * uint64_t(index.tokenWidth))
      fail("sequence " + std::to_string(s) + " is not where the previous "
           "one ends");
    next += uint64_t(index.sequenceLength(s));
  }
  if (next != index.numTokens)
    fail("the sequences do not fill the .bin");
  uint64_t previous = 0;
  for (uint64_t d = 0; d <= index.numDocuments(); ++d) {
    const uint64_t start = index.documentStart(d);
    if (start < previous || start > index.numTokens)
      fail("document " + std::to_string(d) + " starts outside the .bin or "
           "before the previous one");
    previous = start;
  }
  if (index.documentStart(index.numDocuments()) != index.numTokens)
    fail("the documents do not end where the .bin does");
  return 0;
}
