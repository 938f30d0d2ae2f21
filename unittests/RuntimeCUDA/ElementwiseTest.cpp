//===- ElementwiseTest.cpp - the elementwise CUDA kernels vs the CPU ------===//
//
// Part of mlt. Each launcher of kernels/elementwise.h on random inputs,
// against the CPU kernel library (or, for the data movement the CPU backend
// does inline, a plain loop) on the same inputs. Sizes include ones that are
// not multiples of the vector width and pointers that are not 16-byte
// aligned, so both paths run. add, mul, accumulate, casts, transpose,
// shard_slice and fill are exact; the SiLU family differs only by expf's
// last bit (CUDA's expf is within 2 ulp, glibc's within 1), so it is
// compared normwise at 1e-6. SwiGLU's fused amaxes (FP8 current scaling):
// the same outputs as without them, and max |output| bit for bit.
//
//===----------------------------------------------------------------------===//

#include "kernels/elementwise.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Elementwise.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// Sizes around the vector widths (4 f32, 8 bf16) and a large odd one.
const int64_t kSizes[] = {1, 3, 4, 7, 8, 33, 1000, 4097, 100003};

/// Inputs in [-4, 4): SiLU's and SwiGLU's curve, both tails included.
std::vector<float> randomInputs(std::mt19937 &rng, int64_t n) {
  return randomFloats(rng, n, -4.0f, 4.0f);
}

void expectBitEqual(const std::vector<float> &actual,
                    const std::vector<float> &expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ(std::memcmp(&actual[i], &expected[i], sizeof(float)), 0)
        << "element " << i << ": " << actual[i] << " vs " << expected[i];
}

/// The f32 model ops of the elementwise family, for one size and offset.
void checkFloatOps(int64_t n, int64_t offset, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
  const std::vector<float> a = randomInputs(rng, n), b = randomInputs(rng, n),
                           c = randomInputs(rng, n);
  OffsetBuffer<float> da(a, offset), db(b, offset), dc(c, offset);
  OffsetBuffer<float> out(std::vector<float>(n, 0.0f), offset),
      out2(std::vector<float>(n, 0.0f), offset);
  std::vector<float> expected(n), expected2(n);

  ASSERT_TRUE(launchAdd(out.get(), da.get(), db.get(), n, nullptr));
  cpu::add(expected.data(), a.data(), b.data(), n);
  expectBitEqual(out.download(), expected);

  ASSERT_TRUE(launchMul(out.get(), da.get(), db.get(), n, nullptr));
  cpu::mulForward(expected.data(), a.data(), b.data(), n);
  expectBitEqual(out.download(), expected);

  {
    OffsetBuffer<float> y(c, offset);
    ASSERT_TRUE(launchAccumulate(y.get(), da.get(), n, nullptr));
    expected = c;
    cpu::accumulate(expected.data(), a.data(), n);
    expectBitEqual(y.download(), expected);
  }

  ASSERT_TRUE(launchSwiGLUForward(out.get(), da.get(), db.get(), n, nullptr));
  cpu::swigluForward(expected.data(), a.data(), b.data(), n);
  EXPECT_LE(relError(out.download(), expected), 1e-6);

  ASSERT_TRUE(launchSwiGLUBackward(out.get(), out2.get(), da.get(), db.get(),
                                   dc.get(), n, nullptr));
  cpu::swigluBackward(expected.data(), expected2.data(), a.data(), b.data(),
                      c.data(), n);
  EXPECT_LE(relError(out.download(), expected), 1e-6);
  EXPECT_LE(relError(out2.download(), expected2), 1e-6);

  ASSERT_TRUE(launchSiLUForward(out.get(), da.get(), n, nullptr));
  cpu::siluForward(expected.data(), a.data(), n);
  EXPECT_LE(relError(out.download(), expected), 1e-6);

  ASSERT_TRUE(launchSiLUBackward(out.get(), da.get(), db.get(), n, nullptr));
  cpu::siluBackward(expected.data(), a.data(), b.data(), n);
  EXPECT_LE(relError(out.download(), expected), 1e-6);
}

TEST(CudaElementwiseTest, FloatOpsMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(1);
  for (int64_t n : kSizes)
    for (int64_t offset : {0, 1})
      checkFloatOps(n, offset, rng);
}

