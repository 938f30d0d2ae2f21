//===- AttentionTest.cpp - tests of the CUDA attention family -------------===//
//
// Part of mlt. Checks the CUDA flash attention forward and backward against
// the CPU kernels of lib/Runtime/cpu on the same random inputs.
// f32 kernels: head dims 16, 64 and 128 (and 6 and 48, which use the next
// bucket and, for 6, the scalar tile loads), sequences that are not
// multiples of any tile, multi-head (hq/hkv = 1), grouped (2) and
// multi-query (4) layouts, causal and full; bit-reproducibility of the
// backward, and the argument errors.
// bf16 tensor-core kernels: head dims 64 and 128, the CPU kernels run on the
// bf16-rounded inputs as reference, normwise (2-norm) errors within bf16
// rounding; every output poisoned with NaN before the run; sequences of 1,
// 100 and several tiles, MHA, GQA and MQA, causal and full, batch > 1, the
// dk/dv kernel with its group split over blocks or not; bit-reproducibility
// and the argument errors.
// The fused amax outputs: the same bits as the amax of the stored outputs.
// Context parallelism's ring exchange: every step of every rank (one rank's
// block of keys, queries of a chunk that see none of them out 0 and lse
// -inf) on the bf16 blocks of attention_blocks.h and on the f32 kernels,
// folded by launchAttentionMerge into the rank's attention over the whole
// sequence; and launchAttentionMerge alone (f32 and bf16) against the CPU,
// sides at -inf included.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention.h"
#include "CudaTestUtil.h"

#include "kernels/attention_blocks.h"

#include "kernels/fp8.h"
#include "kernels/rope.h"
#include "mlt/Runtime/cpu/Attention.h"
#include "mlt/Runtime/cpu/Fp8.h"
#include "mlt/Runtime/cpu/Rope.h"
#include "mlt/Runtime/cpu/VectorOps.h"
#include "mlt/Runtime/exec/Backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
  /// The scores' scale; 0 stands for 1 / sqrt(headDim).
  double scale = 0.0;

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
  if (c.scale != 0.0)
    os << " scale " << c.scale;
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
  p.scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(double(c.headDim));
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

/// A context-parallel rank's attention shape: cp `ranks`, chunks of `chunk`
/// tokens, rank `rank`'s block of queries against the whole sequence's keys
/// (SequenceOrder.h), causal.
struct CpCase {
  int64_t ranks, chunk, batch, qHeads, kvHeads, headDim;

  std::string describe(int64_t rank) const {
    return "cp " + std::to_string(ranks) + " rank " + std::to_string(rank) +
           " chunk " + std::to_string(chunk) + " head_dim " +
           std::to_string(headDim);
  }
  cpu::AttentionParams params(int64_t rank) const {
    cpu::AttentionParams p;
    p.batch = batch;
    p.seq = 2 * chunk;
    p.kvSeq = p.seq * ranks;
    p.qHeads = qHeads;
    p.kvHeads = kvHeads;
    p.headDim = headDim;
    p.causal = true;
    p.scale = 1.0 / std::sqrt(double(headDim));
    p.queries = rt::SequencePositions::contextBlock(p.seq, rank, ranks);
    p.keys = rt::SequencePositions::contextWhole(p.seq, ranks);
    return p;
  }
  /// After the all-to-all exchange (--cp-comm a2a): the whole sequence's
  /// queries and keys, both in the load-balanced order.
  cpu::AttentionParams wholeParams() const {
    cpu::AttentionParams p = params(0);
    p.seq = p.kvSeq;
    p.queries = p.keys;
    return p;
  }
};

// A context-parallel rank's attention (SequenceOrder.h): its block of the
// queries in the load-balanced order against the whole sequence's keys in
// that order, causal by position, on the f32 kernels, against the CPU
// kernels (which visit keys by position); every rank of cp 2 and 3, chunks
// that are and are not multiples of the tiles, GQA and MQA, batch 2.
TEST(CudaAttentionTest, ContextParallelBlocksMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(607);
  for (const CpCase &c : {CpCase{2, 48, 2, 4, 2, 64}, CpCase{3, 16, 1, 4, 1, 128},
                          CpCase{2, 37, 1, 2, 2, 32}, CpCase{3, 64, 1, 6, 2, 64}})
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      SCOPED_TRACE(c.describe(rank));
      const cpu::AttentionParams p = c.params(rank);
      const int64_t qn = p.batch * p.seq * p.qHeads * p.headDim;
      const int64_t kvn = p.batch * p.kvSeq * p.kvHeads * p.headDim;
      const int64_t ln = p.batch * p.qHeads * p.seq;
      const std::vector<float> q = randomVector<float>(rng, qn, -2.0, 2.0),
                               k = randomVector<float>(rng, kvn, -2.0, 2.0),
                               v = randomVector<float>(rng, kvn),
                               dout = randomVector<float>(rng, qn);
      std::vector<float> out(qn), lse(ln), dq(qn), dk(kvn), dv(kvn);
      ASSERT_TRUE(cpu::attentionForward<float>(out.data(), lse.data(), q.data(),
                                               k.data(), v.data(), p));
      ASSERT_TRUE(cpu::attentionBackward<float>(
          dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
          v.data(), out.data(), lse.data(), p));

      DeviceBuffer<float> dQ(qn), dK(kvn), dV(kvn), dOut(qn), dLse(ln),
          dDout(qn), dDq(qn), dDk(kvn), dDv(kvn);
      dQ.upload(q);
      dK.upload(k);
      dV.upload(v);
      dDout.upload(dout);
      ASSERT_TRUE(launchAttentionFwd(dOut.get(), dLse.get(), dQ.get(),
                                     dK.get(), dV.get(), p, 0));
      EXPECT_LT(relError(dOut.download(), out), kFwdTol);
      EXPECT_LT(relError(dLse.download(), lse), kFwdTol);
      dOut.upload(out);
      dLse.upload(lse);
      const size_t scratchBytes = attentionBwdScratchBytes(p);
      DeviceBuffer<char> scratch(scratchBytes);
      ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(),
                                     dDout.get(), dQ.get(), dK.get(), dV.get(),
                                     dOut.get(), dLse.get(), p, scratch.get(),
                                     scratchBytes, 0));
      EXPECT_LT(relError(dDq.download(), dq), kBwdTol);
      EXPECT_LT(relError(dDk.download(), dk), kBwdTol);
      EXPECT_LT(relError(dDv.download(), dv), kBwdTol);
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
  Status heads =
      launchAttentionFwd(d.get(), d.get(), d.get(), d.get(), d.get(), shape, 0);
  ASSERT_FALSE(heads);
  EXPECT_NE(heads.message().find("not a multiple"), std::string::npos)
      << heads.message();
  shape.qHeads = 2;
  shape.headDim = 256;
  Status dim =
      launchAttentionFwd(d.get(), d.get(), d.get(), d.get(), d.get(), shape, 0);
  ASSERT_FALSE(dim);
  EXPECT_NE(dim.message().find("head_dim 256"), std::string::npos)
      << dim.message();
  shape.headDim = 8;
  Status scratch =
      launchAttentionBwd(d.get(), d.get(), d.get(), d.get(), d.get(), d.get(),
                         d.get(), d.get(), d.get(), shape, nullptr, 0, 0);
  ASSERT_FALSE(scratch);
  EXPECT_NE(scratch.message().find("scratch"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// bf16 tensor-core kernels
//===----------------------------------------------------------------------===//

/// Normwise tolerances of the bf16 kernels against the CPU kernels on the
/// same bf16 inputs. out and the gradients are rounded to bf16 once (2^-9
/// relative) and the products round p and ds to bf16 (the tensor-core
/// operands), which adds a few 2^-9 of noise that partly averages out:
/// expected errors are 2e-3 to 5e-3. lse is f32 from f32 dot products of
/// exact bf16 products, so it stays near f32 rounding.
constexpr double kBf16Tol = 1e-2;
constexpr double kBf16LseTol = 1e-5;

/// ||actual - expected||_2 / ||expected||_2, or infinity if `actual` has a
/// non-finite element (a NaN poison that was never overwritten).
double normError(const std::vector<float> &actual,
                 const std::vector<float> &expected) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!std::isfinite(actual[i]))
      return INFINITY;
    const double d = double(actual[i]) - double(expected[i]);
    diff += d * d;
    ref += double(expected[i]) * double(expected[i]);
  }
  return ref > 0.0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

