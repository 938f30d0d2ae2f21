//===- KernelTableTest.cpp - the kernel table of Kernels.def --------------===//
//
// Part of mlt. The table that names every kernel's attributes (Kernels.def,
// KernelInfo.h) and the rules that say what they imply (KernelInfo.cpp):
// names and arity agree, every kernel's rule gives one count per operand of
// its arity, the counts, ranges and FLOPs of hand-computed cases, and lists
// built by name come out in the table's order.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <array>

using namespace mlt;
using namespace mlt::rt;
using ::testing::ElementsAre;

namespace {

// Positions are the names' order in Kernels.def, checked at compile time.
static_assert(attrs::Matmul::k == 3);
static_assert(attrs::Rope::position_offset == 5);
static_assert(attrs::RMSNormFwd::eps == 0);
static_assert(kernelSignature(Kernel::Matmul).intNames[attrs::Matmul::k] ==
              "k");
static_assert(meshAxisAttribute(Kernel::ShardSlice) == attrs::ShardSlice::axis);
static_assert(sameAttributes(Kernel::Matmul, Kernel::MatmulAdd));
static_assert(!sameAttributes(Kernel::EmbeddingFwd, Kernel::EmbeddingFwdVP));

/// An instruction of `kernel` with `inputs` and `outputs` operands (buffer
/// indices do not matter to the rules) and the given attributes.
InstructionDesc instruction(Kernel kernel, size_t inputs, size_t outputs,
                            std::vector<int64_t> ints,
                            std::vector<double> floats = {}) {
  InstructionDesc inst;
  inst.kernel = kernel;
  inst.inputs.assign(inputs, 0);
  inst.outputs.assign(outputs, 0);
  inst.ints = std::move(ints);
  inst.floats = std::move(floats);
  return inst;
}

/// operandCounts of `inst` on a mesh axis of `groupSize`, which must succeed.
OperandCounts counts(const InstructionDesc &inst, int64_t groupSize = 1) {
  StatusOr<OperandCounts> result = operandCounts(inst, groupSize);
  EXPECT_TRUE(result.isOk()) << result.status().message();
  return result ? *result : OperandCounts();
}

/// operandCounts' error for `inst` on a mesh axis of `groupSize` ("" if it
/// succeeds).
std::string countsError(const InstructionDesc &inst, int64_t groupSize = 1) {
  StatusOr<OperandCounts> result = operandCounts(inst, groupSize);
  return result ? std::string() : result.status().message();
}

// Tests that the table is in the enum's order, that a kernel's number of
// integer and float attributes is the number of names it gives (any number
// for the variadic layouts), that `axis` is the only mesh axis, and that it
// and the transfers' `shift` are the only attributes that may be negative.
TEST(KernelTableTest, NamesMatchArity) {
  ASSERT_EQ(numKernels(), std::size(kKernelSignatures));
  for (size_t i = 0; i < numKernels(); ++i) {
    const KernelSignature &signature = kernelSignature(Kernel(i));
    SCOPED_TRACE(std::string(signature.name));
    EXPECT_EQ(signature.kernel, Kernel(i));
    if (signature.intLayout == IntLayout::Fixed)
      EXPECT_EQ(signature.ints, int(signature.intNames.size()));
    else
      EXPECT_EQ(signature.ints, -1);
    EXPECT_EQ(signature.floats, int(signature.floatNames.size()));
    EXPECT_EQ(meshAxisAttribute(signature.kernel),
              signature.intNames.find("axis"));
  }
  const KernelSignature &matmul = kernelSignature(Kernel::Matmul);
  EXPECT_EQ(matmul.intNames.str(),
            "batch, m, n, k, transpose_a, transpose_b, b_batched");
  EXPECT_EQ(kernelSignature(Kernel::Fill).floatNames.str(), "value");
  EXPECT_EQ(kernelSignature(Kernel::AdamWMulti).intLayout,
            IntLayout::PerTensor);
  EXPECT_EQ(kernelSignature(Kernel::AdamWMulti).intNames.str(), "n, decay");
  EXPECT_EQ(kernelSignature(Kernel::Transpose).intLayout, IntLayout::Variadic);
  EXPECT_TRUE(kernelSignature(Kernel::GlobalNorm).intNames.empty());

  // The kernels that read a mesh coordinate, and where.
  EXPECT_EQ(meshAxisAttribute(Kernel::AllReduceSum), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::ReduceScatterSum), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::AllGather), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::EmbeddingFwdVP), 3);
  EXPECT_EQ(meshAxisAttribute(Kernel::EmbeddingBwdVP), 3);
  EXPECT_EQ(meshAxisAttribute(Kernel::CrossEntropyStats), 2);
  EXPECT_EQ(meshAxisAttribute(Kernel::CrossEntropyBwdStats), 2);
  EXPECT_EQ(meshAxisAttribute(Kernel::ShardSlice), 3);
  EXPECT_EQ(meshAxisAttribute(Kernel::Send), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::Recv), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::AllToAll), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::CollectivePermute), 1);
  EXPECT_EQ(meshAxisAttribute(Kernel::AttentionFwd), 7);
  EXPECT_EQ(meshAxisAttribute(Kernel::AttentionMerge), -1);
  EXPECT_EQ(meshAxisAttribute(Kernel::Matmul), -1);

  // The ring exchange's attributes and kernels.
  EXPECT_EQ(kernelSignature(Kernel::AttentionFwd).intNames.str(),
            "batch, seq, kv_seq, q_heads, kv_heads, head_dim, causal, axis, "
            "ring, ring_step");
  static_assert(sameAttributes(Kernel::AttentionFwd, Kernel::AttentionBwd));
  EXPECT_EQ(kernelSignature(Kernel::AttentionMerge).intNames.str(),
            "batch, seq, heads, head_dim");
  EXPECT_EQ(kernelSignature(Kernel::CollectivePermute).intNames.str(),
            "n, axis, shift");
  EXPECT_TRUE(isCollectiveKernel(Kernel::CollectivePermute));
  EXPECT_FALSE(isTransferKernel(Kernel::CollectivePermute));
  EXPECT_EQ(collectiveKind(Kernel::CollectivePermute), CollectiveKind::Permute);
  EXPECT_EQ(collectiveKind(Kernel::AllToAll), CollectiveKind::AllToAll);
  EXPECT_FALSE(isCollectiveKernel(Kernel::AttentionMerge));

  // The attributes that may be negative: every `axis` and the transfers'
  // `shift`, nothing else (nor past a kernel's names).
  for (size_t i = 0; i < numKernels(); ++i) {
    const KernelSignature &signature = kernelSignature(Kernel(i));
    for (size_t a = 0; a < signature.intNames.size(); ++a)
      EXPECT_EQ(isSignedAttribute(signature.kernel, a),
                signature.intNames[a] == "axis" ||
                    (isTransferKernel(signature.kernel) &&
                     signature.intNames[a] == "shift"))
          << signature.name << " " << signature.intNames[a];
  }
  EXPECT_TRUE(isSignedAttribute(Kernel::Send, attrs::Send::shift));
  EXPECT_FALSE(isSignedAttribute(Kernel::Send, attrs::Send::n));
  EXPECT_FALSE(isSignedAttribute(Kernel::Send, 3));
  EXPECT_FALSE(isSignedAttribute(Kernel::AdamWMulti, 2));
  EXPECT_TRUE(isTransferKernel(Kernel::Recv));
  EXPECT_FALSE(isTransferKernel(Kernel::AllGather));
  EXPECT_FALSE(isCollectiveKernel(Kernel::Send));
  EXPECT_TRUE(isTypeFreeKernel(Kernel::Send));
}

