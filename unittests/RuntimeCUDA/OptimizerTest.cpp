//===- OptimizerTest.cpp - the optimizer CUDA kernels vs the CPU ----------===//
//
// Part of mlt. sum_squares(_multi), global_norm, clip_coefficient and AdamW
// on the GPU against the CPU backend's computations on the same random
// inputs.
// global_norm and clip_coefficient follow the CPU's order exactly and are
// compared bit for bit. sum_squares sums in double in another order, so its
// f32 result may differ by the last bit; it must be the same bits on every
// run. AdamW is the CPU's expression operation for operation; only the
// double-precision pow of the bias corrections may differ in its last bit,
// so the updated tensors are compared to within 2 ulp per element.
//
//===----------------------------------------------------------------------===//

#include "kernels/optimizer.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/AdamW.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// The distance between two finite floats in units in the last place.
int64_t ulpDistance(float a, float b) {
  auto ordered = [](float x) {
    int32_t bits;
    std::memcpy(&bits, &x, sizeof(bits));
    return bits < 0 ? int64_t(INT32_MIN) - bits : int64_t(bits);
  };
  return std::abs(ordered(a) - ordered(b));
}

void expectWithinUlps(const std::vector<float> &actual,
                      const std::vector<float> &expected, int64_t ulps) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_LE(ulpDistance(actual[i], expected[i]), ulps)
        << "element " << i << ": " << actual[i] << " vs " << expected[i];
}

/// The same bits in every element (the first difference named).
template <typename T>
void expectSameBits(const std::vector<T> &actual,
                    const std::vector<T> &expected, const char *what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::memcmp(&actual[i], &expected[i], sizeof(T)) != 0) {
      ADD_FAILURE() << what << " element " << i << ": " << actual[i]
                    << " vs " << expected[i];
      return;
    }
}

TEST(CudaOptimizerTest, SumSquaresMatchesTheCpuAndRepeats) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(1);
  for (int64_t n :
       {int64_t(0), int64_t(1), int64_t(5), int64_t(4096), int64_t(4097),
        int64_t(16384), int64_t(65539), int64_t(4194307), int64_t(5000011)}) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      std::vector<float> x = randomFloats(rng, n, -3.0f, 3.0f);
      DeviceBuffer<float> dx(n + offset), out(2);
      dx.upload(padFront(x, offset));
      DeviceBuffer<double> scratch(sumSquaresScratchBytes(n) / 8 + 1);
      ASSERT_LE(sumSquaresScratchBytes(n), size_t(8192));
      ASSERT_TRUE(launchSumSquares(out.get(), dx.get() + offset, n,
                                   scratch.get(), nullptr));
      ASSERT_TRUE(launchSumSquares(out.get() + 1, dx.get() + offset, n,
                                   scratch.get(), nullptr));
      const std::vector<float> result = out.download();
      const float expected = float(cpu::sumOfSquares(x.data(), n));
      EXPECT_LE(ulpDistance(result[0], expected), 1)
          << result[0] << " vs " << expected;
      EXPECT_EQ(std::memcmp(&result[0], &result[1], sizeof(float)), 0);
    }
  }
}

// Launches of one block and of two kernels (per-block partials, then their
// sum; all with programmatic dependent launch) queued back to back, sharing
// one scratch area, then the same queue captured in a CUDA graph and
// replayed twice: the CPU's sums, the same bits every time.
TEST(CudaOptimizerTest, SumSquaresBackToBackAndInAGraph) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(6);
  const std::vector<int64_t> sizes = {2048,   1 << 20, 2048, 524288, 4097,
                                      300001, 2048,    8,    6000000};
  std::vector<std::vector<float>> hosts;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> inputs;
  size_t scratchBytes = 0;
  for (int64_t n : sizes) {
    hosts.push_back(randomFloats(rng, n, -2.0f, 2.0f));
    inputs.push_back(std::make_unique<DeviceBuffer<float>>(size_t(n)));
    inputs.back()->upload(hosts.back());
    scratchBytes = std::max(scratchBytes, sumSquaresScratchBytes(n));
  }
  const size_t count = sizes.size();
  DeviceBuffer<double> scratch(scratchBytes / 8 + 1);
  DeviceBuffer<float> out(3 * count);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  auto queue = [&](float *outs) {
    for (size_t k = 0; k < count; ++k)
      ASSERT_TRUE(launchSumSquares(outs + k, inputs[k]->get(), sizes[k],
                                   scratch.get(), stream));
  };
  queue(out.get());
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  queue(out.get() + count);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> first = out.download();
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  const std::vector<float> second = out.download();
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(stream);
  for (size_t k = 0; k < count; ++k) {
    SCOPED_TRACE(testing::Message() << "n " << sizes[k]);
    const float expected = float(cpu::sumOfSquares(hosts[k].data(), sizes[k]));
    EXPECT_LE(ulpDistance(first[k], expected), 1)
        << first[k] << " vs " << expected;
    EXPECT_EQ(std::memcmp(&first[k], &first[count + k], sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(&first[k], &second[count + k], sizeof(float)), 0);
  }
}

