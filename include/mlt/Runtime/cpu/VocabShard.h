//===- VocabShard.h - CPU kernels' vocabulary shard check -------*- C++ -*-===//
//
// Part of mlt. The check shared by the kernels that work on one vocabulary
// shard (Embedding.h's embedding*Shard, CrossEntropy.h's crossEntropyStats
// and its backward): the shard they are given must lie in the global
// vocabulary.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_VOCABSHARD_H
#define MLT_RUNTIME_CPU_VOCABSHARD_H

#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

/// The shard [vocabOffset, vocabOffset + vocabShard) lies in the vocabulary
/// [0, vocabTotal); the error names `kernel`, the shard and the vocabulary.
inline Status checkVocabShard(const char *kernel, int64_t vocabShard,
                              int64_t vocabOffset, int64_t vocabTotal) {
  if (vocabShard < 0 || vocabOffset < 0 ||
      vocabOffset > vocabTotal - vocabShard)
    return errorf(kernel, ": the shard [", vocabOffset, ", ",
                  vocabOffset + vocabShard,
                  ") is not inside the vocabulary [0, ", vocabTotal, ")");
  return Status::ok();
}

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_VOCABSHARD_H