// Tests that every kernel's rule gives one element count per operand for an
// instruction of its arity (the variadic ones at a size of their own).
TEST(KernelTableTest, EveryRuleCoversItsOperands) {
  for (size_t i = 0; i < numKernels(); ++i) {
    const KernelSignature &signature = kernelSignature(Kernel(i));
    SCOPED_TRACE(std::string(signature.name));
    size_t inputs = signature.inputs >= 0 ? size_t(signature.inputs) : 3;
    size_t outputs = signature.outputs >= 0 ? size_t(signature.outputs) : 3;
    std::vector<int64_t> ints(std::max(signature.ints, 0), 1);
    std::vector<double> floats(size_t(signature.floats), 1.0);
    switch (signature.kernel) {
    case Kernel::Transpose: // rank 2: shape [1, 1], perm [1, 0]
      ints = {2, 1, 1, 1, 0};
      break;
    case Kernel::SumSquaresMulti: // 3 tensors
      ints = {1, 1, 1};
      break;
    case Kernel::AdamW:      // param, m, v
    case Kernel::AdamWMulti: // 2 tensors: 2 grads and 7 scalars -> 6
      inputs = signature.kernel == Kernel::AdamW ? 8 : 2 + kAdamWScalarInputs;
      outputs = signature.kernel == Kernel::AdamW ? 3 : 6;
      ints = signature.kernel == Kernel::AdamW
                 ? std::vector<int64_t>{1, 1}
                 : std::vector<int64_t>{1, 1, 1, 0};
      break;
    case Kernel::SwiGLUBwd: // dgate, dup
    case Kernel::RMSNormBwd: // dx, dw
    case Kernel::RMSNormBwdAdd:
      outputs = 2;
      break;
    case Kernel::RMSNormFwd: // y
    case Kernel::SwiGLUFwd:
      outputs = 1;
      break;
    case Kernel::AllToAll: // blocks as they are
      ints.back() = 0;
      break;
    case Kernel::MatmulGroup: // 3 products: 3 a, 3 b -> 3 c
      inputs = 6;
      ints.back() = 0; // accumulate
      break;
    case Kernel::Rope: // llama3 scaling (1): high_freq_factor > low; no axis
      floats = {1e4, 8.0, 1.0, 4.0};
      ints[attrs::Rope::axis] = -1;
      break;
    case Kernel::AttentionFwd: // no axis, no ring
    case Kernel::AttentionBwd:
      ints[attrs::AttentionFwd::axis] = -1;
      ints[attrs::AttentionFwd::ring] = 0;
      ints[attrs::AttentionFwd::ring_step] = 0;
      break;
    case Kernel::AttentionBwdRope: // the same, after attention's scale
      floats = {0.125, 1e4, 8.0, 1.0, 4.0};
      ints[attrs::AttentionBwdRope::axis] = -1;
      ints[attrs::AttentionBwdRope::ring] = 0;
      ints[attrs::AttentionBwdRope::ring_step] = 0;
      break;
    case Kernel::QuantizeFp8: // both layouts: scale_inv, q, q_t
      ints = {1, 1, 2};
      break;
    case Kernel::MatmulFp8: // a, a_scale_inv, b, b_scale_inv, addend -> c
      inputs = 5;
      ints = {1, 1, 1, 0, 1};
      break;
    default:
      break;
    }
    InstructionDesc inst =
        instruction(signature.kernel, inputs, outputs, ints, floats);
    if (signature.kernel == Kernel::MatmulGroup) // results apart from operands
      for (size_t o = 0; o < outputs; ++o)
        inst.outputs[o] = uint32_t(1 + o);
    // A permute's shift (1) needs a group of two ranks at least.
    const OperandCounts c =
        counts(inst, signature.kernel == Kernel::CollectivePermute ? 2 : 1);
    EXPECT_EQ(c.inputs.size(), inputs);
    EXPECT_EQ(c.outputs.size(), outputs);
  }
}

