//===- AdamW.h - CPU AdamW optimizer step -----------------------*- C++ -*-===//
//
// Part of mlt. One AdamW update of a parameter tensor on the CPU, with
// PyTorch's semantics (torch.optim.AdamW, single-tensor path): decoupled
// weight decay first, then the moments, then the bias-corrected step, each in
// PyTorch's order of operations so that training matches the HF reference
// fixtures up to rounding.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_ADAMW_H
#define MLT_RUNTIME_CPU_ADAMW_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

/// AdamW hyperparameters (PyTorch's names: lr, betas, eps, weight_decay).
struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
};

//===----------------------------------------------------------------------===//
// adamw family
//
// Invariants:
// - param, grad, m (exp_avg) and v (exp_avg_sq) have `n` elements in the same
//   layout; m and v start at zero before step 1 and are updated in place.
// - `step` is the 1-based number of this update (PyTorch's state['step'] after
//   its increment); it sets the bias corrections. step < 1 is an error.
// - Per element, in T, with the scalars computed in double and rounded to T
//   (as PyTorch rounds Python floats to the tensor's type):
//     if applyWeightDecay:  p = p * (1 - lr * wd)
//     m = lerp(m, g, 1 - beta1)          (exp_avg.lerp_(grad, 1 - beta1))
//     v = v * beta2 + (1 - beta2) * g * g  (mul_ then addcmul_)
//     denom = sqrt(v) / sqrt(1 - beta2^step) + eps
//     p = p + (-(lr / (1 - beta1^step))) * m / denom   (addcdiv_)
//   where lerp(a, b, w) = a + w * (b - a) for w < 0.5, else
//   b - (b - a) * (1 - w), as ATen computes it. Mathematically m is
//   beta1 * m + (1 - beta1) * g; the order only moves the last bit.
// - The caller decides which tensors decay (HF training: parameters with two
//   or more dimensions; norm weights do not).
// - The gradient is read only; clipping is a separate `scale` of the
//   gradients before the step.
//===----------------------------------------------------------------------===//

/// Applies one AdamW update to `param`, updating the moments m and v.
template <typename T>
Status adamwStep(T *param, T *m, T *v, const T *grad, int64_t n,
                 const AdamWParams &params, int64_t step,
                 bool applyWeightDecay);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_ADAMW_H