TEST(CudaElementwiseTest, OutputsMayAliasInputs) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(2);
  const int64_t n = 1001;
  const std::vector<float> a = randomInputs(rng, n), b = randomInputs(rng, n);
  DeviceBuffer<float> da(n), db(n);
  da.upload(a);
  db.upload(b);
  // swiglu_bwd with dgate over dout and dup over up.
  ASSERT_TRUE(launchSwiGLUBackward(da.get(), db.get(), da.get(), da.get(),
                                   db.get(), n, nullptr));
  std::vector<float> dgate(n), dup(n);
  cpu::swigluBackward(dgate.data(), dup.data(), a.data(), a.data(), b.data(),
                      n);
  EXPECT_LE(relError(da.download(), dgate), 1e-6);
  EXPECT_LE(relError(db.download(), dup), 1e-6);
}

/// bf16 storage: the CPU computes in f32 on the widened inputs, and the
/// result is rounded to bf16 the same way.
std::vector<uint16_t> toBF16(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  cpu::castFloatToBF16(out.data(), x.data(), int64_t(x.size()));
  return out;
}
std::vector<float> fromBF16(const std::vector<uint16_t> &x) {
  std::vector<float> out(x.size());
  cpu::castBF16ToFloat(out.data(), x.data(), int64_t(x.size()));
  return out;
}

/// At most `ulps` bf16 steps apart, element by element.
void expectBF16Near(const std::vector<uint16_t> &actual,
                    const std::vector<uint16_t> &expected, int ulps) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    // Same sign here (the values come from the same formula), so the bit
    // patterns' distance is the number of bf16 steps.
    const int diff = std::abs(int(actual[i]) - int(expected[i]));
    ASSERT_LE(diff, ulps) << "element " << i;
  }
}

// Tests swiglu_bwd with the forward's output (the SwiGLU recomputed in its
// gradient's pass): dgate and dup are the two-output kernel's bits and out
// swiglu_fwd's, in f32 and bf16, at sizes with and without a tail, also
// with every output over an input.
TEST(CudaElementwiseTest, SwiGLUBackwardRecomputesTheForwardBitForBit) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(5);
  // Storage S on the host (float, or uint16_t holding bf16), D on the device.
  auto check = [&](auto storage, auto device, int64_t n) {
    using S = decltype(storage);
    using D = decltype(device);
    SCOPED_TRACE(testing::Message()
                 << (sizeof(S) == 2 ? "bf16" : "f32") << ", n " << n);
    auto inputs = [&] {
      std::vector<float> x = randomInputs(rng, n);
      if constexpr (sizeof(S) == 2)
        return toBF16(x);
      else
        return x;
    };
    DeviceBuffer<S> dout(n), gate(n), up(n), dg(n), du(n), y(n), dg2(n),
        du2(n), fwd(n);
    dout.upload(inputs());
    gate.upload(inputs());
    up.upload(inputs());
    auto d = [](DeviceBuffer<S> &b) { return reinterpret_cast<D *>(b.get()); };
    ASSERT_TRUE(launchSwiGLUBackward(d(dg), d(du), d(dout), d(gate), d(up), n,
                                     nullptr, d(y)));
    ASSERT_TRUE(launchSwiGLUBackward(d(dg2), d(du2), d(dout), d(gate), d(up),
                                     n, nullptr));
    ASSERT_TRUE(launchSwiGLUForward(d(fwd), d(gate), d(up), n, nullptr));
    auto same = [](const std::vector<S> &a, const std::vector<S> &b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
    };
    EXPECT_TRUE(same(dg.download(), dg2.download()));
    EXPECT_TRUE(same(du.download(), du2.download()));
    EXPECT_TRUE(same(y.download(), fwd.download()));
    // In place: dgate over gate, dup over up, out over dout.
    ASSERT_TRUE(launchSwiGLUBackward(d(gate), d(up), d(dout), d(gate), d(up),
                                     n, nullptr, d(dout)));
    EXPECT_TRUE(same(gate.download(), dg2.download()));
    EXPECT_TRUE(same(up.download(), du2.download()));
    EXPECT_TRUE(same(dout.download(), fwd.download()));
  };
  for (int64_t n : kSizes) {
    check(float{}, float{}, n);
    check(uint16_t{}, __nv_bfloat16{}, n);
  }
}

//===----------------------------------------------------------------------===//
// SwiGLU's fused amaxes
//===----------------------------------------------------------------------===//

/// Sizes for the amaxes: less than a pack (5), whole packs of either width
/// (4096), and tails past them (1001; 1000003, a grid of many blocks).
const int64_t kAmaxSizes[] = {5, 4096, 1001, 1000003};

