//===- BackgroundCheckpoint.h - a checkpoint written while training goes on -*- C++ -*-===//
//
// Part of mlt. An asynchronous save (mlt-run --async-save, the default)
// stops training only to copy the state into host memory
// (CheckpointStaging::read, at the bus's rate); the shards are then
// written and flushed by a thread of their own while the next steps run.
// The caller commits the checkpoint (Checkpoint.h's phase 3) once the
// write has finished on every process, so that until then `latest` names
// the previous checkpoint, whole: a run killed during the write loses only
// the checkpoint being written. At most one is in flight: the staging
// memory is reused by the next save, which waits for it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_TRAIN_BACKGROUNDCHECKPOINT_H
#define MLT_RUNTIME_TRAIN_BACKGROUNDCHECKPOINT_H

#include "mlt/Runtime/train/CheckpointStaging.h"
#include "mlt/Support/Status.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

namespace mlt::rt {

class BackgroundCheckpoint {
public:
  /// Starts writing what `staging` holds (read for `step`) into the save's
  /// temporary directory `dir` on a thread of its own. `staging` must
  /// outlive the write and not be read again until wait() returns.
  static std::unique_ptr<BackgroundCheckpoint>
  start(const CheckpointStaging &staging, std::string dir, int64_t step);

  /// Waits for the write (a run that ends on an error still ends whole).
  ~BackgroundCheckpoint();
  BackgroundCheckpoint(const BackgroundCheckpoint &) = delete;
  BackgroundCheckpoint &operator=(const BackgroundCheckpoint &) = delete;

  /// Whether the write has ended (in success or failure), without waiting.
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  /// Waits for the write to end: the bytes written, or why it failed.
  StatusOr<uint64_t> wait();

  const std::string &directory() const { return dir_; }
  int64_t step() const { return step_; }
  /// How long the write took (valid once it has finished).
  double seconds() const { return seconds_; }

private:
  BackgroundCheckpoint(std::string dir, int64_t step)
      : dir_(std::move(dir)), step_(step) {}

  std::string dir_;
  int64_t step_;
  std::thread writer_;
  std::atomic<bool> finished_{false};
  std::optional<StatusOr<uint64_t>> result_;
  double seconds_ = 0;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_TRAIN_BACKGROUNDCHECKPOINT_H
