//===- AttentionTest.cpp - tests of the CUDA attention family -------------===//
//
// Part of mlt. Checks the CUDA flash attention forward and backward against
// the CPU kernels of lib/Runtime/cpu on the same random inputs: head dims 16,
// 64 and 128 (and 6 and 48, which use the next bucket and, for 6, the scalar
// tile loads), sequences that are not multiples of any tile, multi-head
// (hq/hkv = 1), grouped (2) and multi-query (4) layouts, causal and full;
// bit-reproducibility of the backward, and the argument errors.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention.h"
#include "CudaTestUtil.h"

#include "mlt/Runtime/cpu/Attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;

namespace {

/// Normwise tolerances against the CPU float kernels (which accumulate in
/// f64): the GPU accumulates dot products (head_dim terms), softmax sums and
/// the dk/dv sums (up to seq * group terms) in f32, in another order.
constexpr double kFwdTol = 1e-5;
constexpr double kBwdTol = 2e-5;

struct Case {
  int64_t batch, seq, qHeads, kvHeads, headDim;
  bool causal;

  /// Elements of q (and out, dout, dq), of k (v, dk, dv) and of lse.
  int64_t qSize() const { return batch * seq * qHeads * headDim; }
  int64_t kvSize() const { return batch * seq * kvHeads * headDim; }
  int64_t lseSize() const { return batch * qHeads * seq; }
};
constexpr Case kCases[] = {
    {2, 37, 4, 2, 64, true},    {1, 70, 2, 2, 16, false},
    {1, 45, 2, 1, 128, true},   {2, 33, 3, 3, 6, true},
    {1, 100, 4, 2, 128, false}, {1, 65, 4, 1, 48, true},
    {2, 1, 2, 1, 64, true},     {1, 129, 2, 2, 16, true},
    {1, 96, 2, 1, 128, true},   {1, 31, 2, 2, 32, false}};

std::string describe(const Case &c) {
  std::ostringstream os;
  os << "batch " << c.batch << " seq " << c.seq << " q_heads " << c.qHeads
     << " kv_heads " << c.kvHeads << " head_dim " << c.headDim
     << (c.causal ? " causal" : " full");
  return os.str();
}

/// The case as the CPU and the CUDA kernels both take it (AttentionShape is
/// cpu::AttentionParams).
cpu::AttentionParams params(const Case &c) {
  cpu::AttentionParams p;
  p.batch = c.batch;
  p.seq = c.seq;
  p.qHeads = c.qHeads;
  p.kvHeads = c.kvHeads;
  p.headDim = c.headDim;
  p.causal = c.causal;
  p.scale = 1.0 / std::sqrt(double(c.headDim));
  return p;
}

/// One case's random inputs and the CPU kernels' forward and backward on them.
struct Reference {
  std::vector<float> q, k, v, dout;
  std::vector<float> out, lse, dq, dk, dv;
};

/// Draws q, k, v and dout from `rng`, in that order, and runs the CPU kernels
/// on them. Call through ASSERT_NO_FATAL_FAILURE.
void cpuReference(const Case &c, std::mt19937 &rng, Reference &r) {
  const int64_t qn = c.qSize(), kvn = c.kvSize(), ln = c.lseSize();
  // Scores of a few units so that the softmax is far from uniform.
  r.q = randomVector<float>(rng, qn, -2.0, 2.0);
  r.k = randomVector<float>(rng, kvn, -2.0, 2.0);
  r.v = randomVector<float>(rng, kvn);
  r.dout = randomVector<float>(rng, qn);
  const cpu::AttentionParams p = params(c);
  r.out.assign(qn, 0.f);
  r.lse.assign(ln, 0.f);
  r.dq.assign(qn, 0.f);
  r.dk.assign(kvn, 0.f);
  r.dv.assign(kvn, 0.f);
  ASSERT_TRUE(cpu::attentionForward<float>(
      r.out.data(), r.lse.data(), r.q.data(), r.k.data(), r.v.data(), p));
  ASSERT_TRUE(cpu::attentionBackward<float>(
      r.dq.data(), r.dk.data(), r.dv.data(), r.dout.data(), r.q.data(),
      r.k.data(), r.v.data(), r.out.data(), r.lse.data(), p));
}

TEST(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(601);
  for (const Case &c : kCases) {
    SCOPED_TRACE(describe(c));
    const int64_t qn = c.qSize(), kvn = c.kvSize(), ln = c.lseSize();
    Reference ref;
    ASSERT_NO_FATAL_FAILURE(cpuReference(c, rng, ref));

    const AttentionShape shape = params(c);
    DeviceBuffer<float> dQ(qn), dK(kvn), dV(kvn), dOut(qn), dLse(ln), dDout(qn),
        dDq(qn), dDk(kvn), dDv(kvn);
    dQ.upload(ref.q);
    dK.upload(ref.k);
    dV.upload(ref.v);
    dDout.upload(ref.dout);
    ASSERT_TRUE(launchAttentionFwd(dOut.get(), dLse.get(), dQ.get(), dK.get(),
                                   dV.get(), shape, 0));
    const std::vector<float> out = dOut.download(), lse = dLse.download();
    EXPECT_LT(relError(out, ref.out), kFwdTol);
    EXPECT_LT(relError(lse, ref.lse), kFwdTol);

    // The backward from the CPU's out and lse, so that it is checked alone.
    dOut.upload(ref.out);
    dLse.upload(ref.lse);
    const size_t scratchBytes = attentionBwdScratchBytes(shape);
    DeviceBuffer<char> scratch(scratchBytes);
    ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(), dDout.get(),
                                   dQ.get(), dK.get(), dV.get(), dOut.get(),
                                   dLse.get(), shape, scratch.get(),
                                   scratchBytes, 0));
    const std::vector<float> dq = dDq.download(), dk = dDk.download(),
                             dv = dDv.download();
    EXPECT_LT(relError(dq, ref.dq), kBwdTol);
    EXPECT_LT(relError(dk, ref.dk), kBwdTol);
    EXPECT_LT(relError(dv, ref.dv), kBwdTol);