// Tests element counts against hand-computed cases.
TEST(KernelTableTest, OperandCounts) {
  // The fused amax outputs (Kernels.def's amax) are scalars after the
  // kernel's own outputs; other counts are refused, naming those allowed.
  EXPECT_THAT(counts(instruction(Kernel::RMSNormFwd, 2, 2, {3, 8}, {1e-5}))
                  .outputs,
              ElementsAre(24, 1));
  EXPECT_THAT(
      counts(instruction(Kernel::RMSNormBwdAdd, 4, 3, {3, 8}, {1e-5})).outputs,
      ElementsAre(24, 8, 1));
  EXPECT_THAT(counts(instruction(Kernel::SwiGLUBwd, 3, 4, {10})).outputs,
              ElementsAre(10, 10, 1, 1));
  EXPECT_THAT(counts(instruction(Kernel::SwiGLUBwd, 3, 6, {10})).outputs,
              ElementsAre(10, 10, 10, 1, 1, 1));
  EXPECT_EQ(countsError(instruction(Kernel::SwiGLUBwd, 3, 5, {10})),
            "writes 2, 3, 4 or 6 outputs, got 5");
  EXPECT_EQ(countsError(instruction(Kernel::RMSNormFwd, 2, 3, {3, 8}, {1e-5})),
            "writes 1 or 2 outputs, got 3");

  // a [2, 3, 5], b [5, 4] shared -> c [2, 3, 4]; and b [2, 5, 4] batched.
  OperandCounts c =
      counts(instruction(Kernel::Matmul, 2, 1, {2, 3, 4, 5, 0, 0, 0}));
  EXPECT_THAT(c.inputs, ElementsAre(30, 20));
  EXPECT_THAT(c.outputs, ElementsAre(24));
  c = counts(instruction(Kernel::MatmulAdd, 3, 1, {2, 3, 4, 5, 0, 1, 1}));
  EXPECT_THAT(c.inputs, ElementsAre(30, 40, 24));
  EXPECT_THAT(c.outputs, ElementsAre(24));

  // q [2, 8, 4, 16], k and v [2, 8, 1, 16], lse [2, 4, 8].
  const std::vector<int64_t> attention = {2, 8, 8, 4, 1, 16, 1, -1, 0, 0};
  c = counts(instruction(Kernel::AttentionFwd, 3, 2, attention, {0.25}));
  EXPECT_THAT(c.inputs, ElementsAre(1024, 256, 256));
  EXPECT_THAT(c.outputs, ElementsAre(1024, 64));
  c = counts(instruction(Kernel::AttentionBwd, 6, 3, attention, {0.25}));
  EXPECT_THAT(c.inputs, ElementsAre(1024, 1024, 256, 256, 1024, 64));
  EXPECT_THAT(c.outputs, ElementsAre(1024, 256, 256));
  // A context-parallel rank of 3 (axis 0): its 8 queries, the whole
  // sequence's 24 keys and values.
  c = counts(instruction(Kernel::AttentionFwd, 3, 2,
                         {2, 8, 24, 4, 1, 16, 1, 0, 0, 0}, {0.25}),
             /*groupSize=*/3);
  EXPECT_THAT(c.inputs, ElementsAre(1024, 768, 768));
  EXPECT_THAT(c.outputs, ElementsAre(1024, 64));
  // A ring step of a rank of 3: its 8 queries, one rank's block of 8 keys
  // and values (the block of the rank 2 places before it); every step.
  for (int64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE("ring_step " + std::to_string(step));
    const std::vector<int64_t> ring = {2, 8, 8, 4, 1, 16, 1, 0, 1, step};
    c = counts(instruction(Kernel::AttentionFwd, 3, 2, ring, {0.25}), 3);
    EXPECT_THAT(c.inputs, ElementsAre(1024, 256, 256));
    EXPECT_THAT(c.outputs, ElementsAre(1024, 64));
    c = counts(instruction(Kernel::AttentionBwd, 6, 3, ring, {0.25}), 3);
    EXPECT_THAT(c.inputs, ElementsAre(1024, 1024, 256, 256, 1024, 64));
    EXPECT_THAT(c.outputs, ElementsAre(1024, 256, 256));
  }
  // Two partial attentions of q [2, 8, 4, 16], lse [2, 4, 8] merged.
  c = counts(instruction(Kernel::AttentionMerge, 4, 2, {2, 8, 4, 16}));
  EXPECT_THAT(c.inputs, ElementsAre(1024, 64, 1024, 64));
  EXPECT_THAT(c.outputs, ElementsAre(1024, 64));

  // FP8: x [3, 8] -> scale_inv, q(, q_t); a [6, 32], b [16, 32] -> c
  // [6, 16].
  c = counts(instruction(Kernel::Amax, 1, 1, {24}));
  EXPECT_THAT(c.inputs, ElementsAre(24));
  EXPECT_THAT(c.outputs, ElementsAre(1));
  c = counts(instruction(Kernel::QuantizeFp8, 2, 2, {3, 8, 1}));
  EXPECT_THAT(c.inputs, ElementsAre(24, 1));
  EXPECT_THAT(c.outputs, ElementsAre(1, 24));
  c = counts(instruction(Kernel::QuantizeFp8, 2, 3, {3, 8, 2}));
  EXPECT_THAT(c.outputs, ElementsAre(1, 24, 24));
  EXPECT_NE(countsError(instruction(Kernel::QuantizeFp8, 2, 2, {3, 8, 2})), "")
      << "both layouts write two copies";
  EXPECT_NE(countsError(instruction(Kernel::QuantizeFp8, 2, 2, {3, 8, 3})), "");
  c = counts(instruction(Kernel::MatmulFp8, 4, 1, {6, 16, 32, 1, 0}));
  EXPECT_THAT(c.inputs, ElementsAre(192, 1, 512, 1));
  EXPECT_THAT(c.outputs, ElementsAre(96));
  EXPECT_NE(
      countsError(instruction(Kernel::MatmulFp8, 5, 1, {6, 16, 32, 1, 0})), "")
      << "an addend and accumulate";
  EXPECT_NE(
      countsError(instruction(Kernel::MatmulFp8, 3, 1, {6, 16, 32, 0, 0})), "");

  c = counts(instruction(Kernel::RMSNormBwdAdd, 4, 2, {3, 8}, {1e-5}));
  EXPECT_THAT(c.inputs, ElementsAre(24, 24, 8, 24));
  EXPECT_THAT(c.outputs, ElementsAre(24, 8));

  c = counts(instruction(Kernel::EmbeddingBwdVP, 2, 1, {6, 10, 4, 0}));
  EXPECT_THAT(c.inputs, ElementsAre(6, 24));
  EXPECT_THAT(c.outputs, ElementsAre(40));

  c = counts(instruction(Kernel::CrossEntropyCombine, 2, 2, {5, 2, 10}));
  EXPECT_THAT(c.inputs, ElementsAre(10, 5));
  EXPECT_THAT(c.outputs, ElementsAre(5, 1));

  // The moves on an axis of 4: x [2, 4 * 3, 5] -> y [2, 3, 5].
  c = counts(instruction(Kernel::ShardSlice, 1, 1, {2, 3, 5, 0}), 4);
  EXPECT_THAT(c.inputs, ElementsAre(120));
  EXPECT_THAT(c.outputs, ElementsAre(30));
  // x [2, 2 * 3 * 4, 5] reordered: outer 2, ranks 3, chunk 4, inner 5.
  c = counts(instruction(Kernel::ReorderSequence, 1, 1, {2, 3, 4, 5, 1}));
  EXPECT_THAT(c.inputs, ElementsAre(240));
  EXPECT_THAT(c.outputs, ElementsAre(240));
  // An all-to-all's blocks: x [4 * 6] -> y [4 * 6], in each order of
  // blocks (as they are, into and from the natural order's chunks).
  for (int64_t order : {0, 1, 2}) {
    c = counts(instruction(Kernel::AllToAll, 1, 1, {6, 0, order}), 4);
    EXPECT_THAT(c.inputs, ElementsAre(24)) << "order " << order;
    EXPECT_THAT(c.outputs, ElementsAre(24)) << "order " << order;
  }
  // A permute moves x [6] whole, by any shift along the group of 4.
  for (int64_t shift = 1; shift < 4; ++shift) {
    c = counts(instruction(Kernel::CollectivePermute, 1, 1, {6, 0, shift}), 4);
    EXPECT_THAT(c.inputs, ElementsAre(6)) << "shift " << shift;
    EXPECT_THAT(c.outputs, ElementsAre(6)) << "shift " << shift;
  }
  c = counts(instruction(Kernel::ReduceScatterSum, 1, 1, {6, 0}), 4);
  EXPECT_THAT(c.inputs, ElementsAre(24));
  EXPECT_THAT(c.outputs, ElementsAre(6));
  c = counts(instruction(Kernel::AllGather, 1, 1, {6, 0}), 4);
  EXPECT_THAT(c.inputs, ElementsAre(6));
  EXPECT_THAT(c.outputs, ElementsAre(24));
  // A send's only operand is its input, a receive's its output.
  c = counts(instruction(Kernel::Send, 1, 0, {6, 0, -1}), 4);
  EXPECT_THAT(c.inputs, ElementsAre(6));
  EXPECT_TRUE(c.outputs.empty());
  c = counts(instruction(Kernel::Recv, 0, 1, {6, 0, 1}), 4);
  EXPECT_TRUE(c.inputs.empty());
  EXPECT_THAT(c.outputs, ElementsAre(6));

  // x [2, 3, 4] -> y [4, 2, 3].
  c = counts(instruction(Kernel::Transpose, 1, 1, {3, 2, 3, 4, 2, 0, 1}));
  EXPECT_THAT(c.inputs, ElementsAre(24));

  // Two tensors of 64 and 8 elements, with compute copies.
  c = counts(instruction(Kernel::AdamWMulti, 2 + kAdamWScalarInputs, 8,
                         {64, 1, 8, 0}));
  EXPECT_THAT(c.inputs, ElementsAre(64, 8, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_THAT(c.outputs, ElementsAre(64, 8, 64, 8, 64, 8, 64, 8));
  c = counts(instruction(Kernel::SumSquaresMulti, 3, 3, {64, 8, 2}));
  EXPECT_THAT(c.inputs, ElementsAre(64, 8, 2));
  EXPECT_THAT(c.outputs, ElementsAre(1, 1, 1));

  // An overflowing count is -1.
  c = counts(instruction(Kernel::RMSNormFwd, 2, 1,
                         {int64_t(1) << 40, int64_t(1) << 40}, {1e-5}));
  EXPECT_EQ(c.inputs[0], -1);
}

// Tests that the rules name the attributes out of their range.
TEST(KernelTableTest, AttributeRanges) {
  EXPECT_EQ(
      countsError(instruction(Kernel::Matmul, 2, 1, {1, 2, 2, 2, 0, 2, 0})),
      "transpose_a, transpose_b and b_batched must be 0 or 1, got ints "
      "[1, 2, 2, 2, 0, 2, 0]");
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1, {1, 2, 1, 4, 3, 0, 0, 0, -1},
                              {1e4, 0, 0, 0})),
      "inverse must be 0 or 1, got ints [1, 2, 1, 4, 3, 0, 0, 0, -1]");
  // A context-parallel rank's rows are two chunks; its keys the whole
  // sequence's.
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1, {1, 3, 1, 4, 0, 0, 0, 0, 0},
                              {1e4, 0, 0, 0})),
      "seq 3 is a context-parallel rank's block of two chunks and must "
      "be even");
  EXPECT_EQ(countsError(instruction(Kernel::AttentionFwd, 3, 2,
                                    {1, 4, 8, 2, 1, 4, 1, -1, 0, 0}, {0.5})),
            "kv_seq must be 4 (seq), got 8");
  // The ring exchange (ring 1): one rank's block of keys (kv_seq = seq), of
  // the rank ring_step places before (ring_step < G), on a context axis.
  for (Kernel kernel : {Kernel::AttentionFwd, Kernel::AttentionBwd}) {
    SCOPED_TRACE(std::string(kernelName(kernel)));
    const size_t inputs = kernel == Kernel::AttentionFwd ? 3 : 6;
    const size_t outputs = kernel == Kernel::AttentionFwd ? 2 : 3;
    auto ringError = [&](std::vector<int64_t> ints, int64_t groupSize) {
      return countsError(instruction(kernel, inputs, outputs, ints, {0.5}),
                         groupSize);
    };
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 1, 2}, 3), "");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 1, 0}, 2), "");
    EXPECT_EQ(ringError({1, 4, 8, 2, 1, 4, 1, 0, 1, 1}, 2),
              "kv_seq must be seq (4: one rank's block of keys) with ring 1, "
              "got 8");
    EXPECT_EQ(ringError({1, 4, 12, 2, 1, 4, 1, 0, 1, 1}, 3),
              "kv_seq must be seq (4: one rank's block of keys) with ring 1, "
              "got 12");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 1, 3}, 3),
              "ring_step must be below the axis's size 3, got 3");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 1, 7}, 3),
              "ring_step must be below the axis's size 3, got 7");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, -1, 1, 0}, 1),
              "ring 1 needs a context axis");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 0, 1}, 2),
              "ring_step 1 needs ring 1");
    EXPECT_EQ(ringError({1, 4, 4, 2, 1, 4, 1, 0, 2, 0}, 2),
              "causal and ring must be 0 or 1, got ints "
              "[1, 4, 4, 2, 1, 4, 1, 0, 2, 0]");
    EXPECT_EQ(ringError({1, 3, 3, 2, 1, 4, 1, 0, 1, 1}, 2),
              "seq 3 is a context-parallel rank's block of two chunks and "
              "must be even");
  }
  // A permute's shift is a step along the group: 0 < shift < G.
  for (int64_t shift : {int64_t(0), int64_t(4), int64_t(5)})
    EXPECT_EQ(
        countsError(instruction(Kernel::CollectivePermute, 1, 1, {6, 0, shift}),
                    4),
        "shift must be in [1, 4) (a step along the group of 4 ranks), "
        "got " +
            std::to_string(shift));
  EXPECT_EQ(
      countsError(instruction(Kernel::CollectivePermute, 1, 1, {6, 0, 1}), 1),
      "shift must be in [1, 1) (a step along the group of 1 ranks), got 1");
  // An all-to-all's order of blocks is one of three, and a block in the
  // natural order's chunks is two of them.
  EXPECT_EQ(countsError(instruction(Kernel::AllToAll, 1, 1, {6, 0, 3}), 4),
            "order must be 0 (blocks), 1 (to_natural) or 2 (from_natural), "
            "got 3");
  EXPECT_EQ(countsError(instruction(Kernel::AllToAll, 1, 1, {5, 0, 2}), 4),
            "a block of n = 5 elements does not split into the two chunks of "
            "order from_natural");
  EXPECT_TRUE(counts(instruction(Kernel::AllToAll, 1, 1, {5, 0, 0}), 4)
                  .inputs.size() == 1);
  // Rotary scaling: a known kind, its attributes in range (named as HF's
  // config.json names them), and none of them set without one.
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1, {1, 2, 1, 4, 0, 0, 2, 0, -1},
                              {1e4, 0, 0, 0})),
      "unknown rope scaling kind 2 (0: none, 1: llama3)");
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1,
                              {1, 2, 1, 4, 0, 0, 1, 8192, -1}, {5e5, 8, 4, 1})),
      "llama3 rope scaling: high_freq_factor (1) must be greater than "
      "low_freq_factor (4)");
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1, {1, 2, 1, 4, 0, 0, 1, 0, -1},
                              {5e5, 8, 1, 4})),
      "llama3 rope scaling: original_max_position_embeddings must be "
      "positive, got 0");
  EXPECT_EQ(
      countsError(instruction(Kernel::Rope, 1, 1,
                              {1, 2, 1, 4, 0, 0, 0, 8192, -1}, {1e4, 0, 0, 0})),
      "rope scaling of kind none has factor 0, low_freq_factor 0, "
      "high_freq_factor 0, original_max_position_embeddings 8192; all "
      "must be 0");
  EXPECT_EQ(countsError(instruction(Kernel::Rope, 1, 1,
                                    {1, 2, 1, 4, 0, 0, 1, 8192, -1},
                                    {5e5, 32, 1, 4})),
            "");
  EXPECT_EQ(
      countsError(instruction(Kernel::CrossEntropyCombine, 2, 2, {4, 2, 0})),
      "num_parts and row_count must be positive, got ints [4, 2, 0]");
  EXPECT_EQ(countsError(instruction(Kernel::AdamWMulti, 2 + kAdamWScalarInputs,
                                    6, {4, 1, 4, 2})),
            "tensor 1's decay must be 0 or 1, got ints [4, 1, 4, 2]");
  EXPECT_EQ(countsError(instruction(Kernel::Transpose, 1, 1, {2, 2, 3, 0, 0})),
            "perm [0, 0] is not a permutation of 0..1");
  EXPECT_EQ(countsError(instruction(Kernel::Transpose, 1, 1, {2, 2, 3, 1})),
            "expects 1 + 2 * rank = 5 integer attributes for rank 2, has 4");
  // A rank near 2^63, whose 1 + 2 * rank overflows (mlt-fuzz-plan).
  EXPECT_EQ(countsError(instruction(Kernel::Transpose, 1, 1,
                                    {6406370469934530563, 2, 3, 1})),
            "expects 1 + 2 * rank integer attributes for rank "
            "6406370469934530563, has 4");
  EXPECT_EQ(countsError(instruction(Kernel::Recv, 0, 1, {6, 0, 0})),
            "shift must not be 0 (a rank does not send to itself), got ints "
            "[6, 0, 0]");
}

