//===- TrainingTestUtil.h - training a plan's ranks in a test ---*- C++ -*-===//
//
// Part of mlt. What the tests that compare layouts share: train every rank
// of a plan from the weights of one seed (trainRanks), keeping each step's
// metrics, the step-1 gradients and the final weights as whole tensors;
// and compare two sets of whole tensors (expectTensorsNear).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMEEXEC_TRAININGTESTUTIL_H
#define MLT_UNITTESTS_RUNTIMEEXEC_TRAININGTESTUTIL_H

#include "PlanTestUtil.h"

#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/io/SafeTensors.h"
#include "mlt/Runtime/io/TokenData.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"

#include "gtest/gtest.h"

#include <functional>
#include <string>
#include <vector>

namespace mlt::rt::testing {

/// A run of a plan: every step's metrics, the gradients of step 1 and the
/// weights at the end, as whole tensors.
struct TrainedRun {
  std::vector<StepMetrics> steps;
  TensorMap gradients, weights;
};

/// Trains every rank of `plan` on `backend` from the weights of seed 5 on
/// the tokens at `tokens` (of `vocab` ids); `atStep1`, if given, also runs
/// after step 1 (reading what else a test keeps). Failures are test
/// failures; the run then holds what was reached.
inline TrainedRun
trainRanks(const Plan &plan, Backend &backend, const std::string &tokens,
           int64_t vocab, const TrainingOptions &options,
           const std::function<Status(RankGroup &)> &atStep1 = {}) {
  TrainedRun result;
  auto group = RankGroup::create(plan, backend);
  EXPECT_TRUE(group) << group.status().message();
  if (!group)
    return result;
  EXPECT_TRUE(initializeParameters(**group, 5));
  auto data = TokenDataset::open(tokens, plan.model.seqLen, vocab);
  EXPECT_TRUE(data) << data.status().message();
  auto trainer = Trainer::create(**group, plan.model, *data, options);
  EXPECT_TRUE(trainer) << trainer.status().message();
  if (!trainer)
    return result;
  Status status = (*trainer)->run([&](const StepMetrics &m) -> Status {
    result.steps.push_back(m);
    if (m.step != 1)
      return Status::ok();
    auto grads = parameterTensors(**group, BufferKind::Gradient);
    if (!grads)
      return grads.takeStatus();
    result.gradients = std::move(*grads);
    return atStep1 ? atStep1(**group) : Status::ok();
  });
  EXPECT_TRUE(status) << status.message();
  auto weights = parameterTensors(**group);
  EXPECT_TRUE(weights) << weights.status().message();
  if (weights)
    result.weights = std::move(*weights);
  return result;
}

/// Every tensor of `actual` within `tolerance` (normwise relative) of
/// `expected`'s, the same names and shapes; a tolerance of 0: bit for bit.
inline void expectTensorsNear(const TensorMap &actual,
                              const TensorMap &expected, double tolerance,
                              const char *what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (const auto &[name, tensor] : expected) {
    ASSERT_TRUE(actual.count(name)) << what << " " << name;
    EXPECT_EQ(actual.at(name).shape, tensor.shape) << what << " " << name;
    if (tolerance == 0)
      EXPECT_EQ(actual.at(name).bytes, tensor.bytes) << what << " " << name;
    else
      EXPECT_LT(relDiff(*toFloat32(name, actual.at(name)),
                        *toFloat32(name, tensor)),
                tolerance)
          << what << " " << name;
  }
}

} // namespace mlt::rt::testing

#endif // MLT_UNITTESTS_RUNTIMEEXEC_TRAININGTESTUTIL_H