    // Bit-reproducible: no atomics, fixed summation orders.
    ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(), dDout.get(),
                                   dQ.get(), dK.get(), dV.get(), dOut.get(),
                                   dLse.get(), shape, scratch.get(),
                                   scratchBytes, 0));
    EXPECT_EQ(dDq.download(), dq);
    EXPECT_EQ(dDk.download(), dk);
    EXPECT_EQ(dDv.download(), dv);
  }
}

// A longer causal sequence at LLaMA's head_dim, several key tiles per query
// tile, with misaligned tensors (scalar tile loads).
TEST(CudaAttentionTest, MisalignedLongSequenceMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(602);
  const Case c{1, 300, 4, 2, 64, true};
  const int64_t qn = c.qSize(), kvn = c.kvSize(), ln = c.lseSize();
  Reference ref;
  ASSERT_NO_FATAL_FAILURE(cpuReference(c, rng, ref));

  auto unshift = [](const std::vector<float> &x) {
    return std::vector<float>(x.begin() + 1, x.end());
  };
  const AttentionShape shape = params(c);
  DeviceBuffer<float> dQ(qn + 1), dK(kvn + 1), dV(kvn + 1), dOut(qn + 1),
      dLse(ln), dDout(qn + 1), dDq(qn + 1), dDk(kvn + 1), dDv(kvn + 1);
  dQ.upload(padFront(ref.q, 1));
  dK.upload(padFront(ref.k, 1));
  dV.upload(padFront(ref.v, 1));
  dDout.upload(padFront(ref.dout, 1));
  ASSERT_TRUE(launchAttentionFwd(dOut.get() + 1, dLse.get(), dQ.get() + 1,
                                 dK.get() + 1, dV.get() + 1, shape, 0));
  EXPECT_LT(relError(unshift(dOut.download()), ref.out), kFwdTol);
  EXPECT_LT(relError(dLse.download(), ref.lse), kFwdTol);
  const size_t scratchBytes = attentionBwdScratchBytes(shape);
  DeviceBuffer<char> scratch(scratchBytes);
  ASSERT_TRUE(launchAttentionBwd(dDq.get() + 1, dDk.get() + 1, dDv.get() + 1,
                                 dDout.get() + 1, dQ.get() + 1, dK.get() + 1,
                                 dV.get() + 1, dOut.get() + 1, dLse.get(),
                                 shape, scratch.get(), scratchBytes, 0));
  EXPECT_LT(relError(unshift(dDq.download()), ref.dq), kBwdTol);
  EXPECT_LT(relError(unshift(dDk.download()), ref.dk), kBwdTol);
  EXPECT_LT(relError(unshift(dDv.download()), ref.dv), kBwdTol);
}

TEST(CudaAttentionTest, BadArgumentsAreErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<float> d(1024);
  AttentionShape shape;
  shape.batch = 1;
  shape.seq = 4;
  shape.qHeads = 3;
  shape.kvHeads = 2;
  shape.headDim = 8;
  rt::Status heads =
      launchAttentionFwd(d.get(), d.get(), d.get(), d.get(), d.get(), shape, 0);
  ASSERT_FALSE(heads);
  EXPECT_NE(heads.message().find("not a multiple"), std::string::npos)
      << heads.message();
  shape.qHeads = 2;
  shape.headDim = 256;
  rt::Status dim =
      launchAttentionFwd(d.get(), d.get(), d.get(), d.get(), d.get(), shape, 0);
  ASSERT_FALSE(dim);
  EXPECT_NE(dim.message().find("head_dim 256"), std::string::npos)
      << dim.message();
  shape.headDim = 8;
  rt::Status scratch =
      launchAttentionBwd(d.get(), d.get(), d.get(), d.get(), d.get(), d.get(),
                         d.get(), d.get(), d.get(), shape, nullptr, 0, 0);
  ASSERT_FALSE(scratch);
  EXPECT_NE(scratch.message().find("scratch"), std::string::npos);
}

} // namespace
