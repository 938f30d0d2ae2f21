//===- AdamW.cpp - CPU AdamW optimizer step -------------------------------===//
//
// Part of mlt. torch.optim.AdamW's single-tensor update, transcribed
// operation by operation: each PyTorch tensor op becomes one T expression,
// and each Python-float scalar is computed in double and rounded to T, as
// PyTorch does when it combines a Python scalar with a float tensor.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/AdamW.h"

#include <cmath>

using namespace mlt;
using namespace mlt::cpu;

template <typename T>
Status mlt::cpu::adamwStep(T *param, T *m, T *v, const T *grad, int64_t n,
                           const AdamWParams &params, int64_t step,
                           bool applyWeightDecay) {
  if (step < 1)
    return errorf("adamw: step ", step, " must be at least 1");
  // Python-side scalars of torch.optim.adamw._single_tensor_adam(w).
  const double biasCorrection1 = 1.0 - std::pow(params.beta1, double(step));
  const double biasCorrection2 = 1.0 - std::pow(params.beta2, double(step));
  const double stepSize = params.lr / biasCorrection1;
  const double biasCorrection2Sqrt = std::sqrt(biasCorrection2);

  const bool decay = applyWeightDecay && params.weightDecay != 0.0;
  const T decayFactor = T(1.0 - params.lr * params.weightDecay);
  const T lerpWeight = T(1.0 - params.beta1);
  const bool lerpWeightSmall = std::abs(lerpWeight) < T(0.5);
  const T beta2 = T(params.beta2);
  const T oneMinusBeta2 = T(1.0 - params.beta2);
  const T bc2Sqrt = T(biasCorrection2Sqrt);
  const T eps = T(params.eps);
  const T negStepSize = T(-stepSize);

  for (int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    T p = param[i];
    // param.mul_(1 - lr * weight_decay)
    if (decay)
      p = p * decayFactor;
    // exp_avg.lerp_(grad, 1 - beta1), in ATen's two-branch form.
    const T mi = m[i];
    const T mNew = lerpWeightSmall ? mi + lerpWeight * (g - mi)
                                   : g - (g - mi) * (T(1) - lerpWeight);
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    T vNew = v[i] * beta2;
    vNew = vNew + oneMinusBeta2 * g * g;
    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    const T denom = std::sqrt(vNew) / bc2Sqrt + eps;
    // param.addcdiv_(exp_avg, denom, value=-step_size)
    p = p + negStepSize * mNew / denom;
    m[i] = mNew;
    v[i] = vNew;
    param[i] = p;
  }
  return Status::ok();
}

template Status mlt::cpu::adamwStep<float>(float *, float *, float *,
                                           const float *, int64_t,
                                           const AdamWParams &, int64_t, bool);
template Status mlt::cpu::adamwStep<double>(double *, double *, double *,
                                            const double *, int64_t,
                                            const AdamWParams &, int64_t, bool);