// sum_squares_multi over 250 random tensors in one arena (three batches of
// the kernel; sizes from empty through one and many blocks to 6M elements,
// some not 16-byte aligned), into NaN-poisoned outputs: each sum the same
// bits as launchSumSquares gives for its tensor alone, within 1 ulp of the
// CPU's, and the same bits again when the launch is captured in a CUDA graph
// and replayed.
TEST(CudaOptimizerTest, SumSquaresMultiIsSumSquaresPerTensor) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(12);
  std::vector<int64_t> sizes;
  for (int k = 0; k < 250; ++k) {
    const int kind = k % 10;
    sizes.push_back(kind < 5   ? int64_t(rng() % 5000)          // one block
                    : kind < 9 ? int64_t(4097 + rng() % 300000) // several
                               : int64_t((1 << 20) + rng() % 5000000));
  }
  sizes[3] = 0;
  sizes[7] = 4096;
  sizes[250 - 1] = 6000000;
  // One arena, tensors one after another; every 7th starts one float past
  // a 16-byte boundary.
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    total = (total + 3) / 4 * 4 + (k % 7 == 6 ? 1 : 0);
    offsets.push_back(total);
    total += sizes[k];
  }
  std::vector<float> arena = randomFloats(rng, total, -2.0f, 2.0f);
  DeviceBuffer<float> dArena{size_t(total)};
  dArena.upload(arena);
  const size_t count = sizes.size();
  std::vector<const void *> xs;
  for (size_t k = 0; k < count; ++k)
    xs.push_back(dArena.get() + offsets[k]);

  DeviceBuffer<float> out(3 * count); // multi, multi in a graph, one by one
  out.upload(std::vector<float>(3 * count, std::nanf("")));
  std::vector<float *> multiOut, graphOut;
  for (size_t k = 0; k < count; ++k) {
    multiOut.push_back(out.get() + k);
    graphOut.push_back(out.get() + count + k);
  }
  const size_t scratchBytes =
      sumSquaresMultiScratchBytes(sizes.data(), int64_t(count));
  size_t singleScratch = 0;
  for (int64_t n : sizes)
    singleScratch = std::max(singleScratch, sumSquaresScratchBytes(n));
  EXPECT_LE(scratchBytes, size_t(112 * 1024 * 8));
  DeviceBuffer<double> scratch(std::max(scratchBytes, singleScratch) / 8 + 1);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_TRUE(launchSumSquaresMulti(multiOut.data(), xs.data(), nullptr, sizes.data(),
                                    int64_t(count), scratch.get(), stream));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (size_t k = 0; k < count; ++k)
    ASSERT_TRUE(launchSumSquares(out.get() + 2 * count + k,
                                 dArena.get() + offsets[k], sizes[k],
                                 scratch.get(), stream));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  ASSERT_TRUE(launchSumSquaresMulti(graphOut.data(), xs.data(), nullptr, sizes.data(),
                                    int64_t(count), scratch.get(), stream));
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  (void)cudaStreamDestroy(stream);
  const std::vector<float> result = out.download();
  for (size_t k = 0; k < count; ++k) {
    SCOPED_TRACE(testing::Message()
                 << "tensor " << k << " n " << sizes[k] << " offset "
                 << offsets[k]);
    const float multi = result[k], graphed = result[count + k],
                single = result[2 * count + k];
    ASSERT_FALSE(std::isnan(multi));
    EXPECT_EQ(std::memcmp(&multi, &single, sizeof(float)), 0)
        << multi << " vs " << single;
    EXPECT_EQ(std::memcmp(&multi, &graphed, sizeof(float)), 0);
    const float expected =
        float(cpu::sumOfSquares(arena.data() + offsets[k], sizes[k]));
    EXPECT_LE(ulpDistance(multi, expected), 1) << multi << " vs " << expected;
  }
  // Errors: a negative size, and partial sums without scratch.
  int64_t negative = -1;
  float *first = out.get();
  EXPECT_FALSE(launchSumSquaresMulti(&first, xs.data(), nullptr, &negative, 1,
                                     scratch.get(), nullptr));
  EXPECT_FALSE(launchSumSquaresMulti(&first, xs.data() + count - 1, nullptr,
                                     sizes.data() + count - 1, 1, nullptr,
                                     nullptr));
}

