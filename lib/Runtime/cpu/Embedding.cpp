//===- Embedding.cpp - CPU token embedding kernels ------------------------===//
//
// Part of mlt. The gather and scatter-add of `mlt.embedding`, of a whole
// table or of one vocabulary shard of it. All validate all ids before
// touching memory, so that a bad id in a data file is an error message, not
// a read or write outside the table.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Embedding.h"
#include "mlt/Runtime/cpu/VocabShard.h"

#include <algorithm>
#include <cstring>

using namespace mlt;
using namespace mlt::cpu;

namespace {

/// Returns an error naming the first id outside [0, vocab) and its position.
Status checkIds(const char *kernel, const int32_t *ids, int64_t numTokens,
                int64_t vocab) {
  for (int64_t p = 0; p < numTokens; ++p)
    if (ids[p] < 0 || ids[p] >= vocab)
      return errorf(kernel, ": token id ", ids[p], " at position ", p,
                    " is outside the vocabulary [0, ", vocab, ")");
  return Status::ok();
}

/// The checks of the shard kernels: the shard [vocabOffset, vocabOffset +
/// vocabShard) lies in the vocabulary, then every id is in [0, vocabTotal).
Status checkShardArgs(const char *kernel, const int32_t *ids, int64_t numTokens,
                      int64_t vocabShard, int64_t vocabOffset,
                      int64_t vocabTotal) {
  MLT_RETURN_IF_ERROR(
      checkVocabShard(kernel, vocabShard, vocabOffset, vocabTotal));
  return checkIds(kernel, ids, numTokens, vocabTotal);
}

} // namespace

template <typename T>
Status mlt::cpu::embeddingForward(T *out, const int32_t *ids, const T *table,
                                  int64_t numTokens, int64_t vocab,
                                  int64_t hidden) {
  MLT_RETURN_IF_ERROR(checkIds("embedding", ids, numTokens, vocab));
  for (int64_t p = 0; p < numTokens; ++p)
    std::memcpy(out + p * hidden, table + int64_t(ids[p]) * hidden,
                sizeof(T) * hidden);
  return Status::ok();
}

template <typename T>
Status mlt::cpu::embeddingBackward(T *dtable, const int32_t *ids, const T *dout,
                                   int64_t numTokens, int64_t vocab,
                                   int64_t hidden) {
  MLT_RETURN_IF_ERROR(checkIds("embedding backward", ids, numTokens, vocab));
  for (int64_t p = 0; p < numTokens; ++p) {
    T *row = dtable + int64_t(ids[p]) * hidden;
    const T *grad = dout + p * hidden;
    for (int64_t j = 0; j < hidden; ++j)
      row[j] += grad[j];
  }
  return Status::ok();
}

template <typename T>
Status mlt::cpu::embeddingForwardShard(T *out, const int32_t *ids,
                                       const T *table, int64_t numTokens,
                                       int64_t vocabShard, int64_t hidden,
                                       int64_t vocabOffset,
                                       int64_t vocabTotal) {
  MLT_RETURN_IF_ERROR(checkShardArgs("embedding shard", ids, numTokens,
                                     vocabShard, vocabOffset, vocabTotal));
  for (int64_t p = 0; p < numTokens; ++p) {
    const int64_t row = int64_t(ids[p]) - vocabOffset;
    if (row >= 0 && row < vocabShard)
      std::memcpy(out + p * hidden, table + row * hidden, sizeof(T) * hidden);
    else
      std::fill(out + p * hidden, out + (p + 1) * hidden, T(0));
  }
  return Status::ok();
}

template <typename T>
Status mlt::cpu::embeddingBackwardShard(T *dtable, const int32_t *ids,
                                        const T *dout, int64_t numTokens,
                                        int64_t vocabShard, int64_t hidden,
                                        int64_t vocabOffset,
                                        int64_t vocabTotal) {
  MLT_RETURN_IF_ERROR(checkShardArgs("embedding shard backward", ids, numTokens,
                                     vocabShard, vocabOffset, vocabTotal));
  for (int64_t p = 0; p < numTokens; ++p) {
    const int64_t row = int64_t(ids[p]) - vocabOffset;
    if (row < 0 || row >= vocabShard)
      continue;
    T *target = dtable + row * hidden;
    const T *grad = dout + p * hidden;
    for (int64_t j = 0; j < hidden; ++j)
      target[j] += grad[j];
  }
  return Status::ok();
}

#define MLT_INSTANTIATE_EMBEDDING(T)                                           \
  template Status mlt::cpu::embeddingForward<T>(                               \
      T *, const int32_t *, const T *, int64_t, int64_t, int64_t);             \
  template Status mlt::cpu::embeddingBackward<T>(                              \
      T *, const int32_t *, const T *, int64_t, int64_t, int64_t);             \
  template Status mlt::cpu::embeddingForwardShard<T>(                          \
      T *, const int32_t *, const T *, int64_t, int64_t, int64_t, int64_t,     \
      int64_t);                                                                \
  template Status mlt::cpu::embeddingBackwardShard<T>(                         \
      T *, const int32_t *, const T *, int64_t, int64_t, int64_t, int64_t,     \
      int64_t);
MLT_INSTANTIATE_EMBEDDING(float)
MLT_INSTANTIATE_EMBEDDING(double)
