//===- optimizer.cuh - optimizer CUDA kernels ------------------*- CUDA -*-===//
//
// Part of mlt. Device code of the optimizer family (launchers in
// optimizer.cu, declared in optimizer.h).
//
// Invariants:
// - sumSquaresKernel: grid of B blocks (B = ceil(n / kSumSquaresBlockElems)
//   clamped to [1, kSumSquaresMaxBlocks]: a function of n only) of
//   kReduceThreads threads. Thread t of block b sums x[i]^2 in double over its
//   elements (with kVector, the 16-byte packs b * threads + t + k * B *
//   threads in increasing k, loaded kSumSquaresUnroll at a time, every
//   pointer 16-byte aligned, then the n % 4 tail elements one per thread;
//   else single elements), then the block sums its threads' values in a
//   fixed tree (warp shuffles, then the warps in order). With B == 1 the
//   block writes float(sum) to the output; otherwise it writes its double
//   partial to partials[b], and sumPartialsKernel (one block, queued after
//   it) sums partials[0..B) in a fixed tree (thread t the partials t + k *
//   threads in order, then the block tree) and writes float(sum). No
//   atomics: the result is the same bits every run. (A variant where the
//   last block to arrive at an atomic counter combined the partials, in one
//   kernel, measured slower over the 201 gradients of a step: 1.92 against
//   1.90 ms; bench/memory-kernels-notes.md.)
// - sumSquaresMultiKernel: sum_squares over up to kSumSquaresMultiBatch
//   tensors in one grid (a batch, passed by value). Tensor k owns blocks
//   [firstBlock[k], firstBlock[k + 1]) of the grid, B_k =
//   sumSquaresBlocks(n_k) of them, and block firstBlock[k] + b computes what
//   block b of sumSquaresKernel computes for that tensor alone (the same
//   elements per thread in the same order, the vector path exactly when x_k
//   is 16-byte aligned, the same block tree); with B_k == 1 it writes
//   float(sum) to out_k, else its double partial to
//   partials[firstPartial[k] + b]. sumPartialsMultiKernel (block k, queued
//   after it) then combines tensor k's partials as sumPartialsKernel does
//   (blocks of tensors with B_k == 1 return at once). Each sum is therefore
//   the same bits as launchSumSquares gives, and no atomics.
// - Every kernel of the family that the launchers queue with
//   launchDependent waits for its predecessors before it touches memory
//   (common.cuh).
// - globalNormKernel: one block; thread k loads part k of its batch (at most
//   kGlobalNormBatch device pointers, passed by value), then thread 0 sums
//   them in order in double, after the running sum of earlier batches
//   (scratch), and the last batch writes float(sqrt(sum)): the CPU's loop,
//   bit for bit.
// - clipCoefficientKernel: one thread.
// - adamwKernel: grid-stride over n elements (16-byte packs of param, m, v
//   and grad when all four are 16-byte aligned, then the tail), one thread
//   per element, reading the element of every buffer before writing it.
//   Thread 0 of each block derives the scalars (double, as cpu/AdamW.cpp,
//   with IEEE operations nvcc does not contract) into shared memory; the
//   per-element update is cpu/AdamW.cpp's expression in rn* operations.
// - adamwMultiKernel: the tensors of one batch (at most kAdamWMultiTensors)
//   cut into chunks of kAdamWChunk elements, numbered tensor after tensor;
//   block b updates chunks b, b + gridDim.x, ... (the tensor of a chunk is
//   the last whose firstChunk is at most it), each element by adamwElement
//   as adamwKernel does (16-byte packs when the tensor's pointers allow,
//   then the tail), so every tensor gets adamw's bits. Thread 0 derives the
//   scalars once per block, with and without weight decay.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_CUH

#include "kernels/common.cuh"
#include "kernels/optimizer.h"

namespace mlt::cuda {

inline constexpr int kReduceThreads = 256;
inline constexpr int kSumSquaresMaxBlocks = 1024;
/// 16-byte loads a sum_squares thread issues before it uses them.
inline constexpr int kSumSquaresUnroll = 4;
/// Elements per block of sum_squares below which fewer blocks are launched:
/// one unrolled round of loads per thread.
inline constexpr int64_t kSumSquaresBlockElems =
    int64_t(kReduceThreads) * 4 * kSumSquaresUnroll;
inline constexpr int kGlobalNormBatch = 256;

/// The number of blocks of sum_squares for n elements (a function of n only).
inline int sumSquaresBlocks(int64_t n) {
  const int64_t blocks =
      (n + kSumSquaresBlockElems - 1) / kSumSquaresBlockElems;
  return int(blocks < 1 ? 1
                        : (blocks > kSumSquaresMaxBlocks ? kSumSquaresMaxBlocks
                                                         : blocks));
}

/// The sum of `value` over the block, in a fixed order; valid in thread 0.
/// Every thread of the block must call it; calls must be separated by a
/// barrier (the shared partial sums are reused).
__device__ __forceinline__ double blockSum(double value) {
  __shared__ double warpSums[kReduceThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xFFFFFFFFu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0)
    warpSums[warp] = value;
  __syncthreads();
  double sum = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kReduceThreads / 32; ++w)
      sum += warpSums[w];
  return sum;
}

