//===- common.cuh - device helpers of the kernel families ------*- CUDA -*-===//
//
// Part of mlt. Small device-side pieces that several kernel families use:
// 16-byte packs for vectorized loads and stores, bfloat16 conversions that
// round exactly as the CPU backend does, IEEE arithmetic without FMA
// contraction, and the launch geometry of grid-stride loops and of the
// one-block-per-row kernels.
//
// Invariants:
// - Pack<T> is 16 bytes, 16-byte aligned: a pointer may be read as Pack<T>
//   only when it is 16-byte aligned (isAligned16); every caller checks this
//   on the host and keeps a scalar path for the rest.
// - floatToBF16Bits is floatToBF16 (mlt/Support/Bf16.h) bit for bit: round to
//   nearest, ties to even, infinities kept, every NaN to 0x7FC0;
//   floatToBF16BitsCvt, floatsToBF16x2Bits and packFromCompute give the same
//   bits through the hardware conversion (cvt.rn.bf16.f32) plus the NaN fix.
// - The rn* helpers are single IEEE operations (__fmul_rn, ...): nvcc never
//   contracts them into an FMA, so an expression written with them rounds
//   like the same expression on the CPU (which has no FMA contraction).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_COMMON_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace mlt::cuda {

/// 16 bytes of elements of T, loaded or stored with one instruction.
template <typename T> struct alignas(16) Pack {
  static constexpr int kWidth = 16 / sizeof(T);
  T v[kWidth];
};

