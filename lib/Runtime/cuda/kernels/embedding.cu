//===- embedding.cu - token embedding CUDA kernels (launchers) ------------===//
//
// Part of mlt. Host launchers of embedding.cuh: argument checks, the vector
// path, and the backward's scratch layout and radix sort (CUB).
//
//===----------------------------------------------------------------------===//

#include "kernels/embedding.cuh"

#include "CudaCheck.h"
#include "mlt/Runtime/cpu/VocabShard.h"

#include <cub/device/device_radix_sort.cuh>

#include <climits>

using namespace mlt;
using namespace mlt::cuda;

namespace {

/// The shard must lie in the vocabulary (cpu/VocabShard.h's check, which the
/// CPU kernels make too).
Status checkShape(const char *kernel, int64_t tokens, int64_t vocabShard,
                  int64_t hidden, int64_t vocabOffset, int64_t vocabTotal) {
  if (tokens < 0 || hidden < 0)
    return errorf(kernel, ": negative size");
  MLT_RETURN_IF_ERROR(
      cpu::checkVocabShard(kernel, vocabShard, vocabOffset, vocabTotal));
  if (tokens > INT32_MAX || vocabShard >= INT32_MAX || vocabTotal > INT32_MAX)
    return errorf(kernel, ": more than 2^31 - 1 tokens or rows");
  return Status::ok();
}

/// Threads for rows of `columns` columns: whole warps, at most
/// kEmbeddingThreads.
unsigned rowThreads(int64_t columns) {
  const int64_t warps = (columns + 31) / 32;
  return unsigned(
      std::min<int64_t>(kEmbeddingThreads, std::max<int64_t>(32, warps * 32)));
}

/// The bits of the sort keys: enough for vocabShard (the sentinel).
int keyBits(int64_t vocabShard) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= vocabShard)
    ++bits;
  return bits;
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t(255); }

/// The backward's scratch: keys, sorted keys, positions, sorted positions,
/// then CUB's temporary storage.
struct BackwardScratch {
  uint32_t *keys = nullptr, *sortedKeys = nullptr;
  int32_t *positions = nullptr, *sortedPositions = nullptr;
  void *sortStorage = nullptr;
  size_t sortBytes = 0;
  size_t total = 0;
};

cudaError_t layoutScratch(BackwardScratch &s, void *base, int64_t tokens,
                          int64_t vocabShard) {
  s.sortBytes = 0;
  cudaError_t error = cub::DeviceRadixSort::SortPairs(
      nullptr, s.sortBytes, static_cast<const uint32_t *>(nullptr),
      static_cast<uint32_t *>(nullptr), static_cast<const int32_t *>(nullptr),
      static_cast<int32_t *>(nullptr), int(tokens), 0, keyBits(vocabShard));
  if (error != cudaSuccess)
    return error;
  const size_t array = align256(size_t(tokens) * 4);
  uint8_t *p = static_cast<uint8_t *>(base);
  if (p) {
    s.keys = reinterpret_cast<uint32_t *>(p);
    s.sortedKeys = reinterpret_cast<uint32_t *>(p + array);
    s.positions = reinterpret_cast<int32_t *>(p + 2 * array);
    s.sortedPositions = reinterpret_cast<int32_t *>(p + 3 * array);
    s.sortStorage = p + 4 * array;
  }
  s.total = 4 * array + align256(s.sortBytes);
  return cudaSuccess;
}

} // namespace

namespace {

template <typename T>
Status embeddingForward(T *out, const int32_t *ids, const T *table,
                        int64_t tokens, int64_t vocabShard, int64_t hidden,
                        int64_t vocabOffset, int64_t vocabTotal,
                        DeviceErrorSink errors, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("embedding", tokens, vocabShard, hidden,
                                 vocabOffset, vocabTotal));
  if (tokens == 0 || hidden == 0)
    return Status::ok();
  const int64_t rowBytes = hidden * int64_t(sizeof(T));
  const bool vector =
      rowBytes % 16 == 0 && isAligned16(out) && isAligned16(table);
  if (vector)
    embeddingForwardKernel<T, true>
        <<<unsigned(tokens), rowThreads(rowBytes / 16), 0, stream>>>(
            out, ids, table, hidden, vocabShard, vocabOffset, vocabTotal,
            errors);
  else
    embeddingForwardKernel<T, false>
        <<<unsigned(tokens), rowThreads(hidden), 0, stream>>>(
            out, ids, table, hidden, vocabShard, vocabOffset, vocabTotal,
            errors);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("embedding forward");
  return Status::ok();
}

