//===- KernelTestUtil.h - helpers for the CPU kernel tests ------*- C++ -*-===//
//
// Part of mlt. Random inputs, error measures and a central finite-difference
// gradient shared by the CPU kernel tests. Errors are measured normwise
// (max |a - b| / max |b|) so that one tolerance fits tensors of any scale; the
// tolerances themselves are stated in each test.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIME_KERNELTESTUTIL_H
#define MLT_UNITTESTS_RUNTIME_KERNELTESTUTIL_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <type_traits>
#include <vector>

namespace mlt::cpu::test {

/// Normwise tolerance for a float kernel against a double reference:
/// float's epsilon is 6e-8, and reductions over tens of elements grow it.
inline constexpr double kFloatTol = 2e-6;
/// Normwise tolerance for a double kernel against a double reference that
/// sums in another order.
inline constexpr double kDoubleTol = 1e-12;
/// Normwise tolerance of an analytic gradient against central differences
/// with step kFiniteDiffStep: truncation error ~h^2 = 1e-10 and rounding
/// error ~1e-16 / h = 1e-11, both far below it.
inline constexpr double kGradTol = 1e-6;
inline constexpr double kFiniteDiffStep = 1e-5;

template <typename T> constexpr double forwardTol() {
  return std::is_same_v<T, float> ? kFloatTol : kDoubleTol;
}

/// `n` values uniform in [lo, hi).
template <typename T>
std::vector<T> randomVector(std::mt19937 &rng, int64_t n, double lo = -1.0,
                            double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> out(n);
  for (T &x : out)
    x = T(dist(rng));
  return out;
}

/// `n` ids uniform in [0, vocab).
inline std::vector<int32_t> randomIds(std::mt19937 &rng, int64_t n,
                                      int32_t vocab) {
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> out(n);
  for (int32_t &x : out)
    x = dist(rng);
  return out;
}

template <typename To, typename From>
std::vector<To> castVector(const std::vector<From> &in) {
  return std::vector<To>(in.begin(), in.end());
}

/// max |actual - expected| / max |expected| (absolute if expected is 0).
template <typename A, typename B>
double relError(const std::vector<A> &actual, const std::vector<B> &expected) {
  double maxDiff = 0.0, maxRef = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    maxDiff =
        std::max(maxDiff, std::abs(double(actual[i]) - double(expected[i])));
    maxRef = std::max(maxRef, std::abs(double(expected[i])));
  }
  return maxRef > 0.0 ? maxDiff / maxRef : maxDiff;
}

/// sum_i out[i] * weights[i]: the scalar whose gradient with respect to out is
/// `weights`, used to turn a tensor-valued function into a loss.
inline double weightedSum(const std::vector<double> &out,
                          const std::vector<double> &weights) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i)
    sum += out[i] * weights[i];
  return sum;
}

/// Central differences of `loss` with respect to every element of `x`, which
/// `loss` reads; x is restored afterwards.
inline std::vector<double>
numericalGradient(const std::function<double()> &loss, std::vector<double> &x,
                  double h = kFiniteDiffStep) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * h);
  }
  return grad;
}

} // namespace mlt::cpu::test

#endif // MLT_UNITTESTS_RUNTIME_KERNELTESTUTIL_H