/// `n` random inputs as S (float, or uint16_t holding bf16: rounded).
template <typename S>
std::vector<S> randomStored(std::mt19937 &rng, int64_t n) {
  std::vector<float> x = randomInputs(rng, n);
  if constexpr (std::is_same_v<S, float>)
    return x;
  else
    return toBF16(x);
}

/// swiglu_fwd with an amax: out the same bits as without it (also over
/// gate), and the amax that of out as stored.
template <typename S>
void checkSwiGLUForwardAmax(int64_t n, int64_t offset, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message() << (std::is_same_v<S, float> ? "f32" : "bf16")
                                  << " n " << n << " offset " << offset);
  const std::vector<S> gate = randomStored<S>(rng, n),
                       up = randomStored<S>(rng, n);
  OffsetBuffer<S> dGate(gate, offset), dUp(up, offset), dOut(gate, offset),
      dOutAmax(gate, offset), dInPlace(gate, offset);
  DeviceBuffer<float> amax(1);
  ASSERT_TRUE(launchSwiGLUForward(onDevice(dOut.get()), onDevice(dGate.get()),
                                  onDevice(dUp.get()), n, nullptr));
  const std::vector<S> out = dOut.download();

  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchSwiGLUForward(onDevice(dOutAmax.get()),
                                  onDevice(dGate.get()), onDevice(dUp.get()), n,
                                  nullptr, amax.get()));
  EXPECT_TRUE(sameBits(dOutAmax.download(), out));
  expectAmaxOf(amax.get(), onDevice(dOutAmax.get()), n);

  amax.upload({kStaleAmax});
  ASSERT_TRUE(launchSwiGLUForward(onDevice(dInPlace.get()),
                                  onDevice(dInPlace.get()), onDevice(dUp.get()),
                                  n, nullptr, amax.get()));
  EXPECT_TRUE(sameBits(dInPlace.download(), out));
  expectAmaxOf(amax.get(), onDevice(dInPlace.get()), n);
}

TEST(CudaElementwiseTest, SwiGLUForwardAmaxIsMaxAbsOfOut) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(7);
  for (int64_t n : kAmaxSizes)
    for (int64_t offset : {0, 1}) {
      checkSwiGLUForwardAmax<float>(n, offset, rng);
      checkSwiGLUForwardAmax<uint16_t>(n, offset, rng);
    }
}

