//===- CrossEntropy.cpp - CPU softmax cross-entropy loss ------------------===//
//
// Part of mlt. Per row: the max, the sum of exp(x - max) in double, and
// lse = max + log(sum), so no exponential overflows whatever the logits. The
// backward turns the saved lse back into probabilities with one exp per
// element. Over vocabulary shards, each shard's row lse is one such sum, and
// combining them is another over the shards' lse values.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/CrossEntropy.h"
#include "mlt/Runtime/cpu/VocabShard.h"

#include <algorithm>
#include <cmath>

using namespace mlt;
using namespace mlt::cpu;

namespace {

Status checkArgs(const char *kernel, const int32_t *labels, int64_t rows,
                 int64_t vocab, int64_t lossDivisor) {
  if (lossDivisor <= 0)
    return errorf(kernel, ": loss divisor ", lossDivisor, " must be positive");
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= vocab)
      return errorf(kernel, ": label ", labels[r], " at position ", r,
                    " is outside the vocabulary [0, ", vocab, ")");
  return Status::ok();
}

/// The shard [vocabOffset, vocabOffset + vocabShard) lies in the global
/// vocabulary, and is not empty when it has rows to read.
Status checkShard(const char *kernel, int64_t rows, int64_t vocabShard,
                  int64_t vocabOffset, int64_t vocabTotal) {
  MLT_RETURN_IF_ERROR(
      checkVocabShard(kernel, vocabShard, vocabOffset, vocabTotal));
  if (vocabShard == 0 && rows > 0)
    return errorf(kernel, ": the vocabulary shard is empty");
  return Status::ok();
}

/// log(sum_j exp(x[j * stride])) over j in [0, n), n > 0: max shifted, the
/// sum in double.
template <typename T>
double logSumExp(const T *x, int64_t n, int64_t stride = 1) {
  double maxValue = double(x[0]);
  for (int64_t j = 1; j < n; ++j)
    maxValue = std::max(maxValue, double(x[j * stride]));
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(double(x[j * stride]) - maxValue);
  return maxValue + std::log(sum);
}

/// dx[j] = (exp(x[j] - lse) - (j == label)) * factor for j in [0, n); no
/// label in the row when `label` is outside [0, n). dx may alias x.
template <typename T>
void softmaxGradientRow(T *dx, const T *x, double rowLse, int64_t label,
                        int64_t n, double factor) {
  const bool hasLabel = label >= 0 && label < n;
  // Read before the row is overwritten, for when dlogits aliases logits;
  // the label's entry is then formed as (p - 1) * factor in double rather
  // than by subtracting from an already rounded p * factor.
  const double labelLogit = hasLabel ? double(x[label]) : 0.0;
  for (int64_t j = 0; j < n; ++j)
    dx[j] = T(std::exp(double(x[j]) - rowLse) * factor);
  if (hasLabel)
    dx[label] = T((std::exp(labelLogit - rowLse) - 1.0) * factor);
}

} // namespace

template <typename T>
Status mlt::cpu::crossEntropyForward(T *loss, T *lse, const T *logits,
                                     const int32_t *labels, int64_t rows,
                                     int64_t vocab, int64_t lossDivisor) {
  MLT_RETURN_IF_ERROR(
      checkArgs("cross_entropy", labels, rows, vocab, lossDivisor));
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const T *x = logits + r * vocab;
    const double rowLse = logSumExp(x, vocab);
    lse[r] = T(rowLse);
    total += rowLse - double(x[labels[r]]);
  }
  *loss = T(total / double(lossDivisor));
  return Status::ok();
}

template <typename T>
Status mlt::cpu::crossEntropyBackward(T *dlogits, const T *logits, const T *lse,
                                      const int32_t *labels, T dloss,
                                      int64_t rows, int64_t vocab,
                                      int64_t lossDivisor) {
  MLT_RETURN_IF_ERROR(
      checkArgs("cross_entropy backward", labels, rows, vocab, lossDivisor));
  const double factor = double(dloss) / double(lossDivisor);
  for (int64_t r = 0; r < rows; ++r)
    softmaxGradientRow(dlogits + r * vocab, logits + r * vocab, double(lse[r]),
                       labels[r], vocab, factor);
  return Status::ok();
}

