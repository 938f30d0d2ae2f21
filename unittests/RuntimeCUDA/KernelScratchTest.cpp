//===- KernelScratchTest.cpp - the scratch a plan's kernels are sized for -===//
//
// Part of mlt. That the scratch the CUDA backend sizes from a plan
// (KernelScratch.h) is what the launches ask for: a context-parallel rank's
// blockwise attention at every coordinate of its axis (sized at one), and a
// ring step's at every coordinate and step, bf16
// attention at a head dim without tensor-core kernels (every bf16 operand
// copied in f32), a rank's area the most of its instructions; then, on a
// GPU, that a context whose scratch was reserved refuses a launch asking
// more, naming both sizes, rather than allocating mid-step. Random shapes,
// odd where the kernels allow.
//
//===----------------------------------------------------------------------===//

#include "CudaTestUtil.h"
#include "KernelScratch.h"

#include "kernels/attention_blocks.h"
#include "kernels/optimizer.h"
#include "kernels/rmsnorm.h"
#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/cuda/CudaBackend.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

namespace {

/// An attention instruction of `kernel` (attention_fwd's attributes, as
/// attention_bwd's) on context axis `axis` (-1: none).
InstructionDesc attention(Kernel kernel, int64_t batch, int64_t seq,
                          int64_t ranks, int64_t qHeads, int64_t kvHeads,
                          int64_t headDim, int64_t axis) {
  using A = attrs::AttentionFwd;
  InstructionDesc inst;
  inst.kernel = kernel;
  inst.ints.assign(A::ring_step + 1, 0); // ring 0, ring_step 0
  inst.ints[A::batch] = batch;
  inst.ints[A::seq] = seq;
  inst.ints[A::kv_seq] = seq * ranks;
  inst.ints[A::q_heads] = qHeads;
  inst.ints[A::kv_heads] = kvHeads;
  inst.ints[A::head_dim] = headDim;
  inst.ints[A::causal] = 1;
  inst.ints[A::axis] = axis;
  inst.floats.assign(A::scale + 1, 0.125);
  return inst;
}

/// attention_bwd's operands: dout, q, k, v, out, lse -> dq, dk, dv.
void backwardOperands(ElementType t, int64_t batch, int64_t seq,
                      int64_t kvSeq, int64_t qHeads, int64_t kvHeads,
                      int64_t headDim, std::vector<OperandSize> &in,
                      std::vector<OperandSize> &out) {
  const int64_t q = batch * seq * qHeads * headDim;
  const int64_t kv = batch * kvSeq * kvHeads * headDim;
  in = {{t, q}, {t, q}, {t, kv}, {t, kv}, {t, q},
        {ElementType::F32, batch * qHeads * seq}};
  out = {{t, q}, {t, kv}, {t, kv}};
}

TEST(KernelScratchTest, ContextBlocksAskTheSameAtEveryCoordinate) {
  std::mt19937 rng(20261130);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t ranks = 2 << (rng() % 3);            // 2, 4, 8
    const int64_t seq = 2 * (1 + int64_t(rng() % 700)); // even, any
    const int64_t kvHeads = 1 + rng() % 4;
    const int64_t qHeads = kvHeads * (1 + rng() % 4);
    const int64_t headDim = rng() % 2 ? 64 : 128;
    const std::vector<MeshAxis> mesh = {{"dp", 3}, {"cp", int(ranks)}};
    std::vector<OperandSize> in, out;
    backwardOperands(ElementType::BF16, 1, seq, seq * ranks, qHeads, kvHeads,
                     headDim, in, out);
    for (Kernel kernel : {Kernel::AttentionFwd, Kernel::AttentionBwd}) {
      const InstructionDesc inst =
          attention(kernel, 1, seq, ranks, qHeads, kvHeads, headDim, 1);
      const size_t planned = kernelScratchBytes(inst, in, out, mesh);
      for (int64_t c = 0; c < ranks; ++c) {
        const AttentionShape shape = attentionPositionsAt(
            attentionParams<AttentionShape>(inst), 1, AxisPosition{c, ranks});
        ASSERT_TRUE(isContextBlockShape(shape));
        ASSERT_EQ(attentionPath(kernel, ElementType::BF16, shape, 1),
                  AttentionPath::ContextBlocks);
        const size_t asked = kernel == Kernel::AttentionFwd
                                 ? contextAttentionFwdScratchBytes(shape)
                                 : contextAttentionBwdScratchBytes(shape);
        EXPECT_EQ(planned, asked) << "seq " << seq << " ranks " << ranks
                                  << " coordinate " << c;
      }
      // The backward's f32 sums of dK and dV over the whole sequence alone.
      if (kernel == Kernel::AttentionBwd)
        EXPECT_GE(planned, size_t(2 * seq * ranks * kvHeads * headDim * 4));
    }
  }
}

