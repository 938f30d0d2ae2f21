//===- AttentionTest.cpp - tests of the CPU attention family --------------===//
//
// Part of mlt. Checks attention against a reference that materializes the
// whole [seq, seq] score matrix per head, for grouped-query (4 query heads on
// 2 kv heads), multi-query (4 on 1) and plain multi-head (3 on 3) layouts,
// causal and not; the backward against finite differences in double;
// float against double; and context parallelism's ring exchange: each ring
// step's attention over one rank's block of keys, the steps merged by
// attentionMerge (and their backward gradients summed) against the rank's
// attention over the whole sequence, and attentionMerge alone.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Attention.h"

#include "KernelTestUtil.h"

#include <gtest/gtest.h>

#include <limits>
#include <sstream>
#include <string>

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

//===----------------------------------------------------------------------===//
// Context parallelism's ring exchange
//===----------------------------------------------------------------------===//

/// A context-parallel shape (SequenceOrder.h): `ranks` ranks on the context
/// axis (G), each holding a block of two chunks of `chunk` tokens of the
/// sequence in its load-balanced order; batch 2, causal.
struct RingCase {
  int64_t ranks, chunk, qHeads, kvHeads, headDim;

  int64_t seq() const { return 2 * chunk; }
  std::string describe() const {
    std::ostringstream os;
    os << "G " << ranks << " chunk " << chunk << " qHeads " << qHeads
       << " kvHeads " << kvHeads << " headDim " << headDim;
    return os.str();
  }
  AttentionParams base() const {
    AttentionParams p;
    p.batch = 2;
    p.seq = seq();
    p.qHeads = qHeads;
    p.kvHeads = kvHeads;
    p.headDim = headDim;
    p.scale = 1.0 / std::sqrt(double(headDim));
    p.causal = true;
    return p;
  }
  /// Rank `coordinate`'s attention with the whole sequence's keys (the
  /// all-gather exchange's; what attentionPositionsAt(params, axis,
  /// {coordinate, G}) gives with ringStep -1): its block of queries, the G
  /// blocks of keys.
  AttentionParams gathered(int64_t coordinate) const {
    AttentionParams p = base();
    p.kvSeq = ranks * p.seq;
    p.queries = rt::SequencePositions::contextBlock(p.seq, coordinate, ranks);
    p.keys = rt::SequencePositions::contextWhole(p.seq, ranks);
    return p;
  }
  /// The holder of the keys of ring step `step` of rank `coordinate`: the
  /// rank `step` places before it on the axis.
  int64_t holder(int64_t coordinate, int64_t step) const {
    return ((coordinate - step) % ranks + ranks) % ranks;
  }
  /// Ring step `step` of rank `coordinate` (what attentionPositionsAt gives
  /// with ringStep `step`): its block of queries against the block of keys
  /// of holder(coordinate, step).
  AttentionParams ring(int64_t coordinate, int64_t step) const {
    AttentionParams p = base();
    p.kvSeq = p.seq;
    p.ringStep = step;
    p.queries = rt::SequencePositions::contextBlock(p.seq, coordinate, ranks);
    p.keys = rt::SequencePositions::contextBlock(
        p.seq, holder(coordinate, step), ranks);
    return p;
  }
  /// The whole sequence's queries and keys in the load-balanced order (the
  /// all-to-all exchange's shape): the G ranks' blocks side by side.
  AttentionParams whole() const {
    AttentionParams p = base();
    p.seq = ranks * seq();
    p.queries = p.keys = rt::SequencePositions::contextWhole(seq(), ranks);
    return p;
  }
};

/// GQA and MQA, head dims that no vector width divides, G = 2, 3 and 4.
constexpr RingCase kRingCases[] = {
    {2, 3, 6, 2, 6}, {3, 2, 4, 1, 14}, {4, 2, 6, 2, 14}, {3, 3, 6, 2, 6}};

/// Rows [first, first + rows) of each batch entry of x [batch, total, width]
/// (width: heads * headDim).
template <typename T>
std::vector<T> sliceRows(const std::vector<T> &x, int64_t batch, int64_t total,
                         int64_t first, int64_t rows, int64_t width) {
  std::vector<T> out;
  out.reserve(batch * rows * width);
  for (int64_t b = 0; b < batch; ++b)
    out.insert(out.end(), x.begin() + (b * total + first) * width,
               x.begin() + (b * total + first + rows) * width);
  return out;
}

