//===- CudaTestUtil.h - helpers for the CUDA kernel tests -------*- C++ -*-===//
//
// Part of mlt. Device buffers with RAII, the skip of every GPU test on a
// machine without a CUDA device (CI compiles these tests but has no GPU), and
// the random inputs and normwise error of the CPU kernel tests
// (../Runtime/KernelTestUtil.h), against whose kernels the GPU is checked.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H
#define MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H

#include "../Runtime/KernelTestUtil.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mlt::cuda::test {

// The CPU tests' inputs and error measure: the same generators, so that a
// seed draws the same values in either suite.
using mlt::cpu::test::randomIds;
using mlt::cpu::test::randomVector;
using mlt::cpu::test::relError;

/// `n` floats uniform in [lo, hi), drawn in float (unlike randomVector, which
/// draws in double: a seed gives other values).
inline std::vector<float> randomFloats(std::mt19937 &rng, int64_t n,
                                       float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float &x : out)
    x = dist(rng);
  return out;
}

/// `host` after `offset` value-initialized elements: uploaded to the start of
/// a buffer, it puts `host` `offset` elements past cudaMalloc's alignment.
template <typename T>
std::vector<T> padFront(const std::vector<T> &host, size_t offset) {
  std::vector<T> padded(offset, T{});
  padded.insert(padded.end(), host.begin(), host.end());
  return padded;
}

/// `count` elements of T in device memory, freed on destruction.
template <typename T> struct DeviceBuffer {
  explicit DeviceBuffer(size_t count) : count(count) {
    if (cudaMalloc(&ptr, (count ? count : 1) * sizeof(T)) != cudaSuccess)
      ptr = nullptr;
  }
  ~DeviceBuffer() {
    if (ptr)
      cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  /// Copies `host` (at most `count` elements) to the start of the buffer.
  void upload(const std::vector<T> &host) {
    ASSERT_LE(host.size(), count);
    ASSERT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  /// The whole buffer, copied back after the device finished its work.
  std::vector<T> download() const {
    std::vector<T> host(count);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(host.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost),
        cudaSuccess);
    return host;
  }
  T *get() const { return ptr; }

  T *ptr = nullptr;
  size_t count = 0;
};

/// A device copy of `host` starting `offset` elements into its allocation
/// (offset 1: not 16-byte aligned).
template <typename T> struct OffsetBuffer {
  OffsetBuffer(const std::vector<T> &host, int64_t offset)
      : buffer(host.size() + offset), offset(offset) {
    buffer.upload(padFront(host, offset));
  }
  T *get() const { return buffer.get() + offset; }
  /// The `host.size()` elements after the offset, copied back.
  std::vector<T> download() const {
    std::vector<T> all = buffer.download();
    return std::vector<T>(all.begin() + offset, all.end());
  }
  DeviceBuffer<T> buffer;
  int64_t offset;
};

} // namespace mlt::cuda::test

/// Skips the current test, visibly, where no CUDA device is usable.
#define MLT_REQUIRE_CUDA()                                                     \
  do {                                                                         \
    int n = 0;                                                                 \
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)                       \
      GTEST_SKIP() << "no CUDA device";                                        \
  } while (0)

#endif // MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H