/// swiglu_bwd with each allowed set of amaxes (dgate's and dup's without
/// out; with out, all three, out's alone, or dgate's and dup's alone): the
/// outputs the same bits as without amaxes, each amax given that of its
/// output as stored, and those not given left untouched. Then every output
/// over an input, with all three amaxes.
template <typename S>
void checkSwiGLUBackwardAmax(int64_t n, int64_t offset, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message() << (std::is_same_v<S, float> ? "f32" : "bf16")
                                  << " n " << n << " offset " << offset);
  const std::vector<S> dout = randomStored<S>(rng, n),
                       gate = randomStored<S>(rng, n),
                       up = randomStored<S>(rng, n);
  OffsetBuffer<S> dDout(dout, offset), dGate(gate, offset), dUp(up, offset);
  // The outputs without amaxes: without out, and with it.
  std::vector<S> refDgate[2], refDup[2], refOut;
  for (bool withOut : {false, true}) {
    OffsetBuffer<S> dg(dout, offset), du(dout, offset), y(dout, offset);
    ASSERT_TRUE(launchSwiGLUBackward(
        onDevice(dg.get()), onDevice(du.get()), onDevice(dDout.get()),
        onDevice(dGate.get()), onDevice(dUp.get()), n, nullptr,
        withOut ? onDevice(y.get()) : nullptr));
    refDgate[withOut] = dg.download();
    refDup[withOut] = du.download();
    if (withOut)
      refOut = y.download();
  }

  // The amaxes of dgate, dup and out.
  DeviceBuffer<float> amaxes(3);
  const std::vector<float> stale(3, kStaleAmax);
  struct Variant {
    bool withOut, gradAmaxes, outAmax;
  };
  for (const Variant &v :
       {Variant{false, true, false}, Variant{true, true, true},
        Variant{true, false, true}, Variant{true, true, false}}) {
    SCOPED_TRACE(testing::Message()
                 << "out " << v.withOut << " dgate/dup amax " << v.gradAmaxes
                 << " out amax " << v.outAmax);
    OffsetBuffer<S> dg(dout, offset), du(dout, offset), y(dout, offset);
    amaxes.upload(stale);
    ASSERT_TRUE(launchSwiGLUBackward(
        onDevice(dg.get()), onDevice(du.get()), onDevice(dDout.get()),
        onDevice(dGate.get()), onDevice(dUp.get()), n, nullptr,
        v.withOut ? onDevice(y.get()) : nullptr,
        v.gradAmaxes ? amaxes.get() : nullptr,
        v.gradAmaxes ? amaxes.get() + 1 : nullptr,
        v.outAmax ? amaxes.get() + 2 : nullptr));
    EXPECT_TRUE(sameBits(dg.download(), refDgate[v.withOut]));
    EXPECT_TRUE(sameBits(du.download(), refDup[v.withOut]));
    if (v.withOut)
      EXPECT_TRUE(sameBits(y.download(), refOut));
    const std::vector<float> after = amaxes.download();
    if (v.gradAmaxes) {
      expectAmaxOf(amaxes.get(), onDevice(dg.get()), n);
      expectAmaxOf(amaxes.get() + 1, onDevice(du.get()), n);
    } else {
      EXPECT_EQ(after[0], kStaleAmax);
      EXPECT_EQ(after[1], kStaleAmax);
    }
    if (v.outAmax)
      expectAmaxOf(amaxes.get() + 2, onDevice(y.get()), n);
    else
      EXPECT_EQ(after[2], kStaleAmax);
  }

  // In place: dgate over gate, dup over up, out over dout.
  amaxes.upload(stale);
  ASSERT_TRUE(launchSwiGLUBackward(
      onDevice(dGate.get()), onDevice(dUp.get()), onDevice(dDout.get()),
      onDevice(dGate.get()), onDevice(dUp.get()), n, nullptr,
      onDevice(dDout.get()), amaxes.get(), amaxes.get() + 1, amaxes.get() + 2));
  EXPECT_TRUE(sameBits(dGate.download(), refDgate[1]));
  EXPECT_TRUE(sameBits(dUp.download(), refDup[1]));
  EXPECT_TRUE(sameBits(dDout.download(), refOut));
  expectAmaxOf(amaxes.get(), onDevice(dGate.get()), n);
  expectAmaxOf(amaxes.get() + 1, onDevice(dUp.get()), n);
  expectAmaxOf(amaxes.get() + 2, onDevice(dDout.get()), n);
}

TEST(CudaElementwiseTest, SwiGLUBackwardAmaxesAreMaxAbsOfOutputs) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(8);
  for (int64_t n : kAmaxSizes)
    for (int64_t offset : {0, 1}) {
      checkSwiGLUBackwardAmax<float>(n, offset, rng);
      checkSwiGLUBackwardAmax<uint16_t>(n, offset, rng);
    }
}

// amaxDgate and amaxDup go together, and amaxOut needs out: anything else is
// an error before any work is queued (the amaxes keep their values).
TEST(CudaElementwiseTest, SwiGLUBackwardAmaxArgumentErrors) {
  MLT_REQUIRE_CUDA();
  const int64_t n = 8;
  DeviceBuffer<float> a(n), b(n), c(n), d(n), e(n), amaxes(3);
  const std::vector<float> stale(3, kStaleAmax);
  amaxes.upload(stale);
  float *amaxDgate = amaxes.get(), *amaxDup = amaxes.get() + 1,
        *amaxOut = amaxes.get() + 2;
  auto run = [&](float *out, float *ag, float *au, float *ao) {
    return launchSwiGLUBackward(a.get(), b.get(), c.get(), d.get(), e.get(), n,
                                nullptr, out, ag, au, ao);
  };
  Status status = run(nullptr, amaxDgate, amaxDup, amaxOut);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "swiglu_bwd: the amax of out is given without out");
  status = run(e.get(), amaxDgate, nullptr, nullptr);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "swiglu_bwd: the amax of dgate is given without "
                              "the amax of dup (both or neither)");
  status = run(nullptr, nullptr, amaxDup, nullptr);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "swiglu_bwd: the amax of dup is given without "
                              "the amax of dgate (both or neither)");
  auto bf16 = [](float *p) { return reinterpret_cast<__nv_bfloat16 *>(p); };
  EXPECT_FALSE(launchSwiGLUBackward(bf16(a.get()), bf16(b.get()), bf16(c.get()),
                                    bf16(d.get()), bf16(e.get()), n, nullptr,
                                    nullptr, nullptr, nullptr, amaxOut));
  EXPECT_EQ(amaxes.download(), stale);
}

