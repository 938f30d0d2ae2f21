//===- CheckpointStaging.h - a checkpoint's state in host memory -*- C++ -*-===//
//
// Part of mlt. Saving a training checkpoint is two halves with different
// owners: reading the state out of the ranks' arenas, which must happen at
// a step boundary (the next step's AdamW overwrites it), and writing it to
// files, which need not. CheckpointStaging is the host memory between them:
// each of a process's ranks' pieces (Parameters.h's SavedPiece) in one
// block, allocated once and reused by every save. On a GPU the blocks are
// page-locked (DeviceContext::allocateHostStaging), so that the read runs
// at the bus's rate (about 50 GB/s on an H200's PCIe 5 link, against a few
// GB/s into pageable memory).
//
// A synchronous save reads and writes in turn; an asynchronous one
// (BackgroundCheckpoint.h) reads at the step boundary, and writes on a
// thread of its own while training goes on.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAIN_CHECKPOINTSTAGING_H
#define MLT_RUNTIME_TRAIN_CHECKPOINTSTAGING_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <vector>

namespace mlt::rt {

class CheckpointStaging {
public:
  /// Host memory for the pieces that `local`'s ranks of `plan` write (a
  /// rank holding only replicas of others' pieces has none), page-locked
  /// through each rank's device when `pinned`.
  static StatusOr<std::unique_ptr<CheckpointStaging>>
  create(RankGroup &local, const Plan &plan, bool pinned);

  /// The bytes a process with ranks `local` of `plan` stages (every local
  /// rank's pieces in f32): what create allocates.
  static StatusOr<uint64_t> bytesFor(const Plan &plan,
                                     const std::vector<uint32_t> &local);
  /// The bytes each rank of `plan` stages, by plan rank (a rank that
  /// writes no piece is absent); sums saturate (a plan's sizes may be
  /// absurd).
  static StatusOr<std::map<uint32_t, uint64_t>> bytesByRank(const Plan &plan);

  ~CheckpointStaging();
  CheckpointStaging(const CheckpointStaging &) = delete;
  CheckpointStaging &operator=(const CheckpointStaging &) = delete;

  /// Copies every piece out of its rank's buffer (as f32): the state of the
  /// step just ended. Waits for the ranks' queued work.
  Status read();

  /// Writes each rank's shard into `dir` from what `read` copied, a thread
  /// per shard, each flushed to disk, with the digest of its hashes beside
  /// it (for commitCheckpoint); the shards' metadata name `step`. Returns
  /// the bytes written. Touches no device: it may run on any thread while
  /// the ranks train, as long as no `read` runs meanwhile.
  StatusOr<uint64_t> write(const std::string &dir, int64_t step) const;

  /// The bytes staged.
  uint64_t bytes() const;

private:
  struct Shard;
  CheckpointStaging() = default;

  RankGroup *local_ = nullptr;
  std::vector<Shard> shards_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAIN_CHECKPOINTSTAGING_H
