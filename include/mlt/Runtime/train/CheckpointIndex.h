//===- CheckpointIndex.h - where a checkpoint's tensors are ------*- C++ -*-===//
//
// Part of mlt. A training checkpoint is written by every rank at once, each
// rank the pieces of the tensors it holds, into a shard of its own
// (`rank-00001.safetensors`), so nothing is gathered on one rank. The index
// (`index.json`) says where each whole tensor is: its shape and the pieces
// that hold it, each a key in one of the shards.
//
//   {"format": "mlt-checkpoint-index", "version": 2, "step": 6,
//    "files": [{"name": "rank-00000.safetensors", "bytes": 52480,
//               "xxh3": "9c0e...", "header_xxh3": "51a2..."}, ...],
//    "tensors": {
//      "model.norm.weight": {"shape": [64], "pieces": [
//        {"file": 0, "key": "model.norm.weight", "offset": [0],
//         "block": [64], "xxh3": "e4b1..."}]},
//      "exp_avg:model.layers.0.mlp.up_proj.weight": {"shape": [176, 64],
//        "pieces": [
//        {"file": 0, "key": "exp_avg:model.layers.0.mlp.up_proj.weight#0",
//         "offset": [0, 0], "block": [88, 64], "begin": 0, "count": 2816},
//        ...]}}}
//
// A piece is a block of its tensor (the box [offset, offset + block)), or,
// with `begin` and `count`, the row-major elements [begin, begin + count) of
// such a block (a partitioned optimizer's slice cuts through parameters
// wherever it falls). Tensors are the parameters by HF name and AdamW's
// moments "exp_avg:<name>" and "exp_avg_sq:<name>"; a piece is stored as
// F32, shaped as its block, or flat for a range. The pieces do not depend on
// the layout that reads them: any layout assembles what it needs.
//
// Content hashes (XXH3, ContentHash.h; version 2): of each shard file whole
// (`xxhsum -H3` prints the same), of its first bytes up to the data (length
// field and header), and of each piece's bytes. The header and the pieces
// together are every byte of a shard, so a reader checks each byte it reads
// without reading the file twice: the header when it opens the shard, a
// piece when it reads it. The step ties the index to its trainer.json.
//
// Parsing proves the index usable before any shard is read: every piece
// lies inside its tensor and names a listed file, blocks are disjoint or
// equal, the ranges of a block do not overlap, and the pieces cover each
// tensor exactly; sizes are bounded so that no hostile index makes the
// reader allocate or loop without bound.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAIN_CHECKPOINTINDEX_H
#define MLT_RUNTIME_TRAIN_CHECKPOINTINDEX_H

#include "mlt/Plan/Blocks.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

struct SavedPiece;

/// A checkpoint's index: its shard files and its tensors' pieces.
struct CheckpointIndex {
  struct File {
    std::string name;
    /// The file's size: a truncated shard is found before it is parsed.
    uint64_t bytes = 0;
    /// The hashes of the whole file and of its length field and header
    /// (none in an index of version 1).
    std::optional<uint64_t> hash, headerHash;
  };
  struct Piece {
    /// Index into `files`, and the tensor's key in that file.
    size_t file = 0;
    std::string key;
    /// The block (layout.fullShape is the tensor's shape), and which of
    /// its elements the piece holds: all, or [begin, begin + count).
    BlockLayout layout;
    bool isRange = false;
    int64_t begin = 0, count = 0;
    /// The hash of the piece's bytes in its shard.
    std::optional<uint64_t> hash;

    /// The piece's shape in its shard: the block's, or [count].
    std::vector<int64_t> storedShape() const;
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;
  };

  /// The checkpoint's step (0 in an index of version 1).
  int64_t step = 0;
  std::vector<File> files;
  /// By name.
  std::vector<Tensor> tensors;

  /// The index as index.json's text.
  std::string toJson() const;
};

/// "rank-00003.safetensors": the shard that plan rank `rank` writes.
std::string shardFileName(uint32_t rank);

/// A shard's safetensors metadata: the step it holds.
inline constexpr const char *kStepMetadata = "mlt_step";
/// Beside each shard while a save is in progress: its hashes, which rank
/// 0's process gathers into the index (another process may have written
/// the shard).
inline constexpr const char *kDigestSuffix = ".digest.json";

/// The index of a checkpoint of `pieces` (checkpointPieces of a plan):
/// each rank's pieces in its shard, keyed by tensor name, or
/// "<name>#<i>" (the tensor's i-th piece) where the piece is not the whole
/// tensor. The step, file sizes and hashes are left for the writer to fill
/// in. `keys`, if
/// given, receives each piece's key, in the order of `pieces`.
CheckpointIndex checkpointIndexOf(const std::vector<SavedPiece> &pieces,
                                  std::vector<std::string> *keys = nullptr);

/// The key of `piece` (the `i`-th of its tensor's `count` pieces) in its
/// shard.
std::string pieceKey(const std::string &tensor, size_t i, size_t count);

/// Parses and validates an index.json text (see the file comment). Errors
/// are one line, naming the tensor or piece at fault.
StatusOr<CheckpointIndex> parseCheckpointIndex(std::string_view text);

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAIN_CHECKPOINTINDEX_H
