//===- embedding.cuh - token embedding CUDA kernels ------------*- CUDA -*-===//
//
// Part of mlt. Device code of the embedding family (launchers in
// embedding.cu, declared in embedding.h).
//
// Invariants:
// - ids are [tokens] int32, indices into the global vocabulary [0,
//   vocabTotal); the table and its gradient are [vocabShard, hidden]
//   row-major, holding global rows [vocabOffset, vocabOffset + vocabShard);
//   activations and their gradients are [tokens, hidden]. An id outside
//   [0, vocabTotal) is reported (DeviceError.h) and treated as outside the
//   shard, so no kernel reads or writes outside its buffers.
// - Rows are moved in columns: with kVector (hidden % 4 == 0 and every
//   pointer 16-byte aligned, checked by the launcher) thread t of a block
//   handles the float4 columns t, t + blockDim.x, ...; else single floats.
// - Forward: one block per token (blockIdx.x = position), copying its table
//   row or writing zeros. Plain loads and stores: the table rows that
//   repeated ids share stay in L2.
// - Backward, deterministic and atomics-free, in three steps:
//   1. embeddingKeysKernel: key[p] = the shard row of ids[p], or vocabShard
//      for ids outside the shard (a sentinel sorted last); value[p] = p.
//   2. cub::DeviceRadixSort::SortPairs over the keys' low bits; radix sort is
//      stable, so each row's positions come out in increasing order.
//   3. embeddingRowsKernel: one block per table row (blockIdx.x = row)
//      finds the row's run of sorted keys by binary search and writes, per
//      column, 0 + dout[p1] + dout[p2] + ... in position order in f32: the
//      CPU's scatter-add into a zeroed gradient, bit for bit. Every row is
//      written exactly once (zeros for rows no token uses), so no memset.
//   Cost: O(tokens * hidden) reads, O(vocabShard * hidden) writes, plus the
//   sort; a row used by many tokens is summed by one block serially (a
//   padding id repeated through a batch makes that block the longest).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_CUH

#include "kernels/common.cuh"
#include "kernels/embedding.h"

namespace mlt::cuda {

/// The most threads of the row kernels.
inline constexpr int kEmbeddingThreads = 128;

/// The shard row of the token at `position`, or -1 when its id is outside
/// the shard; reports ids outside the vocabulary (when `report`).
__device__ __forceinline__ int64_t shardRowOf(
    int32_t id, int64_t position, int64_t vocabShard, int64_t vocabOffset,
    int64_t vocabTotal, DeviceErrorSink errors, bool report) {
  if (id < 0 || id >= vocabTotal) {
    if (report)
      reportDeviceError(errors, kDeviceErrorIdOutOfRange, position,
                        uint32_t(id), vocabTotal);
    return -1;
  }
  const int64_t row = int64_t(id) - vocabOffset;
  return row >= 0 && row < vocabShard ? row : -1;
}

template <bool kVector>
__global__ void __launch_bounds__(kEmbeddingThreads)
    embeddingForwardKernel(float *out, const int32_t *ids, const float *table,
                           int64_t hidden, int64_t vocabShard,
                           int64_t vocabOffset, int64_t vocabTotal,
                           DeviceErrorSink errors) {
  const int64_t p = blockIdx.x;
  const int64_t row = shardRowOf(ids[p], p, vocabShard, vocabOffset, vocabTotal,
                                 errors, threadIdx.x == 0);
  if constexpr (kVector) {
    const int64_t columns = hidden / 4;
    float4 *dst = reinterpret_cast<float4 *>(out + p * hidden);
    if (row >= 0) {
      const float4 *src =
          reinterpret_cast<const float4 *>(table + row * hidden);
      for (int64_t c = threadIdx.x; c < columns; c += blockDim.x)
        dst[c] = src[c];
    } else {
      for (int64_t c = threadIdx.x; c < columns; c += blockDim.x)
        dst[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  } else {
    float *dst = out + p * hidden;
    const float *src = table + (row >= 0 ? row : 0) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
      dst[c] = row >= 0 ? src[c] : 0.0f;
  }
}

__global__ void __launch_bounds__(kFlatThreads)
    embeddingKeysKernel(uint32_t *keys, int32_t *positions, const int32_t *ids,
                        int64_t tokens, int64_t vocabShard, int64_t vocabOffset,
                        int64_t vocabTotal, DeviceErrorSink errors) {
  for (int64_t p = globalThreadIndex(); p < tokens; p += globalThreadCount()) {
    const int64_t row = shardRowOf(ids[p], p, vocabShard, vocabOffset,
                                   vocabTotal, errors, true);
    keys[p] = uint32_t(row >= 0 ? row : vocabShard);
    positions[p] = int32_t(p);
  }
}

template <bool kVector>
__global__ void __launch_bounds__(kEmbeddingThreads)
    embeddingRowsKernel(float *dtable, const uint32_t *sortedKeys,
                        const int32_t *sortedPositions, const float *dout,
                        int64_t tokens, int64_t hidden) {
  const uint32_t row = blockIdx.x;
  // The first sorted key >= row (every thread searches: the keys are shared
  // through L1).
  int64_t lo = 0, hi = tokens;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sortedKeys[mid] < row)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int64_t begin = lo;
  if constexpr (kVector) {
    const int64_t columns = hidden / 4;
    const float4 *src = reinterpret_cast<const float4 *>(dout);
    float4 *dst = reinterpret_cast<float4 *>(dtable + int64_t(row) * hidden);
    for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int64_t k = begin; k < tokens && sortedKeys[k] == row; ++k) {
        const float4 g = src[int64_t(sortedPositions[k]) * columns + c];
        sum.x = __fadd_rn(sum.x, g.x);
        sum.y = __fadd_rn(sum.y, g.y);
        sum.z = __fadd_rn(sum.z, g.z);
        sum.w = __fadd_rn(sum.w, g.w);
      }
      dst[c] = sum;
    }
  } else {
    float *dst = dtable + int64_t(row) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float sum = 0.0f;
      for (int64_t k = begin; k < tokens && sortedKeys[k] == row; ++k)
        sum = __fadd_rn(sum, dout[int64_t(sortedPositions[k]) * hidden + c]);
      dst[c] = sum;
    }
  }
}

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_CUH