__device__ __forceinline__ double addSquares(double sum, float4 v) {
  sum = fma(double(v.x), double(v.x), sum);
  sum = fma(double(v.y), double(v.y), sum);
  sum = fma(double(v.z), double(v.z), sum);
  return fma(double(v.w), double(v.w), sum);
}

/// Pack p (4 elements) of x, widened: 16 bytes of f32, or 8 of bf16 (one
/// element, toCompute, at a time: common.cuh).
__device__ __forceinline__ float4 loadPack(const float *x, int64_t p) {
  return reinterpret_cast<const float4 *>(x)[p];
}
__device__ __forceinline__ float4 loadPack(const __nv_bfloat16 *x, int64_t p) {
  const uint2 bits = reinterpret_cast<const uint2 *>(x)[p];
  return make_float4(bf16BitsToFloat(uint16_t(bits.x)),
                     bf16BitsToFloat(uint16_t(bits.x >> 16)),
                     bf16BitsToFloat(uint16_t(bits.y)),
                     bf16BitsToFloat(uint16_t(bits.y >> 16)));
}

/// The sum of squares of x[0..n) by block `block` of `blocks` (threads
/// kReduceThreads), in sumSquaresKernel's order; valid in thread 0. A bf16
/// x (a gradient reduced in bf16) is widened as it is read, in the same
/// order: the bits of its f32 copy's sum.
template <bool kVector, typename T = float>
__device__ __forceinline__ double blockSumOfSquares(const T *x, int64_t n,
                                                    int block, int blocks) {
  const int64_t thread = int64_t(block) * kReduceThreads + threadIdx.x;
  const int64_t stride = int64_t(blocks) * kReduceThreads;
  double sum = 0.0;
  int64_t scalarStart = 0;
  if constexpr (kVector) {
    const int64_t packs = n / 4;
    int64_t p = thread;
    for (; p + (kSumSquaresUnroll - 1) * stride < packs;
         p += kSumSquaresUnroll * stride) {
      float4 v[kSumSquaresUnroll];
#pragma unroll
      for (int u = 0; u < kSumSquaresUnroll; ++u)
        v[u] = loadPack(x, p + u * stride);
#pragma unroll
      for (int u = 0; u < kSumSquaresUnroll; ++u)
        sum = addSquares(sum, v[u]);
    }
    for (; p < packs; p += stride)
      sum = addSquares(sum, loadPack(x, p));
    scalarStart = packs * 4;
  }
  for (int64_t i = scalarStart + thread; i < n; i += stride) {
    const double value = toCompute(x[i]);
    sum = fma(value, value, sum);
  }
  return blockSum(sum);
}

template <bool kVector>
__global__ void __launch_bounds__(kReduceThreads)
    sumSquaresKernel(float *out, double *partials, const float *x, int64_t n) {
  waitForPredecessors();
  allowDependents();
  const double sum =
      blockSumOfSquares<kVector>(x, n, int(blockIdx.x), int(gridDim.x));
  if (threadIdx.x == 0) {
    if (gridDim.x == 1)
      *out = float(sum);
    else
      partials[blockIdx.x] = sum;
  }
}

/// One block: *out = float(the fixed-tree sum of partials[0..count)).
static __global__ void __launch_bounds__(kReduceThreads)
    sumPartialsKernel(float *out, const double *partials, int count) {
  waitForPredecessors();
  allowDependents();
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += kReduceThreads)
    sum += partials[i];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *out = float(sum);
}