/// Random bf16 bit patterns of finite values in [-2, 2), and the same values
/// widened to f32.
static void randomHalves(std::mt19937 &rng, int64_t n,
                         std::vector<uint16_t> &halves,
                         std::vector<float> &wide) {
  const std::vector<float> values = randomFloats(rng, n, -2.0f, 2.0f);
  halves.resize(n);
  wide.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    halves[i] = uint16_t(bits >> 16);
    bits = uint32_t(halves[i]) << 16;
    std::memcpy(&wide[i], &bits, 4);
  }
}

// Gradients reduced in bf16 (ZeRO-2 with --grad-reduce-dtype bf16): the sums
// of squares of bf16 tensors, mixed with f32 ones in one launch, are the bits
// of the sums of their f32 copies; aligned and misaligned, one block and
// several.
TEST(CudaOptimizerTest, SumSquaresMultiReadsBf16Gradients) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(5);
  const int64_t sizes[] = {3, 4096, 4097, 100003, 1 << 20, 0, 77, 262147};
  const size_t count = std::size(sizes);
  std::vector<uint16_t> halves;
  std::vector<float> wide;
  int64_t total = 0;
  std::vector<int64_t> offsets;
  for (size_t k = 0; k < count; ++k) {
    total = (total + 7) / 8 * 8 + (k % 3 == 2 ? 1 : 0); // some misaligned
    offsets.push_back(total);
    total += sizes[k];
  }
  randomHalves(rng, total, halves, wide);
  DeviceBuffer<uint16_t> dHalves(total);
  DeviceBuffer<float> dWide(total), out(2 * count);
  dHalves.upload(halves);
  dWide.upload(wide);
  out.upload(std::vector<float>(2 * count, std::nanf("")));
  std::vector<const void *> mixed, reference;
  std::unique_ptr<bool[]> half(new bool[count]);
  std::vector<float *> mixedOut, referenceOut;
  std::vector<int64_t> ns(sizes, sizes + count);
  for (size_t k = 0; k < count; ++k) {
    half[k] = k % 2 == 0; // every other tensor bf16
    mixed.push_back(half[k] ? static_cast<const void *>(dHalves.get() + offsets[k])
                            : dWide.get() + offsets[k]);
    reference.push_back(dWide.get() + offsets[k]);
    mixedOut.push_back(out.get() + k);
    referenceOut.push_back(out.get() + count + k);
  }
  DeviceBuffer<double> scratch(
      sumSquaresMultiScratchBytes(ns.data(), int64_t(count)) / 8 + 1);
  ASSERT_TRUE(launchSumSquaresMulti(mixedOut.data(), mixed.data(), half.get(),
                                    ns.data(), int64_t(count), scratch.get(),
                                    nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE(launchSumSquaresMulti(referenceOut.data(), reference.data(),
                                    nullptr, ns.data(), int64_t(count),
                                    scratch.get(), nullptr));
  const std::vector<float> result = out.download();
  for (size_t k = 0; k < count; ++k) {
    SCOPED_TRACE(testing::Message() << "tensor " << k << " n " << sizes[k]);
    ASSERT_FALSE(std::isnan(result[k]));
    EXPECT_EQ(std::memcmp(&result[k], &result[count + k], 4), 0)
        << result[k] << " vs " << result[count + k];
  }
}

TEST(CudaOptimizerTest, GlobalNormSumsInOrder) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(2);
  for (int64_t count : {int64_t(0), int64_t(1), int64_t(7), int64_t(256),
                        int64_t(257), int64_t(600)}) {
    SCOPED_TRACE(testing::Message() << "count " << count);
    // Values over many magnitudes, so that the order of the sum matters.
    std::vector<float> values(count);
    std::uniform_real_distribution<float> exponent(-10.0f, 10.0f);
    for (float &v : values)
      v = std::pow(10.0f, exponent(rng));
    DeviceBuffer<float> parts(count), out(1);
    DeviceBuffer<double> scratch(1);
    parts.upload(values);
    std::vector<const float *> pointers;
    for (int64_t k = 0; k < count; ++k)
      pointers.push_back(parts.get() + k);
    ASSERT_TRUE(launchGlobalNorm(out.get(), pointers.data(), count,
                                 scratch.get(), nullptr));
    double sum = 0.0;
    for (float v : values)
      sum += double(v);
    const float expected = float(std::sqrt(sum));
    const float actual = out.download()[0];
    EXPECT_EQ(std::memcmp(&actual, &expected, sizeof(float)), 0)
        << actual << " vs " << expected;
  }
}

