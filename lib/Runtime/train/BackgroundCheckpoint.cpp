//===- BackgroundCheckpoint.cpp - a checkpoint written while training goes on ===//
//
// Part of mlt. See BackgroundCheckpoint.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/BackgroundCheckpoint.h"

#include <system_error>

using namespace mlt;
using namespace mlt::rt;

std::unique_ptr<BackgroundCheckpoint>
BackgroundCheckpoint::start(const CheckpointStaging &staging, std::string dir,
                            int64_t step) {
  std::unique_ptr<BackgroundCheckpoint> save(
      new BackgroundCheckpoint(std::move(dir), step));
  BackgroundCheckpoint *self = save.get();
  auto write = [self, &staging] {
    const auto begun = std::chrono::steady_clock::now();
    self->result_.emplace(staging.write(self->dir_, self->step_));
    self->seconds_ = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - begun)
                         .count();
    self->finished_.store(true, std::memory_order_release);
  };
  try {
    save->writer_ = std::thread(write);
  } catch (const std::system_error &) {
    write(); // (no thread to be had: written now, as a synchronous save)
  }
  return save;
}

BackgroundCheckpoint::~BackgroundCheckpoint() {
  if (writer_.joinable())
    writer_.join();
}

StatusOr<uint64_t> BackgroundCheckpoint::wait() {
  if (writer_.joinable())
    writer_.join();
  return std::move(*result_);
}