// A NaN gate makes its element of out, dgate and dup NaN: every amax is NaN
// (bit for bit the host's and launchAbsMax's).
TEST(CudaElementwiseTest, SwiGLUAmaxOfNaNIsNaN) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(9);
  auto check = [&](auto storage, int64_t n) {
    using S = decltype(storage);
    SCOPED_TRACE(testing::Message()
                 << (std::is_same_v<S, float> ? "f32" : "bf16") << " n " << n);
    std::vector<S> gate = randomStored<S>(rng, n);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    if constexpr (std::is_same_v<S, float>)
      gate[n / 2] = nan;
    else
      gate[n / 2] = toBF16({nan})[0];
    OffsetBuffer<S> dDout(randomStored<S>(rng, n), 0), dGate(gate, 0),
        dUp(randomStored<S>(rng, n), 0), dg(gate, 0), du(gate, 0), y(gate, 0);
    DeviceBuffer<float> amaxes(4);
    ASSERT_TRUE(launchSwiGLUForward(onDevice(y.get()), onDevice(dGate.get()),
                                    onDevice(dUp.get()), n, nullptr,
                                    amaxes.get() + 3));
    ASSERT_TRUE(launchSwiGLUBackward(
        onDevice(dg.get()), onDevice(du.get()), onDevice(dDout.get()),
        onDevice(dGate.get()), onDevice(dUp.get()), n, nullptr,
        onDevice(y.get()), amaxes.get(), amaxes.get() + 1, amaxes.get() + 2));
    // The backward rewrites y with the forward's bits: amaxes 2 and 3 are both
    // y's.
    S *outputs[] = {dg.get(), du.get(), y.get(), y.get()};
    for (int k = 0; k < 4; ++k) {
      SCOPED_TRACE(testing::Message() << "amax " << k);
      // An amax has no sign: NaN bits are those above infinity's.
      EXPECT_GT(deviceFloatBits(amaxes.get() + k), 0x7F800000u);
      expectAmaxOf(amaxes.get() + k, onDevice(outputs[k]), n);
    }
  };
  for (int64_t n : {int64_t(5), int64_t(1001), int64_t(4096)}) {
    check(float{}, n);
    check(uint16_t{}, n);
  }
}

TEST(CudaElementwiseTest, BF16OpsRoundLikeTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(3);
  for (int64_t n : kSizes) {
    for (int64_t offset : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "n " << n << " offset " << offset);
      const std::vector<uint16_t> a = toBF16(randomInputs(rng, n)),
                                  b = toBF16(randomInputs(rng, n)),
                                  c = toBF16(randomInputs(rng, n));
      const std::vector<float> af = fromBF16(a), bf = fromBF16(b),
                               cf = fromBF16(c);
      auto bf16 = [](uint16_t *p) {
        return reinterpret_cast<__nv_bfloat16 *>(p);
      };
      OffsetBuffer<uint16_t> da(a, offset), db(b, offset), dc(c, offset);
      OffsetBuffer<uint16_t> out(std::vector<uint16_t>(n), offset),
          out2(std::vector<uint16_t>(n), offset);
      std::vector<float> e(n), e2(n);

      ASSERT_TRUE(
          launchAdd(bf16(out.get()), bf16(da.get()), bf16(db.get()), n, 0));
      cpu::add(e.data(), af.data(), bf.data(), n);
      expectBF16Near(out.download(), toBF16(e), 0);

      ASSERT_TRUE(
          launchMul(bf16(out.get()), bf16(da.get()), bf16(db.get()), n, 0));
      cpu::mulForward(e.data(), af.data(), bf.data(), n);
      expectBF16Near(out.download(), toBF16(e), 0);

      ASSERT_TRUE(launchSwiGLUForward(bf16(out.get()), bf16(da.get()),
                                      bf16(db.get()), n, 0));
      cpu::swigluForward(e.data(), af.data(), bf.data(), n);
      expectBF16Near(out.download(), toBF16(e), 1);

      ASSERT_TRUE(launchSwiGLUBackward(bf16(out.get()), bf16(out2.get()),
                                       bf16(da.get()), bf16(db.get()),
                                       bf16(dc.get()), n, 0));
      cpu::swigluBackward(e.data(), e2.data(), af.data(), bf.data(), cf.data(),
                          n);
      expectBF16Near(out.download(), toBF16(e), 1);
      expectBF16Near(out2.download(), toBF16(e2), 1);

      ASSERT_TRUE(launchSiLUForward(bf16(out.get()), bf16(da.get()), n, 0));
      cpu::siluForward(e.data(), af.data(), n);
      expectBF16Near(out.download(), toBF16(e), 1);

      ASSERT_TRUE(launchSiLUBackward(bf16(out.get()), bf16(da.get()),
                                     bf16(db.get()), n, 0));
      cpu::siluBackward(e.data(), af.data(), bf.data(), n);
      expectBF16Near(out.download(), toBF16(e), 1);

      OffsetBuffer<uint16_t> y(c, offset);
      ASSERT_TRUE(launchAccumulate(bf16(y.get()), bf16(da.get()), n, 0));
      e = cf;
      cpu::accumulate(e.data(), af.data(), n);
      expectBF16Near(y.download(), toBF16(e), 0);

      // A bf16 gradient into an f32 one: exact widening, one f32 add.
      OffsetBuffer<float> yf(cf, offset);
      ASSERT_TRUE(launchAccumulate(yf.get(), bf16(da.get()), n, 0));
      e = cf;
      cpu::accumulate(e.data(), af.data(), n);
      EXPECT_EQ(yf.download(), e);
    }
  }
}