template <typename D>
Status embeddingBackward(float *dtable, const int32_t *ids, const D *dout,
                         int64_t tokens, int64_t vocabShard, int64_t hidden,
                         int64_t vocabOffset, int64_t vocabTotal, void *scratch,
                         size_t scratchBytes, DeviceErrorSink errors,
                         cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("embedding backward", tokens, vocabShard,
                                 hidden, vocabOffset, vocabTotal));
  if (vocabShard == 0 || hidden == 0)
    return Status::ok();
  BackwardScratch s;
  if (tokens > 0) {
    MLT_CUDA_RETURN_IF_ERROR(layoutScratch(s, scratch, tokens, vocabShard));
    if (!scratch || scratchBytes < s.total)
      return errorf("embedding backward: ", scratchBytes,
                    " bytes of scratch memory, it needs ", s.total);
    embeddingKeysKernel<<<flatBlocks(tokens), kFlatThreads, 0, stream>>>(
        s.keys, s.positions, ids, tokens, vocabShard, vocabOffset, vocabTotal,
        errors);
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("embedding backward (keys)");
    MLT_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
        s.sortStorage, s.sortBytes, s.keys, s.sortedKeys, s.positions,
        s.sortedPositions, int(tokens), 0, keyBits(vocabShard), stream));
  }
  // Four dout elements per load: 16 bytes of f32 or 8 of bf16.
  const bool vector = hidden % 4 == 0 && isAligned16(dtable) &&
                      reinterpret_cast<uintptr_t>(dout) % (4 * sizeof(D)) == 0;
  if (vector)
    embeddingRowsKernel<D, true>
        <<<unsigned(vocabShard), rowThreads(hidden / 4), 0, stream>>>(
            dtable, s.sortedKeys, s.sortedPositions, dout, tokens, hidden);
  else
    embeddingRowsKernel<D, false>
        <<<unsigned(vocabShard), rowThreads(hidden), 0, stream>>>(
            dtable, s.sortedKeys, s.sortedPositions, dout, tokens, hidden);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("embedding backward (rows)");
  return Status::ok();
}

} // namespace

Status mlt::cuda::launchEmbeddingForward(
    float *out, const int32_t *ids, const float *table, int64_t tokens,
    int64_t vocabShard, int64_t hidden, int64_t vocabOffset, int64_t vocabTotal,
    DeviceErrorSink errors, cudaStream_t stream) {
  return embeddingForward(out, ids, table, tokens, vocabShard, hidden,
                          vocabOffset, vocabTotal, errors, stream);
}

Status mlt::cuda::launchEmbeddingForward(
    __nv_bfloat16 *out, const int32_t *ids, const __nv_bfloat16 *table,
    int64_t tokens, int64_t vocabShard, int64_t hidden, int64_t vocabOffset,
    int64_t vocabTotal, DeviceErrorSink errors, cudaStream_t stream) {
  return embeddingForward(out, ids, table, tokens, vocabShard, hidden,
                          vocabOffset, vocabTotal, errors, stream);
}

size_t mlt::cuda::embeddingBackwardScratchBytes(int64_t tokens,
                                                int64_t vocabShard) {
  if (tokens <= 0 || tokens > INT32_MAX || vocabShard < 0)
    return 0;
  BackwardScratch s;
  if (layoutScratch(s, nullptr, tokens, vocabShard) != cudaSuccess)
    return 0;
  return s.total;
}

Status mlt::cuda::launchEmbeddingBackward(
    float *dtable, const int32_t *ids, const float *dout, int64_t tokens,
    int64_t vocabShard, int64_t hidden, int64_t vocabOffset, int64_t vocabTotal,
    void *scratch, size_t scratchBytes, DeviceErrorSink errors,
    cudaStream_t stream) {
  return embeddingBackward(dtable, ids, dout, tokens, vocabShard, hidden,
                           vocabOffset, vocabTotal, scratch, scratchBytes,
                           errors, stream);
}

Status mlt::cuda::launchEmbeddingBackward(
    float *dtable, const int32_t *ids, const __nv_bfloat16 *dout,
    int64_t tokens, int64_t vocabShard, int64_t hidden, int64_t vocabOffset,
    int64_t vocabTotal, void *scratch, size_t scratchBytes,
    DeviceErrorSink errors, cudaStream_t stream) {
  return embeddingBackward(dtable, ids, dout, tokens, vocabShard, hidden,
                           vocabOffset, vocabTotal, scratch, scratchBytes,
                           errors, stream);
}