/// The inverse: `block` written over rows [first, first + rows) of x.
template <typename T>
void placeRows(std::vector<T> &x, const std::vector<T> &block, int64_t batch,
               int64_t total, int64_t first, int64_t rows, int64_t width) {
  for (int64_t b = 0; b < batch; ++b)
    std::copy(block.begin() + b * rows * width,
              block.begin() + (b + 1) * rows * width,
              x.begin() + (b * total + first) * width);
}

template <typename T> constexpr double ringTol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

template <typename T> class AttentionRingTest : public ::testing::Test {};
TYPED_TEST_SUITE(AttentionRingTest, FloatTypes);

// Tests the ring exchange's attention against the gathered one, on fresh
// random inputs, for every rank coordinate c of each shape: the G ring steps
// (step s: c's queries against the block of keys and values of holder
// b = (c - s) mod G, kvSeq = seq, ringStep s) folded by attentionMerge, in
// place as the ring does, give c's out and lse over the whole sequence's
// keys (kvSeq = G * seq); a step whose keys all come after a query row (the
// rank's first chunk against a later rank's block) gives that row out 0 and
// lse -inf exactly, every other row a finite lse. Backward: each step with
// the whole attention's out and lse gives a share of dq (the shares sum to
// the gathered dq) and exactly the gathered dk and dv rows of block b. And
// the G ranks together against the whole sequence's attention (queries and
// keys both in the load-balanced order): every rank's merged out and lse are
// its rows of it, and dk and dv summed over all ranks and steps are its dk
// and dv.
TYPED_TEST(AttentionRingTest, RingStepsMergedEqualTheGatheredAttention) {
  using T = TypeParam;
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937 rng(54);
  for (const RingCase &rc : kRingCases) {
    SCOPED_TRACE(rc.describe());
    const int64_t G = rc.ranks, S = rc.seq(), C = rc.chunk, B = 2;
    const int64_t D = rc.headDim, H = rc.qHeads, Hkv = rc.kvHeads;
    const int64_t qWidth = H * D, kvWidth = Hkv * D;
    // The whole sequence's keys and values, in the load-balanced order.
    const auto k = castVector<T>(
        randomVector<double>(rng, B * G * S * kvWidth, -1.5, 1.5));
    const auto v =
        castVector<T>(randomVector<double>(rng, B * G * S * kvWidth));
    // Every rank's queries and output gradient, side by side as in whole().
    const auto qAll =
        castVector<T>(randomVector<double>(rng, B * G * S * qWidth, -1.5, 1.5));
    const auto doutAll =
        castVector<T>(randomVector<double>(rng, B * G * S * qWidth));
    std::vector<T> outAll(qAll.size()), lseAll(B * H * G * S);
    // dk, dv summed over every rank and step of the ring.
    std::vector<double> dkRing(k.size(), 0.0), dvRing(v.size(), 0.0);
    int64_t emptyRows = 0;

    for (int64_t c = 0; c < G; ++c) {
      SCOPED_TRACE("rank " + std::to_string(c));
      const auto q = sliceRows(qAll, B, G * S, c * S, S, qWidth);
      const auto dout = sliceRows(doutAll, B, G * S, c * S, S, qWidth);
      const int64_t qn = B * S * qWidth, ln = B * H * S, kvn = B * S * kvWidth;

      // The reference: c's queries against the whole sequence's keys.
      const AttentionParams ref = rc.gathered(c);
      std::vector<T> out(qn), lse(ln), dq(qn), dk(k.size()), dv(v.size());
      ASSERT_TRUE(attentionForward<T>(out.data(), lse.data(), q.data(),
                                      k.data(), v.data(), ref)
                      .isOk());
      ASSERT_TRUE(attentionBackward<T>(dq.data(), dk.data(), dv.data(),
                                       dout.data(), q.data(), k.data(),
                                       v.data(), out.data(), lse.data(), ref)
                      .isOk());
      placeRows(outAll, out, B, G * S, c * S, S, qWidth);
      placeRows(lseAll, lse, B * H, G * S, c * S, S, 1);

      // The ring: step s brings holder b's block.
      std::vector<T> merged(qn), mergedLse(ln);
      std::vector<double> dqSum(qn, 0.0);
      for (int64_t s = 0; s < G; ++s) {
        const int64_t b = rc.holder(c, s);
        SCOPED_TRACE("step " + std::to_string(s) + " (block of rank " +
                     std::to_string(b) + ")");
        const AttentionParams p = rc.ring(c, s);
        ASSERT_EQ(p.keyRows(), S);
        const auto kb = sliceRows(k, B, G * S, b * S, S, kvWidth);
        const auto vb = sliceRows(v, B, G * S, b * S, S, kvWidth);
        // Garbage in the outputs checks that every element is written.
        auto o = castVector<T>(randomVector<double>(rng, qn, 5.0, 6.0));
        auto l = castVector<T>(randomVector<double>(rng, ln, 5.0, 6.0));
        ASSERT_TRUE(attentionForward<T>(o.data(), l.data(), q.data(), kb.data(),
                                        vb.data(), p)
                        .isOk());
        // Query row i (chunk c for i < C, chunk 2G-1-c after) sees none of
        // a later rank's block when it is in the rank's first chunk.
        for (int64_t bh = 0; bh < B * H; ++bh)
          for (int64_t i = 0; i < S; ++i) {
            const bool empty = b > c && i < C;
            const double li = double(l[bh * S + i]);
            const int64_t batch = bh / H, h = bh % H;
            const T *oi = o.data() + ((batch * S + i) * H + h) * D;
            if (empty) {
              ++emptyRows;
              ASSERT_EQ(li, -inf) << "row " << i << " (batch, head) " << bh;
              for (int64_t d = 0; d < D; ++d)
                ASSERT_EQ(oi[d], T(0))
                    << "row " << i << " (batch, head) " << bh;
            } else {
              ASSERT_TRUE(std::isfinite(li))
                  << "row " << i << " (batch, head) " << bh << ": " << li;
            }
          }
        if (s == 0) {
          merged = o;
          mergedLse = l;
        } else {
          attentionMerge<T>(merged.data(), mergedLse.data(), merged.data(),
                            mergedLse.data(), o.data(), l.data(), B, S, H, D);
        }

        // Backward with the whole attention's out and lse.
        auto dqs = castVector<T>(randomVector<double>(rng, qn));
        auto dks = castVector<T>(randomVector<double>(rng, kvn));
        auto dvs = castVector<T>(randomVector<double>(rng, kvn));
        ASSERT_TRUE(attentionBackward<T>(dqs.data(), dks.data(), dvs.data(),
                                         dout.data(), q.data(), kb.data(),
                                         vb.data(), out.data(), lse.data(), p)
                        .isOk());
        for (int64_t e = 0; e < qn; ++e)
          dqSum[e] += double(dqs[e]);
        EXPECT_LT(relError(dks, sliceRows(dk, B, G * S, b * S, S, kvWidth)),
                  ringTol<T>())
            << "dk";
        EXPECT_LT(relError(dvs, sliceRows(dv, B, G * S, b * S, S, kvWidth)),
                  ringTol<T>())
            << "dv";
        for (int64_t batch = 0; batch < B; ++batch)
          for (int64_t e = 0; e < S * kvWidth; ++e) {
            const int64_t at = (batch * G * S + b * S) * kvWidth + e;
            dkRing[at] += double(dks[batch * S * kvWidth + e]);
            dvRing[at] += double(dvs[batch * S * kvWidth + e]);
          }
      }
      EXPECT_LT(relError(merged, out), ringTol<T>()) << "out";
      EXPECT_LT(relError(mergedLse, lse), ringTol<T>()) << "lse";
      EXPECT_LT(relError(dqSum, dq), ringTol<T>()) << "dq";
    }
    // Every (rank c, step) whose block is of a later rank b > c (G(G - 1) / 2
    // of them) has C such rows for each (batch, head).
    EXPECT_EQ(emptyRows, B * H * C * G * (G - 1) / 2);

    // All ranks together: the whole sequence's attention.
    const AttentionParams whole = rc.whole();
    std::vector<T> out(qAll.size()), lse(lseAll.size()), dq(qAll.size()),
        dk(k.size()), dv(v.size());
    ASSERT_TRUE(attentionForward<T>(out.data(), lse.data(), qAll.data(),
                                    k.data(), v.data(), whole)
                    .isOk());
    ASSERT_TRUE(attentionBackward<T>(dq.data(), dk.data(), dv.data(),
                                     doutAll.data(), qAll.data(), k.data(),
                                     v.data(), out.data(), lse.data(), whole)
                    .isOk());
    EXPECT_LT(relError(outAll, out), ringTol<T>()) << "whole out";
    EXPECT_LT(relError(lseAll, lse), ringTol<T>()) << "whole lse";
    EXPECT_LT(relError(dkRing, dk), ringTol<T>()) << "whole dk";
    EXPECT_LT(relError(dvRing, dv), ringTol<T>()) << "whole dv";
  }
}

