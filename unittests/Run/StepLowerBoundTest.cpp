//===- StepLowerBoundTest.cpp - the step bound on compiled pipelines ------===//
//
// Part of mlt. Tests mlt/Analysis/StepLowerBound.h on plans the compiler
// builds, as the planner compiles its candidates (representative ranks):
// the bound that a plan of a few micro-batches gives for many is the one
// the plan of that many gives, and neither is more than the predicted step.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/StepLowerBound.h"
#include "mlt/Analysis/Timeline.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Run/PlanSource.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unistd.h>
#include <string>

using namespace mlt;
using namespace mlt::run;

namespace {

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The tiny model made `layers` deep (as test/Training/planner-shallow.test
/// does), written to a file of the test's own.
std::string deepTinyModel(int layers) {
  std::string text = readFile(MLT_SOURCE_DIR "/models/llama/tiny.mlir");
  auto replace = [&](const std::string &from, const std::string &to) {
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    for (; at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  const std::string n = std::to_string(layers);
  replace("layers 4 ", "layers " + n + " ");
  replace("num_layers = 4,", "num_layers = " + n + ",");
  replace("= 0 to 4 ", "= 0 to " + n + " ");
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("mlt-step-bound-" + std::to_string(::getpid()) + ".mlir"))
          .string();
  std::ofstream(path) << text;
  return path;
}

cost::Calibration cpuCalibration() {
  StatusOr<cost::Calibration> calibration = cost::Calibration::parse(
      readFile(MLT_SOURCE_DIR "/test/Training/Inputs/calibration-cpu.json"));
  EXPECT_TRUE(calibration) << calibration.status().message();
  return *calibration;
}

/// The layout `options` (mlt-opt's form) with `microbatches` of one
/// sequence of 16 tokens each, compiled into representative ranks and
/// priced.
struct Priced {
  rt::Plan plan;
  cost::LaunchCosts costs;
};
std::optional<Priced> compile(const std::string &model,
                              const std::string &layoutText,
                              int64_t microbatches,
                              const cost::Calibration &calibration) {
  RunOptions options;
  options.model = model;
  StatusOr<Layout> layout = parseLayoutOptionText(layoutText);
  if (!layout) {
    ADD_FAILURE() << layoutText << ": " << layout.status().message();
    return std::nullopt;
  }
  options.layout = *layout;
  options.layout.microbatches = microbatches;
  options.batch = microbatches * options.layout.dp;
  options.seqLen = 16;
  CandidateCompile candidate;
  candidate.quiet = true;
  candidate.representatives = true;
  std::string bytes;
  StatusOr<rt::Plan> plan = obtainPlan(options, bytes, candidate);
  if (!plan) {
    ADD_FAILURE() << layoutText << ": " << plan.status().message();
    return std::nullopt;
  }
  StatusOr<cost::LaunchCosts> costs = cost::priceLaunches(*plan, calibration);
  if (!costs) {
    ADD_FAILURE() << costs.status().message();
    return std::nullopt;
  }
  return Priced{std::move(*plan), std::move(*costs)};
}

// Tests 1F1B, interleaved and zero-bubble pipelines, with tp, dp, ZeRO and
// whole-layer recomputation: the bound from a plan of few micro-batches is
// the one from the plan of many (from at least 3), and at most its
// predicted step.
TEST(StepLowerBoundTest, FewMicrobatchesBoundManyAsTheirOwnPlanDoes) {
  const std::string model = deepTinyModel(8);
  const cost::Calibration calibration = cpuCalibration();
  struct Case {
    std::string layout;
    int64_t few, many;
  };
  const Case cases[] = {
      {"pp=4", 3, 12},
      {"pp=4", 3, 5},
      {"pp=8", 3, 16},
      {"pp=2 dp=2 zero=1", 3, 9},
      {"pp=2 dp=2 zero=2", 3, 9},
      {"pp=4 tp=2 sequence-parallel", 3, 8},
      {"pp=4 vp=2", 4, 12},
      {"pp=2 vp=2 dp=2 zero=1", 4, 8},
      {"pp=2 vp=2 dp=2 zero=1", 2, 8},
      {"pp=4 schedule=zb-h1", 3, 12},
      {"pp=4 recompute-layers=all", 3, 8},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.layout + ", " + std::to_string(c.few) + " and " +
                 std::to_string(c.many) + " micro-batches");
    const std::optional<Priced> few =
        compile(model, c.layout, c.few, calibration);
    const std::optional<Priced> many =
        compile(model, c.layout, c.many, calibration);
    ASSERT_TRUE(few && many);
    StatusOr<double> fromFew =
        cost::stepLowerBound(few->plan, few->costs, c.many);
    StatusOr<double> fromMany =
        cost::stepLowerBound(many->plan, many->costs, c.many);
    ASSERT_TRUE(fromFew) << fromFew.status().message();
    ASSERT_TRUE(fromMany) << fromMany.status().message();
    StatusOr<cost::StepTimeline> predicted =
        cost::predictStep(many->plan, many->costs);
    ASSERT_TRUE(predicted) << predicted.status().message();
    const double step = predicted->seconds();
    // (from 3 on, the plan of few has middle micro-batches, which are the
    // ones more of them add; from 2, the least of the first and last)
    if (c.few >= 3)
      EXPECT_NEAR(*fromFew, *fromMany, 1e-9 * step);
    else
      EXPECT_LE(*fromFew, *fromMany);
    EXPECT_LE(*fromMany, step);
    // (a bound worth reading: the stages' work and the pipeline's fill)
    EXPECT_GE(*fromMany, 0.6 * step);
  }
  std::filesystem::remove(model);
}

// Tests that a plan does not bound a step of fewer micro-batches than its
// own.
TEST(StepLowerBoundTest, RefusesFewerMicrobatchesThanThePlansOwn) {
  const std::string model = deepTinyModel(8);
  const std::optional<Priced> plan =
      compile(model, "pp=2", 4, cpuCalibration());
  ASSERT_TRUE(plan);
  StatusOr<double> bound = cost::stepLowerBound(plan->plan, plan->costs, 3);
  ASSERT_FALSE(bound);
  EXPECT_EQ(bound.status().message(),
            "a step bound for 3 micro-batches from a plan of 4");
  std::filesystem::remove(model);
}

} // namespace