TEST(CudaElementwiseTest, CastsMatchTheCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(4);
  for (int64_t n : {int64_t(1), int64_t(9), int64_t(10007)}) {
    std::vector<float> x = randomFloats(rng, n, -1e3f, 1e3f);
    // Special values: ties, infinities, NaN, denormals, the largest float.
    const float specials[] = {std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min(),
                              std::numeric_limits<float>::max(),
                              1.00390625f, // a tie between two bf16 values
                              -0.0f};
    for (size_t i = 0; i < std::size(specials) && i < size_t(n); ++i)
      x[i] = specials[i];
    DeviceBuffer<float> dx(n), df(n);
    DeviceBuffer<uint16_t> dbf(n);
    DeviceBuffer<double> dd(n);
    dx.upload(x);

    // f32 -> bf16 -> f32.
    ASSERT_TRUE(launchCast(dbf.get(), rt::ElementType::BF16, dx.get(),
                           rt::ElementType::F32, n, nullptr));
    std::vector<uint16_t> bits(n);
    cpu::castFloatToBF16(bits.data(), x.data(), n);
    EXPECT_EQ(dbf.download(), bits);
    ASSERT_TRUE(launchCast(df.get(), rt::ElementType::F32, dbf.get(),
                           rt::ElementType::BF16, n, nullptr));
    std::vector<float> widened(n);
    cpu::castBF16ToFloat(widened.data(), bits.data(), n);
    std::vector<float> back = df.download();
    EXPECT_EQ(std::memcmp(back.data(), widened.data(), n * sizeof(float)), 0);
    // Pointers off their packs' alignment (an element in): the same bits,
    // element by element.
    if (n > 1) {
      ASSERT_TRUE(launchCast(dbf.get() + 1, rt::ElementType::BF16,
                             dx.get() + 1, rt::ElementType::F32, n - 1,
                             nullptr));
      EXPECT_EQ(dbf.download(), bits);
      ASSERT_TRUE(launchCast(df.get() + 1, rt::ElementType::F32, dbf.get() + 1,
                             rt::ElementType::BF16, n - 1, nullptr));
      back = df.download();
      EXPECT_EQ(std::memcmp(back.data(), widened.data(), n * sizeof(float)),
                0);
    }

    // f32 -> f64 -> f32 (exact both ways), f64 -> bf16 through f32.
    ASSERT_TRUE(launchCast(dd.get(), rt::ElementType::F64, dx.get(),
                           rt::ElementType::F32, n, nullptr));
    std::vector<double> wide = dd.download();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isnan(x[i]))
        ASSERT_EQ(wide[i], double(x[i])) << i;
    std::vector<double> doubles(n);
    for (int64_t i = 0; i < n; ++i)
      doubles[i] = double(x[i]) * (1.0 + 1e-9); // not representable in f32
    dd.upload(doubles);
    ASSERT_TRUE(launchCast(df.get(), rt::ElementType::F32, dd.get(),
                           rt::ElementType::F64, n, nullptr));
    std::vector<float> narrowed(n);
    cpu::convert<double, float>(narrowed.data(), doubles.data(), n);
    back = df.download();
    EXPECT_EQ(std::memcmp(back.data(), narrowed.data(), n * sizeof(float)), 0);
    ASSERT_TRUE(launchCast(dbf.get(), rt::ElementType::BF16, dd.get(),
                           rt::ElementType::F64, n, nullptr));
    cpu::castFloatToBF16(bits.data(), narrowed.data(), n);
    EXPECT_EQ(dbf.download(), bits);

    // Same type: a copy.
    ASSERT_TRUE(launchCast(df.get(), rt::ElementType::F32, dx.get(),
                           rt::ElementType::F32, n, nullptr));
    back = df.download();
    EXPECT_EQ(std::memcmp(back.data(), x.data(), n * sizeof(float)), 0);
  }
  DeviceBuffer<int32_t> ints(4);
  DeviceBuffer<float> floats(4);
  Status status = launchCast(floats.get(), rt::ElementType::F32, ints.get(),
                             rt::ElementType::I32, 4, nullptr);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "cast: cannot cast from i32");
}