/// bf16 bits of `x` (rounded to nearest even), and `x` replaced by the
/// values those bits hold.
std::vector<uint16_t> roundToBf16(std::vector<float> &x) {
  std::vector<uint16_t> bits(x.size());
  cpu::castFloatToBF16(bits.data(), x.data(), int64_t(x.size()));
  cpu::castBF16ToFloat(x.data(), bits.data(), int64_t(x.size()));
  return bits;
}
std::vector<float> widen(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  cpu::castBF16ToFloat(out.data(), bits.data(), int64_t(bits.size()));
  return out;
}
__nv_bfloat16 *bf(uint16_t *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }

/// Fills a device buffer with NaN (all bits set: a NaN in bf16 and f32).
template <typename T> void poison(DeviceBuffer<T> &buffer) {
  ASSERT_EQ(cudaMemset(buffer.get(), 0xFF, buffer.count * sizeof(T)),
            cudaSuccess);
}

constexpr Case kBf16Cases[] = {
    {2, 100, 8, 2, 64, true},       // GQA, seq not a multiple of a tile
    {2, 100, 8, 2, 64, false},      //
    {1, 1, 4, 4, 64, true},         // one position, MHA
    {2, 1, 4, 2, 128, false},       //
    {1, 100, 4, 4, 128, true},      // MHA
    {2, 77, 8, 2, 128, false},      //
    {1, 300, 8, 1, 64, true},       // MQA, several tiles, dk/dv over 8 parts
    {2, 256, 4, 4, 128, true},      // whole tiles, several of them
    {1, 200, 4, 1, 128, false},     // MQA, dk/dv over 4 parts
    {2, 20, 2048, 256, 64, false},  // dk/dv over 4 parts of 2 heads
    {1, 70, 2048, 1024, 64, true},  // dk/dv unsplit, 2 heads per block
    {1, 130, 4, 2, 64, true, -0.3}, // a negative scale (q negated)
};

/// One case's bf16 inputs and the CPU kernels' results on them.
struct Bf16Reference {
  std::vector<uint16_t> q, k, v, dout, out; // bf16 bits; out from the CPU
  std::vector<float> refOut, lse, dq, dk, dv;
};

void cpuBf16Reference(const Case &c, std::mt19937 &rng, Bf16Reference &r) {
  const int64_t qn = c.qSize(), kvn = c.kvSize(), ln = c.lseSize();
  std::vector<float> q = randomVector<float>(rng, qn, -2.0, 2.0);
  std::vector<float> k = randomVector<float>(rng, kvn, -2.0, 2.0);
  std::vector<float> v = randomVector<float>(rng, kvn);
  std::vector<float> dout = randomVector<float>(rng, qn);
  r.q = roundToBf16(q);
  r.k = roundToBf16(k);
  r.v = roundToBf16(v);
  r.dout = roundToBf16(dout);
  const cpu::AttentionParams p = params(c);
  r.refOut.assign(qn, 0.f);
  r.lse.assign(ln, 0.f);
  ASSERT_TRUE(cpu::attentionForward<float>(r.refOut.data(), r.lse.data(),
                                           q.data(), k.data(), v.data(), p));
  // The backward's out is the bf16 tensor the GPU reads.
  std::vector<float> out = r.refOut;
  r.out = roundToBf16(out);
  r.dq.assign(qn, 0.f);
  r.dk.assign(kvn, 0.f);
  r.dv.assign(kvn, 0.f);
  ASSERT_TRUE(cpu::attentionBackward<float>(
      r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(),
      v.data(), out.data(), r.lse.data(), p));
}

/// One bf16 case on the device: q, k, v and dout uploaded from its
/// Bf16Reference, the outputs (out, lse, dq, dk, dv) and the backward's
/// scratch allocated, and the launches over them.
struct Bf16Buffers {
  Bf16Buffers(const Case &c, const Bf16Reference &ref)
      : shape(params(c)), q(c.qSize()), k(c.kvSize()), v(c.kvSize()),
        out(c.qSize()), dout(c.qSize()), dq(c.qSize()), dk(c.kvSize()),
        dv(c.kvSize()), lse(c.lseSize()),
        scratchBytes(attentionBwdScratchBytes(shape)), scratch(scratchBytes) {
    q.upload(ref.q);
    k.upload(ref.k);
    v.upload(ref.v);
    dout.upload(ref.dout);
  }
  /// out and lse from q, k, v.
  Status forward(AttentionAmax *amax = nullptr) {
    return launchAttentionFwd(bf(out.get()), lse.get(), bf(q.get()),
                              bf(k.get()), bf(v.get()), shape, 0, amax);
  }
  /// dq, dk, dv from dout, q, k, v, out and lse as they stand.
  Status backward(const AttentionRope *rope = nullptr,
                  AttentionAmax *amax = nullptr) {
    return launchAttentionBwd(bf(dq.get()), bf(dk.get()), bf(dv.get()),
                              bf(dout.get()), bf(q.get()), bf(k.get()),
                              bf(v.get()), bf(out.get()), lse.get(), shape,
                              scratch.get(), scratchBytes, 0, rope, amax);
  }
  /// The backward's outputs filled with NaN (call through
  /// ASSERT_NO_FATAL_FAILURE).
  void poisonGradients() {
    poison(dq);
    poison(dk);
    poison(dv);
  }

  const AttentionShape shape;
  DeviceBuffer<uint16_t> q, k, v, out, dout, dq, dk, dv;
  DeviceBuffer<float> lse;
  const size_t scratchBytes;
  DeviceBuffer<char> scratch;
};

