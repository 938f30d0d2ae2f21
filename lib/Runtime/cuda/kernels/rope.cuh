//===- rope.cuh - rotary position embedding CUDA kernels -------*- CUDA -*-===//
//
// Part of mlt. Device code of the rope family (launcher in rope.cu, declared
// in rope.h).
//
// Invariants:
// - x, y are [batch, seq, heads, headDim], headDim even, half = headDim / 2;
//   T is the storage type (float or bf16).
// - One block per token t = b * seq + s (blockIdx.x): its threads first
//   compute the token's half cos/sin pairs into shared memory (dynamic, 2 *
//   half floats) exactly as the CPU kernel does: inv_freq = pow(theta, -2i /
//   headDim), angle = (s + positionOffset) * inv_freq, cos and sin in f64,
//   rounded to T (sin negated for the inverse rotation); then rotate every
//   head of the token.
// - The rotation is in T, every operation rounded to T as the CPU kernel's
//   `lo * cos - hi * sin` (no FMA contraction: rn* / explicit rounding):
//     y[i]      = x[i] * cos - x[i + half] * sin
//     y[i+half] = x[i + half] * cos + x[i] * sin
// - Each thread owns pairs (i, i + half) of one head: with kVec, Pack<T>-wide
//   runs of i (needs half % Pack<T>::kWidth == 0 and 16-byte aligned x and y,
//   checked on the host), else single i. It reads both halves before writing
//   either, and no two threads touch the same element: y may equal x.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH

#include "kernels/common.cuh"

namespace mlt::cuda::rope {

inline constexpr int kThreads = 128;

#ifdef __CUDACC__

/// a * b and a + b (a - b) rounded to T, as T arithmetic on the CPU rounds.
template <typename T> __device__ __forceinline__ float mulT(float a, float b) {
  return toCompute(fromCompute<T>(rnMul(a, b)));
}
template <typename T> __device__ __forceinline__ T addT(float a, float b) {
  return fromCompute<T>(rnAdd(a, b));
}
template <typename T> __device__ __forceinline__ T subT(float a, float b) {
  return fromCompute<T>(rnSub(a, b));
}

template <typename T, bool kVec>
__global__ void ropeKernel(T *y, const T *x, int64_t seq, int64_t heads,
                           int64_t headDim, int64_t positionOffset,
                           double theta, double direction) {
  extern __shared__ float trig[]; // cos[half], sin[half]
  const int64_t half = headDim / 2;
  float *cosv = trig, *sinv = trig + half;
  const int64_t token = blockIdx.x;
  const double pos = double(token % seq + positionOffset);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const double invFreq = pow(theta, -double(2 * i) / double(headDim));
    const double angle = pos * invFreq;
    cosv[i] = toCompute(fromCompute<T>(float(cos(angle))));
    sinv[i] = toCompute(fromCompute<T>(float(direction * sin(angle))));
  }
  __syncthreads();
  const int64_t base = token * heads * headDim;
  if constexpr (kVec) {
    constexpr int W = Pack<T>::kWidth;
    const int64_t packsPerHalf = half / W;
    for (int64_t u = threadIdx.x; u < heads * packsPerHalf; u += blockDim.x) {
      const int64_t h = u / packsPerHalf, i0 = (u % packsPerHalf) * W;
      const int64_t lo = base + h * headDim + i0;
      const Pack<T> a = *reinterpret_cast<const Pack<T> *>(x + lo);
      const Pack<T> b = *reinterpret_cast<const Pack<T> *>(x + lo + half);
      Pack<T> outLo, outHi;
#pragma unroll
      for (int e = 0; e < W; ++e) {
        const float c = cosv[i0 + e], s = sinv[i0 + e];
        const float l = toCompute(a.v[e]), hv = toCompute(b.v[e]);
        outLo.v[e] = subT<T>(mulT<T>(l, c), mulT<T>(hv, s));
        outHi.v[e] = addT<T>(mulT<T>(hv, c), mulT<T>(l, s));
      }
      *reinterpret_cast<Pack<T> *>(y + lo) = outLo;
      *reinterpret_cast<Pack<T> *>(y + lo + half) = outHi;
    }
  } else {
    for (int64_t u = threadIdx.x; u < heads * half; u += blockDim.x) {
      const int64_t h = u / half, i = u % half;
      const int64_t lo = base + h * headDim + i;
      const float c = cosv[i], s = sinv[i];
      const float l = toCompute(x[lo]), hv = toCompute(x[lo + half]);
      y[lo] = subT<T>(mulT<T>(l, c), mulT<T>(hv, s));
      y[lo + half] = addT<T>(mulT<T>(hv, c), mulT<T>(l, s));
    }
  }
}

#endif // __CUDACC__

} // namespace mlt::cuda::rope

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_CUH
