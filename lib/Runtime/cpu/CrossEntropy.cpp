//===- CrossEntropy.cpp - CPU softmax cross-entropy loss ------------------===//
//
// Part of mlt. Per row: the max, the sum of exp(x - max) in double, and
// lse = max + log(sum), so no exponential overflows whatever the logits. The
// backward turns the saved lse back into probabilities with one exp per
// element.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/CrossEntropy.h"

#include <algorithm>
#include <cmath>

using namespace mlt;
using namespace mlt::cpu;

namespace {

rt::Status checkArgs(const char *kernel, const int32_t *labels, int64_t rows,
                     int64_t vocab, int64_t lossDivisor) {
  if (lossDivisor <= 0)
    return rt::errorf(kernel, ": loss divisor ", lossDivisor,
                      " must be positive");
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= vocab)
      return rt::errorf(kernel, ": label ", labels[r], " at position ", r,
                        " is outside the vocabulary [0, ", vocab, ")");
  return rt::Status::ok();
}

} // namespace

template <typename T>
rt::Status mlt::cpu::crossEntropyForward(T *loss, T *lse, const T *logits,
                                         const int32_t *labels, int64_t rows,
                                         int64_t vocab, int64_t lossDivisor) {
  MLT_RETURN_IF_ERROR(
      checkArgs("cross_entropy", labels, rows, vocab, lossDivisor));
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const T *x = logits + r * vocab;
    const double maxLogit = double(*std::max_element(x, x + vocab));
    double sum = 0.0;
    for (int64_t j = 0; j < vocab; ++j)
      sum += std::exp(double(x[j]) - maxLogit);
    const double rowLse = maxLogit + std::log(sum);
    lse[r] = T(rowLse);
    total += rowLse - double(x[labels[r]]);
  }
  *loss = T(total / double(lossDivisor));
  return rt::Status::ok();
}

template <typename T>
rt::Status mlt::cpu::crossEntropyBackward(T *dlogits, const T *logits,
                                          const T *lse, const int32_t *labels,
                                          T dloss, int64_t rows, int64_t vocab,
                                          int64_t lossDivisor) {
  MLT_RETURN_IF_ERROR(
      checkArgs("cross_entropy backward", labels, rows, vocab, lossDivisor));
  const double factor = double(dloss) / double(lossDivisor);
  for (int64_t r = 0; r < rows; ++r) {
    const T *x = logits + r * vocab;
    T *dx = dlogits + r * vocab;
    const double rowLse = double(lse[r]);
    const int64_t label = labels[r];
    // Read before the row is overwritten, for when dlogits aliases logits;
    // the label's entry is then formed as (p - 1) * factor in double rather
    // than by subtracting from an already rounded p * factor.
    const double labelLogit = double(x[label]);
    for (int64_t j = 0; j < vocab; ++j)
      dx[j] = T(std::exp(double(x[j]) - rowLse) * factor);
    dx[label] = T((std::exp(labelLogit - rowLse) - 1.0) * factor);
  }
  return rt::Status::ok();
}

#define MLT_INSTANTIATE_CROSSENTROPY(T)                                        \
  template rt::Status mlt::cpu::crossEntropyForward<T>(                        \
      T *, T *, const T *, const int32_t *, int64_t, int64_t, int64_t);        \
  template rt::Status mlt::cpu::crossEntropyBackward<T>(                       \
      T *, const T *, const T *, const int32_t *, T, int64_t, int64_t,         \
      int64_t);
MLT_INSTANTIATE_CROSSENTROPY(float)
MLT_INSTANTIATE_CROSSENTROPY(double)