template <typename T>
Status mlt::cpu::crossEntropyStats(T *lse, T *target, const T *logits,
                                   const int32_t *labels, int64_t rows,
                                   int64_t vocabShard, int64_t vocabOffset,
                                   int64_t vocabTotal) {
  MLT_RETURN_IF_ERROR(checkShard("cross_entropy_stats", rows, vocabShard,
                                 vocabOffset, vocabTotal));
  MLT_RETURN_IF_ERROR(
      checkArgs("cross_entropy_stats", labels, rows, vocabTotal, 1));
  for (int64_t r = 0; r < rows; ++r) {
    const T *x = logits + r * vocabShard;
    const int64_t column = int64_t(labels[r]) - vocabOffset;
    lse[r] = T(logSumExp(x, vocabShard));
    target[r] = column >= 0 && column < vocabShard ? x[column] : T(0);
  }
  return Status::ok();
}

template <typename T>
Status mlt::cpu::crossEntropyCombine(T *lse, T *loss, const T *parts,
                                     const T *target, int64_t rows,
                                     int64_t numParts, int64_t lossDivisor) {
  if (lossDivisor <= 0)
    return errorf("cross_entropy_combine: loss divisor ", lossDivisor,
                  " must be positive");
  if (numParts <= 0 && rows > 0)
    return errorf("cross_entropy_combine: ", numParts,
                  " parts; at least one is needed");
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const double rowLse = logSumExp(parts + r, numParts, rows);
    total += rowLse - double(target[r]);
    lse[r] = T(rowLse);
  }
  *loss = T(total / double(lossDivisor));
  return Status::ok();
}

template <typename T>
Status mlt::cpu::crossEntropyStatsBackward(
    T *dlogits, const T *logits, const T *lse, const int32_t *labels, T dloss,
    int64_t rows, int64_t vocabShard, int64_t vocabOffset, int64_t vocabTotal,
    int64_t lossDivisor) {
  MLT_RETURN_IF_ERROR(checkShard("cross_entropy_stats backward", rows,
                                 vocabShard, vocabOffset, vocabTotal));
  MLT_RETURN_IF_ERROR(checkArgs("cross_entropy_stats backward", labels, rows,
                                vocabTotal, lossDivisor));
  const double factor = double(dloss) / double(lossDivisor);
  for (int64_t r = 0; r < rows; ++r)
    softmaxGradientRow(dlogits + r * vocabShard, logits + r * vocabShard,
                       double(lse[r]), int64_t(labels[r]) - vocabOffset,
                       vocabShard, factor);
  return Status::ok();
}

#define MLT_INSTANTIATE_CROSSENTROPY(T)                                        \
  template Status mlt::cpu::crossEntropyForward<T>(                            \
      T *, T *, const T *, const int32_t *, int64_t, int64_t, int64_t);        \
  template Status mlt::cpu::crossEntropyBackward<T>(                           \
      T *, const T *, const T *, const int32_t *, T, int64_t, int64_t,         \
      int64_t);                                                                \
  template Status mlt::cpu::crossEntropyStats<T>(T *, T *, const T *,          \
                                                 const int32_t *, int64_t,     \
                                                 int64_t, int64_t, int64_t);   \
  template Status mlt::cpu::crossEntropyCombine<T>(                            \
      T *, T *, const T *, const T *, int64_t, int64_t, int64_t);              \
  template Status mlt::cpu::crossEntropyStatsBackward<T>(                      \
      T *, const T *, const T *, const int32_t *, T, int64_t, int64_t,         \
      int64_t, int64_t, int64_t);
MLT_INSTANTIATE_CROSSENTROPY(float)
MLT_INSTANTIATE_CROSSENTROPY(double)