// A ring step's (ring 1: one rank's block of keys, kv_seq = seq, of the rank
// ring_step places before): sized at coordinate 0, the same at every
// coordinate, on the blockwise bf16 path.
TEST(KernelScratchTest, RingStepsAskTheSameAtEveryCoordinate) {
  using A = attrs::AttentionFwd;
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t ranks = 2 + int64_t(rng() % 7);       // 2..8
    const int64_t seq = 2 * (1 + int64_t(rng() % 700)); // even, any
    const int64_t kvHeads = 1 + rng() % 4;
    const int64_t qHeads = kvHeads * (1 + rng() % 4);
    const int64_t headDim = rng() % 2 ? 64 : 128;
    const int64_t step = int64_t(rng() % uint64_t(ranks));
    const std::vector<MeshAxis> mesh = {{"dp", 3}, {"cp", int(ranks)}};
    std::vector<OperandSize> in, out;
    backwardOperands(ElementType::BF16, 1, seq, seq, qHeads, kvHeads, headDim,
                     in, out);
    for (Kernel kernel : {Kernel::AttentionFwd, Kernel::AttentionBwd}) {
      InstructionDesc inst =
          attention(kernel, 1, seq, 1, qHeads, kvHeads, headDim, 1);
      inst.ints[A::ring] = 1;
      inst.ints[A::ring_step] = step;
      const size_t planned = kernelScratchBytes(inst, in, out, mesh);
      for (int64_t c = 0; c < ranks; ++c) {
        const AttentionShape shape = attentionPositionsAt(
            attentionParams<AttentionShape>(inst), 1, AxisPosition{c, ranks});
        ASSERT_EQ(shape.ringStep, step);
        ASSERT_TRUE(isContextBlockShape(shape))
            << "seq " << seq << " ranks " << ranks << " coordinate " << c
            << " step " << step;
        ASSERT_EQ(attentionPath(kernel, ElementType::BF16, shape, 1),
                  AttentionPath::ContextBlocks);
        const size_t asked = kernel == Kernel::AttentionFwd
                                 ? contextAttentionFwdScratchBytes(shape)
                                 : contextAttentionBwdScratchBytes(shape);
        EXPECT_EQ(planned, asked) << "seq " << seq << " ranks " << ranks
                                  << " coordinate " << c << " step " << step;
      }
    }
  }
}

TEST(KernelScratchTest, OtherHeadDimsCopyEveryBf16OperandInF32) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t batch = 1 + rng() % 3, seq = 1 + rng() % 300;
    const int64_t kvHeads = 1 + rng() % 3, qHeads = kvHeads * (1 + rng() % 3);
    const int64_t headDim = 8 * (1 + rng() % 12);
    if (headDim == 64)
      continue;
    std::vector<OperandSize> in, out;
    backwardOperands(ElementType::BF16, batch, seq, seq, qHeads, kvHeads,
                     headDim, in, out);
    const InstructionDesc inst = attention(Kernel::AttentionBwd, batch, seq, 1,
                                           qHeads, kvHeads, headDim, -1);
    const AttentionShape shape = attentionParams<AttentionShape>(inst);
    ASSERT_EQ(attentionPath(inst.kernel, ElementType::BF16, shape, -1),
              AttentionPath::ThroughF32);
    size_t copies = 0;
    for (const auto *list : {&in, &out})
      for (const OperandSize &operand : *list)
        if (operand.dtype == ElementType::BF16)
          copies += size_t(operand.elements) * 4;
    const size_t planned = kernelScratchBytes(inst, in, out, {});
    EXPECT_GE(planned, copies + attentionBwdScratchBytes(shape));
    EXPECT_LE(planned, copies + attentionBwdScratchBytes(shape) + 256 * 9);
  }
}

