//===- RopeTest.cpp - tests of the CPU rope family ------------------------===//
//
// Part of mlt. Checks the rotation against HF's formulation written out
// (`x * cos(emb) + rotate_half(x) * sin(emb)` with emb = cat(freqs, freqs)),
// the position offset against slicing a longer sequence, the backward against
// finite differences and as the inverse of the forward, and float against
// double.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Rope.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kBatch = 2, kSeq = 7, kHeads = 3, kDim = 10;
constexpr double kTheta = 10000.0;
constexpr int64_t kSize = kBatch * kSeq * kHeads * kDim;

/// HF LLaMA's apply_rotary_pos_emb, one head vector at a time, in double.
std::vector<double> referenceRope(const std::vector<double> &x, int64_t seq,
                                  int64_t offset) {
  const int64_t half = kDim / 2;
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < kHeads; ++h) {
        const double *xv = &x[((b * seq + s) * kHeads + h) * kDim];
        double *ov = &out[((b * seq + s) * kHeads + h) * kDim];
        for (int64_t d = 0; d < kDim; ++d) {
          const int64_t i = d % half; // emb = cat(freqs, freqs)
          const double invFreq = 1.0 / std::pow(kTheta, double(2 * i) / kDim);
          const double angle = double(s + offset) * invFreq;
          const double rotated = d < half ? -xv[d + half] : xv[d - half];
          ov[d] = xv[d] * std::cos(angle) + rotated * std::sin(angle);
        }
      }
  return out;
}

template <typename T> class RopeTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(RopeTest, FloatTypes);

// Tests the forward against HF's formula, with and without a position
// offset, out of place and in place.
TYPED_TEST(RopeTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(41);
  auto x = randomVector<double>(rng, kSize);
  for (int64_t offset : {int64_t(0), int64_t(5), int64_t(1000)}) {
    auto expected = referenceRope(x, kSeq, offset);
    auto xT = castVector<T>(x);
    std::vector<T> out(kSize);
    ASSERT_TRUE(ropeForward<T>(out.data(), xT.data(), kBatch, kSeq, kHeads,
                               kDim, kTheta, offset)
                    .isOk());
    EXPECT_LT(relError(out, expected), forwardTol<T>()) << "offset " << offset;
    ASSERT_TRUE(ropeForward<T>(xT.data(), xT.data(), kBatch, kSeq, kHeads, kDim,
                               kTheta, offset)
                    .isOk());
    EXPECT_EQ(xT, out);
  }
}

// Tests that a sequence slice rotated with positionOffset = its start equals
// the same slice of the whole sequence rotated (how a sequence-parallel rank
// uses the offset).
TEST(RopeOffsetTest, SliceWithOffsetMatchesWholeSequence) {
  std::mt19937 rng(42);
  const int64_t start = 3, sliceLen = kSeq - start;
  auto x = randomVector<double>(rng, kSize);
  std::vector<double> whole(kSize);
  ASSERT_TRUE(ropeForward<double>(whole.data(), x.data(), kBatch, kSeq, kHeads,
                                  kDim, kTheta, 0)
                  .isOk());
  const int64_t rowSize = kHeads * kDim;
  for (int64_t b = 0; b < kBatch; ++b) {
    std::vector<double> slice(x.begin() + (b * kSeq + start) * rowSize,
                              x.begin() + (b + 1) * kSeq * rowSize);
    std::vector<double> sliceOut(slice.size());
    ASSERT_TRUE(ropeForward<double>(sliceOut.data(), slice.data(), 1, sliceLen,
                                    kHeads, kDim, kTheta, start)
                    .isOk());
    std::vector<double> expected(whole.begin() + (b * kSeq + start) * rowSize,
                                 whole.begin() + (b + 1) * kSeq * rowSize);
    EXPECT_EQ(sliceOut, expected);
  }
}

// Tests the backward against central differences of sum(out * G), and that
// it inverts the forward.
TEST(RopeGradTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(43);
  auto x = randomVector<double>(rng, kSize);
  auto weights = randomVector<double>(rng, kSize);
  const int64_t offset = 4;
  auto loss = [&] {
    std::vector<double> out(kSize);
    EXPECT_TRUE(ropeForward<double>(out.data(), x.data(), kBatch, kSeq, kHeads,
                                    kDim, kTheta, offset)
                    .isOk());
    return weightedSum(out, weights);
  };
  std::vector<double> dx(kSize);
  ASSERT_TRUE(ropeBackward<double>(dx.data(), weights.data(), kBatch, kSeq,
                                   kHeads, kDim, kTheta, offset)
                  .isOk());
  EXPECT_LT(relError(dx, numericalGradient(loss, x)), kGradTol);

  std::vector<double> rotated(kSize), back(kSize);
  ASSERT_TRUE(ropeForward<double>(rotated.data(), x.data(), kBatch, kSeq,
                                  kHeads, kDim, kTheta, offset)
                  .isOk());
  ASSERT_TRUE(ropeBackward<double>(back.data(), rotated.data(), kBatch, kSeq,
                                   kHeads, kDim, kTheta, offset)
                  .isOk());
  EXPECT_LT(relError(back, x), kDoubleTol);
}

// Tests that float and double rotations agree.
TEST(RopePrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(44);
  auto xf = randomVector<float>(rng, kSize);
  auto xd = castVector<double>(xf);
  std::vector<float> of(kSize), bf(kSize);
  std::vector<double> od(kSize), bd(kSize);
  ASSERT_TRUE(ropeForward<float>(of.data(), xf.data(), kBatch, kSeq, kHeads,
                                 kDim, kTheta, 2)
                  .isOk());
  ASSERT_TRUE(ropeForward<double>(od.data(), xd.data(), kBatch, kSeq, kHeads,
                                  kDim, kTheta, 2)
                  .isOk());
  ASSERT_TRUE(ropeBackward<float>(bf.data(), xf.data(), kBatch, kSeq, kHeads,
                                  kDim, kTheta, 2)
                  .isOk());
  ASSERT_TRUE(ropeBackward<double>(bd.data(), xd.data(), kBatch, kSeq, kHeads,
                                   kDim, kTheta, 2)
                  .isOk());
  EXPECT_LT(relError(of, od), kFloatTol);
  EXPECT_LT(relError(bf, bd), kFloatTol);
}

// Tests that an odd head dimension is an error.
TEST(RopeErrorTest, RejectsOddHeadDim) {
  std::vector<float> buf(2 * 3 * 5, 1.0f);
  rt::Status status =
      ropeForward<float>(buf.data(), buf.data(), 1, 2, 3, 5, kTheta, 0);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("head_dim 5"), std::string::npos)
      << status.message();
}

} // namespace
