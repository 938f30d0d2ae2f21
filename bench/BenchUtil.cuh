//===- BenchUtil.cuh - shared pieces of the CUDA kernel benchmarks -*- CUDA -*-===//
//
// Part of mlt. What the stand-alone kernel benchmarks (attention_bench.cu,
// memory_kernels_bench.cu) share: checks that stop the benchmark with the
// failing call's file and line (a benchmark is a tool, not library code: it
// may exit), and fresh random inputs generated on the device (a hash of the
// seed and the index, never zeros) so that gigabytes of inputs cost no host
// time.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_BENCH_BENCHUTIL_CUH
#define MLT_BENCH_BENCHUTIL_CUH

#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                       \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                   cudaGetErrorString(err_));                                  \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)
#define CHECK_STATUS(expr)                                                     \
  do {                                                                         \
    ::mlt::Status st_ = (expr);                                                \
    if (!st_) {                                                                \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                  \
                   st_.message().c_str());                                     \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

namespace mlt::bench {

/// x[i] = uniform in [lo, hi) from a hash of (seed, i), converted to T.
template <typename T>
__global__ void fillUniform(T *x, int64_t n, uint32_t seed, float lo,
                            float hi) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed ^ uint32_t(i >> 32);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    x[i] = T(lo + (hi - lo) * (h >> 8) * (1.f / 16777216.f));
  }
}

} // namespace mlt::bench

#endif // MLT_BENCH_BENCHUTIL_CUH