// A context-parallel rank's attention in bf16, blockwise on the tensor-core
// kernels (attention_blocks.h): each pair of a query chunk and a key chunk
// one launch, the forward's outputs merged by their log-sum-exp, the
// backward's gradients summed; against the CPU kernels on the same
// bf16-rounded inputs, every output poisoned first; every rank of cp 2 and
// 3, and the whole sequence's queries of the all-to-all exchange (2 x cp
// chunks of them), head dims 64 and 128, GQA, batch 2, chunks that are not
// multiples of a tile.
TEST(CudaAttentionTest, ContextParallelBf16BlocksMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(608);
  for (const CpCase &c : {CpCase{2, 64, 2, 8, 2, 64}, CpCase{3, 40, 1, 4, 2, 128},
                          CpCase{2, 100, 1, 4, 4, 64}})
    for (int64_t rank = -1; rank < c.ranks; ++rank) {
      SCOPED_TRACE(rank < 0 ? c.describe(0) + " (whole queries)"
                            : c.describe(rank));
      const cpu::AttentionParams p = rank < 0 ? c.wholeParams() : c.params(rank);
      ASSERT_TRUE(isContextBlockShape(p));
      const int64_t qn = p.batch * p.seq * p.qHeads * p.headDim;
      const int64_t kvn = p.batch * p.kvSeq * p.kvHeads * p.headDim;
      const int64_t ln = p.batch * p.qHeads * p.seq;
      std::vector<float> q = randomVector<float>(rng, qn, -2.0, 2.0),
                         k = randomVector<float>(rng, kvn, -2.0, 2.0),
                         v = randomVector<float>(rng, kvn),
                         dout = randomVector<float>(rng, qn);
      const std::vector<uint16_t> qb = roundToBf16(q), kb = roundToBf16(k),
                                  vb = roundToBf16(v), doutb = roundToBf16(dout);
      std::vector<float> out(qn), lse(ln), dq(qn), dk(kvn), dv(kvn);
      ASSERT_TRUE(cpu::attentionForward<float>(out.data(), lse.data(), q.data(),
                                               k.data(), v.data(), p));
      std::vector<float> outRounded = out;
      const std::vector<uint16_t> outb = roundToBf16(outRounded);
      ASSERT_TRUE(cpu::attentionBackward<float>(
          dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
          v.data(), outRounded.data(), lse.data(), p));

      DeviceBuffer<uint16_t> dQ(qn), dK(kvn), dV(kvn), dOut(qn), dDout(qn),
          dDq(qn), dDk(kvn), dDv(kvn);
      DeviceBuffer<float> dLse(ln);
      dQ.upload(qb);
      dK.upload(kb);
      dV.upload(vb);
      dDout.upload(doutb);
      ASSERT_NO_FATAL_FAILURE(poison(dOut));
      ASSERT_NO_FATAL_FAILURE(poison(dLse));
      const size_t fwdBytes = contextAttentionFwdScratchBytes(p);
      DeviceBuffer<char> fwdScratch(fwdBytes);
      ASSERT_TRUE(launchContextAttentionFwd(
          bf(dOut.get()), dLse.get(), bf(dQ.get()), bf(dK.get()), bf(dV.get()),
          p, fwdScratch.get(), fwdBytes, 0));
      EXPECT_LT(normError(widen(dOut.download()), out), kBf16Tol);
      EXPECT_LT(normError(dLse.download(), lse), kBf16LseTol);

      dOut.upload(outb);
      dLse.upload(lse);
      const size_t bwdBytes = contextAttentionBwdScratchBytes(p);
      DeviceBuffer<char> bwdScratch(bwdBytes);
      ASSERT_NO_FATAL_FAILURE(poison(dDq));
      ASSERT_NO_FATAL_FAILURE(poison(dDk));
      ASSERT_NO_FATAL_FAILURE(poison(dDv));
      ASSERT_TRUE(launchContextAttentionBwd(
          bf(dDq.get()), bf(dDk.get()), bf(dDv.get()), bf(dDout.get()),
          bf(dQ.get()), bf(dK.get()), bf(dV.get()), bf(dOut.get()),
          dLse.get(), p, bwdScratch.get(), bwdBytes, 0));
      EXPECT_LT(normError(widen(dDq.download()), dq), kBf16Tol);
      EXPECT_LT(normError(widen(dDk.download()), dk), kBf16Tol);
      EXPECT_LT(normError(widen(dDv.download()), dv), kBf16Tol);
    }
}

//===----------------------------------------------------------------------===//
// Context parallelism's ring exchange
//===----------------------------------------------------------------------===//

/// Ring step `step` of rank `rank` of `c` (--cp-comm ring): the rank's block
/// of queries against one rank's block of keys and values (kvSeq = seq), of
/// the rank `step` places before it, positions as attentionPositionsAt sets
/// them on context axis 0; checked against SequencePositions::contextBlock.
cpu::AttentionParams ringParams(const CpCase &c, int64_t rank, int64_t step) {
  cpu::AttentionParams p = c.params(rank);
  p.kvSeq = p.seq;
  p.ringStep = step;
  p = rt::attentionPositionsAt(p, 0, rt::AxisPosition{rank, c.ranks});
  const int64_t holder = (rank - step + c.ranks) % c.ranks;
  EXPECT_TRUE(p.queries ==
              rt::SequencePositions::contextBlock(p.seq, rank, c.ranks));
  EXPECT_TRUE(p.keys ==
              rt::SequencePositions::contextBlock(p.seq, holder, c.ranks));
  return p;
}

/// Rows [first, first + rows) of each batch entry of x [batch, total, width].
template <typename T>
std::vector<T> sliceRows(const std::vector<T> &x, int64_t batch, int64_t total,
                         int64_t first, int64_t rows, int64_t width) {
  std::vector<T> out;
  for (int64_t b = 0; b < batch; ++b)
    out.insert(out.end(), x.begin() + (b * total + first) * width,
               x.begin() + (b * total + first + rows) * width);
  return out;
}

/// `measure(actual, expected)` over the rows where `expected` (an lse) is
/// finite; infinity where a row at -inf in `expected` (a query that saw no
/// key) is not exactly -inf in `actual`, or where `actual` is not finite
/// elsewhere. `rowsAtMinusInf` counts the former.
template <typename Measure>
double lseError(const std::vector<float> &actual,
                const std::vector<float> &expected, Measure measure,
                int64_t *rowsAtMinusInf = nullptr) {
  std::vector<float> a, e;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected[i]) && expected[i] < 0) {
      if (!(std::isinf(actual[i]) && actual[i] < 0))
        return INFINITY;
      if (rowsAtMinusInf)
        ++*rowsAtMinusInf;
      continue;
    }
    if (!std::isfinite(actual[i]))
      return INFINITY;
    a.push_back(actual[i]);
    e.push_back(expected[i]);
  }
  return measure(a, e);
}
double lseRelError(const std::vector<float> &actual,
                   const std::vector<float> &expected,
                   int64_t *rowsAtMinusInf = nullptr) {
  return lseError(
      actual, expected,
      [](const std::vector<float> &a, const std::vector<float> &e) {
        return relError(a, e);
      },
      rowsAtMinusInf);
}
double lseNormError(const std::vector<float> &actual,
                    const std::vector<float> &expected,
                    int64_t *rowsAtMinusInf = nullptr) {
  return lseError(actual, expected, normError, rowsAtMinusInf);
}

/// A rank's inputs of a ring (its queries and output gradient, the whole
/// sequence's keys and values, bf16-rounded where `bf16`) and the CPU's
/// gathered attention of them (whole keys: c.params(rank)), whose out (bf16
/// rounded where `bf16`) and lse every ring step's backward reads.
struct RingReference {
  std::vector<float> q, k, v, dout, out, lse;
  std::vector<uint16_t> qb, kb, vb, doutb, outb; // bf16 bits, where bf16
};

