//===- TrainingRunTest.cpp - what a training run tells its observer -------===//
//
// Part of mlt. Trains the hand-built LLaMA plan (LlamaTestPlan.h) on the
// bundled corpus through the run library (train, TrainingRun.h) and checks
// what its observer is told: the start, with the run's figures, then every
// step in order; and that the library itself prints nothing.
//
//===----------------------------------------------------------------------===//

#include "mlt/Run/TrainingRun.h"
#include "../RuntimeExec/LlamaTestPlan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace mlt;
using namespace mlt::run;

/// Records what a run tells, in order.
class Recorder final : public RunObserver {
public:
  void started(const RunSummary &summary) override {
    events.push_back("started");
    this->summary = summary;
  }
  void step(const rt::StepMetrics &metrics, const StepProgress &,
            int64_t steps) override {
    events.push_back("step " + std::to_string(metrics.step) + "/" +
                     std::to_string(steps));
    losses.push_back(metrics.loss);
  }

  std::vector<std::string> events;
  RunSummary summary;
  std::vector<double> losses;
};

// Tests that the observer is told the start, then each step in order, and
// that nothing is printed.
TEST(TrainingRunTest, ObserverIsToldEveryStep) {
  const rt::Plan plan = rt::testing::buildLlamaPlan(
      rt::testing::LlamaShape{}, /*microBatch=*/2, /*seqLen=*/16,
      /*microbatches=*/1);
  RunOptions options;
  options.model = "llama.mltplan";
  options.steps = 3;
  Recorder recorder;
  ::testing::internal::CaptureStdout();
  const Status status = train(options, plan, recorder);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(printed, "");
  EXPECT_EQ(recorder.events,
            (std::vector<std::string>{"started", "step 1/3", "step 2/3",
                                      "step 3/3"}));
  EXPECT_EQ(recorder.summary.model, "llama.mltplan");
  EXPECT_EQ(recorder.summary.globalBatch, 2);
  EXPECT_EQ(recorder.summary.seqLen, 16);
  EXPECT_EQ(recorder.summary.steps, 3);
  EXPECT_EQ(recorder.summary.backend, "cpu");
  EXPECT_EQ(recorder.summary.precision, "fp32");
  EXPECT_EQ(recorder.summary.mesh, "");
  for (double loss : recorder.losses)
    EXPECT_TRUE(std::isfinite(loss)) << loss;
}

} // namespace