TEST(CudaOptimizerTest, ClipCoefficientIsTorchs) {
  MLT_REQUIRE_CUDA();
  const std::pair<float, float> cases[] = {
      {2.0f, 1.0f}, {0.5f, 1.0f}, {3.7f, 0.0f}, {0.0f, 1.0f}, {1.0f, 1.0f}};
  DeviceBuffer<float> norm(1), maxNorm(1), out(1);
  for (auto [n, max] : cases) {
    norm.upload({n});
    maxNorm.upload({max});
    ASSERT_TRUE(
        launchClipCoefficient(out.get(), norm.get(), maxNorm.get(), nullptr));
    float expected = 1.0f;
    if (max != 0.0f)
      expected = std::min(1.0f, max / (n + 1e-6f));
    EXPECT_EQ(out.download()[0], expected) << "norm " << n << " max " << max;
  }
}

/// The f32 scalars of launchAdamW in one device buffer.
struct DeviceScalars {
  enum { kGradScale, kLR, kBeta1, kBeta2, kEps, kWeightDecay, kStep, kCount };
  DeviceBuffer<float> buffer{kCount};
  AdamWScalars pointers() const {
    AdamWScalars s;
    s.gradScale = buffer.get() + kGradScale;
    s.lr = buffer.get() + kLR;
    s.beta1 = buffer.get() + kBeta1;
    s.beta2 = buffer.get() + kBeta2;
    s.eps = buffer.get() + kEps;
    s.weightDecay = buffer.get() + kWeightDecay;
    s.step = buffer.get() + kStep;
    return s;
  }
};

struct AdamWCase {
  int64_t n;
  int64_t offset;
  bool decay;
  float gradScale;
  float beta1;
  /// Whether AdamW also writes the parameter's bf16 compute copy.
  bool copy = false;
};

