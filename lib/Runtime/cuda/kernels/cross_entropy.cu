//===- cross_entropy.cu - softmax cross-entropy CUDA launchers ------------===//
//
// Part of mlt. Host side of the cross_entropy family: the CPU kernels'
// argument checks that need no device data (shard bounds, divisors, part
// counts), the launch geometry (a function of the shape only) and the choice
// between the 16-byte and the scalar path.
//
//===----------------------------------------------------------------------===//

#include "kernels/cross_entropy.h"

#include "CudaCheck.h"
#include "kernels/cross_entropy.cuh"
#include "mlt/Runtime/cpu/VocabShard.h"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::xent;

namespace {

Status checkRows(const char *kernel, int64_t rows, int64_t n) {
  if (rows < 0 || n < 0)
    return errorf(kernel, ": bad shape [", rows, ", ", n, "]");
  if (rows > 0 && n == 0)
    return errorf(kernel, ": the vocabulary shard is empty");
  if (rows > INT32_MAX)
    return errorf(kernel, ": ", rows, " rows are more than one grid holds");
  return Status::ok();
}

Status checkDivisor(const char *kernel, int64_t lossDivisor) {
  if (lossDivisor <= 0)
    return errorf(kernel, ": loss divisor ", lossDivisor, " must be positive");
  return Status::ok();
}

template <typename T>
bool vectorizable(int64_t n, const void *a, const void *b = nullptr) {
  return n % Pack<T>::kWidth == 0 && isAligned16(a) && (!b || isAligned16(b));
}

/// Launches rowStatsKernel (per-row loss or shard statistics).
template <typename T>
Status launchRowStats(float *rowLoss, float *lse, float *target,
                      const T *logits, const int32_t *labels, int64_t rows,
                      int64_t n, int64_t labelOffset, int64_t vocabTotal,
                      DeviceErrorSink errors, cudaStream_t stream) {
  const bool vec = vectorizable<T>(n, logits);
  const int threads = rowBlockThreads(n, vec, Pack<T>::kWidth);
  if (vec)
    rowStatsKernel<T, true><<<unsigned(rows), threads, 0, stream>>>(
        rowLoss, lse, target, logits, labels, n, labelOffset, vocabTotal,
        errors);
  else
    rowStatsKernel<T, false><<<unsigned(rows), threads, 0, stream>>>(
        rowLoss, lse, target, logits, labels, n, labelOffset, vocabTotal,
        errors);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross-entropy row statistics");
  return Status::ok();
}

/// Launches gradientKernel (with `rowLoss`, also each row's loss).
template <typename T>
Status launchGradient(T *dlogits, float *rowLoss, const float *dloss,
                      const T *logits, const int32_t *labels, const float *lse,
                      int64_t rows, int64_t n, int64_t labelOffset,
                      int64_t vocabTotal, int64_t lossDivisor,
                      DeviceErrorSink errors, cudaStream_t stream) {
  if (rows == 0)
    return Status::ok();
  const bool vec = vectorizable<T>(n, logits, dlogits);
  const int threads = rowBlockThreads(n, vec, Pack<T>::kWidth);
  if (vec)
    gradientKernel<T, true><<<unsigned(rows), threads, 0, stream>>>(
        dlogits, rowLoss, dloss, logits, labels, lse, n, labelOffset,
        vocabTotal, double(lossDivisor), errors);
  else
    gradientKernel<T, false><<<unsigned(rows), threads, 0, stream>>>(
        dlogits, rowLoss, dloss, logits, labels, lse, n, labelOffset,
        vocabTotal, double(lossDivisor), errors);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross-entropy gradient");
  return Status::ok();
}

template <typename T>
Status crossEntropyFwd(float *loss, const T *logits, const int32_t *labels,
                       int64_t rows, int64_t vocab, int64_t lossDivisor,
                       void *scratch, size_t scratchBytes,
                       DeviceErrorSink errors, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkRows("cross_entropy", rows, vocab));
  MLT_RETURN_IF_ERROR(checkDivisor("cross_entropy", lossDivisor));
  const size_t needed = crossEntropyFwdScratchBytes(rows);
  if (needed > 0 && (!scratch || scratchBytes < needed))
    return errorf("cross_entropy: ", scratchBytes, " bytes of scratch given, ",
                  needed, " needed");
  float *rowLoss = static_cast<float *>(scratch);
  if (rows > 0)
    MLT_RETURN_IF_ERROR(launchRowStats<T>(rowLoss, nullptr, nullptr, logits,
                                          labels, rows, vocab, 0, vocab, errors,
                                          stream));
  sumRowsKernel<<<1, kSumThreads, 0, stream>>>(loss, rowLoss, rows,
                                               double(lossDivisor));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross_entropy (loss sum)");
  return Status::ok();
}