/// Tensors of one sum_squares_multi grid: kSumSquaresMultiBatch keeps the
/// batch (passed by value) under the 4 KiB of a kernel's parameters.
inline constexpr int kSumSquaresMultiBatch = 112;
struct SumSquaresMultiBatch {
  /// f32, or bf16 where half[k].
  const void *x[kSumSquaresMultiBatch];
  float *out[kSumSquaresMultiBatch];
  int64_t n[kSumSquaresMultiBatch];
  /// Tensor k's blocks: [firstBlock[k], firstBlock[k + 1]).
  int firstBlock[kSumSquaresMultiBatch + 1];
  /// Where tensor k's partials start (unused when it has one block).
  int firstPartial[kSumSquaresMultiBatch];
  /// Whether x[k] is aligned for packs of 4 (16 bytes of f32, 8 of bf16:
  /// sumSquaresKernel<true>'s order).
  bool vector[kSumSquaresMultiBatch];
  bool half[kSumSquaresMultiBatch];
  int count;
};
static_assert(sizeof(SumSquaresMultiBatch) + sizeof(void *) <= 4096,
              "a kernel's parameters hold at most 4 KiB");

static __global__ void __launch_bounds__(kReduceThreads)
    sumSquaresMultiKernel(double *partials, SumSquaresMultiBatch batch) {
  // The tensor whose blocks hold this one: the last k with firstBlock[k] <=
  // blockIdx.x (binary search over the batch's prefix).
  const int block = int(blockIdx.x);
  int lo = 0, hi = batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.firstBlock[mid] <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int k = lo;
  const int local = block - batch.firstBlock[k];
  const int blocks = batch.firstBlock[k + 1] - batch.firstBlock[k];
  const float *x = static_cast<const float *>(batch.x[k]);
  const auto *xh = static_cast<const __nv_bfloat16 *>(batch.x[k]);
  const int64_t n = batch.n[k];
  waitForPredecessors();
  allowDependents();
  double sum;
  if (batch.half[k])
    sum = batch.vector[k] ? blockSumOfSquares<true>(xh, n, local, blocks)
                          : blockSumOfSquares<false>(xh, n, local, blocks);
  else
    sum = batch.vector[k] ? blockSumOfSquares<true>(x, n, local, blocks)
                          : blockSumOfSquares<false>(x, n, local, blocks);
  if (threadIdx.x == 0) {
    if (blocks == 1)
      *batch.out[k] = float(sum);
    else
      partials[batch.firstPartial[k] + local] = sum;
  }
}

/// Block k: tensor k's partials combined as sumPartialsKernel does.
static __global__ void __launch_bounds__(kReduceThreads)
    sumPartialsMultiKernel(const double *partials, SumSquaresMultiBatch batch) {
  const int k = int(blockIdx.x);
  const int count = batch.firstBlock[k + 1] - batch.firstBlock[k];
  waitForPredecessors();
  allowDependents();
  if (count == 1)
    return;
  const double *mine = partials + batch.firstPartial[k];
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += kReduceThreads)
    sum += mine[i];
  sum = blockSum(sum);
  if (threadIdx.x == 0)
    *batch.out[k] = float(sum);
}

/// One batch of global_norm's parts.
struct GlobalNormBatch {
  const float *parts[kGlobalNormBatch];
  int count;
  /// Whether earlier batches left a running sum in scratch, and whether this
  /// batch is the last.
  bool continues;
  bool last;
};

static __global__ void __launch_bounds__(kGlobalNormBatch)
    globalNormKernel(float *out, double *running, GlobalNormBatch batch) {
  __shared__ float values[kGlobalNormBatch];
  if (int(threadIdx.x) < batch.count)
    values[threadIdx.x] = *batch.parts[threadIdx.x];
  __syncthreads();
  if (threadIdx.x != 0)
    return;
  double sum = batch.continues ? *running : 0.0;
  for (int k = 0; k < batch.count; ++k)
    sum = __dadd_rn(sum, double(values[k]));
  if (batch.last)
    *out = float(sqrt(sum));
  else
    *running = sum;
}

static __global__ void clipCoefficientKernel(float *out, const float *norm,
                                             const float *maxNorm) {
  const float max = *maxNorm;
  float coefficient = 1.0f;
  if (max != 0.0f) {
    const float c = __fdiv_rn(max, __fadd_rn(*norm, 1e-6f));
    coefficient = c < 1.0f ? c : 1.0f; // std::min(1.0f, c)
  }
  *out = coefficient;
}

/// The scalars of one AdamW update, derived once per block.
struct AdamWDerived {
  float gradScale;
  float decayFactor;
  float lerpWeight;
  float beta2;
  float oneMinusBeta2;
  float bc2Sqrt;
  float eps;
  float negStepSize;
  bool decay;
  bool lerpWeightSmall;
  bool valid;
};

