//===- rope.cuh - rotary position embedding CUDA kernels -------*- CUDA -*-===//
//
// Part of mlt. Device code of the rope family (launcher in rope.cu, declared
// in rope.h).
//
// Invariants:
// - x, y are [batch, seq, heads, headDim], headDim even, half = headDim / 2;
//   T is the storage type (float or bf16).
// - Block b rotates the `positions` sequence indices from s0 = (b %
//   positionBlocks) * positions and the `batches` batch entries from b0 = (b
//   / positionBlocks) * batches (fewer at the ends), every head: a function
//   of the shape only (makeGeometry), never of the device.
// - Its threads compute those positions' half cos/sin pairs into shared
//   memory (dynamic, 2 * positions * half floats) exactly as the CPU kernel
//   does: inv_freq = rt::ropeInverseFrequency (RopeFrequencies.h: theta^(-2i
//   / headDim), scaled by the geometry's rope scaling; computed on the host
//   by the CPU's function and passed by value when half <= kMaxHalf, else
//   by the same function on the device), angle = order(s) *
//   inv_freq, cos and sin in f64, rounded to T (sin negated for the inverse
//   rotation). Each thread first
//   loads its first kUnits units (below), so the loads are in flight while
//   the table is computed.
// - The rotation is in T, every operation rounded to T as the CPU kernel's
//   `lo * cos - hi * sin` (no FMA contraction: rn* / explicit rounding):
//     y[i]      = x[i] * cos - x[i + half] * sin
//     y[i+half] = x[i + half] * cos + x[i] * sin
// - A unit is kW consecutive pairs (i, i + half) of one head (kW =
//   Pack<T>::kWidth on the 16-byte path, which needs half % kW == 0 and
//   16-byte aligned x and y, checked on the host; else 1). Thread t owns the
//   units t + j * blockDim.x of its block, reads both halves of a unit before
//   writing either, and no two threads touch the same element: y may equal
//   x.
// - The kernel waits for its predecessors (waitForPredecessors, common.cuh)
//   before it touches memory: the launcher queues it with launchDependent
//   (programmatic dependent launch), which overlaps only its launch.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH

#include "kernels/common.cuh"

#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Plan/SequenceOrder.h"

#include <cstddef>
#include <type_traits>