template <typename T>
Status crossEntropyBwd(T *dlogits, const float *dloss, const T *logits,
                       const int32_t *labels, int64_t rows, int64_t vocab,
                       int64_t lossDivisor, DeviceErrorSink errors,
                       cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkRows("cross_entropy backward", rows, vocab));
  MLT_RETURN_IF_ERROR(checkDivisor("cross_entropy backward", lossDivisor));
  return launchGradient<T>(dlogits, nullptr, dloss, logits, labels, nullptr,
                           rows, vocab, 0, vocab, lossDivisor, errors, stream);
}

/// Whether fusedRowKernel takes rows of `n` elements of T at `logits` and
/// `dlogits`: whole packs, 16-byte aligned, small enough for its shared
/// memory.
template <typename T>
bool rowFitsSharedMemory(int64_t n, const T *logits, const T *dlogits) {
  return vectorizable<T>(n, logits, dlogits) &&
         n * int64_t(sizeof(T)) <= kFusedMaxRowBytes;
}

/// Launches fusedRowKernel<T>, first allowing it its shared memory on the
/// current device (as the attention launchers do).
template <typename T>
Status launchFusedRows(T *dlogits, float *rowLoss, const float *dloss,
                       const T *logits, const int32_t *labels, int64_t rows,
                       int64_t n, double divisor, DeviceErrorSink errors,
                       cudaStream_t stream) {
  MLT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      fusedRowKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
      int(kFusedMaxRowBytes)));
  fusedRowKernel<T>
      <<<unsigned(rows), kFusedThreads, size_t(n) * sizeof(T), stream>>>(
          dlogits, rowLoss, dloss, logits, labels, n, divisor, errors);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross_entropy_fwd_bwd");
  return Status::ok();
}

template <typename T>
Status crossEntropyFwdBwd(float *loss, T *dlogits, const float *dloss,
                          const T *logits, const int32_t *labels, int64_t rows,
                          int64_t vocab, int64_t lossDivisor, void *scratch,
                          size_t scratchBytes, DeviceErrorSink errors,
                          cudaStream_t stream) {
  const char *kernel = "cross_entropy_fwd_bwd";
  MLT_RETURN_IF_ERROR(checkRows(kernel, rows, vocab));
  MLT_RETURN_IF_ERROR(checkDivisor(kernel, lossDivisor));
  const size_t needed = crossEntropyFwdScratchBytes(rows);
  if (needed > 0 && (!scratch || scratchBytes < needed))
    return errorf(kernel, ": ", scratchBytes, " bytes of scratch given, ",
                  needed, " needed");
  float *rowLoss = static_cast<float *>(scratch);
  const double divisor = double(lossDivisor);
  if (rows > 0) {
    if (rowFitsSharedMemory<T>(vocab, logits, dlogits))
      MLT_RETURN_IF_ERROR(launchFusedRows<T>(dlogits, rowLoss, dloss, logits,
                                             labels, rows, vocab, divisor,
                                             errors, stream));
    else // longer rows, or not in packs: read twice
      MLT_RETURN_IF_ERROR(launchGradient<T>(
          dlogits, rowLoss, dloss, logits, labels, nullptr, rows, vocab, 0,
          vocab, lossDivisor, errors, stream));
  }
  sumRowsKernel<<<1, kSumThreads, 0, stream>>>(loss, rowLoss, rows, divisor);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross_entropy_fwd_bwd (loss sum)");
  return Status::ok();
}

template <typename T>
Status crossEntropyStats(float *lse, float *target, const T *logits,
                         const int32_t *labels, int64_t rows,
                         int64_t vocabLocal, int64_t vocabOffset,
                         int64_t vocabTotal, DeviceErrorSink errors,
                         cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(cpu::checkVocabShard("cross_entropy_stats", vocabLocal,
                                           vocabOffset, vocabTotal));
  MLT_RETURN_IF_ERROR(checkRows("cross_entropy_stats", rows, vocabLocal));
  if (rows == 0)
    return Status::ok();
  return launchRowStats<T>(nullptr, lse, target, logits, labels, rows,
                           vocabLocal, vocabOffset, vocabTotal, errors, stream);
}

