//===- RopeTest.cpp - tests of the CPU rope family ------------------------===//
//
// Part of mlt. Checks the rotation against HF's formulation written out
// (`x * cos(emb) + rotate_half(x) * sin(emb)` with emb = cat(freqs, freqs)),
// the position offset against slicing a longer sequence, the backward against
// finite differences and as the inverse of the forward, and float against
// double; the same with Llama 3.1's rotary scaling, whose inverse
// frequencies are checked against HF's `_compute_llama3_parameters` written
// out as HF writes it (whole-vector selects); and the argument errors.
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

/// HF's unscaled inverse frequencies, 1 / theta^(2i / dim), in double.
std::vector<double> referenceInvFreq(double theta, int64_t dim) {
  std::vector<double> invFreq(dim / 2);
  for (int64_t i = 0; i < dim / 2; ++i)
    invFreq[i] = 1.0 / std::pow(theta, double(2 * i) / double(dim));
  return invFreq;
}

/// HF transformers' `_compute_llama3_parameters` (modeling_rope_utils.py),
/// step for step: the unscaled frequencies, the low ones divided by factor,
/// then the medium ones replaced by the smoothed value; in double.
std::vector<double> referenceLlama3InvFreq(double theta, int64_t dim,
                                           double factor, double lowFreqFactor,
                                           double highFreqFactor,
                                           double oldContextLen) {
  const std::vector<double> invFreq = referenceInvFreq(theta, dim);
  const double lowFreqWavelen = oldContextLen / lowFreqFactor;
  const double highFreqWavelen = oldContextLen / highFreqFactor;
  std::vector<double> out(invFreq.size());
  for (size_t i = 0; i < invFreq.size(); ++i) {
    const double wavelen = 2 * M_PI / invFreq[i];
    // torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    const double llama =
        wavelen > lowFreqWavelen ? invFreq[i] / factor : invFreq[i];
    const double smoothFactor = (oldContextLen / wavelen - lowFreqFactor) /
                                (highFreqFactor - lowFreqFactor);
    const double smoothed =
        (1 - smoothFactor) * llama / factor + smoothFactor * llama;
    const bool isMediumFreq =
        !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
    out[i] = isMediumFreq ? smoothed : llama;
  }
  return out;
}

