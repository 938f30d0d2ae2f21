//===- elementwise.cuh - elementwise CUDA kernels --------------*- CUDA -*-===//
//
// Part of mlt. Device code of the elementwise family (launchers in
// elementwise.cu, declared in elementwise.h).
//
// Invariants:
// - Flat kernels (mapKernel, castKernel, fillKernel, shardSliceKernel) are
//   grid-stride loops over a 1-D index space; the grid is a function of the
//   size only (common.cuh's flatBlocks), kFlatThreads threads per block.
// - mapKernel: buffers of n elements of T (float or bf16), no broadcasting;
//   queued by launchDependent, it waits for its predecessors before it
//   touches memory (common.cuh).
//   With kVector, every pointer is 16-byte aligned (checked by the
//   launcher) and thread t handles packs t, t + stride, ...: one 16-byte load
//   per input and one 16-byte store per output (4 f32 or 8 bf16 elements);
//   the n % width tail elements go one per thread. Without it, one element
//   per iteration. Each element is computed by one thread, which reads it
//   from every input before writing any output: outputs may alias inputs
//   element for element (accumulate reads and writes y). With kAmax, each
//   thread also keeps the maximum absBits of each output's elements as it
//   stores them, merged per block into that output's amax (absmax.cuh): a
//   fused launchAbsMax of the outputs (swiglu's, for FP8 current scaling).
// - Model ops compute in f32 for f32 and bf16 storage (ComputeType), with
//   the CPU kernel's expression written in rn* operations, so no FMA
//   contraction: results match cpu/Elementwise.cpp bit for bit for add, mul
//   and accumulate, and to within expf's ulp for the SiLU family (CUDA's
//   expf is within 2 ulp, glibc's within 1).
// - castKernel converts element by element, through float (f64 <-> f32 by
//   rounding to nearest, bf16 as common.cuh rounds), as CpuBackend.cpp's cast;
//   castPackKernel the same, 8 elements a load and a store when both
//   pointers are aligned to them.
// - transposeKernel: one thread per output unit (coalesced writes); the
//   input offset comes from the output index through the merged shape (at
//   most kMaxTransposeRank dimensions). Where the innermost dimension stays
//   innermost (sequence parallelism's transposes around its collectives
//   with micro-batches of more than one sequence), a unit is the widest of
//   16, 8 or 4 bytes that divides the contiguous run (launchTranspose), and
//   reads are coalesced; a true matrix transpose reads strided (no
//   shared-memory tiling: no plan makes one in its steady state).
// - shardSliceKernel copies units of U (1 to 16 bytes; the launcher picks
//   the widest that divides the block and the pointers' alignment): unit j of
//   output block o is unit j of input block o * groupSize + index.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH

#include "kernels/absmax.cuh"
#include "kernels/common.cuh"
#include "kernels/elementwise.h"

