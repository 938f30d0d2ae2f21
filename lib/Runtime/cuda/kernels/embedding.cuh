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
// - Element types: the table and the forward's output are f32 or bf16 (a
//   mixed-precision plan's compute copy), moved as they are; the backward
//   reads an f32 or bf16 dout, widened exactly, and writes an f32 dtable (a
//   parameter's gradient accumulates in f32).
// - Rows are moved in columns: with kVector (checked by the launcher) the
//   forward copies 16-byte units (rows of a multiple of 16 bytes, both
//   pointers 16-byte aligned) and the backward's thread t sums the four
//   columns 4t.. of each dout row (hidden % 4 == 0, dtable 16-byte aligned,
//   dout aligned to four elements); else single elements.
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

/// One token's row per block. With kVector, rows are copied in 16-byte units
/// (hidden * sizeof(T) a multiple of 16, both pointers 16-byte aligned).
template <typename T, bool kVector>
__global__ void __launch_bounds__(kEmbeddingThreads)
    embeddingForwardKernel(T *out, const int32_t *ids, const T *table,
                           int64_t hidden, int64_t vocabShard,
                           int64_t vocabOffset, int64_t vocabTotal,
                           DeviceErrorSink errors) {
  const int64_t p = blockIdx.x;
  const int64_t row = shardRowOf(ids[p], p, vocabShard, vocabOffset, vocabTotal,
                                 errors, threadIdx.x == 0);
  if constexpr (kVector) {
    const int64_t units = hidden * int64_t(sizeof(T)) / 16;
    uint4 *dst = reinterpret_cast<uint4 *>(out + p * hidden);
    if (row >= 0) {
      const uint4 *src = reinterpret_cast<const uint4 *>(table + row * hidden);
      for (int64_t c = threadIdx.x; c < units; c += blockDim.x)
        dst[c] = src[c];
    } else {
      for (int64_t c = threadIdx.x; c < units; c += blockDim.x)
        dst[c] = make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
    T *dst = out + p * hidden;
    const T *src = table + (row >= 0 ? row : 0) * hidden;
    for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x)
      dst[c] = row >= 0 ? src[c] : fromCompute<T>(0.0f);
  }
}

/// Four consecutive elements of a dout row, widened to f32 (the pointer is
/// 16-byte aligned for f32 and 8-byte aligned for bf16: the launcher checks).
__device__ __forceinline__ float4 loadFour(const float *p) {
  return *reinterpret_cast<const float4 *>(p);
}
__device__ __forceinline__ float4 loadFour(const __nv_bfloat16 *p) {
  const uint2 bits = *reinterpret_cast<const uint2 *>(p);
  return make_float4(
      __uint_as_float(bits.x << 16), __uint_as_float(bits.x & 0xFFFF0000u),
      __uint_as_float(bits.y << 16), __uint_as_float(bits.y & 0xFFFF0000u));
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

/// One table row per block: the f32 sum of the dout rows (f32 or bf16) of
/// its tokens in position order. With kVector, four columns per thread
/// (hidden % 4 == 0, dtable 16-byte and dout 4-element aligned).
template <typename D, bool kVector>
__global__ void __launch_bounds__(kEmbeddingThreads)
    embeddingRowsKernel(float *dtable, const uint32_t *sortedKeys,
                        const int32_t *sortedPositions, const D *dout,
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
    float4 *dst = reinterpret_cast<float4 *>(dtable + int64_t(row) * hidden);
    for (int64_t c = threadIdx.x; c < columns; c += blockDim.x) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int64_t k = begin; k < tokens && sortedKeys[k] == row; ++k) {
        const float4 g =
            loadFour(dout + int64_t(sortedPositions[k]) * hidden + 4 * c);
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
        sum = __fadd_rn(
            sum, toCompute(dout[int64_t(sortedPositions[k]) * hidden + c]));
      dst[c] = sum;
    }
  }
}

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_EMBEDDING_CUH