// Tests the FLOPs: a multiply-add is 2; attention's backward is 2.5 times
// its forward, a causal mask halves both; the other kernels count none.
TEST(KernelTableTest, Flops) {
  EXPECT_EQ(kernelFlops(instruction(Kernel::MatmulAccumulate, 2, 1,
                                    {2, 3, 4, 5, 0, 0, 0})),
            2.0 * 2 * 3 * 4 * 5);
  const double full = 4.0 * 2 * 4 * 8 * 8 * 16; // batch, q_heads, seq^2, d
  EXPECT_EQ(kernelFlops(instruction(Kernel::AttentionFwd, 3, 2,
                                    {2, 8, 8, 4, 1, 16, 0, -1, 0, 0}, {0.25})),
            full);
  EXPECT_EQ(kernelFlops(instruction(Kernel::AttentionBwd, 6, 3,
                                    {2, 8, 8, 4, 1, 16, 1, -1, 0, 0}, {0.25})),
            2.5 * full / 2);
  // A ring step: a causal half of its block's pairs, whichever block.
  EXPECT_EQ(kernelFlops(instruction(Kernel::AttentionFwd, 3, 2,
                                    {2, 8, 8, 4, 1, 16, 1, 0, 1, 1}, {0.25})),
            full / 2);
  EXPECT_EQ(
      kernelFlops(instruction(Kernel::AttentionMerge, 4, 2, {2, 8, 4, 16})),
      0.0);
  EXPECT_EQ(
      kernelFlops(instruction(Kernel::CollectivePermute, 1, 1, {1024, 0, 1})),
      0.0);
  EXPECT_EQ(kernelFlops(instruction(Kernel::Add, 2, 1, {1024})), 0.0);
  EXPECT_EQ(kernelFlops(instruction(Kernel::AllReduceSum, 1, 1, {1024, 0})),
            0.0);
}

