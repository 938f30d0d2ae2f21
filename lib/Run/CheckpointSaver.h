//===- CheckpointSaver.h - a run's training checkpoints ---------*- C++ -*-===//
//
// Part of mlt. Private to lib/Run. How mlt-run's --save-checkpoint saves,
// with one process or one per GPU: rank 0's process begins a checkpoint
// (its temporary directory, named to the others), every process writes
// its ranks' shards, and once all have, rank 0's commits it
// (Checkpoint.h's three phases; the processes agree after each).
//
// Asynchronously (--async-save, the default), a save stops training only
// while the state is copied into host memory kept for it
// (CheckpointStaging.h); the shards are written in the background
// (BackgroundCheckpoint.h), and after each later step the processes ask
// each other whether all have finished (one small MPI reduction while a
// save is in flight); once they have, rank 0's commits. The next save, the
// end of the run and a stop wait for it. A write that fails ends the run
// with its error; the previous checkpoint, which `latest` still names, is
// untouched.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUN_CHECKPOINTSAVER_H
#define MLT_LIB_RUN_CHECKPOINTSAVER_H

#include "Distributed.h"
#include "mlt/Run/RunObserver.h"
#include "mlt/Runtime/train/BackgroundCheckpoint.h"
#include "mlt/Runtime/train/Checkpoint.h"
#include "mlt/Runtime/train/CheckpointStaging.h"

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mlt::run {

class CheckpointSaver {
public:
  /// Saves `plan`'s state in `ranks` under `root`, keeping the newest
  /// `keepLast` (0: all); in the background when `async`. `reports`:
  /// whether this process tells `observer`.
  CheckpointSaver(std::string root, int64_t keepLast, bool async,
                  const rt::Plan &plan, rt::RankGroup &ranks, Distributed *dist,
                  RunObserver &observer, bool reports)
      : root_(std::move(root)), keepLast_(keepLast), async_(async),
        plan_(plan), ranks_(ranks), dist_(dist), observer_(observer),
        reports_(reports) {}

  /// Waits for prepare's allocation, the save in flight (uncommitted) and
  /// the removal of retired checkpoints.
  ~CheckpointSaver();

  /// When async, begins allocating the host memory the saves keep, on a
  /// thread of its own (page-locking 12 GiB takes about 4 s): the first
  /// save waits for it only if it has not finished by then.
  void prepare();

  /// Saves `state` (the state of the step just ended): whole before it
  /// returns, or begun in the background when async and not `wait` (the
  /// save in flight, if any, is committed first). Returns the checkpoint's
  /// directory once committed (empty while it is written).
  StatusOr<std::string> save(const rt::TrainingCheckpoint &state, bool wait);

  /// After a step without a save: commits the save in flight if every
  /// process has written its part. Returns its directory then, else empty.
  StatusOr<std::string> poll();

  /// Waits for the save in flight and commits it (the end of the run).
  /// Returns its directory, or empty if there was none.
  StatusOr<std::string> finish();

  /// Whether a save is in flight.
  bool inFlight() const { return bool(writing_); }

private:
  /// Phase 1: the temporary directory, on every process.
  StatusOr<std::string> begin(int64_t step);
  /// Phase 3 once every process has `written` its shards (or failed to):
  /// rank 0's commits (or abandons the directory); all agree.
  StatusOr<std::string> commit(const std::string &dir,
                               const rt::TrainingCheckpoint &state,
                               const StatusOr<uint64_t> &written,
                               std::vector<std::string> *retired = nullptr);
  /// The processes agree on `status` (one process: `status`).
  Status agree(Status status);

  std::string root_;
  int64_t keepLast_;
  bool async_;
  const rt::Plan &plan_;
  rt::RankGroup &ranks_;
  Distributed *dist_;
  RunObserver &observer_;
  bool reports_;
  /// Kept from prepare (or the first asynchronous save) to the end of the
  /// run; allocated by `preparing_`, which failed with `prepared_`.
  std::unique_ptr<rt::CheckpointStaging> staging_;
  std::thread preparing_;
  Status prepared_ = Status::ok();
  /// The save in flight, its state and how long its step boundary took.
  std::unique_ptr<rt::BackgroundCheckpoint> writing_;
  rt::TrainingCheckpoint writingState_;
  double writingPause_ = 0;
  /// Removes the checkpoints a background save's commit retired beyond
  /// --keep-last (rank 0's process), while training goes on; joined before
  /// the next save begins and at the end.
  std::thread removing_;
};

} // namespace mlt::run

#endif // MLT_LIB_RUN_CHECKPOINTSAVER_H
