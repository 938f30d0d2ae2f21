//===- MatmulTable.h - tuned cuBLASLt algorithms, by shape ------*- C++ -*-===//
//
// Part of mlt. A table of cuBLASLt algorithms chosen by timing, one per
// matrix-product shape, as a JSON file that later runs load: what
// `mlt-run --tune-matmuls` writes and `--matmul-algorithms FILE` reads (the
// CUDA backend's MatmulRunner, lib/Runtime/cuda/kernels/matmul.h). Tuning
// once and replaying the choice keeps runs bit-reproducible (one algorithm
// per shape, the same every run) where timing on every run would not be.
// Plain C++ (the algorithms are opaque words here), so the file's reader is
// tested and fuzzed without a GPU (fuzz/MatmulTableFuzzer.cpp).
//
// Invariants:
// - A table belongs to one device name and one cuBLASLt version (both in
//   the file): cublasLtMatmulAlgo_t is opaque, and its bytes are only
//   meaningful to the library that made them. Loading a table of another
//   device or version is an error naming both, not a silent fallback.
// - Keys are the runner's canonical text of a shape (types, sizes,
//   transposes, batching, addend, alignments); the table does not parse
//   them. Entries keep the algorithm's bytes, the workspace it needs, its
//   configuration in words and the times that chose it.
// - `save` writes the whole table to a temporary file beside the path and
//   renames it over the path: a reader never sees half a table.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_MATMULTABLE_H
#define MLT_RUNTIME_IO_MATMULTABLE_H

#include "mlt/Support/Status.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace mlt::rt {

/// One shape's algorithm: cublasLtMatmulAlgo_t's bytes, and what chose it.
struct TunedAlgorithm {
  std::array<uint64_t, 8> data{};
  /// Workspace bytes the algorithm needs (0: launched without one).
  uint64_t workspaceBytes = 0;
  /// The configuration in words (tile, stages, split-K, ...), for people.
  std::string config;
  /// Median microseconds of this algorithm and of the heuristic's first
  /// proposal when the shape was tuned.
  double microseconds = 0.0, heuristicMicroseconds = 0.0;
};

class MatmulTable {
public:
  MatmulTable() = default;
  MatmulTable(std::string device, int64_t libraryVersion)
      : device_(std::move(device)), libraryVersion_(libraryVersion) {}

  /// Reads `path`. Errors (one line, naming the file): unreadable, not a
  /// table, a malformed entry, or made on another device or cuBLASLt
  /// version than `device` / `libraryVersion`.
  static StatusOr<MatmulTable> load(const std::string &path,
                                    const std::string &device,
                                    int64_t libraryVersion);
  /// The same from the file's `text`; errors name `path`.
  static StatusOr<MatmulTable> parse(std::string_view text,
                                     const std::string &path,
                                     const std::string &device,
                                     int64_t libraryVersion);
  /// The file's text: entries in key order, so equal tables are equal
  /// bytes.
  std::string toJson() const;
  /// Writes toJson() to `path` atomically (a temporary file, renamed).
  Status save(const std::string &path) const;

  const TunedAlgorithm *find(const std::string &key) const;
  void set(const std::string &key, TunedAlgorithm algorithm);
  size_t size() const { return entries_.size(); }
  const std::string &device() const { return device_; }
  int64_t libraryVersion() const { return libraryVersion_; }
  const std::map<std::string, TunedAlgorithm> &entries() const {
    return entries_;
  }

private:
  std::string device_;
  int64_t libraryVersion_ = 0;
  std::map<std::string, TunedAlgorithm> entries_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_MATMULTABLE_H