// Tests reading and building attribute lists by name.
TEST(KernelTableTest, AttributesByName) {
  using A = attrs::Rope;
  // Given in any order, listed in the table's.
  const std::vector<int64_t> ints =
      kernelInts<A>({{A::inverse, 1},
                     {A::batch, 2},
                     {A::position_offset, 7},
                     {A::original_max_position_embeddings, 8192},
                     {A::seq, 3},
                     {A::scaling, 1},
                     {A::axis, -1},
                     {A::heads, 4},
                     {A::head_dim, 8}});
  EXPECT_THAT(ints, ElementsAre(2, 3, 4, 8, 1, 7, 1, 8192, -1));
  const InstructionDesc rope =
      instruction(Kernel::Rope, 1, 1, ints,
                  kernelFloats<A>({{A::high_freq_factor, 4.0},
                                   {A::theta, 5e5},
                                   {A::factor, 32.0},
                                   {A::low_freq_factor, 1.0}}));
  EXPECT_THAT(rope.floats, ElementsAre(5e5, 32.0, 1.0, 4.0));
  const KernelAttrs<A> a(rope);
  EXPECT_EQ(a[A::head_dim], 8);
  EXPECT_EQ(a[A::position_offset], 7);
  EXPECT_EQ(a[A::theta], 5e5);
  EXPECT_EQ(ropeScaling(a), RopeScaling::llama3(32.0, 1.0, 4.0, 8192));

  // Multi-tensor lists, tensor by tensor.
  const InstructionDesc multi =
      instruction(Kernel::AdamWMulti, 2 + kAdamWScalarInputs, 6, {64, 1, 8, 0});
  const KernelAttrs<attrs::AdamWMulti> m(multi);
  EXPECT_EQ(m.tensors(), 2u);
  EXPECT_EQ(m(1, attrs::AdamWMulti::n), 8);
  EXPECT_EQ(m(0, attrs::AdamWMulti::decay), 1);

  // transpose's lists after its rank.
  const std::vector<int64_t> transpose = transposeInts(
      std::array<int64_t, 3>{2, 3, 4}, std::vector<int64_t>{2, 0, 1});
  EXPECT_THAT(transpose, ElementsAre(3, 2, 3, 4, 2, 0, 1));
  const TransposeAttrs dims = transposeAttrs(transpose);
  EXPECT_EQ(dims.rank, 3);
  EXPECT_EQ(dims.shape[2], 4);
  EXPECT_EQ(dims.perm[0], 2);

  // A collective's count and axis, whatever the kernel calls its count.
  const CollectiveAttrs gather =
      collectiveAttrs(instruction(Kernel::AllGather, 1, 1, {6, 1}));
  EXPECT_EQ(gather.count, 6);
  EXPECT_EQ(gather.axis, 1);
  EXPECT_EQ(gather.shift, 0);
  // A permute's, with its shift, both ways.
  const std::vector<int64_t> permute =
      collectiveInts(Kernel::CollectivePermute, CollectiveAttrs{6, 1, 2});
  EXPECT_THAT(permute, ElementsAre(6, 1, 2));
  const CollectiveAttrs moved =
      collectiveAttrs(instruction(Kernel::CollectivePermute, 1, 1, permute));
  EXPECT_EQ(moved.count, 6);
  EXPECT_EQ(moved.axis, 1);
  EXPECT_EQ(moved.shift, 2);

  // A transfer's, the same names in send and recv.
  const std::vector<int64_t> transfer =
      transferInts(Kernel::Recv, TransferAttrs{6, 1, -1});
  EXPECT_THAT(transfer, ElementsAre(6, 1, -1));
  for (Kernel kernel : {Kernel::Send, Kernel::Recv}) {
    const TransferAttrs back = transferAttrs(instruction(
        kernel, kernel == Kernel::Send, kernel == Kernel::Recv, transfer));
    EXPECT_EQ(back.count, 6);
    EXPECT_EQ(back.axis, 1);
    EXPECT_EQ(back.shift, -1);
  }
}

// Tests that a list built by name without every attribute, or with one twice,
// stops the process (a bug in the compiler, not a plan to write).
TEST(KernelTableDeathTest, IncompleteAttributeList) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  using A = attrs::RMSNormFwd;
  EXPECT_DEATH(kernelInts<A>({{A::rows, 4}}),
               "rms_norm_fwd's attribute 'dim' missing");
  EXPECT_DEATH(kernelInts<A>({{A::rows, 4}, {A::rows, 4}, {A::dim, 8}}),
               "rms_norm_fwd's attribute 'rows' given twice");
}

} // namespace