void ringReference(const CpCase &c, int64_t rank, bool bf16, std::mt19937 &rng,
                   RingReference &r) {
  const cpu::AttentionParams p = c.params(rank);
  const int64_t qn = p.batch * p.seq * p.qHeads * p.headDim;
  const int64_t kvn = p.batch * p.kvSeq * p.kvHeads * p.headDim;
  r.q = randomVector<float>(rng, qn, -2.0, 2.0);
  r.k = randomVector<float>(rng, kvn, -2.0, 2.0);
  r.v = randomVector<float>(rng, kvn);
  r.dout = randomVector<float>(rng, qn);
  if (bf16) {
    r.qb = roundToBf16(r.q);
    r.kb = roundToBf16(r.k);
    r.vb = roundToBf16(r.v);
    r.doutb = roundToBf16(r.dout);
  }
  r.out.assign(qn, 0.f);
  r.lse.assign(p.batch * p.qHeads * p.seq, 0.f);
  ASSERT_TRUE(cpu::attentionForward<float>(
      r.out.data(), r.lse.data(), r.q.data(), r.k.data(), r.v.data(), p));
  if (bf16) {
    std::vector<float> rounded = r.out;
    r.outb = roundToBf16(rounded);
  }
}

/// The rows with no key in ring step `step` of rank `rank`: chunk `rank`'s
/// queries (the block's first half) against a later rank's block, for each
/// (batch, head).
int64_t ringEmptyRows(const CpCase &c, int64_t rank, int64_t step) {
  const int64_t holder = (rank - step + c.ranks) % c.ranks;
  return holder > rank ? c.batch * c.qHeads * c.chunk : 0;
}

/// Checks that a ring step's output `got` [batch, S, heads, head_dim] is
/// exactly 0 in the first chunk of every batch entry, the rows that saw no
/// key (ringEmptyRows).
void expectFirstChunkZero(const std::vector<float> &got, const CpCase &c,
                          int64_t S) {
  const int64_t rowWidth = c.qHeads * c.headDim;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t e = 0; e < c.chunk * rowWidth; ++e)
      ASSERT_EQ(got[b * S * rowWidth + e], 0.0f)
          << "batch " << b << " element " << e;
}

// Context parallelism's ring exchange in bf16 on the blockwise tensor-core
// kernels (attention_blocks.h), every step of every rank of cp 2 and 3,
// head dims 64 and 128, GQA, MHA and MQA, batch 1 and 2, chunks that are
// not multiples of a tile: step s's keys and values are the block of the
// rank s places before (kvSeq = seq, isContextBlockShape). Each step's
// forward against the CPU kernels on the same bf16 inputs and positions
// (the first chunk's queries against a later rank's block: out 0 and lse
// -inf, exactly); the steps folded in place by launchAttentionMerge<bf16>
// give the CPU's attention of the rank's queries over the whole sequence;
// each step's backward, from that attention's out and lse, against the
// CPU's backward of the step. Every output poisoned first.
TEST(CudaAttentionTest, RingStepsBf16BlocksMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(614);
  for (const CpCase &c :
       {CpCase{2, 64, 2, 8, 2, 64}, CpCase{3, 40, 1, 4, 2, 128},
        CpCase{2, 100, 1, 4, 4, 128}, CpCase{3, 24, 2, 4, 1, 64}})
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      SCOPED_TRACE(c.describe(rank));
      RingReference ref;
      ASSERT_NO_FATAL_FAILURE(ringReference(c, rank, true, rng, ref));
      const int64_t S = 2 * c.chunk, G = c.ranks;
      const int64_t qn = c.batch * S * c.qHeads * c.headDim;
      const int64_t kvn = c.batch * S * c.kvHeads * c.headDim;
      const int64_t ln = c.batch * c.qHeads * S;
      const int64_t kvWidth = c.kvHeads * c.headDim;
      DeviceBuffer<uint16_t> dQ(qn), dDout(qn), dWholeOut(qn), dK(kvn), dV(kvn),
          dOut(qn), dMerged(qn), dDq(qn), dDk(kvn), dDv(kvn);
      DeviceBuffer<float> dWholeLse(ln), dLse(ln), dMergedLse(ln);
      dQ.upload(ref.qb);
      dDout.upload(ref.doutb);
      dWholeOut.upload(ref.outb);
      dWholeLse.upload(ref.lse);
      for (int64_t step = 0; step < G; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const cpu::AttentionParams p = ringParams(c, rank, step);
        ASSERT_TRUE(isContextBlockShape(p));
        const int64_t holder = (rank - step + G) % G;
        const std::vector<float> k =
            sliceRows(ref.k, c.batch, G * S, holder * S, S, kvWidth);
        const std::vector<float> v =
            sliceRows(ref.v, c.batch, G * S, holder * S, S, kvWidth);
        dK.upload(sliceRows(ref.kb, c.batch, G * S, holder * S, S, kvWidth));
        dV.upload(sliceRows(ref.vb, c.batch, G * S, holder * S, S, kvWidth));

        std::vector<float> out(qn), lse(ln), dq(qn), dk(kvn), dv(kvn);
        ASSERT_TRUE(cpu::attentionForward<float>(
            out.data(), lse.data(), ref.q.data(), k.data(), v.data(), p));
        ASSERT_NO_FATAL_FAILURE(poison(dOut));
        ASSERT_NO_FATAL_FAILURE(poison(dLse));
        const size_t fwdBytes = contextAttentionFwdScratchBytes(p);
        DeviceBuffer<char> fwdScratch(fwdBytes);
        ASSERT_TRUE(launchContextAttentionFwd(
            bf(dOut.get()), dLse.get(), bf(dQ.get()), bf(dK.get()),
            bf(dV.get()), p, fwdScratch.get(), fwdBytes, 0));
        EXPECT_LT(normError(widen(dOut.download()), out), kBf16Tol);
        int64_t empty = 0;
        EXPECT_LT(lseNormError(dLse.download(), lse, &empty), kBf16LseTol);
        EXPECT_EQ(empty, ringEmptyRows(c, rank, step));
        if (empty > 0) // those rows' outputs are exactly 0
          ASSERT_NO_FATAL_FAILURE(
              expectFirstChunkZero(widen(dOut.download()), c, S));

        // Fold the step into the rank's attention, in place.
        if (step == 0) {
          ASSERT_EQ(cudaMemcpy(dMerged.get(), dOut.get(), qn * 2,
                               cudaMemcpyDeviceToDevice),
                    cudaSuccess);
          ASSERT_EQ(cudaMemcpy(dMergedLse.get(), dLse.get(), ln * 4,
                               cudaMemcpyDeviceToDevice),
                    cudaSuccess);
        } else {
          ASSERT_TRUE(launchAttentionMerge<__nv_bfloat16>(
              bf(dMerged.get()), dMergedLse.get(), bf(dMerged.get()),
              dMergedLse.get(), bf(dOut.get()), dLse.get(), c.batch, S,
              c.qHeads, c.headDim, 0));
        }

        // The backward from the whole attention's out (bf16) and lse.
        std::vector<float> wholeOut = widen(ref.outb);
        ASSERT_TRUE(cpu::attentionBackward<float>(
            dq.data(), dk.data(), dv.data(), ref.dout.data(), ref.q.data(),
            k.data(), v.data(), wholeOut.data(), ref.lse.data(), p));
        const size_t bwdBytes = contextAttentionBwdScratchBytes(p);
        DeviceBuffer<char> bwdScratch(bwdBytes);
        ASSERT_NO_FATAL_FAILURE(poison(dDq));
        ASSERT_NO_FATAL_FAILURE(poison(dDk));
        ASSERT_NO_FATAL_FAILURE(poison(dDv));
        ASSERT_TRUE(launchContextAttentionBwd(
            bf(dDq.get()), bf(dDk.get()), bf(dDv.get()), bf(dDout.get()),
            bf(dQ.get()), bf(dK.get()), bf(dV.get()), bf(dWholeOut.get()),
            dWholeLse.get(), p, bwdScratch.get(), bwdBytes, 0));
        EXPECT_LT(normError(widen(dDq.download()), dq), kBf16Tol);
        EXPECT_LT(normError(widen(dDk.download()), dk), kBf16Tol);
        EXPECT_LT(normError(widen(dDv.download()), dv), kBf16Tol);
      }
      // The merged steps: the attention over the whole sequence.
      EXPECT_LT(normError(widen(dMerged.download()), ref.out), kBf16Tol);
      EXPECT_LT(normError(dMergedLse.download(), ref.lse), kBf16LseTol);
    }
}

