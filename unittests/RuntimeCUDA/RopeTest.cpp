//===- RopeTest.cpp - tests of the CUDA rope family -----------------------===//
//
// Part of mlt. Checks the CUDA rotary embedding against the CPU kernels of
// lib/Runtime/cpu on the same random inputs: forward and inverse, position
// offsets, head dims whose half is and is not a multiple of the pack width,
// in-place use, misaligned pointers, bf16 storage and the argument errors.
//
//===----------------------------------------------------------------------===//

#include "kernels/rope.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Rope.h"
#include "mlt/Runtime/cpu/VectorOps.h"

#include <gtest/gtest.h>

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
constexpr Shape kShapes[] = {
    {2, 5, 3, 8, 0}, {1, 7, 2, 6, 3},   {2, 3, 4, 128, 0},   {1, 9, 3, 64, 100},
    {3, 4, 1, 2, 0}, {1, 33, 5, 10, 7}, {2, 17, 4, 16, 2048}};

std::string describe(const Shape &s) {
  std::ostringstream os;
  os << "batch " << s.batch << " seq " << s.seq << " heads " << s.heads
     << " head_dim " << s.headDim << " offset " << s.offset;
  return os.str();
}

constexpr double kTheta = 10000.0;

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
                             s.headDim, inverse, s.offset, kTheta, 0));
      const std::vector<float> y = dY.download();
      EXPECT_LT(relError(y, ref), kTol);
      // In place: the same bits.
      ASSERT_TRUE(launchRope(dX.get(), dX.get(), s.batch, s.seq, s.heads,
                             s.headDim, inverse, s.offset, kTheta, 0));
      EXPECT_EQ(dX.download(), y);
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
                         kTheta, 0));
  ASSERT_TRUE(launchRope(d.get(), d.get(), batch, seq, heads, headDim, true, 5,
                         kTheta, 0));
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
                         false, 1, kTheta, 0));
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
                           seq, heads, headDim, false, 0, kTheta, 0));
    const std::vector<uint16_t> yb = dY.download();
    std::vector<float> y(n);
    cpu::castBF16ToFloat(y.data(), yb.data(), n);
    EXPECT_LT(relError(y, ref), 2e-2);
  }
}

TEST(CudaRopeTest, BadArgumentsAreErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> d(64);
  rt::Status odd =
      launchRope(d.get(), d.get(), 1, 2, 2, 5, false, 0, kTheta, 0);
  ASSERT_FALSE(odd);
  EXPECT_NE(odd.message().find("head_dim 5"), std::string::npos)
      << odd.message();
  rt::Status theta = launchRope(d.get(), d.get(), 1, 2, 2, 4, false, 0, 0.0, 0);
  ASSERT_FALSE(theta);
  EXPECT_NE(theta.message().find("theta"), std::string::npos)
      << theta.message();
  // Nothing to rotate is fine.
  EXPECT_TRUE(launchRope(d.get(), d.get(), 0, 2, 2, 4, false, 0, kTheta, 0));
}

} // namespace
