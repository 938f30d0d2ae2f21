//===- RankGroup.cpp - every rank of a plan, run together -----------------===//
//
// Part of mlt. One thread per rank per `parallel` call. The first failure is
// recorded before the world is aborted, so that the errors which the abort
// causes on the other ranks ("collectives aborted: rank 2: ...") can never be
// the one reported.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/comm/InProcessComm.h"

#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

using namespace mlt;
using namespace mlt::rt;

RankGroup::~RankGroup() = default;

StatusOr<std::unique_ptr<RankGroup>>
RankGroup::create(const Plan &plan, Backend &backend, const Options &options) {
  MLT_RETURN_IF_ERROR(verifyPlanStructure(plan));
  std::unique_ptr<RankGroup> group(new RankGroup());
  group->mesh_ = plan.mesh;
  group->planSize_ = uint32_t(plan.ranks.size());
  if (!plan.mesh.empty()) {
    StatusOr<Mesh> mesh = planMesh(plan);
    if (!mesh)
      return mesh.takeStatus();
    InProcessWorld::Options worldOptions;
    worldOptions.timeout = options.collectiveTimeout;
    group->world_ =
        std::make_unique<InProcessWorld>(std::move(*mesh), worldOptions);
  }
  for (uint32_t rank = 0; rank < plan.ranks.size(); ++rank) {
    Communicator *communicator = nullptr;
    if (group->world_) {
      StatusOr<Communicator *> found = group->world_->communicator(int(rank));
      if (!found)
        return found.takeStatus();
      communicator = *found;
    }
    StatusOr<std::unique_ptr<Executor>> executor =
        Executor::create(plan, rank, backend, communicator);
    if (!executor)
      return plan.ranks.size() == 1 ? executor.takeStatus()
                                    : executor.takeStatus().withContext(
                                          "rank " + std::to_string(rank));
    group->executors_.push_back(std::move(*executor));
  }
  return group;
}

StatusOr<std::unique_ptr<RankGroup>>
RankGroup::createForRank(const Plan &plan, uint32_t rank, Backend &backend,
                         Communicator *communicator) {
  MLT_RETURN_IF_ERROR(verifyPlanStructure(plan));
  if (rank >= plan.ranks.size())
    return errorf("the plan has no rank ", rank, " (it has ", plan.ranks.size(),
                  ")");
  std::unique_ptr<RankGroup> group(new RankGroup());
  group->mesh_ = plan.mesh;
  group->planSize_ = uint32_t(plan.ranks.size());
  StatusOr<std::unique_ptr<Executor>> executor =
      Executor::create(plan, rank, backend, communicator);
  if (!executor)
    return executor.takeStatus();
  group->executors_.push_back(std::move(*executor));
  return group;
}

bool RankGroup::isAborted() const { return world_ && world_->isAborted(); }

void RankGroup::abort(const std::string &message) {
  if (world_)
    world_->abort(message);
}

Status
RankGroup::parallel(const std::function<Status(Executor &executor)> &body) {
  if (executors_.size() == 1)
    return body(*executors_[0]);
  if (isAborted())
    return errorf("the ranks stopped at an earlier failure: ",
                  world_->abortMessage());

  std::mutex mutex;
  std::optional<Status> firstFailure; // guarded by mutex
  auto fail = [&](uint32_t rank, const std::string &message) {
    std::string prefixed = "rank " + std::to_string(rank) + ": " + message;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (!firstFailure)
        firstFailure = Status::error(prefixed);
    }
    world_->abort(prefixed);
  };
  auto runRank = [&](uint32_t rank) {
    Status status;
    try {
      status = body(*executors_[rank]);
    } catch (const std::exception &e) {
      status = errorf("uncaught exception: ", e.what());
    } catch (...) {
      status = errorf("uncaught exception");
    }
    if (!status)
      fail(rank, status.message());
  };

  std::vector<std::thread> threads;
  threads.reserve(executors_.size());
  for (uint32_t rank = 0; rank < executors_.size(); ++rank) {
    try {
      threads.emplace_back(runRank, rank);
    } catch (const std::system_error &e) {
      // The ranks already started must not wait for this one.
      fail(rank, std::string("cannot start its thread: ") + e.what());
      break;
    }
  }
  for (std::thread &thread : threads)
    thread.join();
  return firstFailure ? *firstFailure : Status::ok();
}

Status RankGroup::run(std::string_view name) {
  std::vector<size_t> programs;
  for (uint32_t local = 0; local < size(); ++local) {
    StatusOr<size_t> index = executors_[local]->findProgram(name);
    if (!index)
      return size() == 1
                 ? index.takeStatus()
                 : index.takeStatus().withContext(
                       "rank " +
                       std::to_string(executors_[local]->rankPlan().rank));
    programs.push_back(*index);
  }
  return parallel([&](Executor &executor) {
    for (uint32_t local = 0; local < size(); ++local)
      if (executors_[local].get() == &executor)
        return executor.run(programs[local]);
    return errorf("an executor outside the group");
  });
}