// The same ring steps on the f32 kernels (launchAttentionFwd/Bwd on float,
// which take any positions): every step of every rank of cp 2 and 3, head
// dims 6, 32, 64 and 128, chunks that are and are not multiples of a tile,
// against the CPU kernels (rows with no key: out 0, lse -inf exactly); the
// steps folded in place by launchAttentionMerge<float> against the CPU's
// attention over the whole sequence; each step's backward from that
// attention's out and lse.
TEST(CudaAttentionTest, RingStepsF32MatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(615);
  for (const CpCase &c :
       {CpCase{2, 48, 2, 4, 2, 64}, CpCase{3, 16, 1, 4, 1, 128},
        CpCase{2, 37, 1, 2, 2, 32}, CpCase{3, 5, 2, 6, 2, 6}})
    for (int64_t rank = 0; rank < c.ranks; ++rank) {
      SCOPED_TRACE(c.describe(rank));
      RingReference ref;
      ASSERT_NO_FATAL_FAILURE(ringReference(c, rank, false, rng, ref));
      const int64_t S = 2 * c.chunk, G = c.ranks;
      const int64_t qn = c.batch * S * c.qHeads * c.headDim;
      const int64_t kvn = c.batch * S * c.kvHeads * c.headDim;
      const int64_t ln = c.batch * c.qHeads * S;
      const int64_t kvWidth = c.kvHeads * c.headDim;
      DeviceBuffer<float> dQ(qn), dDout(qn), dWholeOut(qn), dWholeLse(ln),
          dK(kvn), dV(kvn), dOut(qn), dLse(ln), dMerged(qn), dMergedLse(ln),
          dDq(qn), dDk(kvn), dDv(kvn);
      dQ.upload(ref.q);
      dDout.upload(ref.dout);
      dWholeOut.upload(ref.out);
      dWholeLse.upload(ref.lse);
      for (int64_t step = 0; step < G; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const cpu::AttentionParams p = ringParams(c, rank, step);
        const int64_t holder = (rank - step + G) % G;
        const std::vector<float> k =
            sliceRows(ref.k, c.batch, G * S, holder * S, S, kvWidth);
        const std::vector<float> v =
            sliceRows(ref.v, c.batch, G * S, holder * S, S, kvWidth);
        dK.upload(k);
        dV.upload(v);
        std::vector<float> out(qn), lse(ln), dq(qn), dk(kvn), dv(kvn);
        ASSERT_TRUE(cpu::attentionForward<float>(
            out.data(), lse.data(), ref.q.data(), k.data(), v.data(), p));
        ASSERT_NO_FATAL_FAILURE(poison(dOut));
        ASSERT_NO_FATAL_FAILURE(poison(dLse));
        ASSERT_TRUE(launchAttentionFwd(dOut.get(), dLse.get(), dQ.get(),
                                       dK.get(), dV.get(), p, 0));
        const std::vector<float> got = dOut.download();
        EXPECT_LT(relError(got, out), kFwdTol);
        int64_t empty = 0;
        EXPECT_LT(lseRelError(dLse.download(), lse, &empty), kFwdTol);
        EXPECT_EQ(empty, ringEmptyRows(c, rank, step));
        if (empty > 0)
          ASSERT_NO_FATAL_FAILURE(expectFirstChunkZero(got, c, S));

        if (step == 0) {
          ASSERT_EQ(cudaMemcpy(dMerged.get(), dOut.get(), qn * 4,
                               cudaMemcpyDeviceToDevice),
                    cudaSuccess);
          ASSERT_EQ(cudaMemcpy(dMergedLse.get(), dLse.get(), ln * 4,
                               cudaMemcpyDeviceToDevice),
                    cudaSuccess);
        } else {
          ASSERT_TRUE(launchAttentionMerge<float>(
              dMerged.get(), dMergedLse.get(), dMerged.get(), dMergedLse.get(),
              dOut.get(), dLse.get(), c.batch, S, c.qHeads, c.headDim, 0));
        }

        ASSERT_TRUE(cpu::attentionBackward<float>(
            dq.data(), dk.data(), dv.data(), ref.dout.data(), ref.q.data(),
            k.data(), v.data(), ref.out.data(), ref.lse.data(), p));
        const size_t scratchBytes = attentionBwdScratchBytes(p);
        DeviceBuffer<char> scratch(scratchBytes);
        ASSERT_NO_FATAL_FAILURE(poison(dDq));
        ASSERT_NO_FATAL_FAILURE(poison(dDk));
        ASSERT_NO_FATAL_FAILURE(poison(dDv));
        ASSERT_TRUE(launchAttentionBwd(
            dDq.get(), dDk.get(), dDv.get(), dDout.get(), dQ.get(), dK.get(),
            dV.get(), dWholeOut.get(), dWholeLse.get(), p, scratch.get(),
            scratchBytes, 0));
        EXPECT_LT(relError(dDq.download(), dq), kBwdTol);
        EXPECT_LT(relError(dDk.download(), dk), kBwdTol);
        EXPECT_LT(relError(dDv.download(), dv), kBwdTol);
      }
      EXPECT_LT(relError(dMerged.download(), ref.out), kFwdTol);
      EXPECT_LT(lseRelError(dMergedLse.download(), ref.lse), kFwdTol);
    }
}

