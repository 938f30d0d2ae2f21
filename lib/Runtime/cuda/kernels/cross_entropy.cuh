//===- cross_entropy.cuh - softmax cross-entropy CUDA kernels --*- CUDA -*-===//
//
// Part of mlt. Device code of the cross_entropy family (launchers in
// cross_entropy.cu, declared in cross_entropy.h).
//
// Invariants:
// - logits, dlogits are [rows, n] row-major (n = vocab, or vocab_local for a
//   shard); labels are [rows] int32 global ids; lse, target, rowValues are
//   [rows]; T is the logits' (and dlogits') storage type, f32 or bf16;
//   statistics (lse, target, the loss, dloss, combine's parts) are f32
//   always, as Kernels.def's "Element types" says.
// - Row kernels: one block per row (blockIdx.x), blockDim.x a multiple of 32
//   (at most 1024) chosen on the host from n only. Each thread owns the
//   columns of its 16-byte packs i = threadIdx.x + k * blockDim.x (kVec:
//   n % Pack<T>::kWidth == 0 and 16-byte aligned logits/dlogits, checked on
//   the host) or its single columns j = threadIdx.x + k * blockDim.x.
// - Row statistics are an online (max, sum of exp(x - max)) pair per thread
//   in f32, merged by a warp butterfly and then over warps in warp order: a
//   fixed tree, so bit-reproducible; lse = max + log(sum). One exp per
//   element (two when the running max moves).
// - Losses: the row kernel writes lse - target per row; one block of
//   kSumThreads threads then sums the rows (thread t: rows t, t + kSumThreads,
//   ... in order, in f64; then a fixed tree) and divides once. No atomics.
// - Gradient rows: dx[j] = (exp(x[j] - lse) - (j == label)) * factor, factor
//   = f32(dloss / divisor) computed in f64. A thread reads x[j] (the pass
//   that computes lse, then again) before it writes dx[j], and no thread
//   writes before the block's statistics are reduced (the reduction
//   synchronizes): dlogits may alias logits.
// - cross_entropy_fwd_bwd (fusedRowKernel): blocks of kFusedThreads, the
//   row (at most kFusedMaxRowBytes, in packs) in shared memory by one bulk
//   copy before any thread reads it; then max, sum of exponentials (base 2,
//   fastExp2) and the gradient from shared memory, each reduction
//   blockReduce's fixed tree. Longer rows take gradientKernel with its
//   rowLoss (the statistics' pass, then the gradient's).
// - A label outside [0, vocabTotal) is reported (DeviceError.h: position =
//   row, value = the label, limit = vocabTotal) by thread 0 of its row's
//   block, and makes the row's lse / loss / gradient NaN; a label is only
//   used to index the row when it falls inside it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_CUH

#include "DeviceError.h"
#include "kernels/common.cuh"

namespace mlt::cuda::xent {

/// Threads of the single-block sums (loss, combine).
inline constexpr int kSumThreads = 1024;

#ifdef __CUDACC__

/// A running max and sum of exp(x - max).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum emptyMaxSum() {
  return MaxSum{-INFINITY, 0.f};
}

__device__ __forceinline__ void addValue(MaxSum &a, float v) {
  if (v > a.m) {
    a.s = a.s * expf(a.m - v) + 1.f; // exp(-inf) = 0 for the first value
    a.m = v;
  } else if (a.m != -INFINITY) {
    a.s += expf(v - a.m);
  } else if (!(v == -INFINITY)) {
    a.s = v; // v is NaN: keep it
  }
}

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY)
    return MaxSum{m, a.s + b.s};
  return MaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

/// The block's (max, sum) over all threads' pairs, returned to every thread;
/// `red` is 32 MaxSum of shared memory, reusable when it returns.
__device__ __forceinline__ MaxSum blockMaxSum(MaxSum v, MaxSum *red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, offset);
    // Both lanes of a pair merge the same two values in the same order.
    v = (lane & offset) ? merge(o, v) : merge(v, o);
  }
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? red[lane] : emptyMaxSum();
  for (int offset = 16; offset > 0; offset >>= 1) {
    MaxSum o;
    o.m = __shfl_xor_sync(0xffffffffu, v.m, offset);
    o.s = __shfl_xor_sync(0xffffffffu, v.s, offset);
    v = (lane & offset) ? merge(o, v) : merge(v, o);
  }
  __syncthreads();
  return v;
}