namespace mlt::cuda::rope {

/// Threads per block at most (blockThreads), and units a thread keeps in
/// flight (two loads each):
/// the fastest of the configurations bench/memory_kernels_bench.cu times.
inline constexpr int kThreads = 128;
inline constexpr int kUnits = 1;
/// The largest half head dim whose inverse frequencies travel by value.
inline constexpr int kMaxHalf = 256;

/// The inverse frequencies rt::ropeInverseFrequency(i), i < half, computed
/// on the host (the first min(half, kMaxHalf) entries are meaningful).
struct InvFreqs {
  double v[kMaxHalf];
};

/// The launch's shape and its block decomposition.
struct Geometry {
  int64_t batch = 0, seq = 0, heads = 0, headDim = 0;
  /// The position of each row (SequenceOrder.h: an offset, or a
  /// context-parallel rank's load-balanced block).
  rt::SequencePositions order;
  /// Sequence indices and batch entries per block, and the blocks along the
  /// sequence (the grid is positionBlocks * ceil(batch / batches) blocks,
  /// position blocks fastest).
  int64_t positions = 1, batches = 1, positionBlocks = 1, blocks = 1;
  double theta = 0.0, direction = 1.0;
  rt::RopeScaling scaling;
  /// Whether InvFreqs holds the frequencies (half <= kMaxHalf).
  bool hostFreqs = false;
};

/// The decomposition for units of `width` pairs and about `targetUnits`
/// units per block: whole batch entries of one position first, then more
/// positions, as long as the block's cos/sin table fits 48 KiB. A function of
/// the shape only. Needs heads * headDim <= INT32_MAX and half <= 6144 (the
/// launcher checks).
inline Geometry makeGeometry(int64_t batch, int64_t seq, int64_t heads,
                             int64_t headDim,
                             const rt::SequencePositions &order,
                             double theta, const rt::RopeScaling &scaling,
                             bool inverse, int width, int64_t targetUnits) {
  Geometry g;
  g.batch = batch;
  g.seq = seq;
  g.heads = heads;
  g.headDim = headDim;
  g.order = order;
  g.theta = theta;
  g.scaling = scaling;
  g.direction = inverse ? -1.0 : 1.0;
  const int64_t half = headDim / 2;
  g.hostFreqs = half <= kMaxHalf;
  const int64_t perEntry = heads * (half / width); // units of one (b, s)
  auto clamp = [](int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
  };
  g.batches = clamp(targetUnits / perEntry, 1, batch);
  g.positions = clamp(targetUnits / (perEntry * g.batches), 1, seq);
  g.positions = clamp(g.positions, 1, 6144 / half);
  g.positionBlocks = (seq + g.positions - 1) / g.positions;
  g.blocks = g.positionBlocks * ((batch + g.batches - 1) / g.batches);
  return g;
}

/// Threads of a block for units of `width` pairs, `unitsPerThread` each: its
/// full share of units rounded up to whole warps, at most `maxThreads`. Whole
/// batch entries of 12 heads of 64 (the 125m model) are 48 units of 8: 96
/// threads for two, where 128 would leave a quarter idle
/// (bench/memory-kernels-notes.md).
inline int blockThreads(const Geometry &g, int width, int maxThreads,
                        int unitsPerThread) {
  const int64_t units =
      g.positions * g.batches * g.heads * (g.headDim / 2 / width);
  int64_t threads = (units + unitsPerThread - 1) / unitsPerThread;
  threads = (threads + 31) / 32 * 32;
  return int(threads < maxThreads ? threads : maxThreads);
}

/// The dynamic shared memory of a block: its cos and sin table.
inline size_t tableBytes(const Geometry &g) {
  return 2 * size_t(g.positions) * size_t(g.headDim / 2) * sizeof(float);
}

#ifdef __CUDACC__

/// kW consecutive elements of T, loaded or stored with one instruction.
template <typename T, int kW> struct alignas(sizeof(T) * kW) Vec { T v[kW]; };

/// a * b and a + b (a - b) rounded to T, as T arithmetic on the CPU rounds.
template <typename T> __device__ __forceinline__ float mulT(float a, float b) {
  return roundTo<T>(rnMul(a, b));
}

/// `out` rounded to T, kW elements (bf16 pairs through one conversion).
template <typename T, int kW>
__device__ __forceinline__ Vec<T, kW> vecFromCompute(const float (&out)[kW]) {
  Vec<T, kW> v;
  if constexpr (std::is_same_v<T, __nv_bfloat16> && kW % 2 == 0) {
    uint32_t *words = reinterpret_cast<uint32_t *>(v.v);
#pragma unroll
    for (int e = 0; e < kW / 2; ++e)
      words[e] = floatsToBF16x2Bits(out[2 * e], out[2 * e + 1]);
  } else {
#pragma unroll
    for (int e = 0; e < kW; ++e)
      v.v[e] = fromCompute<T>(out[e]);
  }
  return v;
}

template <typename T, int kW, int kUnitsPerThread, int kBlockThreads = kThreads>
__global__ void __launch_bounds__(kBlockThreads)
    ropeKernel(T *y, const T *x, const Geometry g,
               const __grid_constant__ InvFreqs freqs) {
  extern __shared__ float trig[]; // cos[positions][half], sin[positions][half]
  using V = Vec<T, kW>;
  const int64_t half = g.headDim / 2;
  const int64_t s0 = int64_t(blockIdx.x % g.positionBlocks) * g.positions;
  const int64_t b0 = int64_t(blockIdx.x / g.positionBlocks) * g.batches;
  const uint32_t nPos = uint32_t(min(g.positions, g.seq - s0));
  const uint32_t nBatch = uint32_t(min(g.batches, g.batch - b0));
  const uint32_t heads = uint32_t(g.heads);
  const uint32_t vecsPerHalf = uint32_t(half / kW);
  // Units of one batch entry: nPos * heads head vectors of vecsPerHalf units;
  // a block holds fewer than 2^31 (the launcher checks).
  const uint32_t unitsPerBatch = nPos * heads * vecsPerHalf;
  const uint32_t units = nBatch * unitsPerBatch;
  const int64_t rowElems = g.heads * g.headDim;
  float *cosv = trig, *sinv = trig + g.positions * half;

  waitForPredecessors();
  allowDependents();
  V lo[kUnitsPerThread], hi[kUnitsPerThread];
  int64_t offset[kUnitsPerThread];
  uint32_t trigAt[kUnitsPerThread];
  // Loads the units first + j * blockDim.x: the element offset of each
  // unit's low half, its trig index, and both halves.
  auto load = [&](uint32_t first) {
#pragma unroll
    for (int j = 0; j < kUnitsPerThread; ++j) {
      const uint32_t u = first + uint32_t(j) * blockDim.x;
      if (u < units) {
        const uint32_t b = u / unitsPerBatch, rem = u % unitsPerBatch;
        const uint32_t vector = rem / vecsPerHalf, k = rem % vecsPerHalf;
        offset[j] = ((b0 + b) * g.seq + s0) * rowElems +
                    int64_t(vector) * g.headDim + int64_t(k) * kW;
        trigAt[j] = (vector / heads) * uint32_t(half) + k * kW;
        lo[j] = *reinterpret_cast<const V *>(x + offset[j]);
        hi[j] = *reinterpret_cast<const V *>(x + offset[j] + half);
      }
    }
  };
  load(threadIdx.x);

  for (uint32_t q = threadIdx.x; q < nPos * uint32_t(half); q += blockDim.x) {
    const uint32_t p = q / uint32_t(half), i = q % uint32_t(half);
    const double invFreq =
        g.hostFreqs
            ? freqs.v[i]
            : rt::ropeInverseFrequency(g.theta, g.headDim, g.scaling, i);
    const double angle =
        __dmul_rn(double(g.order(s0 + int64_t(p))), invFreq);
    double s, c;
    sincos(angle, &s, &c);
    cosv[q] = roundTo<T>(float(c));
    sinv[q] = roundTo<T>(float(__dmul_rn(g.direction, s)));
  }
  __syncthreads();

  for (uint32_t first = threadIdx.x; first < units;
       first += uint32_t(kUnitsPerThread) * blockDim.x) {
#pragma unroll
    for (int j = 0; j < kUnitsPerThread; ++j) {
      const uint32_t u = first + uint32_t(j) * blockDim.x;
      if (u < units) {
        float outLo[kW], outHi[kW];
#pragma unroll
        for (int e = 0; e < kW; ++e) {
          const float c = cosv[trigAt[j] + e], s = sinv[trigAt[j] + e];
          const float l = toCompute(lo[j].v[e]), h = toCompute(hi[j].v[e]);
          outLo[e] = rnSub(mulT<T>(l, c), mulT<T>(h, s));
          outHi[e] = rnAdd(mulT<T>(h, c), mulT<T>(l, s));
        }
        *reinterpret_cast<V *>(y + offset[j]) = vecFromCompute<T, kW>(outLo);
        *reinterpret_cast<V *>(y + offset[j] + half) =
            vecFromCompute<T, kW>(outHi);
      }
    }
    const uint32_t next = first + uint32_t(kUnitsPerThread) * blockDim.x;
    if (next < units)
      load(next);
  }
}

#endif // __CUDACC__

} // namespace mlt::cuda::rope

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH
