//===- CudaTestUtil.h - helpers for the CUDA kernel tests -------*- C++ -*-===//
//
// Part of mlt. Device buffers with RAII and the skip of every GPU test on a
// machine without a CUDA device (CI compiles these tests but has no GPU).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H
#define MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace mlt::cuda::test {

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
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, count * sizeof(T),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }
  T *get() const { return ptr; }

  T *ptr = nullptr;
  size_t count = 0;
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