void checkAdamW(const AdamWCase &c, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message()
               << "n " << c.n << " offset " << c.offset << " decay " << c.decay
               << " grad_scale " << c.gradScale << " beta1 " << c.beta1);
  const int64_t n = c.n, off = c.offset;
  std::vector<float> param = randomFloats(rng, n), m(n, 0.0f), v(n, 0.0f);
  DeviceBuffer<float> dp(n + off), dm(n + off), dv(n + off), dg(n + off);
  // The compute copy (optional fourth output), poisoned so that an element
  // the kernel misses shows.
  DeviceBuffer<uint16_t> dcopy(n + off);
  dcopy.upload(std::vector<uint16_t>(n + off, 0x7FC1));
  auto pad = [&](const std::vector<float> &x) { return padFront(x, off); };
  auto unpad = [&](const std::vector<float> &x) {
    return std::vector<float>(x.begin() + off, x.end());
  };
  dp.upload(pad(param));
  dm.upload(pad(m));
  dv.upload(pad(v));
  DeviceScalars scalars;
  cpu::AdamWParams params;
  params.lr = 3e-3f;
  params.beta1 = c.beta1;
  params.beta2 = 0.95f;
  params.eps = 1e-8f;
  params.weightDecay = 0.1f;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grad = randomFloats(rng, n, -0.1f, 0.1f);
    dg.upload(pad(grad));
    scalars.buffer.upload({c.gradScale, float(params.lr), float(params.beta1),
                           float(params.beta2), float(params.eps),
                           float(params.weightDecay), float(step)});
    ASSERT_TRUE(launchAdamW(
        dp.get() + off, dm.get() + off, dv.get() + off, dg.get() + off, n,
        scalars.pointers(), c.decay,
        c.copy ? reinterpret_cast<__nv_bfloat16 *>(dcopy.get() + off) : nullptr,
        DeviceErrorSink{}, nullptr));
    // CpuBackend.cpp: the gradient scaled in f32, then cpu::adamwStep.
    std::vector<float> scaled = grad;
    if (c.gradScale != 1.0f)
      for (float &g : scaled)
        g = g * c.gradScale;
    ASSERT_TRUE(cpu::adamwStep(param.data(), m.data(), v.data(), scaled.data(),
                               n, params, step, c.decay));
    SCOPED_TRACE(testing::Message() << "step " << step);
    expectWithinUlps(unpad(dp.download()), param, 2);
    expectWithinUlps(unpad(dm.download()), m, 2);
    expectWithinUlps(unpad(dv.download()), v, 2);
    // The gradient is read only.
    EXPECT_EQ(unpad(dg.download()), grad);
    if (c.copy) {
      // The copy is the updated parameter rounded as `cast` rounds it.
      std::vector<uint16_t> expected(n);
      const std::vector<float> updated = unpad(dp.download());
      cpu::castFloatToBF16(expected.data(), updated.data(), n);
      const std::vector<uint16_t> copy = dcopy.download();
      EXPECT_EQ(std::vector<uint16_t>(copy.begin() + off, copy.end()),
                expected);
    }
  }
}

TEST(CudaOptimizerTest, AdamWMatchesTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(3);
  for (int64_t n : {int64_t(1), int64_t(5), int64_t(4096), int64_t(100003)})
    for (int64_t offset : {0, 1})
      for (bool decay : {false, true})
        checkAdamW({n, offset, decay, 1.0f, 0.9f}, rng);
  // Clipping, and beta1 < 0.5 (lerp's other branch).
  checkAdamW({1027, 0, true, 0.37f, 0.9f}, rng);
  checkAdamW({1027, 0, true, 1.0f, 0.3f}, rng);
  // The bf16 compute copy in the same pass (vector path, and an odd offset:
  // the scalar one).
  for (int64_t offset : {0, 1})
    checkAdamW({100003, offset, true, 1.0f, 0.9f, true}, rng);
}

/// Two copies of AdamW's state (parameters, moments and compute copies,
/// the copies poisoned), for two updates that must end in the same bits.
struct TwinAdamWState {
  std::vector<float> param;
  DeviceBuffer<float> p1, p2, m1, m2, v1, v2;
  DeviceBuffer<uint16_t> c1, c2;
  TwinAdamWState(std::mt19937 &rng, int64_t total)
      : param(randomFloats(rng, total)), p1(total), p2(total), m1(total),
        m2(total), v1(total), v2(total), c1(total), c2(total) {
    const std::vector<float> m = randomFloats(rng, total, -0.01f, 0.01f);
    const std::vector<float> v = randomFloats(rng, total, 0.0f, 1e-4f);
    for (DeviceBuffer<float> *b : {&p1, &p2})
      b->upload(param);
    for (DeviceBuffer<float> *b : {&m1, &m2})
      b->upload(m);
    for (DeviceBuffer<float> *b : {&v1, &v2})
      b->upload(v);
    for (DeviceBuffer<uint16_t> *b : {&c1, &c2})
      b->upload(std::vector<uint16_t>(total, 0x7FC1));
  }
  /// Both updates gave the same bits.
  void expectSame() {
    expectSameBits(p2.download(), p1.download(), "param");
    expectSameBits(m2.download(), m1.download(), "m");
    expectSameBits(v2.download(), v1.download(), "v");
    expectSameBits(c2.download(), c1.download(), "copy");
  }
};

