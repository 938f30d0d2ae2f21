//===- ProcessRanksTest.cpp - one rank per process, simulated -------------===//
//
// Part of mlt. On GPUs each rank of a plan is a process of its own, holding
// a RankGroup of that rank alone (RankGroup::createForRank), training it
// with its own Trainer, and gathering whole tensors on rank 0 through a
// RankTransport (gatherParameterTensors). Here threads stand in for the
// processes: each builds only what its process would (its group over its
// rank's communicator of an InProcessWorld, its own dataset and trainer),
// and a transport of mailboxes stands in for NCCL's point-to-point copies.
// The run must equal the one-process run of every rank bit for bit (the
// in-process collectives are deterministic): losses and gradient norms on
// rank 0, the step-1 gradients and the final weights gathered on rank 0.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"

#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/comm/InProcessComm.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/comm/RankTransport.h"
#include "mlt/Runtime/train/Training.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using ::testing::HasSubstr;

namespace {

/// Point-to-point copies between threads: a mailbox per (from, to) pair.
class Mailboxes {
public:
  /// The transport of rank `rank`.
  class Transport final : public RankTransport {
  public:
    Transport(Mailboxes &boxes, int rank) : boxes_(boxes), rank_(rank) {}
    Status send(int toRank, const void *data, size_t bytes) override {
      const auto *begin = static_cast<const uint8_t *>(data);
      std::lock_guard<std::mutex> lock(boxes_.mutex_);
      boxes_.queues_[{rank_, toRank}].emplace_back(begin, begin + bytes);
      boxes_.wake_.notify_all();
      return Status::ok();
    }
    Status receive(int fromRank, void *data, size_t bytes) override {
      std::unique_lock<std::mutex> lock(boxes_.mutex_);
      auto &queue = boxes_.queues_[{fromRank, rank_}];
      boxes_.wake_.wait(lock, [&] { return !queue.empty(); });
      std::vector<uint8_t> message = std::move(queue.front());
      queue.pop_front();
      if (message.size() != bytes)
        return errorf("expected ", bytes, " bytes, got ", message.size());
      std::memcpy(data, message.data(), bytes);
      return Status::ok();
    }

  private:
    Mailboxes &boxes_;
    int rank_;
  };

  /// Whether every sent message was received.
  bool empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto &[pair, queue] : queues_)
      if (!queue.empty())
        return false;
    return true;
  }

private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> queues_;
};

class ProcessRanksTest : public ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    std::vector<uint16_t> tokens(800);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = uint16_t((i * 5 + i / 7) % 16);
    writeTokenFile(path("tokens.u16"), tokens);
    backend_ = createCpuBackend();
  }

  static TrainingOptions options(int64_t steps) {
    TrainingOptions o;
    o.steps = steps;
    o.schedule.lr = 0.02;
    o.optimizer.weightDecay = 0.01;
    o.seed = 3;
    return o;
  }

  /// What one process saw: its metrics, and on rank 0 the gathered
  /// step-1 gradients and final weights.
  struct Run {
    std::vector<StepMetrics> steps;
    TensorMap gradients, weights;
  };

  /// The whole plan in one process (RankGroup::create): the reference.
  Run trainTogether(const Plan &plan, int64_t steps) {
    Run run;
    auto group = RankGroup::create(plan, *backend_);
    EXPECT_TRUE(group) << group.status().message();
    if (!group)
      return run;
    EXPECT_TRUE(initializeParameters(**group, 5));
    auto data = TokenDataset::open(path("tokens.u16"), plan.model.seqLen, 16);
    EXPECT_TRUE(data);
    auto trainer = Trainer::create(**group, plan.model, *data, options(steps));
    EXPECT_TRUE(trainer);
    Status status = (*trainer)->run([&](const StepMetrics &m) {
      run.steps.push_back(m);
      if (m.step == 1)
        run.gradients = *parameterTensors(**group, BufferKind::Gradient);
      return Status::ok();
    });
    EXPECT_TRUE(status) << status.message();
    run.weights = *parameterTensors(**group);
    return run;
  }

  /// One thread per rank, each as its own process would run it.
  std::vector<Run> trainApart(const Plan &plan, int64_t steps) {
    const int ranks = int(plan.ranks.size());
    InProcessWorld world(*planMesh(plan));
    Mailboxes boxes;
    std::vector<Run> runs(static_cast<size_t>(ranks));
    std::vector<std::string> failures(static_cast<size_t>(ranks));
    auto process = [&](int rank) -> Status {
      StatusOr<Communicator *> communicator = world.communicator(rank);
      if (!communicator)
        return communicator.takeStatus();
      auto group = RankGroup::createForRank(plan, uint32_t(rank), *backend_,
                                            *communicator);
      if (!group)
        return group.takeStatus();
      if ((*group)->size() != 1 || (*group)->planSize() != uint32_t(ranks) ||
          (*group)->executor(0).rankPlan().rank != uint32_t(rank))
        return errorf("the group does not hold rank ", rank, " alone");
      MLT_RETURN_IF_ERROR(initializeParameters(**group, 5));
      auto data = TokenDataset::open(path("tokens.u16"), plan.model.seqLen, 16);
      if (!data)
        return data.takeStatus();
      auto trainer =
          Trainer::create(**group, plan.model, *data, options(steps));
      if (!trainer)
        return trainer.takeStatus();
      Mailboxes::Transport transport(boxes, rank);
      Run &run = runs[size_t(rank)];
      MLT_RETURN_IF_ERROR((*trainer)->run([&](const StepMetrics &m) {
        run.steps.push_back(m);
        if (m.step != 1)
          return Status::ok();
        auto grads = gatherParameterTensors(**group, plan, transport,
                                            BufferKind::Gradient);
        if (!grads)
          return grads.takeStatus();
        run.gradients = std::move(*grads);
        return Status::ok();
      }));
      auto weights = gatherParameterTensors(**group, plan, transport);
      if (!weights)
        return weights.takeStatus();
      run.weights = std::move(*weights);
      return Status::ok();
    };
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank)
      threads.emplace_back([&, rank] {
        Status status = process(rank);
        if (!status) {
          failures[size_t(rank)] = status.message();
          world.abort("rank " + std::to_string(rank) + " failed");
        }
      });
    for (std::thread &thread : threads)
      thread.join();
    for (int rank = 0; rank < ranks; ++rank)
      EXPECT_EQ(failures[size_t(rank)], "") << "rank " << rank;
    EXPECT_TRUE(boxes.empty()) << "a block was sent but never received";
    return runs;
  }

  /// The processes' run equals the one-process run, bit for bit; only
  /// rank 0 measured the loss and gathered tensors.
  static void expectSameRun(const std::vector<Run> &apart,
                            const Run &together) {
    ASSERT_FALSE(apart.empty());
    const Run &root = apart.front();
    ASSERT_EQ(root.steps.size(), together.steps.size());
    for (size_t s = 0; s < together.steps.size(); ++s) {
      EXPECT_EQ(root.steps[s].loss, together.steps[s].loss) << "step " << s;
      EXPECT_EQ(root.steps[s].gradNorm, together.steps[s].gradNorm)
          << "step " << s;
    }
    for (const auto &[what, mine, theirs] :
         {std::tuple<const char *, const TensorMap *, const TensorMap *>{
              "gradient", &root.gradients, &together.gradients},
          {"weight", &root.weights, &together.weights}}) {
      ASSERT_EQ(mine->size(), theirs->size()) << what;
      for (const auto &[name, tensor] : *theirs) {
        ASSERT_TRUE(mine->count(name)) << what << " " << name;
        EXPECT_EQ(mine->at(name).shape, tensor.shape) << what << " " << name;
        EXPECT_EQ(mine->at(name).bytes, tensor.bytes) << what << " " << name;
      }
    }
    for (size_t rank = 1; rank < apart.size(); ++rank) {
      EXPECT_TRUE(apart[rank].gradients.empty()) << "rank " << rank;
      EXPECT_TRUE(apart[rank].weights.empty()) << "rank " << rank;
      ASSERT_EQ(apart[rank].steps.size(), together.steps.size());
      EXPECT_EQ(apart[rank].steps.back().loss, 0.0)
          << "rank " << rank << " read the loss";
    }
  }

  std::unique_ptr<Backend> backend_;
};