/// y = x with the dimensions permuted, on the host.
template <typename T>
std::vector<T> transposeReference(const std::vector<T> &x,
                                  const std::vector<int64_t> &shape,
                                  const std::vector<int64_t> &perm) {
  const size_t rank = shape.size();
  std::vector<int64_t> strides(rank, 1), outShape(rank);
  for (size_t d = rank; d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  for (size_t d = 0; d < rank; ++d)
    outShape[d] = shape[perm[d]];
  std::vector<T> y(x.size());
  for (size_t o = 0; o < y.size(); ++o) {
    int64_t rest = int64_t(o), offset = 0;
    for (size_t d = rank; d-- > 0;) {
      offset += (rest % outShape[d]) * strides[perm[d]];
      rest /= outShape[d];
    }
    y[o] = x[offset];
  }
  return y;
}

template <typename T>
void checkTranspose(const std::vector<int64_t> &shape,
                    const std::vector<int64_t> &perm, std::mt19937 &rng) {
  SCOPED_TRACE(testing::Message() << "rank " << shape.size() << " element "
                                  << sizeof(T) << " bytes");
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1),
                                    std::multiplies<int64_t>());
  std::vector<T> x(n);
  for (T &v : x)
    v = T(rng());
  DeviceBuffer<T> dx(n), dy(n);
  dx.upload(x);
  ASSERT_TRUE(launchTranspose(dy.get(), dx.get(), sizeof(T), shape.data(),
                              perm.data(), int64_t(shape.size()), nullptr));
  EXPECT_EQ(dy.download(), transposeReference(x, shape, perm));
}

TEST(CudaElementwiseTest, TransposeMatchesTheReference) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(5);
  checkTranspose<uint32_t>({37}, {0}, rng);
  checkTranspose<uint32_t>({33, 65}, {1, 0}, rng);
  checkTranspose<uint16_t>({33, 65}, {1, 0}, rng);
  checkTranspose<uint64_t>({5, 7, 9}, {2, 0, 1}, rng);
  checkTranspose<uint8_t>({5, 7, 9}, {1, 2, 0}, rng);
  // [b, s, h, d] -> [b, h, s, d] and back, and every other 4-d permutation.
  std::vector<int64_t> perm = {0, 1, 2, 3};
  do {
    checkTranspose<uint32_t>({2, 5, 3, 7}, perm, rng);
  } while (std::next_permutation(perm.begin(), perm.end()));
  // Unit dimensions are dropped and adjacent ones merged: rank 10 in, fewer
  // than 8 after.
  checkTranspose<uint32_t>({2, 1, 3, 1, 4, 1, 1, 5, 1, 2},
                           {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, rng);
  checkTranspose<uint32_t>({2, 3, 4, 5, 2, 3}, {0, 1, 2, 5, 3, 4}, rng);
  EXPECT_EQ(mergedTransposeRank(std::vector<int64_t>{2, 3, 4}.data(),
                                std::vector<int64_t>{0, 1, 2}.data(), 3),
            1);
}

