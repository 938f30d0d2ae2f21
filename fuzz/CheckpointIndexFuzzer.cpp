//===- CheckpointIndexFuzzer.cpp - libFuzzer target: checkpoint indexes ---===//
//
// Part of mlt. Reads each input as a training checkpoint's index.json
// (parseCheckpointIndex, what --resume and mlt-checkpoint read before any
// shard). An index that passes must hold what the loader relies on (every
// piece names a listed file and lies inside its tensor, and a tensor's
// pieces cover it: their elements add up to its size) and must survive a
// round trip: written again (toJson), it parses to the same text. Any
// crash, hang, leak, undefined behaviour or allocation past -malloc_limit_mb
// is a bug in the reader.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/CheckpointIndex.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace mlt;
using namespace mlt::rt;

namespace {

[[noreturn]] void fail(const std::string &what, const std::string &detail) {
  std::fprintf(stderr, "mlt-fuzz-checkpoint-index: %s\n%s\n", what.c_str(),
               detail.c_str());
  std::abort();
}

/// The product of `shape`, or -1 past 2^62 (a parsed index's are bounded).
int64_t elements(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(count, dim, &count) ||
        count > (int64_t(1) << 62))
      return -1;
  return count;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string_view text(reinterpret_cast<const char *>(data), size);
  StatusOr<CheckpointIndex> index = parseCheckpointIndex(text);
  if (!index)
    return 0;

  for (const CheckpointIndex::Tensor &tensor : index->tensors) {
    const int64_t total = elements(tensor.shape);
    if (total < 0)
      fail("tensor '" + tensor.name + "' has an absurd shape", "");
    int64_t held = 0;
    for (const CheckpointIndex::Piece &piece : tensor.pieces) {
      if (piece.file >= index->files.size())
        fail("a piece of '" + tensor.name + "' names no listed file", "");
      if (piece.layout.fullShape != tensor.shape)
        fail("a piece of '" + tensor.name + "' is of another tensor's shape",
             "");
      const int64_t stored = elements(piece.storedShape());
      if (stored < 0 || stored > total)
        fail("a piece of '" + tensor.name + "' holds more than its tensor",
             "");
      held += stored;
    }
    // Pieces may repeat (replicas), never fall short.
    if (held < total)
      fail("the pieces of '" + tensor.name + "' do not cover it", "");
  }

  const std::string written = index->toJson();
  StatusOr<CheckpointIndex> reread = parseCheckpointIndex(written);
  if (!reread)
    fail("an index that parsed does not parse once written again:",
         reread.status().message() + "\n" + written);
  if (reread->toJson() != written)
    fail("an index written again reads as another index", written);
  return 0;
}