// Tests that adamw_multi gives every tensor launchAdamW's bits: 70 tensors
// (three kernels of at most 32), of sizes from 1 to several chunks, one
// empty, some at an odd offset (the scalar path), weight decay on some,
// with and without compute copies, over three steps with clipping.
TEST(CudaOptimizerTest, AdamWMultiIsAdamWBitForBit) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(11);
  const int64_t sizes[] = {1, 5, 4096, 100003, 8192, 8193, 0, 65536 * 3 + 7};
  struct Tensor {
    int64_t n, offset;
    bool decay;
  };
  std::vector<Tensor> tensors;
  int64_t total = 0;
  for (int t = 0; t < 70; ++t) {
    Tensor x{sizes[t % 8], t % 5 == 3 ? 1 : 0, t % 3 != 0};
    tensors.push_back(x);
    total += x.n + x.offset + 64;
  }
  for (bool copies : {false, true}) {
    SCOPED_TRACE(copies ? "with copies" : "without copies");
    // Two of each state, one updated by adamw and one by adamw_multi.
    TwinAdamWState state(rng, total);
    auto &[param, p1, p2, m1, m2, v1, v2, c1, c2] = state;
    DeviceBuffer<float> g(total);
    DeviceScalars scalars;
    for (int64_t step = 1; step <= 3; ++step) {
      g.upload(randomFloats(rng, total, -0.1f, 0.1f));
      scalars.buffer.upload(
          {step == 2 ? 0.37f : 1.0f, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
           float(step)});
      std::vector<AdamWTensor> multi;
      int64_t at = 0;
      for (const Tensor &x : tensors) {
        const int64_t o = at + x.offset;
        auto copy = [&](DeviceBuffer<uint16_t> &c) {
          return copies ? reinterpret_cast<__nv_bfloat16 *>(c.get() + o)
                        : nullptr;
        };
        ASSERT_TRUE(launchAdamW(p1.get() + o, m1.get() + o, v1.get() + o,
                                g.get() + o, x.n, scalars.pointers(), x.decay,
                                copy(c1), DeviceErrorSink{}, nullptr));
        AdamWTensor t;
        t.param = p2.get() + o;
        t.m = m2.get() + o;
        t.v = v2.get() + o;
        t.grad = g.get() + o;
        t.copy = copy(c2);
        t.n = x.n;
        t.decay = x.decay;
        multi.push_back(t);
        at += x.n + x.offset + 64;
      }
      ASSERT_TRUE(launchAdamWMulti(multi.data(), multi.size(),
                                   scalars.pointers(), DeviceErrorSink{},
                                   nullptr));
      SCOPED_TRACE(testing::Message() << "step " << step);
      state.expectSame();
    }
    // Something was updated (the parameters moved).
    EXPECT_NE(p2.download(), param);
  }
}