// Where the innermost dimension stays innermost the kernel moves units of
// 16, 8 or 4 bytes: random outer permutations of bf16-sized elements with
// inner runs that give every width (and none), from and to pointers one
// element off their allocation (so the alignment picks narrower units).
TEST(CudaElementwiseTest, TransposeOfOuterDimensionsMovesWideUnits) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(11);
  const int64_t inners[] = {1, 2, 3, 4, 6, 8, 16, 24, 40, 2048};
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t rank = 2 + int64_t(rng() % 3);
    std::vector<int64_t> shape(rank);
    for (int64_t &size : shape)
      size = 1 + int64_t(rng() % 6);
    shape.back() = inners[rng() % std::size(inners)];
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end() - 1, rng);
    const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1),
                                      std::multiplies<int64_t>());
    const int64_t inOffset = int64_t(rng() % 2), outOffset = int64_t(rng() % 2);
    SCOPED_TRACE(testing::Message()
                 << "trial " << trial << " inner " << shape.back()
                 << " offsets " << inOffset << ", " << outOffset);
    std::vector<uint16_t> x(n);
    for (uint16_t &v : x)
      v = uint16_t(rng());
    std::vector<uint16_t> padded(inOffset, 0);
    padded.insert(padded.end(), x.begin(), x.end());
    DeviceBuffer<uint16_t> dx(n + 1), dy(n + 1);
    dx.upload(padded);
    ASSERT_TRUE(launchTranspose(dy.get() + outOffset, dx.get() + inOffset,
                                sizeof(uint16_t), shape.data(), perm.data(),
                                rank, nullptr));
    std::vector<uint16_t> y = dy.download();
    EXPECT_EQ(std::vector<uint16_t>(y.begin() + outOffset,
                                    y.begin() + outOffset + n),
              transposeReference(x, shape, perm));
  }
}

TEST(CudaElementwiseTest, ShardSliceTakesTheRankBlock) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(6);
  struct Case {
    int64_t outer, n, inner, groupSize, elementBytes;
  };
  for (const Case &c :
       {Case{3, 5, 7, 2, 4}, Case{1, 8, 4, 4, 4}, Case{4, 3, 1, 3, 2},
        Case{2, 5, 3, 2, 1}, Case{6, 64, 32, 2, 2}}) {
    const int64_t blockBytes = c.n * c.inner * c.elementBytes;
    std::vector<uint8_t> x(c.outer * c.groupSize * blockBytes);
    for (uint8_t &v : x)
      v = uint8_t(rng());
    DeviceBuffer<uint8_t> dx(x.size()), dy(c.outer * blockBytes);
    dx.upload(x);
    for (int64_t index = 0; index < c.groupSize; ++index) {
      ASSERT_TRUE(launchShardSlice(dy.get(), dx.get(), c.elementBytes, c.outer,
                                   c.n, c.inner, c.groupSize, index, nullptr));
      std::vector<uint8_t> expected;
      for (int64_t o = 0; o < c.outer; ++o) {
        auto begin = x.begin() + (o * c.groupSize + index) * blockBytes;
        expected.insert(expected.end(), begin, begin + blockBytes);
      }
      EXPECT_EQ(dy.download(), expected) << "block " << index;
    }
  }
  DeviceBuffer<float> buffer(16);
  Status status =
      launchShardSlice(buffer.get(), buffer.get(), 4, 1, 8, 1, 2, 0, nullptr);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "shard_slice cannot run in place (its input and output overlap)");
}

TEST(CudaElementwiseTest, FillConvertsLikeTheCpu) {
  MLT_REQUIRE_CUDA();
  const int64_t n = 1003;
  DeviceBuffer<float> f(n);
  ASSERT_TRUE(launchFill(f.get(), rt::ElementType::F32, n, 0.1, nullptr));
  EXPECT_EQ(f.download(), std::vector<float>(n, 0.1f));
  DeviceBuffer<double> d(n);
  ASSERT_TRUE(launchFill(d.get(), rt::ElementType::F64, n, 0.1, nullptr));
  EXPECT_EQ(d.download(), std::vector<double>(n, 0.1));
  DeviceBuffer<uint16_t> b(n);
  ASSERT_TRUE(launchFill(b.get(), rt::ElementType::BF16, n, 0.1, nullptr));
  EXPECT_EQ(b.download(), std::vector<uint16_t>(n, floatToBF16(0.1f)));
  DeviceBuffer<int32_t> i(n);
  ASSERT_TRUE(launchFill(i.get(), rt::ElementType::I32, n, -7.9, nullptr));
  EXPECT_EQ(i.download(), std::vector<int32_t>(n, -7));
  DeviceBuffer<int64_t> l(n);
  ASSERT_TRUE(launchFill(l.get(), rt::ElementType::I64, n, 3e10, nullptr));
  EXPECT_EQ(l.download(), std::vector<int64_t>(n, int64_t(3e10)));
}

} // namespace
