//===- cross_entropy.h - softmax cross-entropy CUDA kernels -----*- C++ -*-===//
//
// Part of mlt. Host launchers of the cross_entropy family
// (cross_entropy.cuh): Kernels.def's cross_entropy_fwd / cross_entropy_bwd
// (the loss of whole rows) and the vocabulary-parallel cross_entropy_stats /
// cross_entropy_combine / cross_entropy_bwd_stats, with the semantics of the
// CPU kernels (lib/Runtime/cpu/CrossEntropy.cpp) as the CPU backend drives
// them: the plan keeps no lse between cross_entropy_fwd and
// cross_entropy_bwd, so the backward recomputes each row's lse itself (in
// the same block that then writes the row's gradient: the logits are read
// twice, the softmax never stored).
//
// Each launcher queues its work on `stream` and returns; argument errors
// (shapes, a shard outside the vocabulary, non-positive divisors, too little
// scratch) are returned before anything is queued. Labels live on the
// device, so they are checked while the kernels run, as the embedding
// family checks ids: a label outside [0, vocabTotal) is reported through
// `errors` (DeviceError.h, kDeviceErrorIdOutOfRange: the first bad row and
// its label, read at the context's next synchronize) instead of being
// returned here, and its row's loss, lse and gradient are NaN; nothing
// outside the buffers is read or written.
//
// `dloss` is a device pointer to the one-element loss gradient (the plan's
// scalar buffer). Logits and their gradient are f32 or bf16 (each launcher
// has both forms); the loss, dloss and every statistic (lse, target, parts)
// are f32 in both.
//
// Determinism: no atomics. Row statistics are one block per row with a fixed
// reduction tree; the loss is the sum of the per-row losses (written to
// scratch by the row kernel) by one block in a fixed order, in f64.
//
// Scratch memory: crossEntropyFwdScratchBytes(rows) bytes (one f32 per row),
// owned by the caller; the CUDA backend's device context allocates one
// scratch area per context lazily with cudaMalloc, grown to the largest
// request (launches on one stream reuse it safely: they run in order).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_H

#include "DeviceError.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mlt::cuda {

/// Bytes of scratch launchCrossEntropyFwd needs (0 when it needs none).
size_t crossEntropyFwdScratchBytes(int64_t rows);

/// *loss = sum_r (lse[r] - logits[r, labels[r]]) / lossDivisor over logits
/// [rows, vocab] (cross_entropy_fwd passes lossDivisor = rows). `scratch`
/// holds at least crossEntropyFwdScratchBytes(rows) bytes.
Status launchCrossEntropyFwd(float *loss, const float *logits,
                             const int32_t *labels, int64_t rows, int64_t vocab,
                             int64_t lossDivisor, void *scratch,
                             size_t scratchBytes, DeviceErrorSink errors,
                             cudaStream_t stream);
Status launchCrossEntropyFwd(float *loss, const __nv_bfloat16 *logits,
                             const int32_t *labels, int64_t rows, int64_t vocab,
                             int64_t lossDivisor, void *scratch,
                             size_t scratchBytes, DeviceErrorSink errors,
                             cudaStream_t stream);

/// dlogits = (softmax(logits) - onehot(labels)) * *dloss / lossDivisor, the
/// lse of each row recomputed. dlogits may alias logits.
Status launchCrossEntropyBwd(float *dlogits, const float *dloss,
                             const float *logits, const int32_t *labels,
                             int64_t rows, int64_t vocab, int64_t lossDivisor,
                             DeviceErrorSink errors, cudaStream_t stream);
Status launchCrossEntropyBwd(__nv_bfloat16 *dlogits, const float *dloss,
                             const __nv_bfloat16 *logits, const int32_t *labels,
                             int64_t rows, int64_t vocab, int64_t lossDivisor,
                             DeviceErrorSink errors, cudaStream_t stream);

/// cross_entropy_fwd_bwd: *loss as launchCrossEntropyFwd's and dlogits as
/// launchCrossEntropyBwd's (both divided by lossDivisor), in one pass over
/// the logits: a row of up to 72 KiB in 16-byte packs (36,864 bf16 or
/// 18,432 f32 logits; LLaMA-2's 32,000 bf16) is read once, by one bulk copy
/// into shared memory; a longer one twice (the second time mostly from L2).
/// dlogits may alias logits. `scratch` holds at least
/// crossEntropyFwdScratchBytes(rows) bytes.
Status launchCrossEntropyFwdBwd(float *loss, float *dlogits, const float *dloss,
                                const float *logits, const int32_t *labels,
                                int64_t rows, int64_t vocab,
                                int64_t lossDivisor, void *scratch,
                                size_t scratchBytes, DeviceErrorSink errors,
                                cudaStream_t stream);
Status launchCrossEntropyFwdBwd(float *loss, __nv_bfloat16 *dlogits,
                                const float *dloss, const __nv_bfloat16 *logits,
                                const int32_t *labels, int64_t rows,
                                int64_t vocab, int64_t lossDivisor,
                                void *scratch, size_t scratchBytes,
                                DeviceErrorSink errors, cudaStream_t stream);

/// Over one vocabulary shard [vocabOffset, vocabOffset + vocabLocal) of a
/// vocabulary of vocabTotal entries (the backend passes vocabOffset =
/// coordinate * vocabLocal and vocabTotal = G * vocabLocal): lse[r] =
/// logsumexp of logits row r [rows, vocabLocal]; target[r] = logits[r,
/// labels[r] - vocabOffset] when the label is in the shard, else 0.
Status launchCrossEntropyStats(float *lse, float *target, const float *logits,
                               const int32_t *labels, int64_t rows,
                               int64_t vocabLocal, int64_t vocabOffset,
                               int64_t vocabTotal, DeviceErrorSink errors,
                               cudaStream_t stream);
Status launchCrossEntropyStats(float *lse, float *target,
                               const __nv_bfloat16 *logits,
                               const int32_t *labels, int64_t rows,
                               int64_t vocabLocal, int64_t vocabOffset,
                               int64_t vocabTotal, DeviceErrorSink errors,
                               cudaStream_t stream);

/// lse[r] = logsumexp over g of parts[g, r] (parts [numParts, rows]); *loss =
/// sum_r (lse[r] - target[r]) / lossDivisor. One block, no scratch.
Status launchCrossEntropyCombine(float *lse, float *loss, const float *parts,
                                 const float *target, int64_t rows,
                                 int64_t numParts, int64_t lossDivisor,
                                 cudaStream_t stream);

/// The shard's dlogits [rows, vocabLocal] = (exp(logits - lse[r]) -
/// (labels[r] == vocabOffset + j)) * *dloss / lossDivisor, with `lse` the
/// global one (combine's). dlogits may alias logits.
Status launchCrossEntropyBwdStats(float *dlogits, const float *dloss,
                                  const float *logits, const int32_t *labels,
                                  const float *lse, int64_t rows,
                                  int64_t vocabLocal, int64_t vocabOffset,
                                  int64_t vocabTotal, int64_t lossDivisor,
                                  DeviceErrorSink errors, cudaStream_t stream);
Status launchCrossEntropyBwdStats(__nv_bfloat16 *dlogits, const float *dloss,
                                  const __nv_bfloat16 *logits,
                                  const int32_t *labels, const float *lse,
                                  int64_t rows, int64_t vocabLocal,
                                  int64_t vocabOffset, int64_t vocabTotal,
                                  int64_t lossDivisor, DeviceErrorSink errors,
                                  cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_H
