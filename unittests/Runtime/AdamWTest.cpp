//===- AdamWTest.cpp - tests of the CPU adamw family ----------------------===//
//
// Part of mlt. Checks several AdamW steps against torch.optim.AdamW's
// single-tensor update transcribed statement by statement, against the
// textbook formula (bias-corrected moments, decay of the old parameter) in
// long double, the weight-decay switch, and the step check.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/AdamW.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kN = 3 * 41;
constexpr int kSteps = 6;

/// The fixtures' optimizer (train.json), with a larger lr so that the decay
/// and the bias corrections move the parameters visibly.
AdamWParams fixtureParams() {
  AdamWParams p;
  p.lr = 3e-2;
  p.beta1 = 0.9;
  p.beta2 = 0.95;
  p.eps = 1e-8;
  p.weightDecay = 0.1;
  return p;
}

/// torch/optim/adamw.py (_single_tensor_adam with decoupled weight decay)
/// for one element of a T tensor: each tensor statement in T, each Python
/// float in double, rounded to T where it meets the tensor.
template <typename T>
void torchAdamW(T &param, T &expAvg, T &expAvgSq, T grad, double lr,
                double beta1, double beta2, double eps, double weightDecay,
                int64_t step) {
  // if weight_decay != 0: param.mul_(1 - lr * weight_decay)
  if (weightDecay != 0.0)
    param = param * T(1 - lr * weightDecay);
  // exp_avg.lerp_(grad, 1 - beta1)
  const T weight = T(1 - beta1);
  if (std::abs(weight) < T(0.5))
    expAvg = expAvg + weight * (grad - expAvg);
  else
    expAvg = grad - (grad - expAvg) * (T(1) - weight);
  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
  expAvgSq = expAvgSq * T(beta2);
  expAvgSq = expAvgSq + T(1 - beta2) * grad * grad;
  // bias_correction1 = 1 - beta1 ** step; bias_correction2 = 1 - beta2 ** step
  const double biasCorrection1 = 1 - std::pow(beta1, double(step));
  const double biasCorrection2 = 1 - std::pow(beta2, double(step));
  // step_size = lr / bias_correction1
  const double stepSize = lr / biasCorrection1;
  // bias_correction2_sqrt = sqrt(bias_correction2)
  const double biasCorrection2Sqrt = std::sqrt(biasCorrection2);
  // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
  const T denom = std::sqrt(expAvgSq) / T(biasCorrection2Sqrt) + T(eps);
  // param.addcdiv_(exp_avg, denom, value=-step_size)
  param = param + T(-stepSize) * expAvg / denom;
}

template <typename T> class AdamWTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AdamWTest, FloatTypes);

// Tests several steps, with decay and without, against PyTorch's statements.
// Both evaluate the same operations in the same order, so they agree to the
// last bit; the tolerance only allows for a compiler contracting a * b + c
// into a fused multiply-add in one of them.
TYPED_TEST(AdamWTest, MatchesTorchStatementsOverSeveralSteps) {
  using T = TypeParam;
  const AdamWParams hp = fixtureParams();
  for (bool decay : {true, false}) {
    SCOPED_TRACE(decay ? "with decay" : "without decay");
    std::mt19937 rng(81);
    auto param = randomVector<T>(rng, kN);
    std::vector<T> m(kN, T(0)), v(kN, T(0));
    auto refParam = param, refM = m, refV = v;
    for (int64_t step = 1; step <= kSteps; ++step) {
      auto grad = randomVector<T>(rng, kN, -0.5, 0.5);
      ASSERT_TRUE(adamwStep<T>(param.data(), m.data(), v.data(), grad.data(),
                               kN, hp, step, decay)
                      .isOk());
      for (int64_t i = 0; i < kN; ++i)
        torchAdamW<T>(refParam[i], refM[i], refV[i], grad[i], hp.lr, hp.beta1,
                      hp.beta2, hp.eps, decay ? hp.weightDecay : 0.0, step);
    }
    const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
    EXPECT_LT(relError(param, refParam), tol);
    EXPECT_LT(relError(m, refM), tol);
    EXPECT_LT(relError(v, refV), tol);
  }
}

// Tests the double kernel against AdamW as the paper writes it, in long
// double: m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p = p (1 - lr wd) - lr m^ / (sqrt(v^) + eps). Agreement to 1e-12 shows the
// reordered PyTorch form is the same update and that the decay applies to
// the parameter before the step.
TEST(AdamWFormulaTest, MatchesTextbookFormulaInDouble) {
  const AdamWParams hp = fixtureParams();
  std::mt19937 rng(82);
  auto param = randomVector<double>(rng, kN);
  std::vector<double> m(kN, 0.0), v(kN, 0.0);
  std::vector<long double> refP(param.begin(), param.end()), refM(kN, 0.0L),
      refV(kN, 0.0L);
  for (int64_t step = 1; step <= kSteps; ++step) {
    auto grad = randomVector<double>(rng, kN, -0.5, 0.5);
    ASSERT_TRUE(adamwStep<double>(param.data(), m.data(), v.data(), grad.data(),
                                  kN, hp, step, true)
                    .isOk());
    for (int64_t i = 0; i < kN; ++i) {
      const long double g = grad[i];
      refM[i] = hp.beta1 * refM[i] + (1 - hp.beta1) * g;
      refV[i] = hp.beta2 * refV[i] + (1 - hp.beta2) * g * g;
      const long double mHat =
          refM[i] / (1 - std::pow((long double)hp.beta1, step));
      const long double vHat =
          refV[i] / (1 - std::pow((long double)hp.beta2, step));
      refP[i] = refP[i] * (1 - hp.lr * hp.weightDecay) -
                hp.lr * mHat / (std::sqrt(vHat) + hp.eps);
    }
  }
  std::vector<double> expected(refP.begin(), refP.end());
  EXPECT_LT(relError(param, expected), 1e-12);
}

// Tests that applyWeightDecay = false is exactly a zero weight decay, and
// that the decay then changes the result.
TEST(AdamWDecayTest, NoDecayWhenToldSo) {
  std::mt19937 rng(83);
  auto param = randomVector<float>(rng, kN);
  auto grad = randomVector<float>(rng, kN);
  AdamWParams hp = fixtureParams();
  AdamWParams noDecay = hp;
  noDecay.weightDecay = 0.0;

  auto run = [&](const AdamWParams &params, bool decay) {
    auto p = param;
    std::vector<float> m(kN, 0.0f), v(kN, 0.0f);
    for (int64_t step = 1; step <= 3; ++step)
      EXPECT_TRUE(adamwStep<float>(p.data(), m.data(), v.data(), grad.data(),
                                   kN, params, step, decay)
                      .isOk());
    return p;
  };
  EXPECT_EQ(run(hp, false), run(noDecay, true));
  EXPECT_NE(run(hp, false), run(hp, true));
}

// Tests that a step number below 1 (no bias correction possible) is an error.
TEST(AdamWErrorTest, RejectsStepZero) {
  std::vector<float> p(4, 1.0f), m(4, 0.0f), v(4, 0.0f), g(4, 1.0f);
  Status status = adamwStep<float>(p.data(), m.data(), v.data(), g.data(), 4,
                                   fixtureParams(), 0, true);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("step 0"), std::string::npos)
      << status.message();
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
}

} // namespace