// adamw_multi with bf16 gradients (reduced in bf16) updates every tensor to
// the bits it gets from the same gradients widened to f32, with and without
// compute copies, aligned and misaligned, clipped and not.
TEST(CudaOptimizerTest, AdamWMultiReadsBf16Gradients) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(13);
  const int64_t sizes[] = {1, 5, 4096, 100003, 8193, 65536 * 3 + 7};
  const size_t count = std::size(sizes);
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t t = 0; t < count; ++t) {
    total = (total + 7) / 8 * 8 + (t % 4 == 3 ? 1 : 0);
    offsets.push_back(total);
    total += sizes[t];
  }
  for (bool copies : {false, true}) {
    SCOPED_TRACE(copies ? "with copies" : "without copies");
    TwinAdamWState state(rng, total);
    auto &[param, p1, p2, m1, m2, v1, v2, c1, c2] = state;
    DeviceBuffer<float> wide(total);
    DeviceBuffer<uint16_t> half(total);
    DeviceScalars scalars;
    for (int64_t step = 1; step <= 2; ++step) {
      std::vector<uint16_t> halves;
      std::vector<float> widened;
      randomHalves(rng, total, halves, widened);
      half.upload(halves);
      wide.upload(widened);
      scalars.buffer.upload({step == 2 ? 0.37f : 1.0f, 3e-3f, 0.9f, 0.95f,
                             1e-8f, 0.1f, float(step)});
      std::vector<AdamWTensor> fromHalf, fromWide;
      for (size_t t = 0; t < count; ++t) {
        const int64_t o = offsets[t];
        auto tensor = [&](DeviceBuffer<float> &p, DeviceBuffer<float> &mm,
                          DeviceBuffer<float> &vv, DeviceBuffer<uint16_t> &c) {
          AdamWTensor x;
          x.param = p.get() + o;
          x.m = mm.get() + o;
          x.v = vv.get() + o;
          x.copy = copies ? reinterpret_cast<__nv_bfloat16 *>(c.get() + o)
                          : nullptr;
          x.n = sizes[t];
          x.decay = t % 2 == 0;
          return x;
        };
        AdamWTensor a = tensor(p1, m1, v1, c1), b = tensor(p2, m2, v2, c2);
        a.grad = wide.get() + o;
        b.gradHalf = reinterpret_cast<const __nv_bfloat16 *>(half.get() + o);
        fromWide.push_back(a);
        fromHalf.push_back(b);
      }
      ASSERT_TRUE(launchAdamWMulti(fromWide.data(), count, scalars.pointers(),
                                   DeviceErrorSink{}, nullptr));
      ASSERT_TRUE(launchAdamWMulti(fromHalf.data(), count, scalars.pointers(),
                                   DeviceErrorSink{}, nullptr));
      SCOPED_TRACE(testing::Message() << "step " << step);
      state.expectSame();
    }
    EXPECT_NE(p2.download(), param);
  }
  // A tensor with both gradients, or neither, is refused.
  AdamWTensor both;
  DeviceBuffer<float> one(4);
  both.param = both.m = both.v = one.get();
  both.grad = one.get();
  both.gradHalf = reinterpret_cast<const __nv_bfloat16 *>(one.get());
  both.n = 4;
  DeviceScalars scalars;
  EXPECT_FALSE(launchAdamWMulti(&both, 1, scalars.pointers(),
                                DeviceErrorSink{}, nullptr));
  both.grad = nullptr;
  both.gradHalf = nullptr;
  EXPECT_FALSE(launchAdamWMulti(&both, 1, scalars.pointers(),
                                DeviceErrorSink{}, nullptr));
}

TEST(CudaOptimizerTest, AdamWReportsAnInvalidStep) {
  MLT_REQUIRE_CUDA();
  const int64_t n = 100;
  std::vector<float> param(n, 0.5f);
  DeviceBuffer<float> dp(n), dm(n), dv(n), dg(n);
  dp.upload(param);
  dm.upload(std::vector<float>(n, 0.0f));
  dv.upload(std::vector<float>(n, 0.0f));
  dg.upload(std::vector<float>(n, 0.25f));
  DeviceScalars scalars;
  scalars.buffer.upload({1.0f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f});
  DeviceBuffer<DeviceErrorRecord> record(1);
  ASSERT_EQ(cudaMemset(record.get(), 0, sizeof(DeviceErrorRecord)),
            cudaSuccess);
  DeviceErrorSink sink;
  sink.record = record.get();
  sink.tag = 7;
  ASSERT_TRUE(launchAdamW(dp.get(), dm.get(), dv.get(), dg.get(), n,
                          scalars.pointers(), true, nullptr, sink, nullptr));
  const DeviceErrorRecord r = record.download()[0];
  EXPECT_EQ(r.owner, 7u);
  EXPECT_EQ(r.code, unsigned(kDeviceErrorInvalidStep));
  EXPECT_EQ(uint32_t(~r.where & 0xFFFFFFFFu), 0u); // the bits of 0.0f
  EXPECT_EQ(dp.download(), param);
}

} // namespace
