//===- absmax.cuh - amax reductions shared by kernel families --*- CUDA -*-===//
//
// Part of mlt. The device side of current scaling's amax (max |x| of a
// tensor): fp8.cuh's absMaxKernel reads a tensor to compute it, and the
// kernels that produce FP8 operands (rmsnorm, swiglu) compute it of their
// outputs as they store them, which saves that extra read.
//
// Invariants:
// - A magnitude is tracked as absBits: the float's bits with the sign
//   cleared. Non-negative floats order as their bits do as unsigned
//   integers, and a NaN's bits lie above infinity's, so an unsigned maximum
//   is the float maximum with NaN winning.
// - Each thread keeps the maximum of the values it stored (as stored: a bf16
//   output is widened from its bits), the block reduces them
//   (blockAbsMaxToGlobal) and one atomicMax per block merges the blocks into
//   *amax, which the launcher zeroed first. A maximum does not depend on the
//   order of its operands: the result is exact, the same on every run, and
//   the same bits as absMaxKernel over the stored tensor.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ABSMAX_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ABSMAX_CUH

#include "kernels/common.cuh"

#include <initializer_list>

namespace mlt::cuda {

/// The most blocks a kernel that merges an amax launches (grid-stride
/// kernels loop over the rest): each block's atomicMax on the one address
/// serializes with the others'.
inline constexpr unsigned kAmaxMaxBlocks = 1024;

/// An amax argument as the float bits that the kernels merge into.
inline unsigned *amaxBits(float *amax) {
  return reinterpret_cast<unsigned *>(amax);
}

#ifdef __CUDACC__

/// Up to four amaxes to zero (null: none there).
struct AmaxTargets {
  float *of[4];
};

/// Each non-null *of[i] = 0, once its predecessors on the stream are done (a
/// template, as every kernel of a header, so that several translation units
/// include it).
template <int = 0> __global__ void zeroAmaxKernel(AmaxTargets targets) {
  waitForPredecessors();
  allowDependents();
  if (threadIdx.x < 4 && targets.of[threadIdx.x])
    *targets.of[threadIdx.x] = 0.f;
}

/// Zeroes each of `amaxes` (at most four; nulls skipped, none queued when
/// all are null) ahead of the kernel that merges its blocks' maxima into
/// them. One small kernel queued by launchDependent, not a memset each: a
/// memset node between two kernels of a graph ends their programmatic
/// serialization, so the kernel after it could not launch under the one
/// before (bench/RESULTS.md, 2026-12-02).
inline cudaError_t zeroAmaxes(std::initializer_list<float *> amaxes,
                              cudaStream_t stream) {
  AmaxTargets targets{};
  int count = 0, given = 0;
  for (float *amax : amaxes) {
    if (given++ == 4)
      return cudaErrorInvalidValue;
    if (amax)
      targets.of[count++] = amax;
  }
  return count ? launchDependent(zeroAmaxKernel<>, dim3(1), dim3(32), 0,
                                 stream, targets)
               : cudaSuccess;
}
inline cudaError_t zeroAmax(float *amax, cudaStream_t stream) {
  return zeroAmaxes({amax}, stream);
}

/// |x| as ordered bits.
__device__ __forceinline__ unsigned absBits(float x) {
  return __float_as_uint(x) & 0x7FFFFFFFu;
}

/// max(best, absBits) of the elements of `p`, widened from their bits.
template <typename T>
__device__ __forceinline__ unsigned maxAbsBits(unsigned best,
                                               const Pack<T> &p) {
#pragma unroll
  for (int e = 0; e < Pack<T>::kWidth; ++e)
    best = max(best, absBits(toCompute(p.v[e])));
  return best;
}

/// The same of eight bf16 values (their 16 bytes; maxAbsBitsBf16x8), two at a time: a bf16's bits with the sign
/// cleared order as its magnitude does (NaN above infinity), as an f32's
/// do, and widening to f32 (the bits shifted up 16) keeps that order, so the
/// largest of the 16-bit halves (__vmaxu2) widened once is the maximum of
/// the widened values. A third of the instructions of the element loop,
/// which the SwiGLU backward (three outputs, its exponentials and
/// divisions) could not hide.
__device__ __forceinline__ unsigned maxAbsBitsBf16x8(unsigned best,
                                                    const uint4 &raw) {
  constexpr unsigned kMagnitudes = 0x7FFF7FFFu;
  const unsigned pairs = __vmaxu2(__vmaxu2(raw.x & kMagnitudes,
                                           raw.y & kMagnitudes),
                                  __vmaxu2(raw.z & kMagnitudes,
                                           raw.w & kMagnitudes));
  return max(best, max(pairs & 0xFFFFu, pairs >> 16) << 16);
}
template <>
__device__ __forceinline__ unsigned
maxAbsBits<__nv_bfloat16>(unsigned best, const Pack<__nv_bfloat16> &p) {
  return maxAbsBitsBf16x8(best, *reinterpret_cast<const uint4 *>(&p));
}

/// Merges each lane's `best` into *amax (float bits) with one atomicMax per
/// warp, none where the warp's maximum is 0 (the zeroed value) or amax is
/// null: for kernels that store their outputs warp by warp, with no block
/// synchronization to spare. Every lane of the warp must call it.
__device__ __forceinline__ void warpAbsMaxToGlobal(unsigned *amax,
                                                   unsigned best) {
  best = __reduce_max_sync(0xFFFFFFFFu, best);
  if (amax && threadIdx.x % 32 == 0 && best != 0u)
    atomicMax(amax, best);
}

/// Merges best[k], each thread's maximum of the absBits of output k, into
/// *amax[k] (as float bits) with one atomicMax per block; a null amax[k] is
/// skipped. Every thread of the block must call it (it synchronizes the
/// block), and blockDim.x must be a multiple of 32. `warps` is N * 32
/// unsigned of shared memory that no thread uses while this runs: a caller
/// that lends memory used before synchronizes the block first, and it is not
/// free again until the block synchronizes after.
template <int N>
__device__ __forceinline__ void blockAbsMaxToGlobal(unsigned *const (&amax)[N],
                                                    unsigned (&best)[N],
                                                    unsigned *warps) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    best[k] = __reduce_max_sync(0xFFFFFFFFu, best[k]);
    if (lane == 0)
      warps[k * 32 + warp] = best[k];
  }
  __syncthreads();
  if (warp == 0) {
    const unsigned blockWarps = blockDim.x / 32;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      unsigned blockBest = lane < blockWarps ? warps[k * 32 + lane] : 0u;
      blockBest = __reduce_max_sync(0xFFFFFFFFu, blockBest);
      if (lane == 0 && amax[k])
        atomicMax(amax[k], blockBest);
    }
  }
}

/// blockAbsMaxToGlobal of one output.
__device__ __forceinline__ void
blockAbsMaxToGlobal(unsigned *amax, unsigned best, unsigned *warps) {
  unsigned *const targets[1] = {amax};
  unsigned bests[1] = {best};
  blockAbsMaxToGlobal(targets, bests, warps);
}

#endif // __CUDACC__

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ABSMAX_CUH