namespace mlt::cuda {

//===----------------------------------------------------------------------===//
// Model ops
//===----------------------------------------------------------------------===//

/// The operands of a map: NIn inputs and NOut outputs of n elements.
template <typename T, int NIn, int NOut> struct MapArgs {
  const T *in[NIn];
  T *out[NOut];
};

/// Where a map merges the amax of each output (null: not wanted), as float
/// bits (absmax.cuh).
template <int NOut> struct MapAmax { unsigned *out[NOut]; };

/// Element i of a map; with kAmax, best[k] takes in the absBits of output
/// k's element as stored.
template <bool kAmax, typename T, int NIn, int NOut, typename Op>
__device__ __forceinline__ void mapOne(const MapArgs<T, NIn, NOut> &args,
                                       int64_t i, const Op &op,
                                       unsigned (&best)[NOut]) {
  using C = typename ComputeType<T>::type;
  C x[NIn], y[NOut];
#pragma unroll
  for (int k = 0; k < NIn; ++k)
    x[k] = toCompute(args.in[k][i]);
  op(x, y);
#pragma unroll
  for (int k = 0; k < NOut; ++k) {
    const T stored = fromCompute<T>(y[k]);
    args.out[k][i] = stored;
    if constexpr (kAmax)
      best[k] = max(best[k], absBits(toCompute(stored)));
  }
}

template <typename T, int NIn, int NOut, typename Op, bool kVector, bool kAmax>
__global__ void __launch_bounds__(kFlatThreads)
    mapKernel(MapArgs<T, NIn, NOut> args, int64_t n, Op op,
              MapAmax<NOut> amax) {
  using C = typename ComputeType<T>::type;
  waitForPredecessors();
  allowDependents();
  unsigned best[NOut] = {};
  int64_t scalarStart = 0;
  if constexpr (kVector) {
    constexpr int W = Pack<T>::kWidth;
    const int64_t packs = n / W;
    for (int64_t p = globalThreadIndex(); p < packs; p += globalThreadCount()) {
      Pack<T> x[NIn], y[NOut];
#pragma unroll
      for (int k = 0; k < NIn; ++k)
        x[k] = reinterpret_cast<const Pack<T> *>(args.in[k])[p];
#pragma unroll
      for (int j = 0; j < W; ++j) {
        C xs[NIn], ys[NOut];
#pragma unroll
        for (int k = 0; k < NIn; ++k)
          xs[k] = toCompute(x[k].v[j]);
        op(xs, ys);
#pragma unroll
        for (int k = 0; k < NOut; ++k)
          y[k].v[j] = fromCompute<T>(ys[k]);
      }
#pragma unroll
      for (int k = 0; k < NOut; ++k) {
        reinterpret_cast<Pack<T> *>(args.out[k])[p] = y[k];
        if constexpr (kAmax)
          best[k] = maxAbsBits(best[k], y[k]);
      }
    }
    scalarStart = packs * W;
  }
  for (int64_t i = scalarStart + globalThreadIndex(); i < n;
       i += globalThreadCount())
    mapOne<kAmax>(args, i, op, best);
  if constexpr (kAmax) {
    __shared__ unsigned warps[NOut * 32];
    blockAbsMaxToGlobal(amax.out, best, warps);
  }
}

/// out = a + b.
struct AddOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    y[0] = rnAdd(x[0], x[1]);
  }
};

/// out = a * b.
struct MulOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    y[0] = rnMul(x[0], x[1]);
  }
};

/// (x, y) -> y + x.
struct AccumulateOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    y[0] = rnAdd(x[1], x[0]);
  }
};

/// y (f32) += x (bf16, widened exactly): a bf16 gradient added into a
/// parameter's f32 gradient. One element per iteration, grid-stride.
__global__ void __launch_bounds__(kFlatThreads)
    accumulateWidenKernel(float *y, const __nv_bfloat16 *x, int64_t n) {
  for (int64_t i = globalThreadIndex(); i < n; i += globalThreadCount())
    y[i] = rnAdd(y[i], toCompute(x[i]));
}

/// 1 / (1 + exp(-x)).
template <typename C> __device__ __forceinline__ C sigmoidOf(C x) {
  return rnDiv(C(1), rnAdd(C(1), expOf(-x)));
}

/// s * (1 + x * (1 - s)): silu'(x) for s = sigmoid(x).
template <typename C> __device__ __forceinline__ C siluDerivative(C x, C s) {
  return rnMul(s, rnAdd(C(1), rnMul(x, rnSub(C(1), s))));
}

/// (gate, up) -> gate / (1 + exp(-gate)) * up.
struct SwiGLUForwardOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    const C g = x[0], u = x[1];
    y[0] = rnMul(rnDiv(g, rnAdd(C(1), expOf(-g))), u);
  }
};

/// (dout, gate, up) -> (dgate, dup).
struct SwiGLUBackwardOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    const C dy = x[0], g = x[1], u = x[2];
    const C s = sigmoidOf(g);
    y[0] = rnMul(rnMul(dy, u), siluDerivative(g, s));
    y[1] = rnMul(dy, rnMul(g, s));
  }
};

/// (dout, gate, up) -> (dgate, dup, out): SwiGLUBackwardOp's and
/// SwiGLUForwardOp's results, the same operations (one exponential).
struct SwiGLUBackwardForwardOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    const C dy = x[0], g = x[1], u = x[2];
    const C onePlusExp = rnAdd(C(1), expOf(-g));
    const C s = rnDiv(C(1), onePlusExp); // sigmoidOf(g)
    y[0] = rnMul(rnMul(dy, u), siluDerivative(g, s));
    y[1] = rnMul(dy, rnMul(g, s));
    y[2] = rnMul(rnDiv(g, onePlusExp), u);
  }
};

/// x -> x / (1 + exp(-x)).
struct SiLUForwardOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    y[0] = rnDiv(x[0], rnAdd(C(1), expOf(-x[0])));
  }
};

