//===- AttentionTest.cpp - tests of the CPU attention family --------------===//
//
// Part of mlt. Checks attention against a reference that materializes the
// whole [seq, seq] score matrix per head, for grouped-query (4 query heads on
// 2 kv heads), multi-query (4 on 1) and plain multi-head (3 on 3) layouts,
// causal and not; the backward against finite differences in double; and
// float against double.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Attention.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>

using namespace mlt;
using namespace mlt::cpu;
using namespace mlt::cpu::test;

namespace {

AttentionParams makeParams(int64_t qHeads, int64_t kvHeads, bool causal) {
  AttentionParams p;
  p.batch = 2;
  p.seq = 7;
  p.qHeads = qHeads;
  p.kvHeads = kvHeads;
  p.headDim = 6;
  p.scale = 1.0 / std::sqrt(6.0);
  p.causal = causal;
  return p;
}

/// The layouts under test: GQA, MQA and MHA, each causal and not.
std::vector<AttentionParams> allParams() {
  std::vector<AttentionParams> out;
  for (bool causal : {true, false}) {
    out.push_back(makeParams(4, 2, causal));
    out.push_back(makeParams(4, 1, causal));
    out.push_back(makeParams(3, 3, causal));
  }
  return out;
}

std::string describe(const AttentionParams &p) {
  std::ostringstream os;
  os << "qHeads " << p.qHeads << " kvHeads " << p.kvHeads
     << (p.causal ? " causal" : " full");
  return os.str();
}

int64_t qSize(const AttentionParams &p) {
  return p.batch * p.seq * p.qHeads * p.headDim;
}
int64_t kvSize(const AttentionParams &p) {
  return p.batch * p.seq * p.kvHeads * p.headDim;
}

/// softmax(scale * Q K^T + mask) V per (batch, head) with the full score
/// matrix, and lse per row, in double.
std::vector<double> referenceAttention(const std::vector<double> &q,
                                       const std::vector<double> &k,
                                       const std::vector<double> &v,
                                       const AttentionParams &p,
                                       std::vector<double> *lse) {
  const int64_t S = p.seq, D = p.headDim, group = p.qHeads / p.kvHeads;
  auto qAt = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return q[((b * S + s) * p.qHeads + h) * D + d];
  };
  auto kvIndex = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    return ((b * S + s) * p.kvHeads + h) * D + d;
  };
  std::vector<double> out(qSize(p));
  lse->assign(p.batch * p.qHeads * S, 0.0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.qHeads; ++h) {
      const int64_t g = h / group;
      std::vector<double> scores(S * S);
      for (int64_t i = 0; i < S; ++i)
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < D; ++d)
            dot += qAt(b, i, h, d) * k[kvIndex(b, j, g, d)];
          scores[i * S + j] = (p.causal && j > i)
                                  ? -std::numeric_limits<double>::infinity()
                                  : p.scale * dot;
        }
      for (int64_t i = 0; i < S; ++i) {
        double maxScore = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < S; ++j)
          maxScore = std::max(maxScore, scores[i * S + j]);
        double sum = 0.0;
        for (int64_t j = 0; j < S; ++j)
          sum += std::exp(scores[i * S + j] - maxScore);
        (*lse)[(b * p.qHeads + h) * S + i] = maxScore + std::log(sum);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j < S; ++j)
            acc += std::exp(scores[i * S + j] - maxScore) / sum *
                   v[kvIndex(b, j, g, d)];
          out[((b * S + i) * p.qHeads + h) * D + d] = acc;
        }
      }
    }
  return out;
}

template <typename T> class AttentionTest : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(AttentionTest, FloatTypes);

// Tests out and lse against the full-matrix reference in every layout.
TYPED_TEST(AttentionTest, ForwardMatchesReference) {
  using T = TypeParam;
  std::mt19937 rng(51);
  for (const AttentionParams &p : allParams()) {
    SCOPED_TRACE(describe(p));
    auto q = randomVector<double>(rng, qSize(p), -1.5, 1.5);
    auto k = randomVector<double>(rng, kvSize(p), -1.5, 1.5);
    auto v = randomVector<double>(rng, kvSize(p));
    std::vector<double> lseRef;
    auto expected = referenceAttention(q, k, v, p, &lseRef);
    auto qT = castVector<T>(q), kT = castVector<T>(k), vT = castVector<T>(v);
    std::vector<T> out(qSize(p)), lse(p.batch * p.qHeads * p.seq);
    ASSERT_TRUE(attentionForward<T>(out.data(), lse.data(), qT.data(),
                                    kT.data(), vT.data(), p)
                    .isOk());
    EXPECT_LT(relError(out, expected), forwardTol<T>());
    EXPECT_LT(relError(lse, lseRef), forwardTol<T>());
  }
}