// Tests attentionMerge alone on random rows of four kinds: both sides
// finite (against the formula in double: lse = log(exp(lse_a) + exp(lse_b)),
// out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse)), one side at -inf
// (the other side exactly, out and lse, whatever the -inf side's out
// holds), and both at -inf (out 0, lse -inf: no key at all); in place over
// out_a and lse_a the same bits as out of place.
TYPED_TEST(AttentionRingTest, MergeMatchesTheFormula) {
  using T = TypeParam;
  const double inf = std::numeric_limits<double>::infinity();
  std::mt19937 rng(55);
  const int64_t B = 2, S = 9, H = 3, D = 5;
  const int64_t n = B * S * H * D, rows = B * H * S;
  const auto outA = castVector<T>(randomVector<double>(rng, n, -2.0, 2.0));
  const auto outB = castVector<T>(randomVector<double>(rng, n, -2.0, 2.0));
  auto lseA = castVector<T>(randomVector<double>(rng, rows, -20.0, 20.0));
  auto lseB = castVector<T>(randomVector<double>(rng, rows, -20.0, 20.0));
  // Row kind: 0 both finite, 1 b at -inf, 2 a at -inf, 3 both.
  std::vector<int> kind(rows);
  for (int64_t r = 0; r < rows; ++r) {
    kind[r] = int(r % 4 == 0 ? 0 : rng() % 4);
    if (kind[r] & 1)
      lseB[r] = T(-inf);
    if (kind[r] & 2)
      lseA[r] = T(-inf);
  }
  std::vector<T> out = castVector<T>(randomVector<double>(rng, n, 5.0, 6.0));
  std::vector<T> lse = castVector<T>(randomVector<double>(rng, rows));
  attentionMerge<T>(out.data(), lse.data(), outA.data(), lseA.data(),
                    outB.data(), lseB.data(), B, S, H, D);

  std::vector<double> expectedOut(n), expectedLse(rows);
  int seen[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t stat = (b * H + h) * S + i;
        const int64_t row = ((b * S + i) * H + h) * D;
        const double la = double(lseA[stat]), lb = double(lseB[stat]);
        ++seen[kind[stat]];
        SCOPED_TRACE("row " + std::to_string(i) + " batch " +
                     std::to_string(b) + " head " + std::to_string(h) +
                     " kind " + std::to_string(kind[stat]));
        switch (kind[stat]) {
        case 0: {
          const double l = std::log(std::exp(la) + std::exp(lb));
          expectedLse[stat] = l;
          for (int64_t d = 0; d < D; ++d)
            expectedOut[row + d] = double(outA[row + d]) * std::exp(la - l) +
                                   double(outB[row + d]) * std::exp(lb - l);
          break;
        }
        case 1:
        case 2: {
          const std::vector<T> &side = kind[stat] == 1 ? outA : outB;
          const T sideLse = kind[stat] == 1 ? lseA[stat] : lseB[stat];
          EXPECT_EQ(lse[stat], sideLse);
          for (int64_t d = 0; d < D; ++d)
            EXPECT_EQ(out[row + d], side[row + d]) << "element " << d;
          expectedLse[stat] = double(sideLse);
          for (int64_t d = 0; d < D; ++d)
            expectedOut[row + d] = double(side[row + d]);
          break;
        }
        default:
          EXPECT_EQ(double(lse[stat]), -inf);
          for (int64_t d = 0; d < D; ++d)
            EXPECT_EQ(out[row + d], T(0)) << "element " << d;
          expectedLse[stat] = 0.0;
          for (int64_t d = 0; d < D; ++d)
            expectedOut[row + d] = 0.0;
          break;
        }
      }
  for (int k = 0; k < 4; ++k)
    EXPECT_GT(seen[k], 0) << "no row of kind " << k;
  // Normwise over the finite rows (the rows at -inf were checked above).
  std::vector<T> finiteLse = lse;
  for (int64_t r = 0; r < rows; ++r)
    if (kind[r] == 3)
      finiteLse[r] = T(0);
  EXPECT_LT(relError(out, expectedOut), forwardTol<T>());
  EXPECT_LT(relError(finiteLse, expectedLse), forwardTol<T>());

  // In place over a: the same bits.
  std::vector<T> inPlace = outA, inPlaceLse = lseA;
  attentionMerge<T>(inPlace.data(), inPlaceLse.data(), inPlace.data(),
                    inPlaceLse.data(), outB.data(), lseB.data(), B, S, H, D);
  EXPECT_EQ(inPlace, out);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(double(inPlaceLse[r]), double(lse[r])) << "lse " << r;
}

} // namespace