/// Whether `p` may be read or written as Pack<T>.
inline bool isAligned16(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// Threads per block of the flat (grid-stride) kernels.
inline constexpr int kFlatThreads = 256;

/// Blocks for `work` items, kFlatThreads per block, at least 1 and capped (the
/// kernels loop over the rest): a function of `work` only, never of the
/// device, so every device runs the same decomposition.
inline unsigned flatBlocks(int64_t work) {
  const int64_t blocks = (work + kFlatThreads - 1) / kFlatThreads;
  const int64_t cap = 65536;
  return unsigned(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

/// Threads per block of the one-block-per-row kernels (rmsnorm,
/// cross_entropy) for rows of `n` elements: one pack of `width` elements
/// (vec) or one element per thread, rounded up to whole warps, between 32
/// and 512 threads; a row longer than that is looped over.
inline int rowBlockThreads(int64_t n, bool vec, int width) {
  const int64_t units = vec ? n / width : n;
  int64_t threads = (units + 31) / 32 * 32;
  if (threads < 32)
    threads = 32;
  if (threads > 512)
    threads = 512;
  return int(threads);
}

#ifdef __CUDACC__

/// Programmatic dependent launch (sm_90): a kernel queued with
/// launchDependent may start while the kernel before it on the stream
/// finishes. It must call waitForPredecessors() before it touches global
/// memory (it returns once every earlier kernel on the stream has completed
/// and its writes are visible), so only the launch latency overlaps; and it
/// may call allowDependents() to let the next such kernel start early.
__device__ __forceinline__ void waitForPredecessors() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}
__device__ __forceinline__ void allowDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// Queues kernel<<<grid, block, shared, stream>>>(args...) with programmatic
/// stream serialization allowed (see waitForPredecessors).
template <typename... Params, typename... Args>
cudaError_t launchDependent(void (*kernel)(Params...), dim3 grid, dim3 block,
                            size_t shared, cudaStream_t stream,
                            Args &&...args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

__device__ __forceinline__ int64_t globalThreadIndex() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t globalThreadCount() {
  return int64_t(gridDim.x) * blockDim.x;
}

/// Bf16.h's float -> bfloat16 rounding (floatToBF16), on the device.
__device__ __forceinline__ uint16_t floatToBF16Bits(float value) {
  if (value != value)
    return 0x7FC0;
  const uint32_t bits = __float_as_uint(value);
  const uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1u);
  return uint16_t((bits + roundingBias) >> 16);
}
__device__ __forceinline__ float bf16BitsToFloat(uint16_t value) {
  return __uint_as_float(uint32_t(value) << 16);
}

/// Loads and stores of the types kernels compute on, through float (or
/// double for double): the value a kernel computes with and the rounding of
/// its result back to storage.
__device__ __forceinline__ float toCompute(float x) { return x; }
__device__ __forceinline__ double toCompute(double x) { return x; }
__device__ __forceinline__ float toCompute(__nv_bfloat16 x) {
  return bf16BitsToFloat(__bfloat16_as_ushort(x));
}
template <typename T> struct ComputeType { using type = float; };
template <> struct ComputeType<double> { using type = double; };
template <typename T, typename C> __device__ __forceinline__ T fromCompute(C x);
template <> __device__ __forceinline__ float fromCompute<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ double fromCompute<double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 fromCompute<__nv_bfloat16>(float x) {
  return __ushort_as_bfloat16(floatToBF16Bits(x));
}

/// floatToBF16Bits through the hardware conversion (cvt.rn.bf16.f32, round to
/// nearest even, as floatToBF16Bits rounds), every NaN mapped to 0x7FC0: the
/// same bits for every input, in fewer instructions.
__device__ __forceinline__ uint16_t floatToBF16BitsCvt(float value) {
  return value != value ? uint16_t(0x7FC0)
                        : __bfloat16_as_ushort(__float2bfloat16_rn(value));
}
/// Two floats as floatToBF16BitsCvt rounds them, `lo` in the low half (the
/// lower address): one conversion instruction for both.
__device__ __forceinline__ uint32_t floatsToBF16x2Bits(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  uint32_t bits = uint32_t(__bfloat16_as_ushort(pair.x)) |
                  uint32_t(__bfloat16_as_ushort(pair.y)) << 16;
  if (lo != lo)
    bits = (bits & 0xFFFF0000u) | 0x7FC0u;
  if (hi != hi)
    bits = (bits & 0x0000FFFFu) | 0x7FC00000u;
  return bits;
}

/// `x` rounded to T and widened back to float: the value a T intermediate
/// holds. For bf16 a NaN stays a NaN but may change payload, so use it for
/// intermediates and round stored values with fromCompute or packFromCompute.
template <typename T> __device__ __forceinline__ float roundTo(float x);
template <> __device__ __forceinline__ float roundTo<float>(float x) {
  return x;
}
template <> __device__ __forceinline__ float roundTo<__nv_bfloat16>(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

/// A Pack<T> of computed values, each rounded to T as fromCompute<T> rounds
/// it (the same bits; bf16 through floatsToBF16x2Bits).
template <typename T>
__device__ __forceinline__ Pack<T>
packFromCompute(const float (&v)[Pack<T>::kWidth]) {
  Pack<T> out;
#pragma unroll
  for (int e = 0; e < Pack<T>::kWidth; ++e)
    out.v[e] = fromCompute<T>(v[e]);
  return out;
}
template <>
__device__ __forceinline__ Pack<__nv_bfloat16>
packFromCompute<__nv_bfloat16>(const float (&v)[8]) {
  Pack<__nv_bfloat16> out;
  uint32_t *words = reinterpret_cast<uint32_t *>(out.v);
#pragma unroll
  for (int e = 0; e < 4; ++e)
    words[e] = floatsToBF16x2Bits(v[2 * e], v[2 * e + 1]);
  return out;
}

/// IEEE operations that nvcc does not contract into FMAs.
__device__ __forceinline__ float rnAdd(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ float rnSub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ float rnMul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ float rnDiv(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double rnAdd(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ double rnSub(double a, double b) {
  return __dsub_rn(a, b);
}
__device__ __forceinline__ double rnMul(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ double rnDiv(double a, double b) {
  return __ddiv_rn(a, b);
}
/// 2^x on the special-function unit (relative error ~2^-22; 2^-inf = 0;
/// results below 2^-126 flush to 0).
__device__ __forceinline__ float fastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float expOf(float x) { return expf(x); }
__device__ __forceinline__ double expOf(double x) { return exp(x); }

#endif // __CUDACC__

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_COMMON_CUH
