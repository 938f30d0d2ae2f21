//===- RopeTest.cpp - tests of the CUDA rope family -----------------------===//
//
// Part of mlt. Checks the CUDA rotary embedding against the CPU kernels of
// lib/Runtime/cpu on the same random inputs: forward and inverse, position
// offsets, head dims whose half is and is not a multiple of the pack width,
// the block decompositions (positions and batch entries per block), in-place
// use, misaligned pointers, bf16 storage (bit for bit against its rounding
// on the CPU), Llama 3.1's rotary scaling and the argument errors.
//
//===----------------------------------------------------------------------===//

#include "kernels/rope.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Rope.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// cos and sin are computed in f64 and rounded to f32 on both sides, and the
/// rotation is the same f32 expression without FMA contraction: only a last
/// bit of cos/sin (CUDA's f64 libm against glibc's) may differ.
constexpr double kTol = 1e-6;

struct Shape {
  int64_t batch, seq, heads, headDim, offset;
};
// Besides small odd shapes: blocks of several batch entries and positions
// (4 heads of 64, as LLaMA's keys), one position of a whole batch (32 heads),
// batch entries split over blocks (300 of them), a head vector longer than a
// block's share (40 heads of 128: one position of one entry per block), and a
// half head dim past the frequencies passed by value (520: pow on the
// device).
constexpr Shape kShapes[] = {
    {2, 5, 3, 8, 0},      {1, 7, 2, 6, 3},    {2, 3, 4, 128, 0},
    {1, 9, 3, 64, 100},   {3, 4, 1, 2, 0},    {1, 33, 5, 10, 7},
    {2, 17, 4, 16, 2048}, {4, 40, 4, 64, 3},  {2, 64, 32, 64, 0},
    {300, 2, 1, 8, 0},    {2, 3, 40, 128, 5}, {1, 3, 2, 520, 1}};

std::string describe(const Shape &s) {
  std::ostringstream os;
  os << "batch " << s.batch << " seq " << s.seq << " heads " << s.heads
     << " head_dim " << s.headDim << " offset " << s.offset;
  return os.str();
}

constexpr double kTheta = 10000.0;
const rt::RopeScaling kNone;

// A context-parallel rank's block of the sequence (SequenceOrder.h): its two
// chunks rotated by their positions in the whole sequence, as the CPU kernel
// rotates them; every rank of cp 2 and 4.
TEST(CudaRopeTest, ContextParallelBlocksMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(409);
  const int64_t batch = 2, heads = 3, headDim = 64, chunk = 40;
  for (int64_t ranks : {2, 4})
    for (int64_t rank = 0; rank < ranks; ++rank)
      for (bool inverse : {false, true}) {
        SCOPED_TRACE("cp " + std::to_string(ranks) + " rank " +
                     std::to_string(rank) + (inverse ? " inverse" : ""));
        const int64_t seq = 2 * chunk, n = batch * seq * heads * headDim;
        const rt::SequencePositions order =
            rt::SequencePositions::contextBlock(seq, rank, ranks);
        auto x = randomVector<float>(rng, n, -2.0, 2.0);
        std::vector<float> ref(n);
        if (inverse)
          ASSERT_TRUE(cpu::ropeBackward<float>(ref.data(), x.data(), batch, seq,
                                               heads, headDim, kTheta, order));
        else
          ASSERT_TRUE(cpu::ropeForward<float>(ref.data(), x.data(), batch, seq,
                                              heads, headDim, kTheta, order));
        DeviceBuffer<float> dX(n), dY(n);
        dX.upload(x);
        ASSERT_TRUE(launchRope(dY.get(), dX.get(), batch, seq, heads, headDim,
                               inverse, order, kTheta, kNone, 0));
        EXPECT_LT(relError(dY.download(), ref), kTol);
      }
}

TEST(CudaRopeTest, MatchesCpuForwardAndInverse) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(401);
  for (const Shape &s : kShapes) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(describe(s) + (inverse ? " inverse" : " forward"));
      const int64_t n = s.batch * s.seq * s.heads * s.headDim;
      auto x = randomVector<float>(rng, n, -2.0, 2.0);
      std::vector<float> ref(n);
      if (inverse)
        ASSERT_TRUE(cpu::ropeBackward<float>(ref.data(), x.data(), s.batch,
                                             s.seq, s.heads, s.headDim, kTheta,
                                             s.offset));
      else
        ASSERT_TRUE(cpu::ropeForward<float>(ref.data(), x.data(), s.batch,
                                            s.seq, s.heads, s.headDim, kTheta,
                                            s.offset));
      DeviceBuffer<float> dX(n), dY(n);
      dX.upload(x);
      ASSERT_TRUE(launchRope(dY.get(), dX.get(), s.batch, s.seq, s.heads,
                             s.headDim, inverse, s.offset, kTheta, kNone, 0));
      const std::vector<float> y = dY.download();
      EXPECT_LT(relError(y, ref), kTol);
      // In place: the same bits.
      ASSERT_TRUE(launchRope(dX.get(), dX.get(), s.batch, s.seq, s.heads,
                             s.headDim, inverse, s.offset, kTheta, kNone, 0));
      EXPECT_EQ(dX.download(), y);
    }
  }
}

