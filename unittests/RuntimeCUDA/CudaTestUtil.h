//===- CudaTestUtil.h - helpers for the CUDA kernel tests -------*- C++ -*-===//
//
// Part of mlt. Device buffers with RAII, the skip of every GPU test on a
// machine without a CUDA device (CI compiles these tests but has no GPU), and
// the random inputs and normwise error of the CPU kernel tests
// (../Runtime/KernelTestUtil.h), against whose kernels the GPU is checked,
// and the check of the amax that kernels fuse for FP8 current scaling.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H
#define MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H

#include "../Runtime/KernelTestUtil.h"
#include "kernels/fp8.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
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

/// Host storage S (float, or uint16_t holding bf16 bits) and the element
/// type the launchers take for it.
template <typename S>
using DeviceOf =
    std::conditional_t<std::is_same_v<S, float>, float, __nv_bfloat16>;
template <typename S> DeviceOf<S> *onDevice(S *p) {
  return reinterpret_cast<DeviceOf<S> *>(p);
}

/// Whether `a` and `b` hold the same bits (unlike ==, which takes -0 for 0
/// and no NaN for itself).
template <typename S>
bool sameBits(const std::vector<S> &a, const std::vector<S> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
}

/// What a test leaves in an amax buffer before a launch: not 0, so that a
/// launcher that does not zero it shows.
inline constexpr float kStaleAmax = 1e30f;

/// The bits of max |v| over `values` as launchAbsMax and the kernels that
/// fuse it compute it (kernels/absmax.cuh): the largest of the floats' bits
/// with the sign cleared, so a NaN beats infinity; 0 for no values. bf16
/// values (their uint16_t bits) are widened to float first.
inline uint32_t absMaxBits(const std::vector<float> &values) {
  uint32_t best = 0;
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    best = std::max(best, bits & 0x7FFFFFFFu);
  }
  return best;
}
inline uint32_t absMaxBits(const std::vector<uint16_t> &bf16Bits) {
  uint32_t best = 0;
  for (uint16_t b : bf16Bits)
    best = std::max(best, (uint32_t(b) << 16) & 0x7FFFFFFFu);
  return best;
}

/// The bits of the float at `p` in device memory, after the device's work.
inline uint32_t deviceFloatBits(const float *p) {
  float value = 0.f;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(&value, p, sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

/// Expects the device float `amax` to be max |x| over the `n` elements of
/// the device tensor x (float or __nv_bfloat16) as stored, bit for bit: the
/// host's absMaxBits of x, and what launchAbsMax computes from x.
template <typename T>
void expectAmaxOf(const float *amax, const T *x, int64_t n) {
  using Stored = std::conditional_t<sizeof(T) == 2, uint16_t, float>;
  std::vector<Stored> host(n);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(host.data(), x, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost),
      cudaSuccess);
  DeviceBuffer<float> reference(1);
  ASSERT_TRUE(launchAbsMax(reference.get(), x, n, nullptr));
  const uint32_t bits = deviceFloatBits(amax);
  EXPECT_EQ(bits, absMaxBits(host)) << std::hex << "amax bits 0x" << bits;
  EXPECT_EQ(bits, deviceFloatBits(reference.get()))
      << std::hex << "amax bits 0x" << bits;
}

} // namespace mlt::cuda::test

/// Skips the current test, visibly, where no CUDA device is usable.
#define MLT_REQUIRE_CUDA()                                                     \
  do {                                                                         \
    int n = 0;                                                                 \
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)                       \
      GTEST_SKIP() << "no CUDA device";                                        \
  } while (0)

#endif // MLT_UNITTESTS_RUNTIMECUDA_CUDATESTUTIL_H
