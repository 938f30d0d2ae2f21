//===- ElementwiseTest.cpp - tests of the CPU elementwise family ----------===//
//
// Part of mlt. Checks swiglu, silu, add and mul against their formulas, their
// backwards against finite differences, in-place use, and float against
// double.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Elementwise.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

constexpr int64_t kN = 3 * 5 * 11;

double refSilu(double x) { return x / (1.0 + std::exp(-x)); }

template <typename T> class ElementwiseTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(ElementwiseTest, FloatTypes);

// Tests every forward against its formula in double, on inputs wide enough
// to reach both tails of the sigmoid.
TYPED_TEST(ElementwiseTest, ForwardsMatchReference) {
  using T = TypeParam;
  std::mt19937 rng(61);
  auto a = randomVector<double>(rng, kN, -8.0, 8.0);
  auto b = randomVector<double>(rng, kN, -2.0, 2.0);
  std::vector<double> swiglu(kN), silu(kN), sum(kN), prod(kN);
  for (int64_t i = 0; i < kN; ++i) {
    swiglu[i] = refSilu(a[i]) * b[i];
    silu[i] = refSilu(a[i]);
    sum[i] = a[i] + b[i];
    prod[i] = a[i] * b[i];
  }
  auto aT = castVector<T>(a), bT = castVector<T>(b);
  std::vector<T> out(kN);
  swigluForward<T>(out.data(), aT.data(), bT.data(), kN);
  EXPECT_LT(relError(out, swiglu), forwardTol<T>());
  siluForward<T>(out.data(), aT.data(), kN);
  EXPECT_LT(relError(out, silu), forwardTol<T>());
  add<T>(out.data(), aT.data(), bT.data(), kN);
  EXPECT_LT(relError(out, sum), forwardTol<T>());
  mulForward<T>(out.data(), aT.data(), bT.data(), kN);
  EXPECT_LT(relError(out, prod), forwardTol<T>());

  // In place: the output overwrites the first input.
  auto inPlace = aT;
  swigluForward<T>(inPlace.data(), inPlace.data(), bT.data(), kN);
  std::vector<T> outOfPlace(kN);
  swigluForward<T>(outOfPlace.data(), aT.data(), bT.data(), kN);
  EXPECT_EQ(inPlace, outOfPlace);
}

// Tests that silu saturates without NaNs far in both tails.
TYPED_TEST(ElementwiseTest, SiluIsFiniteInTheTails) {
  using T = TypeParam;
  std::vector<T> x = {T(-1000), T(-100), T(100), T(1000)};
  std::vector<T> out(4), dx(4), ones(4, T(1));
  siluForward<T>(out.data(), x.data(), 4);
  siluBackward<T>(dx.data(), ones.data(), x.data(), 4);
  EXPECT_EQ(out[0], T(0));
  EXPECT_EQ(out[3], T(1000));
  EXPECT_EQ(dx[0], T(0));
  EXPECT_EQ(dx[3], T(1));
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(std::isfinite(out[i]) && std::isfinite(dx[i])) << i;
}

// Tests every backward against central differences of sum(out * G).
TEST(ElementwiseGradTest, BackwardsMatchFiniteDifferences) {
  std::mt19937 rng(62);
  auto a = randomVector<double>(rng, kN, -4.0, 4.0);
  auto b = randomVector<double>(rng, kN, -2.0, 2.0);
  auto g = randomVector<double>(rng, kN);
  std::vector<double> out(kN), da(kN), db(kN);

  auto swigluLoss = [&] {
    swigluForward<double>(out.data(), a.data(), b.data(), kN);
    return weightedSum(out, g);
  };
  swigluBackward<double>(da.data(), db.data(), g.data(), a.data(), b.data(),
                         kN);
  EXPECT_LT(relError(da, numericalGradient(swigluLoss, a)), kGradTol);
  EXPECT_LT(relError(db, numericalGradient(swigluLoss, b)), kGradTol);

  auto siluLoss = [&] {
    siluForward<double>(out.data(), a.data(), kN);
    return weightedSum(out, g);
  };
  siluBackward<double>(da.data(), g.data(), a.data(), kN);
  EXPECT_LT(relError(da, numericalGradient(siluLoss, a)), kGradTol);

  auto mulLoss = [&] {
    mulForward<double>(out.data(), a.data(), b.data(), kN);
    return weightedSum(out, g);
  };
  mulBackward<double>(da.data(), db.data(), g.data(), a.data(), b.data(), kN);
  EXPECT_LT(relError(da, numericalGradient(mulLoss, a)), kGradTol);
  EXPECT_LT(relError(db, numericalGradient(mulLoss, b)), kGradTol);

  // add's backward is the identity: d(sum((a + b) * G))/da = G.
  auto addLoss = [&] {
    add<double>(out.data(), a.data(), b.data(), kN);
    return weightedSum(out, g);
  };
  EXPECT_LT(relError(g, numericalGradient(addLoss, a)), kGradTol);

  // In place: dgate overwrites dout.
  auto dgateInPlace = g;
  std::vector<double> dup(kN);
  swigluBackward<double>(dgateInPlace.data(), dup.data(), dgateInPlace.data(),
                         a.data(), b.data(), kN);
  swigluBackward<double>(da.data(), db.data(), g.data(), a.data(), b.data(),
                         kN);
  EXPECT_EQ(dgateInPlace, da);
  EXPECT_EQ(dup, db);

  // With the forward's output too (the SwiGLU recomputed in its gradient's
  // pass): dgate and dup unchanged, out swigluForward's, bit for bit, also
  // with every output over an input (dgate over gate, dup over up, out over
  // dout).
  std::vector<double> dgate3(kN), dup3(kN), out3(kN), forward(kN);
  swigluBackward<double>(dgate3.data(), dup3.data(), g.data(), a.data(),
                         b.data(), kN, out3.data());
  swigluForward<double>(forward.data(), a.data(), b.data(), kN);
  EXPECT_EQ(dgate3, da);
  EXPECT_EQ(dup3, db);
  EXPECT_EQ(out3, forward);
  auto gate = a, up = b, dout = g;
  swigluBackward<double>(gate.data(), up.data(), dout.data(), gate.data(),
                         up.data(), kN, dout.data());
  EXPECT_EQ(gate, da);
  EXPECT_EQ(up, db);
  EXPECT_EQ(dout, forward);
}

// Tests that float backwards agree with double ones on the same inputs.
TEST(ElementwisePrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(63);
  auto af = randomVector<float>(rng, kN, -4.0, 4.0);
  auto bf = randomVector<float>(rng, kN, -2.0, 2.0);
  auto gf = randomVector<float>(rng, kN);
  auto ad = castVector<double>(af), bd = castVector<double>(bf),
       gd = castVector<double>(gf);
  std::vector<float> daf(kN), dbf(kN);
  std::vector<double> dad(kN), dbd(kN);
  swigluBackward<float>(daf.data(), dbf.data(), gf.data(), af.data(), bf.data(),
                        kN);
  swigluBackward<double>(dad.data(), dbd.data(), gd.data(), ad.data(),
                         bd.data(), kN);
  EXPECT_LT(relError(daf, dad), kFloatTol);
  EXPECT_LT(relError(dbf, dbd), kFloatTol);
  siluBackward<float>(daf.data(), gf.data(), af.data(), kN);
  siluBackward<double>(dad.data(), gd.data(), ad.data(), kN);
  EXPECT_LT(relError(daf, dad), kFloatTol);
}

} // namespace
