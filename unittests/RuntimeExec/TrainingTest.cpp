//===- TrainingTest.cpp - schedule, initialization, training loop ---------===//
//
// Part of mlt. The learning-rate schedule at its corners; the HF-style
// initialization (statistics, norms, determinism); the trainer on the tiny
// plan: it learns, micro-batching does not change the training, a NaN loss
// stops it, and weights survive a checkpoint round trip.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"

#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using ::testing::HasSubstr;

namespace {

//===----------------------------------------------------------------------===//
// Learning-rate schedule
//===----------------------------------------------------------------------===//

// Tests the constant schedule, with and without warmup.
TEST(LearningRateTest, Constant) {
  LRSchedule s;
  s.lr = 0.01;
  EXPECT_DOUBLE_EQ(learningRate(s, 1, 10), 0.01);
  EXPECT_DOUBLE_EQ(learningRate(s, 10, 10), 0.01);
  s.warmup = 4;
  EXPECT_DOUBLE_EQ(learningRate(s, 1, 10), 0.0025);
  EXPECT_DOUBLE_EQ(learningRate(s, 2, 10), 0.005);
  EXPECT_DOUBLE_EQ(learningRate(s, 4, 10), 0.01);
  EXPECT_DOUBLE_EQ(learningRate(s, 5, 10), 0.01);
}

// Tests the cosine's end set apart from the run's steps (--lr-decay-steps,
// and a resumed run's longer --steps): the same curve up to it, min_lr past
// it.
TEST(LearningRateTest, CosineEndsAtItsDecaySteps) {
  LRSchedule s;
  s.kind = LRScheduleKind::Cosine;
  s.lr = 1.0;
  s.minLR = 0.1;
  s.warmup = 10;
  s.decaySteps = 110;
  for (int64_t step = 1; step <= 110; ++step)
    EXPECT_DOUBLE_EQ(learningRate(s, step, 300), learningRate(s, step, 110));
  EXPECT_NEAR(learningRate(s, 60, 300), 0.55, 1e-12);
  for (int64_t step : {111, 200, 300})
    EXPECT_NEAR(learningRate(s, step, 300), 0.1, 1e-12);
  // A run shorter than the cosine stops part of the way down.
  EXPECT_NEAR(learningRate(s, 60, 60), 0.55, 1e-12);
}

// Tests the cosine schedule: warmup, the midpoint, min_lr at the last step.
TEST(LearningRateTest, Cosine) {
  LRSchedule s;
  s.kind = LRScheduleKind::Cosine;
  s.lr = 1.0;
  s.minLR = 0.1;
  s.warmup = 10;
  const int64_t steps = 110;
  EXPECT_DOUBLE_EQ(learningRate(s, 5, steps), 0.5);
  EXPECT_DOUBLE_EQ(learningRate(s, 10, steps), 1.0);
  // (s - warmup) / (steps - warmup) = 1/2: halfway between lr and min_lr.
  EXPECT_NEAR(learningRate(s, 60, steps), 0.55, 1e-12);
  EXPECT_NEAR(learningRate(s, 35, steps),
              0.1 + 0.45 * (1 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(learningRate(s, steps, steps), 0.1, 1e-12);
  // Strictly decreasing after the warmup.
  for (int64_t step = 11; step < steps; ++step)
    EXPECT_GT(learningRate(s, step, steps), learningRate(s, step + 1, steps));

  // No warmup: the first step is just below lr.
  s.warmup = 0;
  EXPECT_LT(learningRate(s, 1, 100), 1.0);
  EXPECT_GT(learningRate(s, 1, 100), 0.999);
  EXPECT_NEAR(learningRate(s, 100, 100), 0.1, 1e-12);
  // Warmup covering every step: no decay.
  s.warmup = 8;
  EXPECT_DOUBLE_EQ(learningRate(s, 8, 8), 1.0);
}

//===----------------------------------------------------------------------===//
// Initialization
//===----------------------------------------------------------------------===//

// Tests the Box-Muller generator's moments.
TEST(InitTest, NormalGeneratorMoments) {
  NormalGenerator gen(7);
  const int n = 200000;
  double sum = 0, sumSq = 0, sum4 = 0;
  for (int i = 0; i < n; ++i) {
    double x = gen.next();
    sum += x;
    sumSq += x * x;
    sum4 += x * x * x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sumSq / n, 1.0, 0.01);
  EXPECT_NEAR(sum4 / n, 3.0, 0.06); // the normal's kurtosis
}

// Tests normal(0, 0.02) for matrices, ones for norm weights, and determinism.
TEST(InitTest, HFStyle) {
  std::vector<float> w = initialParameterValues(
      "model.layers.0.mlp.up_proj.weight", {256, 256}, 1234);
  ASSERT_EQ(w.size(), 65536u);
  double sum = 0, sumSq = 0;
  for (float x : w) {
    sum += x;
    sumSq += double(x) * x;
  }
  const double mean = sum / w.size();
  const double stddev = std::sqrt(sumSq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 3 * 0.02 / 256);
  EXPECT_NEAR(stddev, 0.02, 0.0005);

  std::vector<float> norm =
      initialParameterValues("model.norm.weight", {64}, 1234);
  EXPECT_EQ(norm, std::vector<float>(64, 1.0f));

  EXPECT_EQ(w, initialParameterValues("model.layers.0.mlp.up_proj.weight",
                                      {256, 256}, 1234));
  EXPECT_NE(w, initialParameterValues("model.layers.0.mlp.up_proj.weight",
                                      {256, 256}, 1235));
  EXPECT_NE(w, initialParameterValues("model.layers.1.mlp.up_proj.weight",
                                      {256, 256}, 1234));
}

// Tests that initializeParameters fills every parameter and zeroes the
// optimizer states.
TEST(InitTest, InitializeExecutor) {
  Plan plan = buildTinyPlan(TinyModel());
  std::unique_ptr<Backend> backend = createCpuBackend();
  auto exec = Executor::create(plan, 0, *backend);
  ASSERT_TRUE(exec);
  size_t m = *(*exec)->findBuffer(std::string(kExpAvgPrefix) + kTinyHead);
  std::vector<float> junk(16 * 8, 5.0f);
  ASSERT_TRUE((*exec)->writeFloats(m, junk.data(), int64_t(junk.size())));
  ASSERT_TRUE(initializeParameters(**exec, 99));
  EXPECT_EQ(*(*exec)->readFloats(m), std::vector<float>(16 * 8, 0.0f));
  EXPECT_EQ(*(*exec)->readFloats(*(*exec)->findBuffer(
                std::string(kParameterPrefix) + kTinyHead)),
            initialParameterValues(kTinyHead, {16, 8}, 99));
  EXPECT_EQ(*(*exec)->readFloats(*(*exec)->findBuffer(
                std::string(kParameterPrefix) + kTinyNorm)),
            std::vector<float>(8, 1.0f));
  EXPECT_EQ(countParameters((*exec)->rankPlan()), 16 * 8 * 2 + 8);
}

//===----------------------------------------------------------------------===//
// Trainer
//===----------------------------------------------------------------------===//

class TrainerTest : public ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    writeLearnableTokens(path("tokens.u16"));
    backend_ = createCpuBackend();
  }

  /// An executor for `model`, initialized with seed 5.
  std::unique_ptr<Executor> makeExecutor(const TinyModel &model) {
    plans_.push_back(std::make_unique<Plan>(buildTinyPlan(model)));
    auto exec = Executor::create(*plans_.back(), 0, *backend_);
    EXPECT_TRUE(exec) << exec.status().message();
    if (!exec)
      return nullptr;
    EXPECT_TRUE(initializeParameters(**exec, 5));
    return std::move(*exec);
  }

  TokenDataset openData(int64_t seqLen = 4) {
    auto data = TokenDataset::open(path("tokens.u16"), seqLen, 16);
    EXPECT_TRUE(data) << data.status().message();
    return std::move(*data);
  }

  static TrainingOptions options(int64_t steps) {
    TrainingOptions o;
    o.steps = steps;
    o.schedule.lr = 0.02;
    o.optimizer.weightDecay = 0.0;
    o.shuffle = true;
    o.seed = 3;
    return o;
  }

  std::unique_ptr<Backend> backend_;
  std::vector<std::unique_ptr<Plan>> plans_;
};

// Tests that training lowers the loss from ln(vocab) and reports each step.
TEST_F(TrainerTest, Learns) {
  TinyModel model;
  auto exec = makeExecutor(model);
  ASSERT_TRUE(exec);
  TokenDataset data = openData();
  auto trainer =
      Trainer::create(*exec, plans_.back()->model, data, options(40));
  ASSERT_TRUE(trainer) << trainer.status().message();
  std::vector<StepMetrics> steps;
  Status status = (*trainer)->run([&](const StepMetrics &m) {
    steps.push_back(m);
    return Status::ok();
  });
  ASSERT_TRUE(status) << status.message();
  ASSERT_EQ(steps.size(), 40u);
  EXPECT_EQ(steps[0].step, 1);
  EXPECT_EQ(steps[0].tokens, model.microBatch * model.seqLen);
  EXPECT_DOUBLE_EQ(steps[0].lr, 0.02);
  EXPECT_NEAR(steps[0].loss, std::log(16.0), 0.05);
  EXPECT_GT(steps[0].gradNorm, 0.0);
  EXPECT_LT(steps.back().loss, 1.0);

  // The hyper-parameters the last step wrote.
  EXPECT_EQ(*exec->readScalar(*exec->findBuffer(kHyperStep)), 40.0);
  EXPECT_FLOAT_EQ(float(*exec->readScalar(*exec->findBuffer(kHyperLR))), 0.02f);
}

// Tests that 2 micro-batches of 2 train exactly like 1 micro-batch of 4.
TEST_F(TrainerTest, MicrobatchesAreEquivalent) {
  TinyModel whole;
  whole.microBatch = 4;
  TinyModel split;
  split.microBatch = 2;
  split.microbatches = 2;
  auto execWhole = makeExecutor(whole);
  const ModelInfo wholeInfo = plans_.back()->model;
  auto execSplit = makeExecutor(split);
  const ModelInfo splitInfo = plans_.back()->model;
  ASSERT_TRUE(execWhole && execSplit);
  TokenDataset dataWhole = openData(), dataSplit = openData();
  auto a = Trainer::create(*execWhole, wholeInfo, dataWhole, options(3));
  auto b = Trainer::create(*execSplit, splitInfo, dataSplit, options(3));
  ASSERT_TRUE(a && b);
  for (int64_t s = 1; s <= 3; ++s) {
    auto ma = (*a)->step(s);
    auto mb = (*b)->step(s);
    ASSERT_TRUE(ma && mb);
    EXPECT_NEAR(ma->loss, mb->loss, 1e-5 * ma->loss) << "step " << s;
    EXPECT_NEAR(ma->gradNorm, mb->gradNorm, 1e-5 * ma->gradNorm)
        << "step " << s;
  }
  for (const char *name : {kTinyEmbedding, kTinyNorm, kTinyHead}) {
    std::string param = std::string(kParameterPrefix) + name;
    auto pa = execWhole->readFloats(*execWhole->findBuffer(param));
    auto pb = execSplit->readFloats(*execSplit->findBuffer(param));
    ASSERT_TRUE(pa && pb);
    EXPECT_LT(relDiff(*pb, *pa), 1e-5) << name;
  }
}

// Tests that a NaN loss stops training with the step named.
TEST_F(TrainerTest, NaNLossIsAnError) {
  auto exec = makeExecutor(TinyModel());
  ASSERT_TRUE(exec);
  size_t head = *exec->findBuffer(std::string(kParameterPrefix) + kTinyHead);
  std::vector<float> nan(16 * 8, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(exec->writeFloats(head, nan.data(), int64_t(nan.size())));
  TokenDataset data = openData();
  auto trainer = Trainer::create(*exec, plans_.back()->model, data, options(5));
  ASSERT_TRUE(trainer);
  int calls = 0;
  Status status = (*trainer)->run([&](const StepMetrics &) {
    ++calls;
    return Status::ok();
  });
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "loss is NaN at step 1");
  EXPECT_EQ(calls, 0);
}

// Tests that the data must be cut like the plan's sequences.
TEST_F(TrainerTest, SeqLenMismatch) {
  auto exec = makeExecutor(TinyModel());
  ASSERT_TRUE(exec);
  TokenDataset data = openData(8);
  auto trainer = Trainer::create(*exec, plans_.back()->model, data, options(1));
  ASSERT_FALSE(trainer);
  EXPECT_EQ(trainer.status().message(),
            "the data is cut into sequences of 8 tokens, the plan's are 4");
}

// Tests that trained weights survive saving and loading an HF checkpoint,
// and that a checkpoint of another model is rejected by tensor name.
TEST_F(TrainerTest, CheckpointRoundTrip) {
  auto exec = makeExecutor(TinyModel());
  ASSERT_TRUE(exec);
  const ModelInfo info = plans_.back()->model;
  TokenDataset data = openData();
  auto trainer = Trainer::create(*exec, info, data, options(2));
  ASSERT_TRUE(trainer);
  ASSERT_TRUE((*trainer)->run(nullptr));

  auto tensors = parameterTensors(*exec);
  ASSERT_TRUE(tensors);
  EXPECT_EQ(tensors->size(), 3u);
  ASSERT_TRUE(writeCheckpointDir(path("ckpt"), info.hfConfig, *tensors));
  auto loaded = readCheckpoint(path("ckpt"));
  ASSERT_TRUE(loaded) << loaded.status().message();

  auto fresh = makeExecutor(TinyModel());
  ASSERT_TRUE(fresh);
  ASSERT_TRUE(loadParameters(*fresh, *loaded));
  for (const char *name : {kTinyEmbedding, kTinyNorm, kTinyHead}) {
    std::string param = std::string(kParameterPrefix) + name;
    EXPECT_EQ(*fresh->readFloats(*fresh->findBuffer(param)),
              *exec->readFloats(*exec->findBuffer(param)))
        << name;
  }

  loaded->erase(kTinyNorm);
  Status status = loadParameters(*fresh, *loaded);
  ASSERT_FALSE(status);
  EXPECT_THAT(status.message(), HasSubstr(kTinyNorm));
}

} // namespace