// Tests data and tensor parallel plans (dp=2, tp=2, dp=2 x tp=2), each rank
// trained as its own process would: the same training as one process, and
// whole tensors gathered on rank 0 from the lowest rank holding each block.
TEST_F(ProcessRanksTest, TrainLikeOneProcess) {
  for (auto [dp, tp] : {std::pair<int64_t, int64_t>{2, 1}, {1, 2}, {2, 2}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " tp " + std::to_string(tp));
    MlpModel model;
    model.dp = dp;
    model.tp = tp;
    Plan plan = buildMlpPlan(model);
    expectSameRun(trainApart(plan, 3), trainTogether(plan, 3));
  }
}

// Tests plans whose parameters, gradients and moments are held by segments
// (ZeRO-1 over 3 ranks in f32 and bf16, slices cutting through the
// parameters; the MLP's tensor-parallel blocks as segments, replicated
// over dp): each process initializes its slices, and rank 0 gathers whole
// tensors range by range; the run is the one-process run, bit for bit.
TEST_F(ProcessRanksTest, SegmentsTrainLikeOneProcess) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "ZeRO-1 bf16" : "ZeRO-1 f32");
    TinyModel model;
    model.hidden = 20;
    model.microBatch = 6;
    model.dp = 3;
    Plan plan = buildTinyZeroPlan(model, bf16);
    expectSameRun(trainApart(plan, 3), trainTogether(plan, 3));
  }
  SCOPED_TRACE("tensor-parallel blocks as segments");
  MlpModel model;
  model.dp = 2;
  model.tp = 2;
  Plan plan = withParameterSegments(buildMlpPlan(model), {kMlpUp, kMlpDown});
  expectSameRun(trainApart(plan, 3), trainTogether(plan, 3));
}

// Tests a group created for one rank: the rank must exist, and one
// process's rank alone cannot assemble a sharded tensor by itself.
TEST_F(ProcessRanksTest, GroupOfOneRank) {
  MlpModel model;
  model.tp = 2;
  Plan plan = buildMlpPlan(model);
  InProcessWorld world(*planMesh(plan));
  auto missing =
      RankGroup::createForRank(plan, 2, *backend_, *world.communicator(0));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().message(), "the plan has no rank 2 (it has 2)");

  auto group =
      RankGroup::createForRank(plan, 1, *backend_, *world.communicator(1));
  ASSERT_TRUE(group) << group.status().message();
  EXPECT_EQ((*group)->size(), 1u);
  EXPECT_EQ((*group)->planSize(), 2u);
  ASSERT_TRUE(initializeParameters(**group, 5));
  auto partial = parameterTensors(**group);
  ASSERT_FALSE(partial);
  EXPECT_THAT(partial.status().message(), HasSubstr("the ranks hold only"));
}

} // namespace