// launchAttentionMerge (f32 and bf16 outputs, f32 lse) against
// cpu::attentionMerge on the same inputs (bf16 widened), rows of four kinds:
// both sides finite, lse_b at -inf, lse_a at -inf (the other side's out and
// lse exactly, bit for bit), both at -inf (out 0, lse -inf); out of place,
// and in place over out_a and lse_a with the same bits; every output
// poisoned first.
TEST(CudaAttentionTest, MergeMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(616);
  for (const int64_t headDim : {int64_t(64), int64_t(6)}) {
    const int64_t B = 2, S = 37, H = 4, D = headDim;
    const int64_t n = B * S * H * D, rows = B * H * S;
    SCOPED_TRACE("head_dim " + std::to_string(D));
    std::vector<float> outA = randomVector<float>(rng, n, -2.0, 2.0);
    std::vector<float> outB = randomVector<float>(rng, n, -2.0, 2.0);
    std::vector<float> lseA = randomVector<float>(rng, rows, -20.0, 20.0);
    std::vector<float> lseB = randomVector<float>(rng, rows, -20.0, 20.0);
    std::vector<int> kind(rows);
    for (int64_t r = 0; r < rows; ++r) {
      kind[r] = r % 4 == 0 ? 0 : int(rng() % 4);
      if (kind[r] & 1)
        lseB[r] = -INFINITY;
      if (kind[r] & 2)
        lseA[r] = -INFINITY;
    }
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(bf16 ? "bf16" : "f32");
      std::vector<float> a = outA, b = outB;
      std::vector<uint16_t> ab, bb;
      if (bf16) {
        ab = roundToBf16(a);
        bb = roundToBf16(b);
      }
      std::vector<float> expected(n), expectedLse(rows);
      cpu::attentionMerge<float>(expected.data(), expectedLse.data(), a.data(),
                                 lseA.data(), b.data(), lseB.data(), B, S, H,
                                 D);
      DeviceBuffer<float> dLseA(rows), dLseB(rows), dLse(rows);
      dLseA.upload(lseA);
      dLseB.upload(lseB);
      ASSERT_NO_FATAL_FAILURE(poison(dLse));
      std::vector<float> got, gotInPlace;
      std::vector<float> gotLse, gotLseInPlace;
      if (bf16) {
        DeviceBuffer<uint16_t> dA(n), dB(n), dOut(n);
        dA.upload(ab);
        dB.upload(bb);
        ASSERT_NO_FATAL_FAILURE(poison(dOut));
        ASSERT_TRUE(launchAttentionMerge<__nv_bfloat16>(
            bf(dOut.get()), dLse.get(), bf(dA.get()), dLseA.get(), bf(dB.get()),
            dLseB.get(), B, S, H, D, 0));
        got = widen(dOut.download());
        gotLse = dLse.download();
        ASSERT_TRUE(launchAttentionMerge<__nv_bfloat16>(
            bf(dA.get()), dLseA.get(), bf(dA.get()), dLseA.get(), bf(dB.get()),
            dLseB.get(), B, S, H, D, 0));
        gotInPlace = widen(dA.download());
        gotLseInPlace = dLseA.download();
      } else {
        DeviceBuffer<float> dA(n), dB(n), dOut(n);
        dA.upload(a);
        dB.upload(b);
        ASSERT_NO_FATAL_FAILURE(poison(dOut));
        ASSERT_TRUE(launchAttentionMerge<float>(dOut.get(), dLse.get(),
                                                dA.get(), dLseA.get(), dB.get(),
                                                dLseB.get(), B, S, H, D, 0));
        got = dOut.download();
        gotLse = dLse.download();
        ASSERT_TRUE(launchAttentionMerge<float>(dA.get(), dLseA.get(), dA.get(),
                                                dLseA.get(), dB.get(),
                                                dLseB.get(), B, S, H, D, 0));
        gotInPlace = dA.download();
        gotLseInPlace = dLseA.download();
      }
      // One rounding to bf16 of out, or f32 weights against the CPU's f64.
      EXPECT_LT(normError(got, expected), bf16 ? 4e-3 : 1e-6);
      EXPECT_LT(lseRelError(gotLse, expectedLse), 1e-6);
      int seen[4] = {0, 0, 0, 0};
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t i = 0; i < S; ++i)
          for (int64_t h = 0; h < H; ++h) {
            const int64_t stat = (bi * H + h) * S + i;
            const int64_t row = ((bi * S + i) * H + h) * D;
            ++seen[kind[stat]];
            if (kind[stat] == 0)
              continue;
            SCOPED_TRACE("row " + std::to_string(i) + " batch " +
                         std::to_string(bi) + " head " + std::to_string(h) +
                         " kind " + std::to_string(kind[stat]));
            const std::vector<float> *side = kind[stat] == 1   ? &a
                                             : kind[stat] == 2 ? &b
                                                               : nullptr;
            const float sideLse = kind[stat] == 1   ? lseA[stat]
                                  : kind[stat] == 2 ? lseB[stat]
                                                    : -INFINITY;
            EXPECT_EQ(gotLse[stat], sideLse);
            for (int64_t d = 0; d < D; ++d)
              ASSERT_EQ(got[row + d], side ? (*side)[row + d] : 0.0f)
                  << "element " << d;
          }
      for (int k = 0; k < 4; ++k)
        EXPECT_GT(seen[k], 0) << "no row of kind " << k;
      EXPECT_EQ(gotInPlace, got);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(gotLseInPlace[r], gotLse[r]) << "lse " << r;
    }
  }
}