// Llama 3.1's rotary scaling: the CUDA kernel against the CPU kernel (one
// inverse-frequency function, RopeFrequencies.h, for both), forward and
// inverse, at every shape above: the half head dims within the table passed
// by value and past it (520: the function on the device). Theta 1e4 with an
// original context of 64 (wavelengths kept below 16, scaled above 64) takes
// every branch of the formula at head dims of 6 and more; and the result
// differs from the unscaled one, so a scaling lost on the way would fail.
TEST(CudaRopeTest, Llama3ScalingMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(406);
  const rt::RopeScaling llama3 = rt::RopeScaling::llama3(8.0, 1.0, 4.0, 64);
  for (const Shape &s : kShapes) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(describe(s) + (inverse ? " inverse" : " forward"));
      const int64_t n = s.batch * s.seq * s.heads * s.headDim;
      auto x = randomVector<float>(rng, n, -2.0, 2.0);
      std::vector<float> ref(n);
      if (inverse)
        ASSERT_TRUE(cpu::ropeBackward<float>(ref.data(), x.data(), s.batch,
                                             s.seq, s.heads, s.headDim, kTheta,
                                             s.offset, llama3));
      else
        ASSERT_TRUE(cpu::ropeForward<float>(ref.data(), x.data(), s.batch,
                                            s.seq, s.heads, s.headDim, kTheta,
                                            s.offset, llama3));
      DeviceBuffer<float> dX(n), dY(n);
      dX.upload(x);
      ASSERT_TRUE(launchRope(dY.get(), dX.get(), s.batch, s.seq, s.heads,
                             s.headDim, inverse, s.offset, kTheta, llama3, 0));
      const std::vector<float> y = dY.download();
      EXPECT_LT(relError(y, ref), kTol);
      if (s.headDim >= 6) {
        ASSERT_TRUE(launchRope(dY.get(), dX.get(), s.batch, s.seq, s.heads,
                               s.headDim, inverse, s.offset, kTheta, kNone, 0));
        EXPECT_GT(relError(dY.download(), ref), 1e-3);
      }
    }
  }
}

// The inverse undoes the forward (up to rounding).
TEST(CudaRopeTest, InverseUndoesForward) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(402);
  const int64_t batch = 2, seq = 11, heads = 3, headDim = 32,
                n = batch * seq * heads * headDim;
  auto x = randomVector<float>(rng, n, -2.0, 2.0);
  DeviceBuffer<float> d(n);
  d.upload(x);
  ASSERT_TRUE(launchRope(d.get(), d.get(), batch, seq, heads, headDim, false, 5,
                         kTheta, kNone, 0));
  ASSERT_TRUE(launchRope(d.get(), d.get(), batch, seq, heads, headDim, true, 5,
                         kTheta, kNone, 0));
  EXPECT_LT(relError(d.download(), x), 1e-6);
}

// One float past a 16-byte boundary: the scalar path.
TEST(CudaRopeTest, MisalignedPointersMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(403);
  const int64_t batch = 1, seq = 6, heads = 2, headDim = 64,
                n = batch * seq * heads * headDim;
  auto x = randomVector<float>(rng, n, -2.0, 2.0);
  std::vector<float> ref(n);
  ASSERT_TRUE(cpu::ropeForward<float>(ref.data(), x.data(), batch, seq, heads,
                                      headDim, kTheta, 1));
  DeviceBuffer<float> dX(n + 1), dY(n + 1);
  dX.upload(padFront(x, 1));
  ASSERT_TRUE(launchRope(dY.get() + 1, dX.get() + 1, batch, seq, heads, headDim,
                         false, 1, kTheta, kNone, 0));
  const std::vector<float> y = dY.download();
  EXPECT_LT(relError(std::vector<float>(y.begin() + 1, y.end()), ref), kTol);
}

// bf16 storage: within the bf16 rounding of the CPU float result on the same
// inputs (cos/sin and each product are rounded to bf16, as HF does).
TEST(CudaRopeTest, BF16MatchesCpuWithinRounding) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(404);
  for (int64_t headDim : {16, 6}) {
    SCOPED_TRACE("head_dim " + std::to_string(headDim));
    const int64_t batch = 2, seq = 9, heads = 3,
                  n = batch * seq * heads * headDim;
    auto xf = randomVector<float>(rng, n, -2.0, 2.0);
    std::vector<uint16_t> xb(n);
    cpu::castFloatToBF16(xb.data(), xf.data(), n);
    cpu::castBF16ToFloat(xf.data(), xb.data(), n);
    std::vector<float> ref(n);
    ASSERT_TRUE(cpu::ropeForward<float>(ref.data(), xf.data(), batch, seq,
                                        heads, headDim, kTheta, 0));
    DeviceBuffer<uint16_t> dX(n), dY(n);
    dX.upload(xb);
    ASSERT_TRUE(launchRope(reinterpret_cast<__nv_bfloat16 *>(dY.get()),
                           reinterpret_cast<__nv_bfloat16 *>(dX.get()), batch,
                           seq, heads, headDim, false, 0, kTheta, kNone, 0));
    const std::vector<uint16_t> yb = dY.download();
    std::vector<float> y(n);
    cpu::castBF16ToFloat(y.data(), yb.data(), n);
    EXPECT_LT(relError(y, ref), 2e-2);
  }
}