TEST(KernelScratchTest, ARanksAreaIsItsLargestAskRounded) {
  RankPlan rank;
  auto buffer = [&](ElementType t, std::vector<int64_t> shape) {
    BufferDesc b;
    b.name = "b" + std::to_string(rank.buffers.size());
    b.dtype = t;
    b.shape = std::move(shape);
    b.bytes = uint64_t(b.numElements()) * elementSize(t);
    rank.buffers.push_back(b);
    return uint32_t(rank.buffers.size() - 1);
  };
  // rms_norm_bwd of 3,001 rows of 777 (row partials), then a cp2 attention
  // backward (bf16, head dim 128) of 1,030 rows a rank.
  InstructionDesc norm;
  norm.kernel = Kernel::RMSNormBwd;
  norm.ints.assign(attrs::RMSNormBwd::dim + 1, 0);
  norm.ints[attrs::RMSNormBwd::rows] = 3001;
  norm.ints[attrs::RMSNormBwd::dim] = 777;
  norm.floats.assign(attrs::RMSNormBwd::eps + 1, 1e-5);
  const uint32_t x = buffer(ElementType::BF16, {3001, 777});
  const uint32_t w = buffer(ElementType::BF16, {777});
  norm.inputs = {x, x, w};
  norm.outputs = {x, w};
  InstructionDesc attn =
      attention(Kernel::AttentionBwd, 1, 1030, 2, 6, 2, 128, 0);
  const uint32_t q = buffer(ElementType::BF16, {1, 1030, 6, 128});
  const uint32_t kv = buffer(ElementType::BF16, {1, 2060, 2, 128});
  const uint32_t lse = buffer(ElementType::F32, {1, 6, 1030});
  attn.inputs = {q, q, kv, kv, q, lse};
  attn.outputs = {q, kv, kv};
  const std::vector<MeshAxis> mesh = {{"cp", 2}};
  rank.programs.push_back(ProgramDesc{"step", {norm, attn}});
  const size_t normBytes = rmsNormBwdScratchBytes(3001, 777);
  const size_t attnBytes = contextAttentionBwdScratchBytes(
      attentionPositionsAt(attentionParams<AttentionShape>(attn), 0,
                           AxisPosition{1, 2}));
  ASSERT_GT(normBytes, 0u);
  ASSERT_GT(attnBytes, 0u);
  const size_t most = std::max(normBytes, attnBytes);
  const size_t area = rankScratchBytes(rank, mesh);
  EXPECT_EQ(area % (size_t(1) << 20), 0u);
  EXPECT_GE(area, most);
  EXPECT_LT(area, most + (size_t(1) << 20));
  EXPECT_EQ(createCudaBackend()->scratchBytes(rank, mesh), area);
}

TEST(KernelScratchTest, AReservedContextRefusesALargerAsk) {
  MLT_REQUIRE_CUDA();
  std::unique_ptr<Backend> backend = createCudaBackend();
  StatusOr<std::unique_ptr<DeviceContext>> context =
      backend->createContext(RankInfo{0, 1, nullptr});
  ASSERT_TRUE(context) << context.status().message();
  // sum_squares of 2^22 elements asks for its blocks' partials.
  const int64_t n = int64_t(1) << 22;
  ASSERT_GT(sumSquaresScratchBytes(n), 0u);
  ASSERT_TRUE((*context)->reserveScratch(0));
  StatusOr<uint8_t *> arena = (*context)->allocate(uint64_t(n) * 4 + 256);
  ASSERT_TRUE(arena) << arena.status().message();
  InstructionDesc inst;
  inst.kernel = Kernel::SumSquares;
  inst.ints = {n};
  const BufferView x{*arena, ElementType::F32, n};
  const BufferView sum{*arena + n * 4, ElementType::F32, 1};
  Status status = (*context)->launch(inst, {x}, {sum});
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("more than the 0 reserved"),
            std::string::npos)
      << status.message();
  (*context)->deallocate(*arena);
}

} // namespace