TEST(CudaAttentionTest, Bf16ForwardAndBackwardMatchCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(611);
  double worst[5] = {0, 0, 0, 0, 0};
  for (const Case &c : kBf16Cases) {
    SCOPED_TRACE(describe(c));
    Bf16Reference ref;
    ASSERT_NO_FATAL_FAILURE(cpuBf16Reference(c, rng, ref));
    Bf16Buffers d(c, ref);
    ASSERT_NO_FATAL_FAILURE(poison(d.out));
    ASSERT_NO_FATAL_FAILURE(poison(d.lse));
    ASSERT_TRUE(d.forward());
    const double outErr = normError(widen(d.out.download()), ref.refOut);
    const double lseErr = normError(d.lse.download(), ref.lse);
    EXPECT_LT(outErr, kBf16Tol);
    EXPECT_LT(lseErr, kBf16LseTol);

    // The backward from the CPU's out (rounded) and lse, checked alone.
    d.out.upload(ref.out);
    d.lse.upload(ref.lse);
    ASSERT_EQ(cudaMemset(d.scratch.get(), 0xFF, d.scratchBytes), cudaSuccess);
    ASSERT_NO_FATAL_FAILURE(d.poisonGradients());
    ASSERT_TRUE(d.backward());
    const std::vector<uint16_t> dq = d.dq.download(), dk = d.dk.download(),
                                dv = d.dv.download();
    const double dqErr = normError(widen(dq), ref.dq);
    const double dkErr = normError(widen(dk), ref.dk);
    const double dvErr = normError(widen(dv), ref.dv);
    EXPECT_LT(dqErr, kBf16Tol);
    EXPECT_LT(dkErr, kBf16Tol);
    EXPECT_LT(dvErr, kBf16Tol);
    const double errs[5] = {outErr, lseErr, dqErr, dkErr, dvErr};
    for (int i = 0; i < 5; ++i)
      worst[i] = std::max(worst[i], errs[i]);
    std::printf("[ bf16     ] %-58s out %.2e lse %.2e dq %.2e dk %.2e dv "
                "%.2e\n",
                describe(c).c_str(), outErr, lseErr, dqErr, dkErr, dvErr);

    // Bit-reproducible: no atomics, fixed summation orders.
    ASSERT_NO_FATAL_FAILURE(d.poisonGradients());
    ASSERT_TRUE(d.backward());
    EXPECT_EQ(d.dq.download(), dq);
    EXPECT_EQ(d.dk.download(), dk);
    EXPECT_EQ(d.dv.download(), dv);
  }
  std::printf("[ bf16     ] worst: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              worst[0], worst[1], worst[2], worst[3], worst[4]);
}

// The forward's own out and lse feed the backward (the training order), at a
// TinyLlama-like layout (32 query heads, 4 kv heads, head_dim 64) with a
// sequence that spans many tiles.
TEST(CudaAttentionTest, Bf16ForwardThenBackwardMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(612);
  const Case c{1, 333, 32, 4, 64, true};
  Bf16Reference ref;
  ASSERT_NO_FATAL_FAILURE(cpuBf16Reference(c, rng, ref));
  Bf16Buffers d(c, ref);
  ASSERT_NO_FATAL_FAILURE(poison(d.out));
  ASSERT_NO_FATAL_FAILURE(poison(d.lse));
  ASSERT_NO_FATAL_FAILURE(d.poisonGradients());
  ASSERT_TRUE(d.forward());
  ASSERT_TRUE(d.backward());
  EXPECT_LT(normError(widen(d.out.download()), ref.refOut), kBf16Tol);
  EXPECT_LT(normError(d.lse.download(), ref.lse), kBf16LseTol);
  EXPECT_LT(normError(widen(d.dq.download()), ref.dq), kBf16Tol);
  EXPECT_LT(normError(widen(d.dk.download()), ref.dk), kBf16Tol);
  EXPECT_LT(normError(widen(d.dv.download()), ref.dv), kBf16Tol);
}

// attention_bwd_rope: the backward with rope's inverse on dq and dk, in the
// wgmma kernels' epilogues on Hopper (elsewhere rope's launches after the
// backward), against the CPU's backward then rope's inverse in f32: GQA
// (dk from parts), MHA, MQA, both head dims, llama3 scaling, positions from
// an offset (large angles: the epilogue reduces them in f64). Also against
// the unfused GPU path (the backward, then launchRope on its bf16 dq and
// dk), which rounds twice; and bit-reproducible. f32: the same as the
// backward followed by launchRope, bit for bit (the same launches).
TEST(CudaAttentionTest, BackwardWithRopeMatchesCpu) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(613);
  rt::RopeScaling llama3;
  llama3.kind = rt::RopeScalingKind::Llama3;
  llama3.factor = 8.0;
  llama3.lowFreqFactor = 1.0;
  llama3.highFreqFactor = 4.0;
  llama3.originalMaxPositionEmbeddings = 64;
  struct RopeCase {
    Case c;
    double theta;
    int64_t offset;
    bool scaled;
  };
  const RopeCase cases[] = {
      {{2, 100, 8, 2, 64, true}, 1e4, 0, false},     // GQA, dk/dv in parts
      {{1, 300, 8, 1, 64, true}, 5e5, 0, true},      // MQA, llama3 scaling
      {{2, 77, 4, 4, 128, true}, 1e4, 5, false},     // MHA, head_dim 128
      {{1, 200, 4, 1, 128, false}, 1e4, 0, true},    // MQA, 4 parts, D 128
      {{1, 130, 4, 2, 64, true}, 1e4, 100000, false} // large angles
  };
  for (const RopeCase &rc : cases) {
    const Case &c = rc.c;
    SCOPED_TRACE(describe(c) + " offset " + std::to_string(rc.offset));
    Bf16Reference ref;
    ASSERT_NO_FATAL_FAILURE(cpuBf16Reference(c, rng, ref));
    AttentionRope rope;
    rope.theta = rc.theta;
    rope.positionOffset = rc.offset;
    if (rc.scaled)
      rope.scaling = llama3;
    std::vector<float> wantDq = ref.dq, wantDk = ref.dk;
    ASSERT_TRUE(cpu::ropeBackward<float>(wantDq.data(), ref.dq.data(), c.batch,
                                         c.seq, c.qHeads, c.headDim, rope.theta,
                                         rope.positionOffset, rope.scaling));
    ASSERT_TRUE(cpu::ropeBackward<float>(
        wantDk.data(), ref.dk.data(), c.batch, c.seq, c.kvHeads, c.headDim,
        rope.theta, rope.positionOffset, rope.scaling));

    Bf16Buffers d(c, ref);
    d.out.upload(ref.out);
    d.lse.upload(ref.lse);
    auto backward = [&](const AttentionRope *r) {
      poison(d.dq);
      poison(d.dk);
      poison(d.dv);
      return d.backward(r);
    };
    ASSERT_TRUE(backward(&rope));
    const std::vector<uint16_t> dq = d.dq.download(), dk = d.dk.download(),
                                dv = d.dv.download();
    const double dqErr = normError(widen(dq), wantDq);
    const double dkErr = normError(widen(dk), wantDk);
    EXPECT_LT(dqErr, kBf16Tol);
    EXPECT_LT(dkErr, kBf16Tol);
    EXPECT_LT(normError(widen(dv), ref.dv), kBf16Tol);
    // Bit-reproducible.
    ASSERT_TRUE(backward(&rope));
    EXPECT_EQ(d.dq.download(), dq);
    EXPECT_EQ(d.dk.download(), dk);
    EXPECT_EQ(d.dv.download(), dv);
    // The unfused path: the backward, then rope's launches on bf16.
    ASSERT_TRUE(backward(nullptr));
    ASSERT_TRUE(launchRope(bf(d.dq.get()), bf(d.dq.get()), c.batch, c.seq,
                           c.qHeads, c.headDim, true, rope.positionOffset,
                           rope.theta, rope.scaling, 0));
    ASSERT_TRUE(launchRope(bf(d.dk.get()), bf(d.dk.get()), c.batch, c.seq,
                           c.kvHeads, c.headDim, true, rope.positionOffset,
                           rope.theta, rope.scaling, 0));
    const double dqTwice = normError(widen(d.dq.download()), wantDq);
    const double dkTwice = normError(widen(d.dk.download()), wantDk);
    EXPECT_LT(dqTwice, kBf16Tol);
    EXPECT_LT(dkTwice, kBf16Tol);
    std::printf("[ rope     ] %-58s dq %.2e dk %.2e (unfused %.2e %.2e)\n",
                describe(c).c_str(), dqErr, dkErr, dqTwice, dkTwice);
  }

  // f32: the backward then rope's launches, the same bits.
  const Case c{2, 50, 4, 2, 64, true};
  const int64_t qn = c.qSize(), kvn = c.kvSize(), ln = c.lseSize();
  const AttentionShape shape = params(c);
  std::vector<float> host[6] = {
      randomVector<float>(rng, qn),  randomVector<float>(rng, qn),
      randomVector<float>(rng, kvn), randomVector<float>(rng, kvn),
      randomVector<float>(rng, qn),  randomVector<float>(rng, ln)};
  DeviceBuffer<float> dDout(qn), dQ(qn), dK(kvn), dV(kvn), dOut(qn), dLse(ln),
      dDq(qn), dDk(kvn), dDv(kvn);
  DeviceBuffer<float> *inputs[6] = {&dDout, &dQ, &dK, &dV, &dOut, &dLse};
  for (int i = 0; i < 6; ++i)
    inputs[i]->upload(host[i]);
  const size_t scratchBytes = attentionBwdScratchBytes(shape);
  DeviceBuffer<char> scratch(scratchBytes);
  AttentionRope rope;
  rope.theta = 1e4;
  rope.positionOffset = 3;
  ASSERT_TRUE(launchAttentionBwd(dDq.get(), dDk.get(), dDv.get(), dDout.get(),
                                 dQ.get(), dK.get(), dV.get(), dOut.get(),
                                 dLse.get(), shape, scratch.get(), scratchBytes,
                                 0, &rope));
  const std::vector<float> fusedDq = dDq.download(), fusedDk = dDk.download();
  ASSERT_TRUE(launchAttentionBwd(
      dDq.get(), dDk.get(), dDv.get(), dDout.get(), dQ.get(), dK.get(),
      dV.get(), dOut.get(), dLse.get(), shape, scratch.get(), scratchBytes, 0));
  ASSERT_TRUE(launchRope(dDq.get(), dDq.get(), c.batch, c.seq, c.qHeads,
                         c.headDim, true, 3, 1e4, {}, 0));
  ASSERT_TRUE(launchRope(dDk.get(), dDk.get(), c.batch, c.seq, c.kvHeads,
                         c.headDim, true, 3, 1e4, {}, 0));
  EXPECT_EQ(dDq.download(), fusedDq);
  EXPECT_EQ(dDk.download(), fusedDk);
}