/// cpu/AdamW.cpp's Python-side scalars, from the f32 buffers.
__device__ inline AdamWDerived deriveAdamW(const AdamWScalars &s,
                                           bool applyWeightDecay,
                                           DeviceErrorSink errors) {
  AdamWDerived d{};
  const float stepValue = *s.step;
  d.valid = stepValue >= 1.0f && stepValue <= 9.0e15f;
  if (!d.valid) {
    reportDeviceError(errors, kDeviceErrorInvalidStep, 0,
                      __float_as_uint(stepValue), 0);
    return d;
  }
  const double step = double(llroundf(stepValue));
  const double lr = *s.lr, beta1 = *s.beta1, beta2 = *s.beta2, eps = *s.eps,
               weightDecay = *s.weightDecay;
  const double biasCorrection1 = __dsub_rn(1.0, pow(beta1, step));
  const double biasCorrection2 = __dsub_rn(1.0, pow(beta2, step));
  const double stepSize = __ddiv_rn(lr, biasCorrection1);
  const double biasCorrection2Sqrt = __dsqrt_rn(biasCorrection2);
  d.gradScale = *s.gradScale;
  d.decay = applyWeightDecay && weightDecay != 0.0;
  d.decayFactor = float(__dsub_rn(1.0, __dmul_rn(lr, weightDecay)));
  d.lerpWeight = float(__dsub_rn(1.0, beta1));
  d.lerpWeightSmall = fabsf(d.lerpWeight) < 0.5f;
  d.beta2 = float(beta2);
  d.oneMinusBeta2 = float(__dsub_rn(1.0, beta2));
  d.bc2Sqrt = float(biasCorrection2Sqrt);
  d.eps = float(eps);
  d.negStepSize = float(-stepSize);
  return d;
}

/// One element: (param, m, v) updated in place from grad.
__device__ __forceinline__ void adamwElement(const AdamWDerived &d, float g,
                                             float &p, float &m, float &v) {
  if (d.gradScale != 1.0f)
    g = __fmul_rn(g, d.gradScale);
  if (d.decay)
    p = __fmul_rn(p, d.decayFactor);
  const float mNew =
      d.lerpWeightSmall
          ? __fadd_rn(m, __fmul_rn(d.lerpWeight, __fsub_rn(g, m)))
          : __fsub_rn(
                g, __fmul_rn(__fsub_rn(g, m), __fsub_rn(1.0f, d.lerpWeight)));
  float vNew = __fmul_rn(v, d.beta2);
  vNew = __fadd_rn(vNew, __fmul_rn(__fmul_rn(d.oneMinusBeta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vNew), d.bc2Sqrt), d.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(d.negStepSize, mNew), denom));
  m = mNew;
  v = vNew;
}

/// Pack i (4 elements) of a 16-byte-aligned tensor, and of its compute copy
/// (8-byte aligned) when `copy` is not null. The gradient is f32 (16-byte
/// aligned) or bf16 (8-byte aligned), widened as it is read.
template <typename G>
__device__ __forceinline__ void adamwPack(const AdamWDerived &d, int64_t i,
                                          float *param, float *m, float *v,
                                          const G *grad, __nv_bfloat16 *copy) {
  float4 *p4 = reinterpret_cast<float4 *>(param);
  float4 *m4 = reinterpret_cast<float4 *>(m);
  float4 *v4 = reinterpret_cast<float4 *>(v);
  const float4 g = loadPack(grad, i);
  float4 p = p4[i], mm = m4[i], vv = v4[i];
  adamwElement(d, g.x, p.x, mm.x, vv.x);
  adamwElement(d, g.y, p.y, mm.y, vv.y);
  adamwElement(d, g.z, p.z, mm.z, vv.z);
  adamwElement(d, g.w, p.w, mm.w, vv.w);
  p4[i] = p;
  m4[i] = mm;
  v4[i] = vv;
  if (copy)
    reinterpret_cast<uint2 *>(copy)[i] =
        make_uint2(uint32_t(floatToBF16Bits(p.x)) |
                       uint32_t(floatToBF16Bits(p.y)) << 16,
                   uint32_t(floatToBF16Bits(p.z)) |
                       uint32_t(floatToBF16Bits(p.w)) << 16);
}

/// Element i, and its compute copy when `copy` is not null.
template <typename G>
__device__ __forceinline__ void adamwOne(const AdamWDerived &d, int64_t i,
                                         float *param, float *m, float *v,
                                         const G *grad, __nv_bfloat16 *copy) {
  float p = param[i], mm = m[i], vv = v[i];
  adamwElement(d, toCompute(grad[i]), p, mm, vv);
  param[i] = p;
  m[i] = mm;
  v[i] = vv;
  if (copy)
    copy[i] = __ushort_as_bfloat16(floatToBF16Bits(p));
}