/// (dout, x) -> dx.
struct SiLUBackwardOp {
  template <typename C> __device__ void operator()(const C *x, C *y) const {
    const C s = sigmoidOf(x[1]);
    y[0] = rnMul(x[0], siluDerivative(x[1], s));
  }
};

//===----------------------------------------------------------------------===//
// Cast
//===----------------------------------------------------------------------===//

/// bf16 as its bits, so that the conversions below are plain overloads.
struct BF16Bits {
  uint16_t bits;
};

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(double x) {
  return __double2float_rn(x);
}
__device__ __forceinline__ float widen(BF16Bits x) {
  return bf16BitsToFloat(x.bits);
}

template <typename Out> struct Narrow;
template <> struct Narrow<float> {
  __device__ static float from(float x) { return x; }
};
template <> struct Narrow<double> {
  __device__ static double from(float x) { return double(x); }
};
template <> struct Narrow<BF16Bits> {
  __device__ static BF16Bits from(float x) { return {floatToBF16Bits(x)}; }
};

/// out[i] = in[i] converted through float (exact except when narrowing).
template <typename In, typename Out>
__global__ void __launch_bounds__(kFlatThreads)
    castKernel(Out *out, const In *in, int64_t n) {
  for (int64_t i = globalThreadIndex(); i < n; i += globalThreadCount())
    out[i] = Narrow<Out>::from(widen(in[i]));
}

/// kCastPack elements of T, loaded or stored as one aligned unit (16 bytes
/// of bf16, 32 of f32: vector loads and stores).
inline constexpr int kCastPack = 8;
template <typename T> struct alignas(kCastPack * sizeof(T)) CastPack {
  T v[kCastPack];
};

/// castKernel by packs: thread t converts packs t, t + stride, ... (both
/// pointers aligned to their pack, checked by the launcher), then the
/// n % kCastPack tail one element per thread; each element as castKernel
/// converts it.
template <typename In, typename Out>
__global__ void __launch_bounds__(kFlatThreads)
    castPackKernel(Out *out, const In *in, int64_t n) {
  const int64_t packs = n / kCastPack;
  const auto *x = reinterpret_cast<const CastPack<In> *>(in);
  auto *y = reinterpret_cast<CastPack<Out> *>(out);
  for (int64_t p = globalThreadIndex(); p < packs; p += globalThreadCount()) {
    const CastPack<In> a = x[p];
    CastPack<Out> b;
#pragma unroll
    for (int j = 0; j < kCastPack; ++j)
      b.v[j] = Narrow<Out>::from(widen(a.v[j]));
    y[p] = b;
  }
  for (int64_t i = packs * kCastPack + globalThreadIndex(); i < n;
       i += globalThreadCount())
    out[i] = Narrow<Out>::from(widen(in[i]));
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

/// The merged transpose: y has `rank` dimensions of sizes outShape; moving
/// one step along y's dimension d moves inStride[d] elements in x.
struct TransposeGeometry {
  int rank;
  int64_t outShape[kMaxTransposeRank];
  int64_t inStride[kMaxTransposeRank];
};

template <typename U>
__global__ void __launch_bounds__(kFlatThreads)
    transposeKernel(U *out, const U *in, int64_t total, TransposeGeometry g) {
  for (int64_t o = globalThreadIndex(); o < total; o += globalThreadCount()) {
    int64_t rest = o, offset = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      const int64_t size = g.outShape[d];
      const int64_t q = rest / size;
      offset += (rest - q * size) * g.inStride[d];
      rest = q;
    }
    out[o] = in[offset];
  }
}

//===----------------------------------------------------------------------===//
// Shard slice and fill
//===----------------------------------------------------------------------===//

template <typename U>
__global__ void __launch_bounds__(kFlatThreads)
    shardSliceKernel(U *out, const U *in, int64_t outer, int64_t unitsPerBlock,
                     int64_t groupSize, int64_t index) {
  const int64_t total = outer * unitsPerBlock;
  for (int64_t t = globalThreadIndex(); t < total; t += globalThreadCount()) {
    const int64_t o = t / unitsPerBlock, j = t - o * unitsPerBlock;
    out[t] = in[(o * groupSize + index) * unitsPerBlock + j];
  }
}

template <typename U>
__global__ void __launch_bounds__(kFlatThreads)
    fillKernel(U *data, int64_t n, U value) {
  for (int64_t i = globalThreadIndex(); i < n; i += globalThreadCount())
    data[i] = value;
}

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ELEMENTWISE_CUH
