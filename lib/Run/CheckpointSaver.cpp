//===- CheckpointSaver.cpp - a run's training checkpoints -----------------===//
//
// Part of mlt. See CheckpointSaver.h.
//
//===----------------------------------------------------------------------===//

#include "CheckpointSaver.h"

#include <chrono>
#include <filesystem>
#include <system_error>

using namespace mlt;
using namespace mlt::run;
using namespace mlt::rt;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       start)
      .count();
}

} // namespace

CheckpointSaver::~CheckpointSaver() {
  if (preparing_.joinable())
    preparing_.join();
  if (removing_.joinable())
    removing_.join();
}

void CheckpointSaver::prepare() {
  if (!async_ || staging_ || preparing_.joinable() || !prepared_)
    return;
  auto allocate = [this] {
    StatusOr<std::unique_ptr<CheckpointStaging>> made =
        CheckpointStaging::create(ranks_, plan_, /*pinned=*/true);
    if (made)
      staging_ = std::move(*made);
    else
      prepared_ = made.takeStatus();
  };
  try {
    preparing_ = std::thread(allocate);
  } catch (const std::system_error &) {
    allocate();
  }
}

Status CheckpointSaver::agree(Status status) {
#ifdef MLT_HAVE_CUDA
  if (dist_)
    return dist_->session.agree(status).withContext("--save-checkpoint");
#endif
  return status ? status : std::move(status).withContext("--save-checkpoint");
}

StatusOr<std::string> CheckpointSaver::begin(int64_t step) {
  std::string dir;
  Status begun = Status::ok();
  if (reports_) {
    StatusOr<std::string> made = beginCheckpoint(root_, step);
    if (made)
      dir = std::move(*made);
    else
      begun = made.takeStatus();
  }
  MLT_RETURN_IF_ERROR(agree(begun));
#ifdef MLT_HAVE_CUDA
  if (dist_) {
    // The temporary directory's name, from rank 0's process.
    uint64_t length = dir.size();
    MLT_RETURN_IF_ERROR(dist_->session.broadcast(&length, sizeof(length), 0));
    dir.resize(size_t(length));
    MLT_RETURN_IF_ERROR(dist_->session.broadcast(dir.data(), dir.size(), 0));
  }
#endif
  return dir;
}

StatusOr<std::string>
CheckpointSaver::commit(const std::string &dir, const TrainingCheckpoint &state,
                        const StatusOr<uint64_t> &written,
                        std::vector<std::string> *retired) {
  Status shards = agree(written ? Status::ok() : written.status());
  if (!shards && reports_)
    abandonCheckpoint(dir);
  MLT_RETURN_IF_ERROR(shards);
  StatusOr<std::string> saved =
      reports_ ? commitCheckpoint(root_, dir, plan_, state, keepLast_, retired)
               : StatusOr<std::string>(
                     (std::filesystem::path(root_) /
                      checkpointDirName(state.step))
                         .string());
  if (!saved && reports_)
    abandonCheckpoint(dir);
  MLT_RETURN_IF_ERROR(agree(saved ? Status::ok() : saved.status()));
  return saved;
}

StatusOr<std::string> CheckpointSaver::save(const TrainingCheckpoint &state,
                                            bool wait) {
  // At most one in flight: its staging memory is this one's.
  StatusOr<std::string> previous = finish();
  if (!previous)
    return previous;
  // (the removal of checkpoints retired by the last one, before a new
  // save's temporary directory appears beside them)
  if (removing_.joinable())
    removing_.join();
  const auto start = std::chrono::steady_clock::now();
  StatusOr<std::string> dir = begin(state.step);
  if (!dir)
    return dir;
  if (!async_) {
    StatusOr<uint64_t> written =
        writeCheckpointShards(ranks_, plan_, *dir, state.step);
    StatusOr<std::string> saved = commit(*dir, state, written);
    if (saved && reports_)
      observer_.checkpointSaved(
          {*saved, state.step, *written, secondsSince(start), std::nullopt});
    return saved;
  }
  prepare(); // (if not yet begun)
  if (preparing_.joinable())
    preparing_.join();
  Status staged = prepared_;
  if (staged)
    staged = staging_->read();
  staged = agree(staged);
  if (!staged) {
    if (reports_)
      abandonCheckpoint(*dir);
    return staged;
  }
  writingPause_ = secondsSince(start);
  writingState_ = state;
  writing_ = BackgroundCheckpoint::start(*staging_, *dir, state.step);
  if (wait)
    return finish();
  return std::string();
}

StatusOr<std::string> CheckpointSaver::poll() {
  if (!writing_)
    return std::string();
  int pending = writing_->finished() ? 0 : 1;
#ifdef MLT_HAVE_CUDA
  if (dist_) {
    StatusOr<int> any = dist_->session.maxOf(pending);
    if (!any)
      return any.takeStatus();
    pending = *any;
  }
#endif
  if (pending)
    return std::string();
  return finish();
}

StatusOr<std::string> CheckpointSaver::finish() {
  if (!writing_)
    return std::string();
  std::unique_ptr<BackgroundCheckpoint> writing = std::move(writing_);
  StatusOr<uint64_t> written = writing->wait();
  if (!written)
    written = written.takeStatus().withContext(
        "step " + std::to_string(writing->step()) +
        "'s checkpoint, written in the background");
  std::vector<std::string> retired;
  StatusOr<std::string> saved =
      commit(writing->directory(), writingState_, written, &retired);
  if (!saved)
    return saved;
  if (!retired.empty()) {
    if (removing_.joinable())
      removing_.join();
    removing_ = std::thread([retired] { removeRetired(retired); });
  }
  if (reports_)
    observer_.checkpointSaved({*saved, writing->step(), *written,
                               writingPause_, writing->seconds()});
  return saved;
}