// The fused amax outputs (attention_fwd's amax(out), attention_bwd(_rope)'s
// amax(dq), amax(dk), amax(dv)): the same bits as the amax of each tensor as
// stored (cpu::absMaxBF16 of the downloaded outputs), every amax poisoned
// with NaN first (the launch zeroes it), over the bf16 cases (rows past seq
// left out, dk/dv from parts reduced in the dk/dv kernel or by the
// reduction kernel, the non-warp-specialized forward of a negative scale),
// with and without rope's inverse on dq and dk; the outputs themselves the
// same bits as without the amaxes. The launcher takes every amax but dq's
// and dk's when rope's launches rotate them after the kernels (not on
// Hopper): those the test takes after the launch, as CudaDispatch does.
TEST(CudaAttentionTest, FusedAmaxIsTheStoredOutputsAmax) {
  MLT_REQUIRE_CUDA();
  std::mt19937 rng(614);
  for (const Case &c : kBf16Cases) {
    for (bool withRope : {false, true}) {
      SCOPED_TRACE(describe(c) + (withRope ? " rope" : ""));
      const int64_t qn = c.qSize(), kvn = c.kvSize();
      Bf16Reference ref;
      ASSERT_NO_FATAL_FAILURE(cpuBf16Reference(c, rng, ref));
      Bf16Buffers d(c, ref);
      DeviceBuffer<float> dAmax(4);
      ASSERT_NO_FATAL_FAILURE(poison(dAmax));
      AttentionAmax fwd;
      fwd.of[0] = dAmax.get();
      ASSERT_TRUE(d.forward(&fwd));
      EXPECT_TRUE(fwd.taken[0]);
      const std::vector<uint16_t> out = d.out.download();
      ASSERT_TRUE(d.forward());
      EXPECT_EQ(d.out.download(), out);

      AttentionRope rope;
      rope.theta = 1e4;
      rope.positionOffset = 3;
      const AttentionRope *rotation = withRope ? &rope : nullptr;
      AttentionAmax bwd;
      for (int i = 0; i < 3; ++i)
        bwd.of[i] = dAmax.get() + 1 + i;
      ASSERT_TRUE(d.backward(rotation, &bwd));
      const std::vector<uint16_t> dq = d.dq.download(), dk = d.dk.download(),
                                  dv = d.dv.download();
      EXPECT_TRUE(bwd.taken[2]);
      EXPECT_EQ(bwd.taken[0], bwd.taken[1]);
      if (!withRope)
        EXPECT_TRUE(bwd.taken[0]);
      if (!bwd.taken[0]) {
        ASSERT_TRUE(launchAbsMax(bwd.of[0], bf(d.dq.get()), qn, 0));
        ASSERT_TRUE(launchAbsMax(bwd.of[1], bf(d.dk.get()), kvn, 0));
      }
      const std::vector<float> amax = dAmax.download();
      const float want[4] = {cpu::absMaxBF16(out.data(), qn),
                             cpu::absMaxBF16(dq.data(), qn),
                             cpu::absMaxBF16(dk.data(), kvn),
                             cpu::absMaxBF16(dv.data(), kvn)};
      for (int i = 0; i < 4; ++i) {
        uint32_t got = 0, expected = 0;
        std::memcpy(&got, &amax[i], 4);
        std::memcpy(&expected, &want[i], 4);
        EXPECT_EQ(got, expected) << "amax " << i << ": " << amax[i]
                                 << " against " << want[i];
        // (one position: p = 1, so ds = p (dp - delta) = 0, and dq = dk = 0)
        if (c.seq > 1 || i == 0 || i == 3)
          EXPECT_GT(want[i], 0.f) << "amax " << i;
      }
      ASSERT_TRUE(d.backward(rotation));
      EXPECT_EQ(d.dq.download(), dq);
      EXPECT_EQ(d.dk.download(), dk);
      EXPECT_EQ(d.dv.download(), dv);
    }
  }
}

TEST(CudaAttentionTest, Bf16BadArgumentsAreErrors) {
  MLT_REQUIRE_CUDA();
  DeviceBuffer<uint16_t> d(1 << 16);
  DeviceBuffer<float> f(1024);
  __nv_bfloat16 *x = bf(d.get());
  AttentionShape shape;
  shape.batch = 1;
  shape.seq = 4;
  shape.qHeads = 2;
  shape.kvHeads = 2;
  shape.headDim = 96;
  Status dim = launchAttentionFwd(x, f.get(), x, x, x, shape, 0);
  ASSERT_FALSE(dim);
  EXPECT_NE(dim.message().find("head_dim 96"), std::string::npos)
      << dim.message();
  shape.headDim = 64;
  Status misaligned = launchAttentionFwd(x + 1, f.get(), x, x, x, shape, 0);
  ASSERT_FALSE(misaligned);
  EXPECT_NE(misaligned.message().find("16-byte aligned"), std::string::npos)
      << misaligned.message();
  shape.qHeads = 3;
  Status heads = launchAttentionFwd(x, f.get(), x, x, x, shape, 0);
  ASSERT_FALSE(heads);
  EXPECT_NE(heads.message().find("not a multiple"), std::string::npos)
      << heads.message();
  shape.qHeads = 2;
  const size_t needed = attentionBwdScratchBytes(shape);
  Status scratch = launchAttentionBwd(x, x, x, x, x, x, x, x, f.get(), shape,
                                      f.get(), needed - 1, 0);
  ASSERT_FALSE(scratch);
  EXPECT_NE(scratch.message().find("scratch"), std::string::npos)
      << scratch.message();
  Status bwdAlign = launchAttentionBwd(x, x, x, x, x, x, x, x + 3, f.get(),
                                       shape, f.get(), needed, 0);
  ASSERT_FALSE(bwdAlign);
  EXPECT_NE(bwdAlign.message().find("16-byte aligned"), std::string::npos)
      << bwdAlign.message();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

} // namespace
