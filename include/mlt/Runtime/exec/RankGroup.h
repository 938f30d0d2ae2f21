//===- RankGroup.h - every rank of a plan, run together ---------*- C++ -*-===//
//
// Part of mlt. A RankGroup brings all ranks of a plan to life in one
// process: an InProcessWorld over the plan's mesh and, per rank, an Executor
// whose device context holds that rank's Communicator (a plan without a mesh
// is one executor and no world). `parallel` runs a function on every rank at
// once, one thread per rank, and returns when all have finished; `run` runs a
// program that way, and the Trainer runs a whole optimizer step per rank.
//
// Errors. A rank whose function fails aborts the world, so that peers blocked
// in a collective (or arriving at one later) return instead of waiting for it
// forever; `parallel` returns the first failure, as "rank 2: <message>". The
// aborted world stays aborted: every later `parallel` fails at once, since the
// ranks are no longer in step. With one rank nothing is prefixed.
//
// Threads. Each `parallel` call starts one std::thread per rank and joins
// them, rather than keeping a pool: the CPU backend has no per-thread state
// (scratch memory lives in the context, OpenBLAS is thread safe), the cost
// (tens of microseconds per rank) is noise next to a training step, which is
// one `parallel` call, and there is no pool to shut down, no lost wake-up and
// no worker left behind by an error. A single-rank plan runs inline on the
// calling thread, exactly as one Executor does. A CUDA backend runs one
// process per GPU: each process holds a RankGroup of its own rank alone
// (`createForRank`, over a NCCL communicator), which also runs inline, so
// it needs no device-bound threads here either; should an in-process
// multi-GPU runner want them, only `parallel`'s body changes.
//
// Local ranks. A group holds the executors of the ranks that live in this
// process: all of the plan's (`create`), or one (`createForRank`). `size()`
// and `executor(i)` index the local ones; executor(i).rankPlan().rank is the
// plan rank. Code that walks the group (the Trainer, Parameters.h) works
// either way; what needs every rank's data (whole tensors of a sharded
// plan) must gather it from the other processes (gatherParameterTensors).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_RANKGROUP_H
#define MLT_RUNTIME_RANKGROUP_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Support/Status.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

class InProcessWorld;

class RankGroup {
public:
  struct Options {
    /// How long a rank waits in one collective for the rest of its group,
    /// or in one transfer group for its peers, before it aborts the world
    /// (InProcessWorld::Options::timeout); zero waits forever. A failing
    /// rank aborts the world anyway, and the plan verifier checks that the
    /// ranks' collectives and transfers match and cannot deadlock, so this
    /// only guards against a bug.
    std::chrono::milliseconds collectiveTimeout{0};
  };

  /// Verifies the plan's structure (verifyPlanStructure), creates the world
  /// over its mesh when it has one, and one executor per rank on `backend`
  /// (Executor::create). `backend` must outlive the group.
  static StatusOr<std::unique_ptr<RankGroup>>
  create(const Plan &plan, Backend &backend, const Options &options);
  static StatusOr<std::unique_ptr<RankGroup>> create(const Plan &plan,
                                                     Backend &backend) {
    return create(plan, backend, Options());
  }

  /// Rank `rank` of `plan` alone, in a process of its own: verifies the
  /// plan's structure and creates that rank's executor over `communicator`
  /// (the rank's side of a world that spans processes, e.g. NCCL), which
  /// must outlive the group. Failures of other ranks do not reach this
  /// group: whoever owns the communicator aborts it.
  static StatusOr<std::unique_ptr<RankGroup>>
  createForRank(const Plan &plan, uint32_t rank, Backend &backend,
                Communicator *communicator);

  ~RankGroup();
  RankGroup(const RankGroup &) = delete;
  RankGroup &operator=(const RankGroup &) = delete;

  /// The number of ranks in this process.
  uint32_t size() const { return uint32_t(executors_.size()); }
  /// The number of ranks of the plan (size() unless created for one rank).
  uint32_t planSize() const { return planSize_; }
  /// The executor of local rank `index` (< size()): plan rank `index` when
  /// the group holds every rank. Between `parallel` calls the calling thread
  /// may use any of them (e.g. to write inputs).
  Executor &executor(uint32_t index) const { return *executors_.at(index); }
  /// The plan's mesh; empty for a plan of one rank without one.
  const std::vector<MeshAxis> &mesh() const { return mesh_; }

  /// Runs `body` on every rank at once, each call on its own thread with its
  /// rank's executor (executor.rankPlan().rank is the rank), and returns when
  /// every call has returned: ok, or the first failure prefixed with its rank.
  /// A failure (or an exception) aborts the world. Inline with one rank.
  Status parallel(const std::function<Status(Executor &executor)> &body);

  /// Runs program `name` on every rank (each must have it).
  Status run(std::string_view name);

  /// Whether a failure has aborted the world (so every later call fails).
  bool isAborted() const;

  /// Aborts the world from any thread (the hang watchdog's), as a failing
  /// rank does: ranks waiting in a collective or exchange return
  /// "collectives aborted: <message>", and so does every later call. Does
  /// nothing without a world (one rank, or a rank of its own process).
  void abort(const std::string &message);

private:
  RankGroup() = default;

  std::vector<MeshAxis> mesh_;
  uint32_t planSize_ = 0;
  // Declared before the executors, so that it outlives their contexts, which
  // hold its communicators.
  std::unique_ptr<InProcessWorld> world_;
  std::vector<std::unique_ptr<Executor>> executors_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_RANKGROUP_H