/// `v` reduced over the block by `op` with identity `identity` (a fixed
/// tree: a warp butterfly, then the warps' values in warp order), returned
/// to every thread; `red` is 32 V of shared memory, reusable when it
/// returns.
template <typename V, typename Op>
__device__ __forceinline__ V blockReduce(V v, V identity, V *red, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (lane == 0)
    red[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? red[lane] : identity;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  return v;
}

/// The sum of `v` over the block in a fixed order (blockReduce).
__device__ __forceinline__ double blockSumDouble(double v, double *red) {
  return blockReduce(v, 0.0, red, [](double a, double b) { return a + b; });
}

/// logsumexp of row x [n] over the block.
template <typename T, bool kVec>
__device__ __forceinline__ float rowLogSumExp(const T *x, int64_t n,
                                              MaxSum *red) {
  MaxSum acc = emptyMaxSum();
  if constexpr (kVec) {
    constexpr int W = Pack<T>::kWidth;
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
    for (int64_t i = threadIdx.x; i < n / W; i += blockDim.x) {
      const Pack<T> p = xp[i];
#pragma unroll
      for (int e = 0; e < W; ++e)
        addValue(acc, toCompute(p.v[e]));
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      addValue(acc, toCompute(x[j]));
  }
  acc = blockMaxSum(acc, red);
  return acc.m + logf(acc.s);
}

/// Per row: lse and, with `rowLoss`, lse - logits[label] (cross_entropy_fwd,
/// labelOffset 0); with `lse`/`target`, the shard statistics
/// (cross_entropy_stats). Labels outside [0, vocabTotal) give NaN.
template <typename T, bool kVec>
__global__ void rowStatsKernel(float *rowLoss, float *lseOut, float *targetOut,
                               const T *logits, const int32_t *labels,
                               int64_t n, int64_t labelOffset,
                               int64_t vocabTotal, DeviceErrorSink errors) {
  __shared__ MaxSum red[32];
  const int64_t row = blockIdx.x;
  const T *x = logits + row * n;
  const float lse = rowLogSumExp<T, kVec>(x, n, red);
  if (threadIdx.x != 0)
    return;
  const int64_t label = labels[row];
  const int64_t local = label - labelOffset;
  const bool valid = label >= 0 && label < vocabTotal;
  if (!valid)
    reportDeviceError(errors, kDeviceErrorIdOutOfRange, row, uint32_t(label),
                      vocabTotal);
  const float target = local >= 0 && local < n ? toCompute(x[local]) : 0.f;
  if (rowLoss)
    rowLoss[row] = valid ? lse - target : NAN;
  if (lseOut) {
    lseOut[row] = valid ? lse : NAN;
    targetOut[row] = target;
  }
}

/// *loss = sum_r values[r] / divisor: one block of kSumThreads threads.
__global__ void sumRowsKernel(float *loss, const float *values, int64_t rows,
                              double divisor) {
  __shared__ double red[32];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += double(values[r]);
  sum = blockSumDouble(sum, red);
  if (threadIdx.x == 0)
    *loss = float(sum / divisor);
}

/// cross_entropy_combine: one block of kSumThreads threads; per row (thread
/// t: rows t, t + blockDim.x, ...) the lse over the parts in f64, as the CPU
/// kernel; the loss sum in f64 in a fixed order.
__global__ void combineKernel(float *lse, float *loss, const float *parts,
                              const float *target, int64_t rows,
                              int64_t numParts, double divisor) {
  __shared__ double red[32];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    double maxValue = double(parts[r]);
    for (int64_t g = 1; g < numParts; ++g)
      maxValue = fmax(maxValue, double(parts[g * rows + r]));
    double expSum = 0.0;
    for (int64_t g = 0; g < numParts; ++g)
      expSum += exp(double(parts[g * rows + r]) - maxValue);
    const double rowLse = maxValue + log(expSum);
    lse[r] = float(rowLse);
    sum += rowLse - double(target[r]);
  }
  sum = blockSumDouble(sum, red);
  if (threadIdx.x == 0)
    *loss = float(sum / divisor);
}

/// Gradient rows: dx = (exp(x - lse) - onehot(label - labelOffset)) * dloss /
/// divisor, with lse recomputed from the row when `lseIn` is null; with
/// `rowLoss` (whole rows: labelOffset 0), also the row's lse - x[label],
/// written by the thread that reads x[label] before it writes dx[label].
template <typename T, bool kVec>
__global__ void gradientKernel(T *dlogits, float *rowLoss, const float *dloss,
                               const T *logits, const int32_t *labels,
                               const float *lseIn, int64_t n,
                               int64_t labelOffset, int64_t vocabTotal,
                               double divisor, DeviceErrorSink errors) {
  __shared__ MaxSum red[32];
  const int64_t row = blockIdx.x;
  const T *x = logits + row * n;
  T *dx = dlogits + row * n;
  float lse;
  if (lseIn) {
    lse = lseIn[row];
  } else {
    lse = rowLogSumExp<T, kVec>(x, n, red);
  }
  const int64_t label = labels[row];
  const int64_t local = label - labelOffset;
  const bool valid = label >= 0 && label < vocabTotal;
  if (!valid && threadIdx.x == 0) {
    reportDeviceError(errors, kDeviceErrorIdOutOfRange, row, uint32_t(label),
                      vocabTotal);
    if (rowLoss)
      rowLoss[row] = NAN;
  }
  const float factor = valid ? float(double(*dloss) / divisor) : NAN;
  if constexpr (kVec) {
    constexpr int W = Pack<T>::kWidth;
    const Pack<T> *xp = reinterpret_cast<const Pack<T> *>(x);
    Pack<T> *dxp = reinterpret_cast<Pack<T> *>(dx);
    for (int64_t i = threadIdx.x; i < n / W; i += blockDim.x) {
      const Pack<T> p = xp[i];
      Pack<T> out;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float value = toCompute(p.v[e]);
        const float prob = expf(value - lse);
        const bool target = i * W + e == local;
        if (rowLoss && target)
          rowLoss[row] = lse - value;
        out.v[e] = fromCompute<T>((target ? prob - 1.f : prob) * factor);
      }
      dxp[i] = out;
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float value = toCompute(x[j]);
      const float prob = expf(value - lse);
      if (rowLoss && j == local)
        rowLoss[row] = lse - value;
      dx[j] = fromCompute<T>((j == local ? prob - 1.f : prob) * factor);
    }
  }
}