/// The bf16 rotation as the kernel defines it, on the CPU: cos and sin in
/// f64 (inv_freq by std::pow, as cpu/Rope.cpp), rounded to f32 then bf16,
/// and every product, sum and difference rounded to bf16.
std::vector<uint16_t> bf16Reference(const std::vector<uint16_t> &x,
                                    const Shape &s, bool inverse) {
  const int64_t half = s.headDim / 2;
  auto bf = [](float v) { return bf16ToFloat(floatToBF16(v)); };
  std::vector<uint16_t> y(x.size());
  std::vector<float> cosv(half), sinv(half);
  for (int64_t t = 0; t < s.seq; ++t) {
    const double pos = double(t + s.offset);
    for (int64_t i = 0; i < half; ++i) {
      const double angle =
          pos * std::pow(kTheta, -double(2 * i) / double(s.headDim));
      cosv[i] = bf(float(std::cos(angle)));
      sinv[i] = bf(float((inverse ? -1.0 : 1.0) * std::sin(angle)));
    }
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t base = ((b * s.seq + t) * s.heads + h) * s.headDim;
        for (int64_t i = 0; i < half; ++i) {
          const float lo = bf16ToFloat(x[base + i]),
                      hi = bf16ToFloat(x[base + i + half]);
          y[base + i] = floatToBF16(bf(lo * cosv[i]) - bf(hi * sinv[i]));
          y[base + i + half] = floatToBF16(bf(hi * cosv[i]) + bf(lo * sinv[i]));
        }
      }
  }
  return y;
}

// bf16 bit for bit against that definition (HF's bf16 rotation): the 16-byte
// and the scalar path, forward and inverse, at LLaMA's query and key shapes.
// Only a last bit of the f64 cos/sin (CUDA's libm against glibc's) could
// differ, and it would have to straddle two roundings to show.
TEST(CudaRopeTest, BF16IsTheRoundedRotationBitForBit) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(405);
  for (const Shape &s : {Shape{4, 64, 32, 64, 0}, Shape{4, 64, 4, 64, 9},
                         Shape{2, 5, 3, 6, 2}, Shape{3, 7, 2, 16, 0}}) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(describe(s) + (inverse ? " inverse" : " forward"));
      const int64_t n = s.batch * s.seq * s.heads * s.headDim;
      std::vector<float> xf = randomVector<float>(rng, n, -4.0, 4.0);
      std::vector<uint16_t> xb(n);
      cpu::castFloatToBF16(xb.data(), xf.data(), n);
      DeviceBuffer<uint16_t> dX(n), dY(n);
      dX.upload(xb);
      ASSERT_TRUE(launchRope(reinterpret_cast<__nv_bfloat16 *>(dY.get()),
                             reinterpret_cast<__nv_bfloat16 *>(dX.get()),
                             s.batch, s.seq, s.heads, s.headDim, inverse,
                             s.offset, kTheta, kNone, 0));
      const std::vector<uint16_t> y = dY.download();
      const std::vector<uint16_t> ref = bf16Reference(xb, s, inverse);
      int64_t mismatches = 0, first = -1;
      for (int64_t i = 0; i < n; ++i)
        if (y[i] != ref[i] && mismatches++ == 0)
          first = i;
      EXPECT_EQ(mismatches, 0)
          << "first at " << first << ": " << y[first] << " vs " << ref[first];
      // In place: the same bits.
      ASSERT_TRUE(launchRope(reinterpret_cast<__nv_bfloat16 *>(dX.get()),
                             reinterpret_cast<__nv_bfloat16 *>(dX.get()),
                             s.batch, s.seq, s.heads, s.headDim, inverse,
                             s.offset, kTheta, kNone, 0));
      EXPECT_EQ(dX.download(), y);
    }
  }
}

TEST(CudaRopeTest, BadArgumentsAreErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> d(64);
  Status odd =
      launchRope(d.get(), d.get(), 1, 2, 2, 5, false, 0, kTheta, kNone, 0);
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.message().find("head_dim 5"), std::string::npos)
      << odd.message();
  Status theta =
      launchRope(d.get(), d.get(), 1, 2, 2, 4, false, 0, 0.0, kNone, 0);
  ASSERT_FALSE(theta);
  EXPECT_NE(theta.message().find("theta"), std::string::npos)
      << theta.message();
  Status scaling = launchRope(d.get(), d.get(), 1, 2, 2, 4, false, 0, kTheta,
                              rt::RopeScaling::llama3(8.0, 4.0, 1.0, 8192), 0);
  ASSERT_FALSE(scaling);
  EXPECT_NE(scaling.message().find("high_freq_factor"), std::string::npos)
      << scaling.message();
  // Nothing to rotate is fine.
  EXPECT_TRUE(
      launchRope(d.get(), d.get(), 0, 2, 2, 4, false, 0, kTheta, kNone, 0));
}

} // namespace
