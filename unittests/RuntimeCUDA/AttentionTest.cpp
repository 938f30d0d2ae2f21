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

#include "CudaTestUtil.h"
#include "kernels/attention.h"

#include "../Runtime/KernelTestUtil.h"
#include "mlt/Runtime/cpu/Attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::test;
using mlt::cpu::test::randomVector;
using mlt::cpu::test::relError;

namespace {

/// Normwise tolerances against the CPU float kernels (which accumulate in
/// f64): the GPU accumulates dot products (head_dim terms), softmax sums and
/// the dk/dv sums (up to seq * group terms) in f32, in another order.
constexpr double kFwdTol = 1e-5;
constexpr double kBwdTol = 2e-5;

struct Case {
  int64_t batch, seq, qHeads, kvHeads, headDim;
  bool causal;
};
constexpr Case kCases[] = {
    {2, 37, 4, 2, 64, true},   {1, 70, 2, 2, 16, false},
    {1, 45, 2, 1, 128, true},  {2, 33, 3, 3, 6, true},
    {1, 100, 4, 2, 128, false}, {1, 65, 4, 1, 48, true},
    {2, 1, 2, 1, 64, true},    {1, 129, 2, 2, 16, true},
    {1, 96, 2, 1, 128, true},  {1, 31, 2, 2, 32, false}};

std::string describe(const Case &c) {
  std::ostringstream os;
  os << "batch " << c.batch << " seq " << c.seq << " q_heads " << c.qHeads
     << " kv_heads " << c.kvHeads << " head_dim " << c.headDim
     << (c.causal ? " causal" : " full");
  return os.str();
}

AttentionShape gpuShape(const Case &c) {
  AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.qHeads = c.qHeads;
  s.kvHeads = c.kvHeads;
  s.headDim = c.headDim;
  s.causal = c.causal;
  s.scale = 1.0 / std::sqrt(double(c.headDim));
  return s;
}

cpu::AttentionParams cpuParams(const Case &c) {
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

TEST(CudaAttentionTest, ForwardAndBackwardMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(601);
  for (const Case &c : kCases) {
    SCOPED_TRACE(describe(c));
    const int64_t qn = c.batch * c.seq * c.qHeads * c.headDim;
    const int64_t kvn = c.batch * c.seq * c.kvHeads * c.headDim;
    const int64_t ln = c.batch * c.qHeads * c.seq;
    // Scores of a few units so that the softmax is far from uniform.
    auto q = randomVector<float>(rng, qn, -2.0, 2.0);
    auto k = randomVector<float>(rng, kvn, -2.0, 2.0);
    auto v = randomVector<float>(rng, kvn);
    auto dout = randomVector<float>(rng, qn);
    const cpu::AttentionParams params = cpuParams(c);
    std::vector<float> outRef(qn), lseRef(ln), dqRef(qn), dkRef(kvn),
        dvRef(kvn);
    ASSERT_TRUE(cpu::attentionForward<float>(outRef.data(), lseRef.data(),
                                             q.data(), k.data(), v.data(),
                                             params));
    ASSERT_TRUE(cpu::attentionBackward<float>(
        dqRef.data(), dkRef.data(), dvRef.data(), dout.data(), q.data(),
        k.data(), v.data(), outRef.data(), lseRef.data(), params));

    const AttentionShape shape = gpuShape(c);
    DeviceBuffer<float> dQ(qn), dK(kvn), dV(kvn), dOut(qn), dLse(ln),
        dDout(qn), dDq(qn), dDk(kvn), dDv(kvn);
    dQ.upload(q);
    dK.upload(k);
    dV.upload(v);
    dDout.upload(dout);
    ASSERT_TRUE(launchAttentionFwd(dOut.get(), dLse.get(), dQ.get(), dK.get(),
                                   dV.get(), shape, 0));
    const std::vector<float> out = dOut.download(), lse = dLse.download();
    EXPECT_LT(relError(out, outRef), kFwdTol);
    EXPECT_LT(relError(lse, lseRef), kFwdTol);

    // The backward from the CPU's out and lse, so that it is checked alone.
    dOut.upload(outRef);
    dLse.upload(lseRef);
    const size_t scratchBytes = attentionBwdScratchBytes(shape);
    DeviceBuffer<char> scratch(scratchBytes);
    ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(),
                                   dDout.get(), dQ.get(), dK.get(), dV.get(),
                                   dOut.get(), dLse.get(), shape,
                                   scratch.get(), scratchBytes, 0));
    const std::vector<float> dq = dDq.download(), dk = dDk.download(),
                             dv = dDv.download();
    EXPECT_LT(relError(dq, dqRef), kBwdTol);
    EXPECT_LT(relError(dk, dkRef), kBwdTol);
    EXPECT_LT(relError(dv, dvRef), kBwdTol);

    // Bit-reproducible: no atomics, fixed summation orders.
    ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(),
                                   dDout.get(), dQ.get(), dK.get(), dV.get(),
                                   dOut.get(), dLse.get(), shape,
                                   scratch.get(), scratchBytes, 0));
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
  const int64_t qn = c.batch * c.seq * c.qHeads * c.headDim;
  const int64_t kvn = c.batch * c.seq * c.kvHeads * c.headDim;
  const int64_t ln = c.batch * c.qHeads * c.seq;
  auto q = randomVector<float>(rng, qn, -2.0, 2.0);
  auto k = randomVector<float>(rng, kvn, -2.0, 2.0);
  auto v = randomVector<float>(rng, kvn);
  auto dout = randomVector<float>(rng, qn);
  const cpu::AttentionParams params = cpuParams(c);
  std::vector<float> outRef(qn), lseRef(ln), dqRef(qn), dkRef(kvn), dvRef(kvn);
  ASSERT_TRUE(cpu::attentionForward<float>(outRef.data(), lseRef.data(),
                                           q.data(), k.data(), v.data(),
                                           params));
  ASSERT_TRUE(cpu::attentionBackward<float>(
      dqRef.data(), dkRef.data(), dvRef.data(), dout.data(), q.data(), k.data(),
      v.data(), outRef.data(), lseRef.data(), params));

  auto shifted = [](const std::vector<float> &x) {
    std::vector<float> out(x.size() + 1, 0.f);
    std::copy(x.begin(), x.end(), out.begin() + 1);
    return out;
  };
  auto unshift = [](const std::vector<float> &x) {
    return std::vector<float>(x.begin() + 1, x.end());
  };
  const AttentionShape shape = gpuShape(c);
  DeviceBuffer<float> dQ(qn + 1), dK(kvn + 1), dV(kvn + 1), dOut(qn + 1),
      dLse(ln), dDout(qn + 1), dDq(qn + 1), dDk(kvn + 1), dDv(kvn + 1);
  dQ.upload(shifted(q));
  dK.upload(shifted(k));
  dV.upload(shifted(v));
  dDout.upload(shifted(dout));
  ASSERT_TRUE(launchAttentionFwd(dOut.get() + 1, dLse.get(), dQ.get() + 1,
                                 dK.get() + 1, dV.get() + 1, shape, 0));
  EXPECT_LT(relError(unshift(dOut.download()), outRef), kFwdTol);
  EXPECT_LT(relError(dLse.download(), lseRef), kFwdTol);
  const size_t scratchBytes = attentionBwdScratchBytes(shape);
  DeviceBuffer<char> scratch(scratchBytes);
  ASSERT_TRUE(launchAttentionBwd(dDq.get() + 1, dDk.get() + 1, dDv.get() + 1,
                                 dDout.get() + 1, dQ.get() + 1, dK.get() + 1,
                                 dV.get() + 1, dOut.get() + 1, dLse.get(),
                                 shape, scratch.get(), scratchBytes, 0));
  EXPECT_LT(relError(unshift(dDq.download()), dqRef), kBwdTol);
  EXPECT_LT(relError(unshift(dDk.download()), dkRef), kBwdTol);
  EXPECT_LT(relError(unshift(dDv.download()), dvRef), kBwdTol);
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