/// HF LLaMA's apply_rotary_pos_emb, one head vector at a time, in double,
/// with the inverse frequencies `invFreq` (default: unscaled, kTheta).
std::vector<double> referenceRope(const std::vector<double> &x, int64_t seq,
                                  int64_t offset,
                                  std::vector<double> invFreq = {}) {
  const int64_t half = kDim / 2;
  if (invFreq.empty())
    invFreq = referenceInvFreq(kTheta, kDim);
  std::vector<double> out(x.size());
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < kHeads; ++h) {
        const double *xv = &x[((b * seq + s) * kHeads + h) * kDim];
        double *ov = &out[((b * seq + s) * kHeads + h) * kDim];
        for (int64_t d = 0; d < kDim; ++d) {
          const int64_t i = d % half; // emb = cat(freqs, freqs)
          const double angle = double(s + offset) * invFreq[i];
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

//===----------------------------------------------------------------------===//
// Llama 3.1 rotary scaling
//===----------------------------------------------------------------------===//

// kDim = 10 and theta 1e4 give wavelengths 6.3, 39.7, 250, 1580 and 9960;
// with an original context of 64, low_freq_factor 1 and high_freq_factor 4
// (scaled above 64, kept below 16) the first is kept, the second smoothed and
// the rest divided by the factor: every branch of the formula is taken.
const rt::RopeScaling kLlama3 = rt::RopeScaling::llama3(8.0, 1.0, 4.0, 64);

std::vector<double> llama3Reference(double theta, int64_t dim,
                                    const rt::RopeScaling &s) {
  return referenceLlama3InvFreq(theta, dim, s.factor, s.lowFreqFactor,
                                s.highFreqFactor,
                                double(s.originalMaxPositionEmbeddings));
}

// Tests the shared inverse frequencies against HF's function, for the
// test's scaling and for Llama-3.1-8B's and Llama-3.2-1B's (head_dim 128 and
// 64, theta 500000, original 8192, factors 8 and 32): the kept ones equal
// the unscaled, the scaled ones the unscaled over the factor, the smoothed
// ones lie between.
TEST(RopeScalingTest, InverseFrequenciesMatchHF) {
  struct Case {
    double theta;
    int64_t dim;
    rt::RopeScaling scaling;
  };
  for (const Case &c :
       {Case{kTheta, kDim, kLlama3},
        Case{5e5, 128, rt::RopeScaling::llama3(8.0, 1.0, 4.0, 8192)},
        Case{5e5, 64, rt::RopeScaling::llama3(32.0, 1.0, 4.0, 8192)}}) {
    SCOPED_TRACE("head_dim " + std::to_string(c.dim));
    const std::vector<double> ours =
        rt::ropeInverseFrequencies(c.theta, c.dim, c.scaling);
    const std::vector<double> hf = llama3Reference(c.theta, c.dim, c.scaling);
    const std::vector<double> plain = referenceInvFreq(c.theta, c.dim);
    ASSERT_EQ(ours.size(), hf.size());
    int kept = 0, scaled = 0, smoothed = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      // 1 / pow(theta, e) (HF) against pow(theta, -e) (ours): an ulp or two.
      EXPECT_NEAR(ours[i], hf[i], 1e-14 * hf[i]) << "pair " << i;
      if (hf[i] == plain[i])
        ++kept;
      else if (std::abs(hf[i] - plain[i] / c.scaling.factor) <= 1e-15 * hf[i])
        ++scaled;
      else if (hf[i] > plain[i] / c.scaling.factor && hf[i] < plain[i])
        ++smoothed;
      else
        ADD_FAILURE() << "pair " << i << " is none of kept, scaled, smoothed";
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(scaled, 0);
    EXPECT_GT(smoothed, 0);
  }
}

// Tests that kind none is the unscaled rotation, bit for bit, and that a
// factor of 1 leaves the frequencies as they are (up to rounding).
TEST(RopeScalingTest, NoneAndFactorOneAreUnscaled) {
  const std::vector<double> plain =
      rt::ropeInverseFrequencies(kTheta, kDim, rt::RopeScaling());
  for (int64_t i = 0; i < kDim / 2; ++i)
    EXPECT_EQ(plain[i], std::pow(kTheta, -double(2 * i) / double(kDim)));
  const std::vector<double> one = rt::ropeInverseFrequencies(
      kTheta, kDim, rt::RopeScaling::llama3(1.0, 1.0, 4.0, 64));
  for (int64_t i = 0; i < kDim / 2; ++i)
    EXPECT_NEAR(one[i], plain[i], 1e-15 * plain[i]) << "pair " << i;
}

// Tests the scaled forward against HF's formula with HF's scaled
// frequencies, with and without a position offset, out of place and in
// place; and that the scaling changes the result.
TYPED_TEST(RopeTest, ScaledForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(45);
  auto x = randomVector<double>(rng, kSize);
  const std::vector<double> invFreq = llama3Reference(kTheta, kDim, kLlama3);
  for (int64_t offset : {int64_t(0), int64_t(5), int64_t(1000)}) {
    auto expected = referenceRope(x, kSeq, offset, invFreq);
    auto xT = castVector<T>(x);
    std::vector<T> out(kSize), unscaled(kSize);
    ASSERT_TRUE(ropeForward<T>(out.data(), xT.data(), kBatch, kSeq, kHeads,
                               kDim, kTheta, offset, kLlama3)
                    .isOk());
    EXPECT_LT(relError(out, expected), forwardTol<T>()) << "offset " << offset;
    ASSERT_TRUE(ropeForward<T>(unscaled.data(), xT.data(), kBatch, kSeq, kHeads,
                               kDim, kTheta, offset)
                    .isOk());
    // Far above any rounding: a wrong or ignored scaling would pass above
    // only if it were this close to HF's.
    EXPECT_GT(relError(unscaled, expected), 1e-2) << "offset " << offset;
    ASSERT_TRUE(ropeForward<T>(xT.data(), xT.data(), kBatch, kSeq, kHeads, kDim,
                               kTheta, offset, kLlama3)
                    .isOk());
    EXPECT_EQ(xT, out);
  }
}

// Tests the scaled backward against central differences and as the inverse
// of the scaled forward.
TEST(RopeScalingTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(46);
  auto x = randomVector<double>(rng, kSize);
  auto weights = randomVector<double>(rng, kSize);
  const int64_t offset = 9;
  auto loss = [&] {
    std::vector<double> out(kSize);
    EXPECT_TRUE(ropeForward<double>(out.data(), x.data(), kBatch, kSeq, kHeads,
                                    kDim, kTheta, offset, kLlama3)
                    .isOk());
    return weightedSum(out, weights);
  };
  std::vector<double> dx(kSize);
  ASSERT_TRUE(ropeBackward<double>(dx.data(), weights.data(), kBatch, kSeq,
                                   kHeads, kDim, kTheta, offset, kLlama3)
                  .isOk());
  EXPECT_LT(relError(dx, numericalGradient(loss, x)), kGradTol);

  std::vector<double> rotated(kSize), back(kSize);
  ASSERT_TRUE(ropeForward<double>(rotated.data(), x.data(), kBatch, kSeq,
                                  kHeads, kDim, kTheta, offset, kLlama3)
                  .isOk());
  ASSERT_TRUE(ropeBackward<double>(back.data(), rotated.data(), kBatch, kSeq,
                                   kHeads, kDim, kTheta, offset, kLlama3)
                  .isOk());
  EXPECT_LT(relError(back, x), kDoubleTol);
}

// Tests that a bad scaling is an error naming the field, before anything is
// written.
TEST(RopeErrorTest, RejectsBadScaling) {
  struct Bad {
    rt::RopeScaling scaling;
    const char *expected;
  };
  rt::RopeScaling unknown = kLlama3;
  unknown.kind = rt::RopeScalingKind(7);
  rt::RopeScaling noneWithFactor;
  noneWithFactor.factor = 8.0;
  for (const Bad &bad :
       {Bad{rt::RopeScaling::llama3(0.5, 1.0, 4.0, 64), "factor"},
        Bad{rt::RopeScaling::llama3(NAN, 1.0, 4.0, 64), "factor"},
        Bad{rt::RopeScaling::llama3(8.0, 0.0, 4.0, 64), "low_freq_factor"},
        Bad{rt::RopeScaling::llama3(8.0, 4.0, 4.0, 64), "high_freq_factor"},
        Bad{rt::RopeScaling::llama3(8.0, 1.0, INFINITY, 64),
            "high_freq_factor"},
        Bad{rt::RopeScaling::llama3(8.0, 1.0, 4.0, 0),
            "original_max_position_embeddings"},
        Bad{unknown, "unknown rope scaling kind 7"},
        Bad{noneWithFactor, "kind none"}}) {
    std::vector<float> buf(kSize, 1.0f);
    Status status = ropeForward<float>(buf.data(), buf.data(), kBatch, kSeq,
                                       kHeads, kDim, kTheta, 0, bad.scaling);
    ASSERT_FALSE(status.isOk()) << bad.expected;
    EXPECT_EQ(status.message().rfind("rope: ", 0), 0u) << status.message();
    EXPECT_NE(status.message().find(bad.expected), std::string::npos)
        << status.message();
    EXPECT_EQ(buf, std::vector<float>(kSize, 1.0f));
  }
}

// Tests that an odd head dimension is an error.
TEST(RopeErrorTest, RejectsOddHeadDim) {
  std::vector<float> buf(2 * 3 * 5, 1.0f);
  Status status =
      ropeForward<float>(buf.data(), buf.data(), 1, 2, 3, 5, kTheta, 0);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("head_dim 5"), std::string::npos)
      << status.message();
}

} // namespace