/// With `copy` (may be null), the updated parameter rounded to bf16 is
/// written there too: the compute copy of a mixed-precision plan, in the same
/// pass as the update.
template <bool kVector>
__global__ void __launch_bounds__(kFlatThreads)
    adamwKernel(float *param, float *m, float *v, const float *grad, int64_t n,
                AdamWScalars scalars, bool applyWeightDecay,
                __nv_bfloat16 *copy, DeviceErrorSink errors) {
  __shared__ AdamWDerived shared;
  if (threadIdx.x == 0)
    shared = deriveAdamW(scalars, applyWeightDecay,
                         blockIdx.x == 0 ? errors : DeviceErrorSink{});
  __syncthreads();
  const AdamWDerived d = shared;
  if (!d.valid)
    return;
  int64_t scalarStart = 0;
  if constexpr (kVector) {
    const int64_t packs = n / 4;
    for (int64_t i = globalThreadIndex(); i < packs; i += globalThreadCount())
      adamwPack(d, i, param, m, v, grad, copy);
    scalarStart = packs * 4;
  }
  for (int64_t i = scalarStart + globalThreadIndex(); i < n;
       i += globalThreadCount())
    adamwOne(d, i, param, m, v, grad, copy);
}

/// Tensors per adamw_multi kernel (the batch goes by value: 32 tensors are
/// 2 KiB of parameters), elements per chunk, and the most blocks.
inline constexpr int kAdamWMultiTensors = 32;
inline constexpr int64_t kAdamWChunk = int64_t(kFlatThreads) * 4 * 8;
inline constexpr int64_t kAdamWMultiMaxBlocks = 8192;

struct AdamWBatchTensor {
  float *param, *m, *v;
  /// The gradient: f32, or bf16 (gradHalf) when grad is null.
  const float *grad;
  const __nv_bfloat16 *gradHalf;
  __nv_bfloat16 *copy;
  int64_t n;
  /// The index of the tensor's first chunk in the batch.
  int64_t firstChunk;
  bool decay;
  /// 16-byte packs (param, m, v, an f32 grad 16-byte aligned; a bf16 grad
  /// and copy 8-byte).
  bool vector;
};

struct AdamWBatch {
  AdamWBatchTensor tensors[kAdamWMultiTensors];
  int count;
  int64_t chunks;
};

/// Elements [begin, end) of one tensor of a batch, by the block's threads.
template <typename G>
__device__ __forceinline__ void adamwChunk(const AdamWDerived &d,
                                           const AdamWBatchTensor &x,
                                           const G *grad, int64_t begin,
                                           int64_t end) {
  int64_t scalarStart = begin;
  if (x.vector) {
    const int64_t packEnd = end / 4; // begin is a multiple of 4
    for (int64_t i = begin / 4 + threadIdx.x; i < packEnd; i += blockDim.x)
      adamwPack(d, i, x.param, x.m, x.v, grad, x.copy);
    scalarStart = packEnd * 4;
  }
  for (int64_t i = scalarStart + threadIdx.x; i < end; i += blockDim.x)
    adamwOne(d, i, x.param, x.m, x.v, grad, x.copy);
}

static __global__ void __launch_bounds__(kFlatThreads)
    adamwMultiKernel(AdamWBatch batch, AdamWScalars scalars,
                     DeviceErrorSink errors) {
  __shared__ AdamWDerived shared[2]; // [0] without weight decay, [1] with
  if (threadIdx.x == 0) {
    shared[1] = deriveAdamW(scalars, /*applyWeightDecay=*/true,
                            blockIdx.x == 0 ? errors : DeviceErrorSink{});
    shared[0] = shared[1];
    shared[0].decay = false;
  }
  __syncthreads();
  if (!shared[1].valid)
    return;
  for (int64_t c = blockIdx.x; c < batch.chunks; c += gridDim.x) {
    int t = 0;
    while (t + 1 < batch.count && batch.tensors[t + 1].firstChunk <= c)
      ++t;
    const AdamWBatchTensor &x = batch.tensors[t];
    const AdamWDerived &d = shared[x.decay ? 1 : 0];
    const int64_t begin = (c - x.firstChunk) * kAdamWChunk;
    const int64_t end = begin + kAdamWChunk < x.n ? begin + kAdamWChunk : x.n;
    if (x.grad)
      adamwChunk(d, x, x.grad, begin, end);
    else
      adamwChunk(d, x, x.gradHalf, begin, end);
  }
}

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_OPTIMIZER_CUH