/// Threads of fusedRowKernel's blocks, and the largest row (in bytes) it
/// holds in shared memory: three such rows fit an SM's 227 KiB, so three
/// blocks share it (one loading while the others reduce and store).
/// LLaMA-2's 32,000 bf16 logits are 64,000 bytes.
inline constexpr int kFusedThreads = 512;
inline constexpr int64_t kFusedMaxRowBytes = 72 * 1024;

/// Shared-memory address of `p` (for the PTX below).
__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

/// cross_entropy_fwd_bwd with the row in shared memory: one block per row.
/// Thread 0 loads the whole row with one bulk copy (cp.async.bulk, the
/// copy engine of the SM: no registers, no instruction per pack) that
/// completes on an mbarrier all threads wait on. Then, over the packs i =
/// threadIdx.x + k * blockDim.x of the row in shared memory: the row's max m
/// and, in base 2 on the special-function unit, s = sum of 2^(x log2e - m
/// log2e) (two block reductions); lse = m + log(s); the row's lse -
/// x[label] (written by the thread holding the label) and dx = (2^(x log2e
/// - lse log2e) - onehot(label)) * dloss / divisor, the exponent one FFMA.
/// The whole row is in shared memory before any of it is written: dlogits
/// may alias logits. Needs n % Pack<T>::kWidth == 0, 16-byte aligned rows
/// and n * sizeof(T) <= kFusedMaxRowBytes of dynamic shared memory.
template <typename T>
__global__ void __launch_bounds__(kFusedThreads)
    fusedRowKernel(T *dlogits, float *rowLoss, const float *dloss,
                   const T *logits, const int32_t *labels, int64_t n,
                   double divisor, DeviceErrorSink errors) {
  constexpr int W = Pack<T>::kWidth;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ __align__(16) unsigned char rowBytes[];
  __shared__ __align__(8) uint64_t loaded;
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const int packs = int(n / W);
  const uint32_t bytes = uint32_t(n * int64_t(sizeof(T)));
  const uint32_t barrier = sharedAddress(&loaded);
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier));
    // The initialized barrier, visible to the bulk copy (the async proxy).
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile(
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier),
        "r"(bytes)
        : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::"
                 "bytes [%0], [%1], %2, [%3];" ::"r"(sharedAddress(rowBytes)),
                 "l"(logits + row * n), "r"(bytes), "r"(barrier)
                 : "memory");
  }
  // While the row arrives: the label and the scale.
  const int64_t label = labels[row];
  const bool valid = label >= 0 && label < n;
  const float factor = valid ? float(double(*dloss) / divisor) : NAN;
  __syncthreads(); // the barrier is initialized before anyone waits on it
  for (uint32_t done = 0; !done;)
    asm volatile("{\n .reg .pred p;\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                 " selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(barrier)
                 : "memory");
  const Pack<T> *xs = reinterpret_cast<const Pack<T> *>(rowBytes);
  float m = -INFINITY;
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack<T> p = xs[i];
#pragma unroll
    for (int e = 0; e < W; ++e)
      m = fmaxf(m, toCompute(p.v[e]));
  }
  m = blockReduce(m, -INFINITY, red,
                  [](float a, float b) { return fmaxf(a, b); });
  // A row of -inf has sum 0 and lse -inf (not 2^(-inf - -inf) = NaN); a
  // NaN logit, which fmaxf passes over, makes the sum NaN.
  const float shift = m == -INFINITY ? 0.f : -m * kLog2e;
  float sum = 0.f;
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack<T> p = xs[i];
#pragma unroll
    for (int e = 0; e < W; ++e)
      sum += fastExp2(fmaf(toCompute(p.v[e]), kLog2e, shift));
  }
  sum = blockReduce(sum, 0.f, red, [](float a, float b) { return a + b; });
  const float lse = m + logf(sum);
  const float negLse2 = -lse * kLog2e;
  if (!valid && threadIdx.x == 0) {
    reportDeviceError(errors, kDeviceErrorIdOutOfRange, row, uint32_t(label),
                      n);
    rowLoss[row] = NAN;
  }
  // The pack holding the label (none for a bad label).
  const int64_t labelPack = valid ? label / W : -1;
  Pack<T> *dxp = reinterpret_cast<Pack<T> *>(dlogits + row * n);
  for (int i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack<T> p = xs[i];
    float g[W];
#pragma unroll
    for (int e = 0; e < W; ++e)
      g[e] = fastExp2(fmaf(toCompute(p.v[e]), kLog2e, negLse2));
    if (i == labelPack) {
      const int e = int(label - labelPack * W);
      float value = 0.f;
#pragma unroll
      for (int j = 0; j < W; ++j)
        if (j == e) {
          value = toCompute(p.v[j]);
          g[j] -= 1.f;
        }
      rowLoss[row] = lse - value;
    }
#pragma unroll
    for (int e = 0; e < W; ++e)
      g[e] *= factor;
    dxp[i] = packFromCompute<T>(g);
  }
}

#endif // __CUDACC__

} // namespace mlt::cuda::xent

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_CROSS_ENTROPY_CUH