template <typename T>
Status crossEntropyBwdStats(T *dlogits, const float *dloss, const T *logits,
                            const int32_t *labels, const float *lse,
                            int64_t rows, int64_t vocabLocal,
                            int64_t vocabOffset, int64_t vocabTotal,
                            int64_t lossDivisor, DeviceErrorSink errors,
                            cudaStream_t stream) {
  const char *kernel = "cross_entropy_stats backward";
  MLT_RETURN_IF_ERROR(
      cpu::checkVocabShard(kernel, vocabLocal, vocabOffset, vocabTotal));
  MLT_RETURN_IF_ERROR(checkRows(kernel, rows, vocabLocal));
  MLT_RETURN_IF_ERROR(checkDivisor(kernel, lossDivisor));
  return launchGradient<T>(dlogits, nullptr, dloss, logits, labels, lse, rows,
                           vocabLocal, vocabOffset, vocabTotal, lossDivisor,
                           errors, stream);
}

} // namespace

size_t mlt::cuda::crossEntropyFwdScratchBytes(int64_t rows) {
  return rows > 0 ? size_t(rows) * sizeof(float) : 0;
}

#define MLT_DEFINE_CROSS_ENTROPY(T)                                            \
  Status mlt::cuda::launchCrossEntropyFwd(                                     \
      float *loss, const T *logits, const int32_t *labels, int64_t rows,       \
      int64_t vocab, int64_t lossDivisor, void *scratch, size_t scratchBytes,  \
      DeviceErrorSink errors, cudaStream_t stream) {                           \
    return crossEntropyFwd(loss, logits, labels, rows, vocab, lossDivisor,     \
                           scratch, scratchBytes, errors, stream);             \
  }                                                                            \
  Status mlt::cuda::launchCrossEntropyBwd(                                     \
      T *dlogits, const float *dloss, const T *logits, const int32_t *labels,  \
      int64_t rows, int64_t vocab, int64_t lossDivisor,                        \
      DeviceErrorSink errors, cudaStream_t stream) {                           \
    return crossEntropyBwd(dlogits, dloss, logits, labels, rows, vocab,        \
                           lossDivisor, errors, stream);                       \
  }                                                                            \
  Status mlt::cuda::launchCrossEntropyFwdBwd(                                  \
      float *loss, T *dlogits, const float *dloss, const T *logits,            \
      const int32_t *labels, int64_t rows, int64_t vocab, int64_t lossDivisor, \
      void *scratch, size_t scratchBytes, DeviceErrorSink errors,              \
      cudaStream_t stream) {                                                   \
    return crossEntropyFwdBwd(loss, dlogits, dloss, logits, labels, rows,      \
                              vocab, lossDivisor, scratch, scratchBytes,       \
                              errors, stream);                                 \
  }                                                                            \
  Status mlt::cuda::launchCrossEntropyStats(                                   \
      float *lse, float *target, const T *logits, const int32_t *labels,       \
      int64_t rows, int64_t vocabLocal, int64_t vocabOffset,                   \
      int64_t vocabTotal, DeviceErrorSink errors, cudaStream_t stream) {       \
    return crossEntropyStats(lse, target, logits, labels, rows, vocabLocal,    \
                             vocabOffset, vocabTotal, errors, stream);         \
  }                                                                            \
  Status mlt::cuda::launchCrossEntropyBwdStats(                                \
      T *dlogits, const float *dloss, const T *logits, const int32_t *labels,  \
      const float *lse, int64_t rows, int64_t vocabLocal, int64_t vocabOffset, \
      int64_t vocabTotal, int64_t lossDivisor, DeviceErrorSink errors,         \
      cudaStream_t stream) {                                                   \
    return crossEntropyBwdStats(dlogits, dloss, logits, labels, lse, rows,     \
                                vocabLocal, vocabOffset, vocabTotal,           \
                                lossDivisor, errors, stream);                  \
  }
MLT_DEFINE_CROSS_ENTROPY(float)
MLT_DEFINE_CROSS_ENTROPY(__nv_bfloat16)
#undef MLT_DEFINE_CROSS_ENTROPY

Status mlt::cuda::launchCrossEntropyCombine(
    float *lse, float *loss, const float *parts, const float *target,
    int64_t rows, int64_t numParts, int64_t lossDivisor, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkDivisor("cross_entropy_combine", lossDivisor));
  if (numParts <= 0 && rows > 0)
    return errorf("cross_entropy_combine: ", numParts,
                  " parts; at least one is needed");
  if (rows < 0)
    return errorf("cross_entropy_combine: ", rows, " rows");
  combineKernel<<<1, kSumThreads, 0, stream>>>(lse, loss, parts, target, rows,
                                               numParts, double(lossDivisor));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cross_entropy_combine");
  return Status::ok();
}