// Tests dq, dk and dv against central differences of sum(out * G) in every
// layout; dk and dv thereby include the sum over a group's query heads.
TEST(AttentionGradTest, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(52);
  for (const AttentionParams &p : allParams()) {
    SCOPED_TRACE(describe(p));
    auto q = randomVector<double>(rng, qSize(p), -1.5, 1.5);
    auto k = randomVector<double>(rng, kvSize(p), -1.5, 1.5);
    auto v = randomVector<double>(rng, kvSize(p));
    auto weights = randomVector<double>(rng, qSize(p));
    std::vector<double> out(qSize(p)), lse(p.batch * p.qHeads * p.seq);
    auto loss = [&] {
      std::vector<double> o(qSize(p)), l(p.batch * p.qHeads * p.seq);
      EXPECT_TRUE(attentionForward<double>(o.data(), l.data(), q.data(),
                                           k.data(), v.data(), p)
                      .isOk());
      return weightedSum(o, weights);
    };
    ASSERT_TRUE(attentionForward<double>(out.data(), lse.data(), q.data(),
                                         k.data(), v.data(), p)
                    .isOk());
    // Garbage in the outputs checks that they are overwritten.
    auto dq = randomVector<double>(rng, qSize(p));
    auto dk = randomVector<double>(rng, kvSize(p));
    auto dv = randomVector<double>(rng, kvSize(p));
    ASSERT_TRUE(attentionBackward<double>(dq.data(), dk.data(), dv.data(),
                                          weights.data(), q.data(), k.data(),
                                          v.data(), out.data(), lse.data(), p)
                    .isOk());
    EXPECT_LT(relError(dq, numericalGradient(loss, q)), kGradTol);
    EXPECT_LT(relError(dk, numericalGradient(loss, k)), kGradTol);
    EXPECT_LT(relError(dv, numericalGradient(loss, v)), kGradTol);
  }
}

// Tests that float forward and backward agree with double on the same
// inputs.
TEST(AttentionPrecisionTest, FloatAgreesWithDouble) {
  std::mt19937 rng(53);
  for (const AttentionParams &p : allParams()) {
    SCOPED_TRACE(describe(p));
    auto qf = randomVector<float>(rng, qSize(p), -1.5, 1.5);
    auto kf = randomVector<float>(rng, kvSize(p), -1.5, 1.5);
    auto vf = randomVector<float>(rng, kvSize(p));
    auto gf = randomVector<float>(rng, qSize(p));
    auto qd = castVector<double>(qf), kd = castVector<double>(kf),
         vd = castVector<double>(vf), gd = castVector<double>(gf);
    const int64_t lseSize = p.batch * p.qHeads * p.seq;
    std::vector<float> of(qSize(p)), lf(lseSize), dqf(qSize(p)), dkf(kvSize(p)),
        dvf(kvSize(p));
    std::vector<double> od(qSize(p)), ld(lseSize), dqd(qSize(p)),
        dkd(kvSize(p)), dvd(kvSize(p));
    ASSERT_TRUE(attentionForward<float>(of.data(), lf.data(), qf.data(),
                                        kf.data(), vf.data(), p)
                    .isOk());
    ASSERT_TRUE(attentionForward<double>(od.data(), ld.data(), qd.data(),
                                         kd.data(), vd.data(), p)
                    .isOk());
    ASSERT_TRUE(attentionBackward<float>(dqf.data(), dkf.data(), dvf.data(),
                                         gf.data(), qf.data(), kf.data(),
                                         vf.data(), of.data(), lf.data(), p)
                    .isOk());
    ASSERT_TRUE(attentionBackward<double>(dqd.data(), dkd.data(), dvd.data(),
                                          gd.data(), qd.data(), kd.data(),
                                          vd.data(), od.data(), ld.data(), p)
                    .isOk());
    EXPECT_LT(relError(of, od), kFloatTol);
    EXPECT_LT(relError(lf, ld), kFloatTol);
    EXPECT_LT(relError(dqf, dqd), kFloatTol);
    EXPECT_LT(relError(dkf, dkd), kFloatTol);
    EXPECT_LT(relError(dvf, dvd), kFloatTol);
  }
}

// Tests that query heads that are not a multiple of kv heads are an error.
TEST(AttentionErrorTest, RejectsIndivisibleHeads) {
  AttentionParams p = makeParams(4, 3, true);
  std::vector<float> buf(qSize(p) * 2, 1.0f);
  Status status = attentionForward<float>(buf.data(), buf.data(), buf.data(),
                                          buf.data(), buf.data(), p);
  ASSERT_FALSE(status.isOk());
  EXPECT_NE(status.message().find("not a multiple"), std::string::npos)
      << status.message();
}

} // namespace
