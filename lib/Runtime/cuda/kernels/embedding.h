//===- embedding.h - token embedding CUDA kernels (host side) ---*- C++ -*-===//
//
// Part of mlt. Host launchers of the embedding family (embedding.cuh): the
// gather of table rows by token id and its transpose, the scatter-add into
// the table's gradient, for a whole table (embedding_fwd/bwd: offset 0,
// shard = total = vocab) or one vocabulary shard of it (embedding_fwd_vp /
// bwd_vp). Semantics are those of Kernels.def and cpu/Embedding.h, with one
// difference forced by the device: ids are checked while the kernels run,
// so a bad id is reported through `errors` (DeviceError.h: the first bad
// position and its id, read at the context's next synchronize) instead of
// being returned here; the outputs are then unspecified, but nothing outside
// the buffers is read or written (a bad id's row is treated as outside the
// shard).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_H

#include "DeviceError.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mlt::cuda {

/// out[p, :] = table[ids[p] - vocabOffset, :] when vocabOffset <= ids[p] <
/// vocabOffset + vocabShard, else zeros; ids outside [0, vocabTotal) are
/// reported. out is [tokens, hidden], table [vocabShard, hidden].
Status launchEmbeddingForward(float *out, const int32_t *ids,
                              const float *table, int64_t tokens,
                              int64_t vocabShard, int64_t hidden,
                              int64_t vocabOffset, int64_t vocabTotal,
                              DeviceErrorSink errors, cudaStream_t stream);
/// The same for bf16 tables (a mixed-precision plan's compute copy): rows are
/// copied as they are.
Status launchEmbeddingForward(__nv_bfloat16 *out, const int32_t *ids,
                              const __nv_bfloat16 *table, int64_t tokens,
                              int64_t vocabShard, int64_t hidden,
                              int64_t vocabOffset, int64_t vocabTotal,
                              DeviceErrorSink errors, cudaStream_t stream);

/// The device scratch launchEmbeddingBackward needs.
size_t embeddingBackwardScratchBytes(int64_t tokens, int64_t vocabShard);

/// dtable [vocabShard, hidden] overwritten with the scatter-add of the dout
/// rows [tokens, hidden] whose ids fall in the shard: each row is 0 plus its
/// tokens' dout rows in position order, in f32, which is the CPU backend's
/// result bit for bit (and the same bits every run). `scratch` holds
/// embeddingBackwardScratchBytes(tokens, vocabShard) bytes, 256-byte aligned.
Status launchEmbeddingBackward(float *dtable, const int32_t *ids,
                               const float *dout, int64_t tokens,
                               int64_t vocabShard, int64_t hidden,
                               int64_t vocabOffset, int64_t vocabTotal,
                               void *scratch, size_t scratchBytes,
                               DeviceErrorSink errors, cudaStream_t stream);
/// The same for a bf16 dout: widened exactly to f32 and summed in f32, so
/// dtable (the parameter's gradient) is f32 (Kernels.def's "Element types").
Status launchEmbeddingBackward(float *dtable, const int32_t *ids,
                               const __nv_bfloat16 *dout, int64_t tokens,
                               int64_t vocabShard, int64_t hidden,
                               int64_t vocabOffset, int64_t vocabTotal,
                               void *scratch, size_t scratchBytes,
                               DeviceErrorSink errors, cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_H
