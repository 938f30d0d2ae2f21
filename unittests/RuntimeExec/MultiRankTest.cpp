//===- MultiRankTest.cpp - plans of several ranks -------------------------===//
//
// Part of mlt. Plans laid out over a mesh, end to end on simulated ranks
// (threads over the in-process collectives): the format's new fields round
// trip and are verified (the mesh, blocks, parameter coverage, collectives
// and their agreement across ranks); each collective kernel computes what
// Kernels.def says on a 2x2 mesh; a failing rank stops every rank and is
// named; the kernels of sharded programs (shard_slice, the vocabulary
// parallel embedding and cross-entropy) find each rank's block from its mesh
// coordinate and are verified against the mesh; data and tensor parallel
// training plans (TestPlans.h) train like their single-rank plan; and
// sharded parameters initialize, load and save as whole tensors.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"
#include "TrainingTestUtil.h"

#include "../Runtime/KernelTestUtil.h"

#include "mlt/Plan/Blocks.h"
#include "mlt/Runtime/comm/InProcessComm.h"
#include "mlt/Runtime/cpu/Kernels.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using mlt::cpu::test::randomIds;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

MlpModel mlp(int64_t dp, int64_t tp) {
  MlpModel m;
  m.dp = dp;
  m.tp = tp;
  return m;
}

TinyModel tinyDp(int64_t dp, int64_t microbatches = 1) {
  TinyModel m;
  m.microBatch = 4;
  m.microbatches = microbatches;
  m.dp = dp;
  return m;
}

/// Every buffer of `rank` that holds (a block of) parameter `name`.
std::vector<BufferDesc *> parameterBuffers(RankPlan &rank,
                                           const std::string &name) {
  std::vector<BufferDesc *> buffers;
  for (BufferDesc &buffer : rank.buffers)
    if (buffer.parameter == name)
      buffers.push_back(&buffer);
  return buffers;
}

/// The first instruction of `kernel` in program `program` of `rank`.
InstructionDesc *findInstruction(RankPlan &rank, const std::string &program,
                                 Kernel kernel) {
  for (ProgramDesc &p : rank.programs)
    if (p.name == program)
      for (InstructionDesc &inst : p.instructions)
        if (inst.kernel == kernel)
          return &inst;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Blocks
//===----------------------------------------------------------------------===//

// Tests extracting and inserting blocks of a 3-d tensor against an
// element-by-element reference, for blocks that are whole, split in one
// dimension, or in several.
TEST(BlocksTest, ExtractAndInsert) {
  const std::vector<int64_t> full = {3, 4, 5};
  std::vector<int32_t> tensor(60);
  for (size_t i = 0; i < tensor.size(); ++i)
    tensor[i] = int32_t(i);
  const std::vector<BlockLayout> layouts = {
      {full, {0, 0, 0}, {3, 4, 5}}, {full, {1, 0, 0}, {2, 4, 5}},
      {full, {0, 2, 0}, {3, 2, 5}}, {full, {0, 0, 3}, {3, 4, 2}},
      {full, {1, 1, 1}, {2, 2, 3}}, {full, {2, 3, 4}, {1, 1, 1}},
      {full, {0, 1, 0}, {3, 0, 5}}};
  for (const BlockLayout &layout : layouts) {
    std::vector<int32_t> expected;
    for (int64_t i = 0; i < layout.shape[0]; ++i)
      for (int64_t j = 0; j < layout.shape[1]; ++j)
        for (int64_t k = 0; k < layout.shape[2]; ++k)
          expected.push_back(
              tensor[((layout.offset[0] + i) * 4 + layout.offset[1] + j) * 5 +
                     layout.offset[2] + k]);
    std::vector<int32_t> block = extractBlock(tensor, layout);
    EXPECT_EQ(block, expected);

    std::vector<int32_t> target(60, -1);
    insertBlock(target, layout, block);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 5; ++k) {
          bool inside =
              i >= layout.offset[0] && i < layout.offset[0] + layout.shape[0] &&
              j >= layout.offset[1] && j < layout.offset[1] + layout.shape[1] &&
              k >= layout.offset[2] && k < layout.offset[2] + layout.shape[2];
          int64_t e = (i * 4 + j) * 5 + k;
          EXPECT_EQ(target[e], inside ? tensor[e] : -1);
        }
  }
  EXPECT_TRUE(layouts[0].isWhole());
  EXPECT_FALSE(layouts[1].isWhole());
}

//===----------------------------------------------------------------------===//
// The format: round trip, printing, verification
//===----------------------------------------------------------------------===//

// Tests that the mesh, the blocks and the collectives survive serialization.
TEST(MultiRankPlanTest, RoundTrip) {
  Plan plan = buildMlpPlan(mlp(2, 2));
  ASSERT_TRUE(verifyPlan(plan).isOk()) << verifyPlan(plan).message();
  std::string bytes = serializePlan(plan);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(parsed->worldSize, 4u);
  EXPECT_EQ(parsed->mesh, (std::vector<MeshAxis>{{"dp", 2}, {"tp", 2}}));
  ASSERT_EQ(parsed->ranks.size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    const RankPlan &a = parsed->ranks[r], &b = plan.ranks[r];
    EXPECT_EQ(a.rank, r);
    ASSERT_EQ(a.buffers.size(), b.buffers.size());
    for (size_t i = 0; i < a.buffers.size(); ++i) {
      EXPECT_EQ(a.buffers[i].fullShape, b.buffers[i].fullShape);
      EXPECT_EQ(a.buffers[i].sliceOffset, b.buffers[i].sliceOffset);
    }
    EXPECT_EQ(a.programs[0].instructions.size(),
              b.programs[0].instructions.size());
  }
  const BufferDesc &up = parsed->ranks[3].buffers[*parsed->ranks[3].findBuffer(
      std::string(kParameterPrefix) + kMlpUp)];
  EXPECT_EQ(up.shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(up.fullShape, (std::vector<int64_t>{12, 8}));
  EXPECT_EQ(up.sliceOffset, (std::vector<int64_t>{6, 0}));
  const BufferDesc &tokens =
      parsed->ranks[2].buffers[*parsed->ranks[2].findBuffer(kTokensInput)];
  EXPECT_EQ(tokens.shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(tokens.sliceOffset, (std::vector<int64_t>{2, 0}));

  // A single-rank plan keeps writing no mesh and no blocks.
  Plan single = buildMlpPlan(mlp(1, 1));
  bytes = serializePlan(single);
  parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_TRUE(parsed->mesh.empty());
  for (const BufferDesc &buffer : parsed->ranks[0].buffers)
    EXPECT_FALSE(buffer.isBlock()) << buffer.name;
}

// Tests that the printer shows the mesh, the blocks and collectives' axes.
TEST(MultiRankPlanTest, Print) {
  std::ostringstream os;
  printPlan(buildMlpPlan(mlp(2, 2)), os);
  std::string text = os.str();
  EXPECT_THAT(text, HasSubstr("world size 4, mesh dp=2,tp=2\n"));
  EXPECT_THAT(text, HasSubstr("rank 3: arena"));
  EXPECT_THAT(text, HasSubstr("parameter model.mlp.up_proj.weight (decay)  "
                              "block [6:12, 0:8] of [12, 8]\n"));
  EXPECT_THAT(text, HasSubstr("all_reduce_sum (y.partial) -> (y) ints [64, 1] "
                              "axis tp\n"));
  EXPECT_THAT(text, HasSubstr("ints [1, 0] axis dp\n"));
}

// Tests the checks of the mesh against the ranks.
TEST(MultiRankPlanTest, MeshErrors) {
  Plan plan = buildMlpPlan(mlp(2, 2));
  plan.mesh[1].size = 3;
  EXPECT_EQ(parseError(plan), "plan.mltplan: the plan's world size is 4, but "
                              "its mesh dp=2,tp=3 has 6 ranks");

  plan = buildMlpPlan(mlp(2, 2));
  plan.mesh[1].name = "dp";
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: the plan's mesh: mesh axis 'dp' appears twice");

  plan = buildMlpPlan(mlp(2, 2));
  plan.mesh[0].name = "data parallel";
  EXPECT_THAT(parseError(plan), HasSubstr("is not an identifier"));

  plan = buildMlpPlan(mlp(2, 2));
  plan.ranks[1].rank = 2;
  plan.ranks[2].rank = 1;
  EXPECT_EQ(parseError(plan), "plan.mltplan: rank entry 1 is numbered 2 "
                              "(ranks must be listed in order)");

  plan = buildMlpPlan(mlp(2, 2));
  plan.ranks.pop_back();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: the plan's world size is 4 but it has 3 ranks");
}

// Tests the checks of one buffer's block.
TEST(MultiRankPlanTest, BlockErrors) {
  const std::string up = std::string(kParameterPrefix) + kMlpUp;
  Plan plan = buildMlpPlan(mlp(1, 2));
  RankPlan &rank1 = plan.ranks[1];
  rank1.buffers[*rank1.findBuffer(up)].sliceOffset = {7, 0};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 1: buffer 'param:model.mlp.up_proj.weight' "
            "holds the block [7:13, 0:8] of [12, 8], out of bounds in "
            "dimension 0");

  plan = buildMlpPlan(mlp(1, 2));
  plan.ranks[0].buffers[*plan.ranks[0].findBuffer(up)].sliceOffset = {0, -1};
  EXPECT_THAT(parseError(plan), HasSubstr(", out of bounds in dimension 1"));

  plan = buildMlpPlan(mlp(1, 2));
  plan.ranks[0].buffers[*plan.ranks[0].findBuffer(up)].fullShape = {96};
  EXPECT_THAT(parseError(plan),
              HasSubstr("buffer 'param:model.mlp.up_proj.weight' of shape "
                        "[6, 8] has full_shape [96] and slice_offset [0, 0]; "
                        "both must have the shape's rank 2"));

  plan = buildMlpPlan(mlp(1, 2));
  BufferDesc &x = plan.ranks[0].buffers[*plan.ranks[0].findBuffer("x")];
  x.fullShape = {32, 8};
  x.sliceOffset = {0, 0};
  EXPECT_THAT(parseError(plan),
              HasSubstr("buffer 'x' is a block of a larger tensor, but only "
                        "parameter, gradient and optimizer-state buffers and "
                        "the inputs 'tokens' and 'labels' may be (it is a "
                        "temporary buffer)"));

  // tokens must be a block of the [micro_batch, seq_len] micro-batch.
  plan = buildMlpPlan(mlp(2, 1));
  plan.ranks[1].buffers[*plan.ranks[1].findBuffer(kTokensInput)].fullShape = {
      8, 4};
  EXPECT_EQ(parseError(plan), "plan.mltplan: rank 1: buffer 'tokens' has full "
                              "shape [8, 4], expected [4, 4]");

  // A gradient holds the block its parameter holds.
  plan = buildMlpPlan(mlp(1, 2));
  plan.ranks[1]
      .buffers[*plan.ranks[1].findBuffer(std::string(kGradientPrefix) + kMlpUp)]
      .sliceOffset = {0, 0};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 1: gradient buffer "
            "'grad:model.mlp.up_proj.weight' holds the block [0:6, 0:8] of "
            "[12, 8], but its parameter holds [6:12, 0:8] of [12, 8]");
}

// Tests the checks of a parameter's blocks across ranks: every element held,
// blocks disjoint unless equal, one full shape.
TEST(MultiRankPlanTest, CoverageErrors) {
  // Both tp ranks hold the first half of W1: the second half has no holder.
  Plan plan = buildMlpPlan(mlp(1, 2));
  for (BufferDesc *buffer : parameterBuffers(plan.ranks[1], kMlpUp))
    buffer->sliceOffset = {0, 0};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.mlp.up_proj.weight' of shape "
            "[12, 8] is not covered by the ranks' blocks: they hold 48 of its "
            "96 elements (some element is held by no rank)");

  plan = buildMlpPlan(mlp(1, 2));
  for (BufferDesc *buffer : parameterBuffers(plan.ranks[1], kMlpUp))
    buffer->sliceOffset = {3, 0};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.mlp.up_proj.weight' has the blocks "
            "[0:6, 0:8] of [12, 8] on rank 0 and [3:9, 0:8] of [12, 8] on rank "
            "1, which overlap without being the same block");

  plan = buildMlpPlan(mlp(1, 2));
  for (BufferDesc *buffer : parameterBuffers(plan.ranks[1], kMlpUp))
    buffer->fullShape = {13, 8};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.mlp.up_proj.weight' has full shape "
            "[12, 8] on rank 0 but [13, 8] on rank 1");

  plan = buildMlpPlan(mlp(1, 2));
  plan.ranks[1]
      .buffers[*plan.ranks[1].findBuffer(std::string(kParameterPrefix) +
                                         kTinyHead)]
      .decay = false;
  EXPECT_EQ(parseError(plan), "plan.mltplan: parameter 'lm_head.weight' has "
                              "decay on on rank 0 but off on rank 1");

  // Replicas on the dp ranks are fine; so is a parameter held whole by one
  // rank and in blocks by none.
  EXPECT_EQ(parseError(buildMlpPlan(mlp(2, 2))), "");
}

// Tests the checks of collectives: a mesh axis, sizes from the group, sums
// of float types, in-place forms, and the same collectives on every member.
TEST(MultiRankPlanTest, CollectiveErrors) {
  Plan plan = buildMlpPlan(mlp(2, 2));
  findInstruction(plan.ranks[0], kMicroStepProgram, Kernel::AllReduceSum)
      ->ints[1] = 2;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 0: program 'micro_step' instruction 4 "
            "(all_reduce_sum): axis 2 is not an axis of the plan's mesh "
            "dp=2,tp=2 (axes 0..1)");

  // A single-rank plan has no mesh, so no collective.
  plan = buildTinyPlan(TinyModel());
  RankPlan &rank = plan.ranks[0];
  ProgramDesc &opt = rank.programs[1];
  InstructionDesc allReduce;
  allReduce.kernel = Kernel::AllReduceSum;
  allReduce.inputs =
      allReduce.outputs = {uint32_t(*rank.findBuffer("grad:lm_head.weight"))};
  allReduce.ints = {128, 0};
  opt.instructions.insert(opt.instructions.begin(), allReduce);
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: program 'optimizer_step' instruction 0 "
            "(all_reduce_sum): axis 0 is not an axis of the plan's mesh: the "
            "plan has no mesh");

  // reduce_scatter's input holds n_out * group size.
  PlanBuilder b;
  uint32_t in = b.temp("in", {8}), out = b.temp("out", {4});
  b.launch("p", Kernel::ReduceScatterSum, {in}, {out}, {2, 0});
  std::vector<MeshAxis> mesh = {{"dp", 2}};
  EXPECT_EQ(verifyRank(b.rankPlan(0), mesh).message(),
            "program 'p' instruction 0 (reduce_scatter_sum): input 0 'in' has "
            "8 elements, but the kernel's ints [2, 0] need 4");
  b.rank().programs[0].instructions[0].ints = {4, 0};
  EXPECT_TRUE(verifyRank(b.rankPlan(0), mesh).isOk());

  // Sums take floats; all_gather moves anything, but of one type.
  PlanBuilder ints;
  uint32_t i0 = ints.temp("i0", {4}, ElementType::I32);
  uint32_t i1 = ints.temp("i1", {4}, ElementType::I32);
  uint32_t i2 = ints.temp("i2", {8}, ElementType::I32);
  uint32_t f2 = ints.temp("f2", {8}, ElementType::F32);
  ints.launch("p", Kernel::AllReduceSum, {i0}, {i1}, {4, 0});
  EXPECT_EQ(verifyRank(ints.rankPlan(0), mesh).message(),
            "program 'p' instruction 0 (all_reduce_sum): input 'i0' is i32, "
            "but sums take f32, f64 and bf16");
  ints.rank().programs[0].instructions[0] = {
      Kernel::AllGather, {i0}, {i2}, {4, 0}, {}, 0};
  EXPECT_TRUE(verifyRank(ints.rankPlan(0), mesh).isOk());
  ints.rank().programs[0].instructions[0].outputs = {f2};
  EXPECT_THAT(verifyRank(ints.rankPlan(0), mesh).message(),
              HasSubstr("output 0 'f2' is f32, but input 0 is i32"));

  // Input and output overlap only in the in-place forms.
  PlanBuilder overlap;
  uint32_t whole = overlap.temp("whole", {8});
  overlap.launch("p", Kernel::ReduceScatterSum, {whole}, {whole}, {4, 0});
  // The rank's chunk of the input is the output: in place at index 0 only.
  RankPlan view = overlap.rankPlan(0);
  view.buffers.push_back(view.buffers[0]);
  view.buffers.back().name = "chunk";
  view.buffers.back().shape = {4};
  view.buffers.back().bytes = 16;
  view.programs[0].instructions[0].outputs = {1};
  EXPECT_TRUE(verifyRank(view, mesh).isOk())
      << verifyRank(view, mesh).message();
  view.rank = 1; // index 1: its chunk starts 16 bytes in
  EXPECT_EQ(verifyRank(view, mesh).message(),
            "program 'p' instruction 0 (reduce_scatter_sum): input 'whole' at "
            "[0, 32) and output 'chunk' at [0, 16) overlap without being in "
            "place (rank 1 is index 1 of its group)");
}

/// A plan of `mesh` in which every rank runs program "p" with the one
/// collective `kernel` from buffer "in" to buffer "out" (or in place).
Plan collectivePlan(std::vector<MeshAxis> mesh, Kernel kernel, int64_t count,
                    int64_t axis, ElementType dtype, int64_t inElements,
                    int64_t outElements, bool inPlace = false) {
  int world = 1;
  for (const MeshAxis &a : mesh)
    world *= a.size;
  std::vector<PlanBuilder> ranks(world);
  for (PlanBuilder &b : ranks) {
    uint32_t in = b.temp("in", {inElements}, dtype);
    uint32_t out = inPlace ? in : b.temp("out", {outElements}, dtype);
    b.launch("p", kernel, {in}, {out}, {count, axis});
  }
  return multiRankPlan(ModelInfo(), std::move(mesh), ranks);
}

// Tests that the members of a group must launch the same collectives.
TEST(MultiRankPlanTest, CollectivesMustMatch) {
  Plan plan = collectivePlan({{"dp", 2}, {"tp", 2}}, Kernel::AllReduceSum, 4, 1,
                             ElementType::F32, 4, 4);
  EXPECT_TRUE(verifyPlanStructure(plan).isOk());
  plan.ranks[3].programs[0].instructions[0].kernel = Kernel::AllGather;
  plan.ranks[3].buffers[1].shape = {8};
  plan.ranks[3].buffers[1].bytes = 32;
  plan.ranks[3].arenaBytes = 512;
  plan.ranks[3].programs[0].instructions[0].ints = {4, 1};
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "program 'p': ranks 2 and 3 launch different collectives on axis "
            "'tp': collective #0 is all_reduce_sum of 4 f32 on rank 2, "
            "all_gather of 4 f32 per rank on rank 3");

  plan = collectivePlan({{"dp", 2}, {"tp", 2}}, Kernel::AllReduceSum, 4, 0,
                        ElementType::F32, 4, 4);
  plan.ranks[2].programs[0].instructions.clear();
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "program 'p': ranks 0 and 2 launch different collectives on axis "
            "'dp': rank 0 launches 1, rank 2 launches 0");
}

//===----------------------------------------------------------------------===//
// Collectives on a 2x2 mesh
//===----------------------------------------------------------------------===//

class CollectiveKernelTest : public ::testing::Test {
protected:
  void SetUp() override { backend_ = createCpuBackend(); }

  /// Runs `plan`'s program "p" with rank r's input (buffer 0) set to
  /// `inputs(r)` and returns every rank's output (its last buffer) as floats.
  std::vector<std::vector<float>>
  run(const Plan &plan,
      const std::function<std::vector<float>(uint32_t)> &inputs) {
    auto group = RankGroup::create(plan, *backend_);
    EXPECT_TRUE(group) << group.status().message();
    if (!group)
      return {};
    for (uint32_t r = 0; r < (*group)->size(); ++r) {
      std::vector<float> values = inputs(r);
      Status status = (*group)->executor(r).writeFloats(0, values.data(),
                                                        int64_t(values.size()));
      EXPECT_TRUE(status) << status.message();
    }
    Status status = (*group)->run("p");
    EXPECT_TRUE(status) << status.message();
    std::vector<std::vector<float>> outputs;
    for (uint32_t r = 0; r < (*group)->size(); ++r) {
      Executor &executor = (*group)->executor(r);
      outputs.push_back(
          *executor.readFloats(executor.rankPlan().buffers.size() - 1));
    }
    return outputs;
  }

  static std::vector<MeshAxis> mesh() { return {{"dp", 2}, {"tp", 2}}; }

  /// Small integers: exact in bf16 and in every sum below.
  static std::vector<float> ramp(uint32_t rank, int64_t n) {
    std::vector<float> values(n);
    for (int64_t j = 0; j < n; ++j)
      values[j] = float((rank + 1) * (j + 1));
    return values;
  }

  std::unique_ptr<Backend> backend_;
};

// Tests all_reduce_sum over each axis of a 2x2 mesh (tp groups {0,1}, {2,3};
// dp groups {0,2}, {1,3}), in f32, f64 and bf16, and in place.
TEST_F(CollectiveKernelTest, AllReduceSum) {
  for (ElementType dtype :
       {ElementType::F32, ElementType::F64, ElementType::BF16}) {
    for (int64_t axis : {0, 1}) {
      for (bool inPlace : {false, true}) {
        Plan plan = collectivePlan(mesh(), Kernel::AllReduceSum, 3, axis, dtype,
                                   3, 3, inPlace);
        auto out = run(plan, [](uint32_t r) { return ramp(r, 3); });
        ASSERT_EQ(out.size(), 4u);
        for (uint32_t r = 0; r < 4; ++r) {
          // The other member of r's group.
          uint32_t peer = axis == 1 ? r ^ 1u : r ^ 2u;
          std::vector<float> expected(3);
          for (int j = 0; j < 3; ++j)
            expected[j] = ramp(r, 3)[j] + ramp(peer, 3)[j];
          EXPECT_EQ(out[r], expected)
              << elementTypeName(dtype) << " axis " << axis << " rank " << r
              << (inPlace ? " in place" : "");
        }
      }
    }
  }
}

// Tests reduce_scatter_sum: rank r gets chunk (its index) of the group's sum.
TEST_F(CollectiveKernelTest, ReduceScatterSum) {
  for (int64_t axis : {0, 1}) {
    Plan plan = collectivePlan(mesh(), Kernel::ReduceScatterSum, 2, axis,
                               ElementType::F32, 4, 2);
    auto out = run(plan, [](uint32_t r) { return ramp(r, 4); });
    ASSERT_EQ(out.size(), 4u);
    for (uint32_t r = 0; r < 4; ++r) {
      uint32_t peer = axis == 1 ? r ^ 1u : r ^ 2u;
      uint32_t index = axis == 1 ? r % 2 : r / 2;
      std::vector<float> expected(2);
      for (int j = 0; j < 2; ++j)
        expected[j] = ramp(r, 4)[index * 2 + j] + ramp(peer, 4)[index * 2 + j];
      EXPECT_EQ(out[r], expected) << "axis " << axis << " rank " << r;
    }
  }
}

// Tests all_gather: every rank gets its group's inputs in group order, of
// floats and of i32 (moved as bytes).
TEST_F(CollectiveKernelTest, AllGather) {
  for (int64_t axis : {0, 1}) {
    Plan plan = collectivePlan(mesh(), Kernel::AllGather, 3, axis,
                               ElementType::F32, 3, 6);
    auto out = run(plan, [](uint32_t r) { return ramp(r, 3); });
    ASSERT_EQ(out.size(), 4u);
    for (uint32_t r = 0; r < 4; ++r) {
      uint32_t first = axis == 1 ? r & ~1u : r & ~2u;
      uint32_t second = axis == 1 ? first | 1u : first | 2u;
      std::vector<float> expected = ramp(first, 3);
      for (float v : ramp(second, 3))
        expected.push_back(v);
      EXPECT_EQ(out[r], expected) << "axis " << axis << " rank " << r;
    }
  }

  Plan plan =
      collectivePlan(mesh(), Kernel::AllGather, 2, 1, ElementType::I32, 2, 4);
  auto group = RankGroup::create(plan, *backend_);
  ASSERT_TRUE(group) << group.status().message();
  for (uint32_t r = 0; r < 4; ++r) {
    int32_t ids[2] = {int32_t(10 * r), int32_t(10 * r + 1)};
    ASSERT_TRUE((*group)->executor(r).writeRaw(0, ids, sizeof(ids)));
  }
  ASSERT_TRUE((*group)->run("p"));
  int32_t gathered[4];
  ASSERT_TRUE((*group)->executor(3).readRaw(1, gathered, sizeof(gathered)));
  EXPECT_EQ(std::vector<int32_t>(gathered, gathered + 4),
            (std::vector<int32_t>{20, 21, 30, 31}));
}

//===----------------------------------------------------------------------===//
// Kernels of sharded programs on {tp: 2}
//===----------------------------------------------------------------------===//

/// `n` values uniform in [lo, hi), drawn in float (KernelTestUtil.h's
/// randomVector draws doubles, another sequence).
std::vector<float> randomValues(std::mt19937 &rng, int64_t n, float lo = -1.0f,
                                float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(n);
  for (float &v : values)
    v = dist(rng);
  return values;
}

class ShardedKernelTest : public ::testing::Test {
protected:
  void SetUp() override { backend_ = createCpuBackend(); }

  /// A plan of two ranks over {tp: 2} whose rank r runs what `build` adds to
  /// its builder (program "p").
  static Plan tpPlan(const std::function<void(PlanBuilder &)> &build) {
    std::vector<PlanBuilder> ranks(2);
    for (PlanBuilder &b : ranks)
      build(b);
    return multiRankPlan(ModelInfo(), {{"tp", 2}}, ranks);
  }

  std::unique_ptr<RankGroup> group(const Plan &plan) {
    auto created = RankGroup::create(plan, *backend_);
    EXPECT_TRUE(created) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  static size_t index(Executor &executor, const std::string &name) {
    return *executor.findBuffer(name);
  }
  static void write(Executor &executor, const std::string &name,
                    const std::vector<float> &values) {
    Status status = executor.writeFloats(index(executor, name), values.data(),
                                         int64_t(values.size()));
    ASSERT_TRUE(status) << status.message();
  }
  static void write(Executor &executor, const std::string &name,
                    const std::vector<int32_t> &ids) {
    Status status = executor.writeRaw(index(executor, name), ids.data(),
                                      ids.size() * sizeof(int32_t));
    ASSERT_TRUE(status) << status.message();
  }
  static std::vector<float> read(Executor &executor, const std::string &name) {
    StatusOr<std::vector<float>> values =
        executor.readFloats(index(executor, name));
    EXPECT_TRUE(values) << values.status().message();
    return values ? *values : std::vector<float>();
  }

  std::unique_ptr<Backend> backend_;
};

// Tests that shard_slice gives each rank the block of the middle dimension
// at its coordinate, for f32 and for i32 (bytes of any type), and that the
// printer names its axis.
TEST_F(ShardedKernelTest, ShardSliceTakesTheRanksBlock) {
  const int64_t outer = 2, n = 3, inner = 4, G = 2;
  Plan plan = tpPlan([&](PlanBuilder &b) {
    uint32_t x = b.temp("x", {outer, G * n, inner});
    uint32_t y = b.temp("y", {outer, n, inner});
    uint32_t xi = b.temp("xi", {outer, G * n, inner}, ElementType::I32);
    uint32_t yi = b.temp("yi", {outer, n, inner}, ElementType::I32);
    b.launch("p", Kernel::ShardSlice, {x}, {y}, {outer, n, inner, 0});
    b.launch("p", Kernel::ShardSlice, {xi}, {yi}, {outer, n, inner, 0});
  });
  std::ostringstream printed;
  printPlan(plan, printed);
  EXPECT_THAT(printed.str(),
              HasSubstr("shard_slice (x) -> (y) ints [2, 3, 4, 0] axis tp\n"));

  std::mt19937 rng(31);
  std::vector<float> x = randomValues(rng, outer * G * n * inner);
  std::vector<int32_t> xi = randomIds(rng, outer * G * n * inner, 1000);
  auto ranks = group(plan);
  ASSERT_TRUE(ranks);
  for (uint32_t r = 0; r < 2; ++r) {
    write(ranks->executor(r), "x", x);
    write(ranks->executor(r), "xi", xi);
  }
  ASSERT_TRUE(ranks->run("p"));
  for (uint32_t r = 0; r < 2; ++r) {
    Executor &executor = ranks->executor(r);
    std::vector<float> expected;
    std::vector<int32_t> expectedIds;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t from = (o * G * n + r * n + j) * inner + i;
          expected.push_back(x[from]);
          expectedIds.push_back(xi[from]);
        }
    EXPECT_EQ(read(executor, "y"), expected) << "rank " << r;
    std::vector<int32_t> yi(expectedIds.size());
    ASSERT_TRUE(executor.readRaw(index(executor, "yi"), yi.data(),
                                 yi.size() * sizeof(int32_t)));
    EXPECT_EQ(yi, expectedIds) << "rank " << r;
  }
}

// Tests the vocabulary-parallel embedding: rank r looks up the ids in rows
// [r * vocab_local, (r + 1) * vocab_local) of the global table, zeros for the
// others, so that an all_reduce_sum of the ranks' lookups is the whole
// lookup; the backward overwrites each rank's table gradient with the rows
// of the whole gradient it holds.
TEST_F(ShardedKernelTest, VocabParallelEmbedding) {
  const int64_t tokens = 9, vocabLocal = 5, hidden = 3, V = 2 * vocabLocal;
  Plan plan = tpPlan([&](PlanBuilder &b) {
    uint32_t ids = b.temp("ids", {tokens}, ElementType::I32);
    uint32_t table = b.temp("table", {vocabLocal, hidden});
    uint32_t out = b.temp("out", {tokens, hidden});
    uint32_t sum = b.temp("sum", {tokens, hidden});
    uint32_t dout = b.temp("dout", {tokens, hidden});
    uint32_t dtable = b.temp("dtable", {vocabLocal, hidden});
    b.launch("p", Kernel::EmbeddingFwdVP, {ids, table}, {out},
             {tokens, vocabLocal, hidden, 0});
    b.launch("p", Kernel::AllReduceSum, {out}, {sum}, {tokens * hidden, 0});
    b.launch("p", Kernel::EmbeddingBwdVP, {ids, dout}, {dtable},
             {tokens, vocabLocal, hidden, 0});
  });
  std::mt19937 rng(32);
  std::vector<float> table = randomValues(rng, V * hidden);
  std::vector<float> dout = randomValues(rng, tokens * hidden);
  std::vector<int32_t> ids = randomIds(rng, tokens, int32_t(V));
  ids[0] = 0;
  ids[1] = int32_t(V - 1);
  ids[2] = ids[5] = int32_t(vocabLocal); // a repeated id, rank 1's first row
  auto ranks = group(plan);
  ASSERT_TRUE(ranks);
  for (uint32_t r = 0; r < 2; ++r) {
    Executor &executor = ranks->executor(r);
    write(executor, "ids", ids);
    write(executor, "table",
          std::vector<float>(table.begin() + r * vocabLocal * hidden,
                             table.begin() + (r + 1) * vocabLocal * hidden));
    write(executor, "dout", dout);
    write(executor, "dtable", std::vector<float>(vocabLocal * hidden, 7.0f));
  }
  ASSERT_TRUE(ranks->run("p"));

  std::vector<float> whole(tokens * hidden), dwhole(V * hidden, 0.0f);
  ASSERT_TRUE(cpu::embeddingForward(whole.data(), ids.data(), table.data(),
                                    tokens, V, hidden));
  ASSERT_TRUE(cpu::embeddingBackward(dwhole.data(), ids.data(), dout.data(),
                                     tokens, V, hidden));
  for (uint32_t r = 0; r < 2; ++r) {
    Executor &executor = ranks->executor(r);
    std::vector<float> expected(tokens * hidden, 0.0f);
    for (int64_t t = 0; t < tokens; ++t)
      if (ids[t] / vocabLocal == int64_t(r))
        for (int64_t j = 0; j < hidden; ++j)
          expected[t * hidden + j] = table[ids[t] * hidden + j];
    EXPECT_EQ(read(executor, "out"), expected) << "rank " << r;
    EXPECT_EQ(read(executor, "sum"), whole) << "rank " << r;
    EXPECT_EQ(
        read(executor, "dtable"),
        std::vector<float>(dwhole.begin() + r * vocabLocal * hidden,
                           dwhole.begin() + (r + 1) * vocabLocal * hidden))
        << "rank " << r;
  }

  // An id outside the global vocabulary fails on the rank that has it.
  ids[4] = int32_t(V);
  write(ranks->executor(1), "ids", ids);
  Status status = ranks->run("p");
  ASSERT_FALSE(status);
  EXPECT_THAT(status.message(), StartsWith("rank 1: program 'p' instruction 0 "
                                           "(embedding_fwd_vp): "));
  EXPECT_THAT(status.message(), HasSubstr("token id 10 at position 4 is "
                                          "outside the vocabulary [0, 10)"));
}

// Tests the vocabulary-parallel cross-entropy as a sharded program runs it,
// in f32 and f64: each rank's stats of its logit columns, the lse parts
// all-gathered and the targets all-reduced, combined into the loss of the
// whole rows, and each rank's dlogits from the combined lse: the columns of
// the unsharded backward.
TEST_F(ShardedKernelTest, VocabParallelCrossEntropy) {
  const int64_t rows = 6, vocabLocal = 7, V = 2 * vocabLocal;
  for (ElementType dtype : {ElementType::F32, ElementType::F64}) {
    SCOPED_TRACE(elementTypeName(dtype));
    Plan plan = tpPlan([&](PlanBuilder &b) {
      uint32_t logits = b.temp("logits", {rows, vocabLocal}, dtype);
      uint32_t labels = b.temp("labels", {rows}, ElementType::I32);
      uint32_t lsePart = b.temp("lse.part", {rows}, dtype);
      uint32_t targetPart = b.temp("target.part", {rows}, dtype);
      uint32_t parts = b.temp("parts", {2, rows}, dtype);
      uint32_t target = b.temp("target", {rows}, dtype);
      uint32_t lse = b.temp("lse", {rows}, dtype);
      uint32_t loss = b.temp("loss", {}, dtype);
      uint32_t dloss = b.temp("dloss", {}, dtype);
      uint32_t dlogits = b.temp("dlogits", {rows, vocabLocal}, dtype);
      b.launch("p", Kernel::CrossEntropyStats, {logits, labels},
               {lsePart, targetPart}, {rows, vocabLocal, 0});
      b.launch("p", Kernel::AllGather, {lsePart}, {parts}, {rows, 0});
      b.launch("p", Kernel::AllReduceSum, {targetPart}, {target}, {rows, 0});
      b.launch("p", Kernel::CrossEntropyCombine, {parts, target}, {lse, loss},
               {rows, 2, rows});
      b.launch("p", Kernel::CrossEntropyBwdStats, {dloss, logits, labels, lse},
               {dlogits}, {rows, vocabLocal, 0, rows});
    });
    std::mt19937 rng(33);
    std::vector<float> logits = randomValues(rng, rows * V, -3.0f, 3.0f);
    std::vector<int32_t> labels = randomIds(rng, rows, int32_t(V));
    labels[0] = 0;
    labels[1] = int32_t(V - 1);
    labels[2] = int32_t(vocabLocal);
    auto ranks = group(plan);
    ASSERT_TRUE(ranks);
    std::vector<std::vector<float>> shards(2);
    for (uint32_t r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < vocabLocal; ++j)
          shards[r].push_back(logits[i * V + r * vocabLocal + j]);
      Executor &executor = ranks->executor(r);
      write(executor, "logits", shards[r]);
      write(executor, "labels", labels);
      write(executor, "dloss", std::vector<float>{0.75f});
    }
    ASSERT_TRUE(ranks->run("p"));

    // The unsharded loss and gradient, in double.
    std::vector<double> logitsD(logits.begin(), logits.end());
    std::vector<double> lseD(rows), dlogitsD(rows * V);
    double lossD;
    ASSERT_TRUE(cpu::crossEntropyForward(&lossD, lseD.data(), logitsD.data(),
                                         labels.data(), rows, V, rows));
    ASSERT_TRUE(cpu::crossEntropyBackward(dlogitsD.data(), logitsD.data(),
                                          lseD.data(), labels.data(), 0.75,
                                          rows, V, rows));
    const double tol = dtype == ElementType::F32 ? 2e-6 : 1e-7;
    for (uint32_t r = 0; r < 2; ++r) {
      Executor &executor = ranks->executor(r);
      // The rank's own stats: its columns' lse, and the label's logit only
      // where the label is among its columns.
      std::vector<float> lsePart = read(executor, "lse.part");
      std::vector<float> targetPart = read(executor, "target.part");
      for (int64_t i = 0; i < rows; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < vocabLocal; ++j)
          sum += std::exp(double(shards[r][i * vocabLocal + j]));
        EXPECT_NEAR(lsePart[i], std::log(sum),
                    tol * std::max(1.0, std::abs(std::log(sum))))
            << "rank " << r << " row " << i;
        const bool mine = labels[i] / vocabLocal == int64_t(r);
        EXPECT_EQ(targetPart[i], mine ? logits[i * V + labels[i]] : 0.0f)
            << "rank " << r << " row " << i;
      }
      EXPECT_EQ(read(executor, "target"),
                [&] {
                  std::vector<float> t;
                  for (int64_t i = 0; i < rows; ++i)
                    t.push_back(logits[i * V + labels[i]]);
                  return t;
                }())
          << "rank " << r;
      EXPECT_LT(relDiff(read(executor, "lse"), lseD), tol) << "rank " << r;
      EXPECT_NEAR(read(executor, "loss")[0], lossD, tol * lossD)
          << "rank " << r;
      std::vector<double> columnsD;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < vocabLocal; ++j)
          columnsD.push_back(dlogitsD[i * V + r * vocabLocal + j]);
      EXPECT_LT(relDiff(read(executor, "dlogits"), columnsD), tol)
          << "rank " << r;
    }
    // Both ranks hold the same loss and lse, bit for bit.
    EXPECT_EQ(read(ranks->executor(0), "loss"),
              read(ranks->executor(1), "loss"));
    EXPECT_EQ(read(ranks->executor(0), "lse"), read(ranks->executor(1), "lse"));
  }
}

// Tests the verifier's checks of the kernels of sharded programs: `axis`
// indexes the mesh (-1 only where the kernel allows it), sizes follow from
// the ints and the axis's size; and that an executor of a rank reading its
// coordinate needs a communicator.
TEST_F(ShardedKernelTest, VerifierChecksAxesAndSizes) {
  auto verify = [&](Kernel kernel, std::vector<std::vector<int64_t>> ins,
                    std::vector<std::vector<int64_t>> outs,
                    std::vector<int64_t> ints,
                    std::vector<size_t> int32Inputs = {},
                    std::vector<MeshAxis> planMesh = {{"tp", 2}}) {
    PlanBuilder b;
    std::vector<uint32_t> inputs, outputs;
    for (size_t i = 0; i < ins.size(); ++i) {
      bool isInt = std::find(int32Inputs.begin(), int32Inputs.end(), i) !=
                   int32Inputs.end();
      inputs.push_back(b.temp("in" + std::to_string(i), ins[i],
                              isInt ? ElementType::I32 : ElementType::F32));
    }
    for (size_t i = 0; i < outs.size(); ++i)
      outputs.push_back(b.temp("out" + std::to_string(i), outs[i]));
    b.launch("p", kernel, inputs, outputs, std::move(ints));
    return verifyRank(b.rankPlan(0), planMesh).message();
  };

  // shard_slice: a mesh axis, never -1; the input is G blocks.
  EXPECT_EQ(verify(Kernel::ShardSlice, {{2, 6, 4}}, {{2, 3, 4}}, {2, 3, 4, 0}),
            "");
  EXPECT_EQ(verify(Kernel::ShardSlice, {{2, 6, 4}}, {{2, 3, 4}}, {2, 3, 4, 1}),
            "program 'p' instruction 0 (shard_slice): axis 1 is not an axis "
            "of the plan's mesh tp=2 (axes 0..0)");
  EXPECT_EQ(verify(Kernel::ShardSlice, {{2, 6, 4}}, {{2, 3, 4}}, {2, 3, 4, -1}),
            "program 'p' instruction 0 (shard_slice): axis -1 is not an axis "
            "of the plan's mesh tp=2 (axes 0..0)");
  EXPECT_EQ(verify(Kernel::ShardSlice, {{2, 3, 4}}, {{2, 3, 4}}, {2, 3, 4, 0}),
            "program 'p' instruction 0 (shard_slice): input 0 'in0' has 24 "
            "elements, but the kernel's ints [2, 3, 4, 0] need 48");
  EXPECT_EQ(verify(Kernel::ShardSlice, {{2, 6, 4}}, {{2, 3, 4}}, {-2, 3, 4, 0}),
            "program 'p' instruction 0 (shard_slice): integer attributes must "
            "not be negative, got [-2, 3, 4, 0]");

  // The embedding's axis must name the mesh; without a mesh, none can.
  EXPECT_EQ(verify(Kernel::EmbeddingFwdVP, {{8}, {5, 3}}, {{8, 3}},
                   {8, 5, 3, 0}, {0}),
            "");
  EXPECT_EQ(verify(Kernel::EmbeddingFwdVP, {{8}, {5, 3}}, {{8, 3}},
                   {8, 5, 3, 2}, {0}),
            "program 'p' instruction 0 (embedding_fwd_vp): axis 2 is not an "
            "axis of the plan's mesh tp=2 (axes 0..0)");
  EXPECT_EQ(verify(Kernel::EmbeddingBwdVP, {{8}, {8, 3}}, {{5, 3}},
                   {8, 5, 3, 0}, {0}, {}),
            "program 'p' instruction 0 (embedding_bwd_vp): axis 0 is not an "
            "axis of the plan's mesh: the plan has no mesh");
  EXPECT_EQ(verify(Kernel::EmbeddingBwdVP, {{8}, {8, 3}}, {{10, 3}},
                   {8, 5, 3, 0}, {0}),
            "program 'p' instruction 0 (embedding_bwd_vp): output 0 'out0' has "
            "30 elements, but the kernel's ints [8, 5, 3, 0] need 15");

  // The cross-entropy statistics take -1 for the whole vocabulary.
  EXPECT_EQ(verify(Kernel::CrossEntropyStats, {{4, 7}, {4}}, {{4}, {4}},
                   {4, 7, -1}, {1}, {}),
            "");
  EXPECT_EQ(verify(Kernel::CrossEntropyStats, {{4, 7}, {4}}, {{4}, {4}},
                   {4, 7, 1}, {1}),
            "program 'p' instruction 0 (cross_entropy_stats): axis 1 is not "
            "an axis of the plan's mesh tp=2 (axes 0..0, or -1 for none)");
  EXPECT_EQ(verify(Kernel::CrossEntropyBwdStats, {{}, {4, 7}, {4}, {4}},
                   {{4, 7}}, {4, 7, -2, 4}, {2}),
            "program 'p' instruction 0 (cross_entropy_bwd_stats): axis -2 is "
            "not an axis of the plan's mesh tp=2 (axes 0..0, or -1 for none)");
  EXPECT_EQ(verify(Kernel::CrossEntropyBwdStats, {{}, {4, 7}, {4}, {4}},
                   {{4, 7}}, {4, 7, 0, 0}, {2}),
            "program 'p' instruction 0 (cross_entropy_bwd_stats): row_count "
            "must be positive, got ints [4, 7, 0, 0]");
  EXPECT_EQ(
      verify(Kernel::CrossEntropyStats, {{4, 7}, {4}}, {{4}, {4}}, {4, 7, 0}),
      "program 'p' instruction 0 (cross_entropy_stats): input 1 'in1' "
      "is f32, but token ids and labels are i32");
  EXPECT_EQ(
      verify(Kernel::CrossEntropyCombine, {{2, 4}, {4}}, {{4}, {}}, {4, 2, 8}),
      "");
  EXPECT_EQ(
      verify(Kernel::CrossEntropyCombine, {{2, 4}, {4}}, {{4}, {}}, {4, 3, 8}),
      "program 'p' instruction 0 (cross_entropy_combine): input 0 'in0' "
      "has 8 elements, but the kernel's ints [4, 3, 8] need 12");
  EXPECT_EQ(
      verify(Kernel::CrossEntropyCombine, {{0}, {4}}, {{4}, {}}, {4, 0, 8}),
      "program 'p' instruction 0 (cross_entropy_combine): num_parts and "
      "row_count must be positive, got ints [4, 0, 8]");

  // A rank that reads its coordinate needs its communicator; with axis -1 it
  // reads none.
  Plan plan = tpPlan([](PlanBuilder &b) {
    uint32_t x = b.temp("x", {4}), y = b.temp("y", {2});
    b.launch("p", Kernel::ShardSlice, {x}, {y}, {1, 2, 1, 0});
  });
  auto executor = Executor::create(plan, 1, *backend_);
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "rank 1 launches kernels that read its mesh coordinate but has no "
            "communicator");
  plan = tpPlan([](PlanBuilder &b) {
    uint32_t logits = b.temp("logits", {2, 3});
    uint32_t labels = b.temp("labels", {2}, ElementType::I32);
    uint32_t lse = b.temp("lse", {2}), target = b.temp("target", {2});
    b.launch("p", Kernel::CrossEntropyStats, {logits, labels}, {lse, target},
             {2, 3, -1});
  });
  EXPECT_TRUE(Executor::create(plan, 1, *backend_));
}

//===----------------------------------------------------------------------===//
// RankGroup: errors
//===----------------------------------------------------------------------===//

/// Two ranks over {tp: 2}: an embedding lookup, then an all-reduce of it.
Plan embedThenReduce() {
  std::vector<PlanBuilder> ranks(2);
  for (PlanBuilder &b : ranks) {
    uint32_t ids = b.temp("ids", {2}, ElementType::I32);
    uint32_t table = b.temp("table", {4, 2});
    uint32_t x = b.temp("x", {2, 2}), y = b.temp("y", {2, 2});
    b.launch("p", Kernel::EmbeddingFwd, {ids, table}, {x}, {2, 4, 2});
    b.launch("p", Kernel::AllReduceSum, {x}, {y}, {4, 0});
  }
  return multiRankPlan(ModelInfo(), {{"tp", 2}}, ranks);
}

// Tests that a kernel failing on rank 1 stops rank 0, which waits in the
// all-reduce, and that the failure is reported with its rank; the group stays
// stopped.
TEST(RankGroupTest, FailingRankStopsTheOthers) {
  std::unique_ptr<Backend> backend = createCpuBackend();
  auto group = RankGroup::create(embedThenReduce(), *backend);
  ASSERT_TRUE(group) << group.status().message();
  ASSERT_TRUE((*group)->run("p")); // zero ids: fine
  int32_t bad[2] = {1, 9};
  ASSERT_TRUE((*group)->executor(1).writeRaw(0, bad, sizeof(bad)));
  Status status = (*group)->run("p");
  ASSERT_FALSE(status);
  EXPECT_THAT(
      status.message(),
      StartsWith("rank 1: program 'p' instruction 0 (embedding_fwd): "));
  EXPECT_THAT(status.message(), HasSubstr("9"));
  EXPECT_TRUE((*group)->isAborted());

  status = (*group)->run("p");
  ASSERT_FALSE(status);
  EXPECT_THAT(status.message(),
              StartsWith("the ranks stopped at an earlier failure: rank 1: "));
}

// Tests that an exception on one rank is an error of that rank and stops the
// others, and that a single rank runs inline with nothing prefixed.
TEST(RankGroupTest, ExceptionsAndSingleRank) {
  std::unique_ptr<Backend> backend = createCpuBackend();
  auto group = RankGroup::create(embedThenReduce(), *backend);
  ASSERT_TRUE(group);
  Status status = (*group)->parallel([](Executor &executor) -> Status {
    if (executor.rankPlan().rank == 0)
      throw std::runtime_error("boom");
    return executor.run("p"); // waits for rank 0 in the all-reduce
  });
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "rank 0: uncaught exception: boom");

  auto single = RankGroup::create(buildTinyPlan(TinyModel()), *backend);
  ASSERT_TRUE(single);
  EXPECT_EQ((*single)->size(), 1u);
  EXPECT_TRUE((*single)->mesh().empty());
  EXPECT_EQ((*single)->run("nope").message(), "the plan has no program 'nope'");
  const std::thread::id caller = std::this_thread::get_id();
  EXPECT_TRUE((*single)->parallel([&](Executor &) {
    return std::this_thread::get_id() == caller ? Status::ok()
                                                : errorf("not inline");
  }));
}

// Tests that an executor of a rank that launches collectives needs that
// rank's communicator over the plan's mesh.
TEST(RankGroupTest, ExecutorNeedsCommunicator) {
  std::unique_ptr<Backend> backend = createCpuBackend();
  Plan plan = embedThenReduce();
  auto executor = Executor::create(plan, 1, *backend);
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "rank 1 launches collectives but has no communicator");

  InProcessWorld world(*Mesh::create({{"tp", 2}}));
  executor = Executor::create(plan, 1, *backend, *world.communicator(0));
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "rank 1 was given the communicator of rank 0");
  InProcessWorld other(*Mesh::create({{"dp", 2}}));
  executor = Executor::create(plan, 1, *backend, *other.communicator(1));
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "rank 1's communicator is over the mesh dp=2, not over the plan's "
            "mesh");
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

class MultiRankTrainingTest : public ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    writeLearnableTokens(path("tokens.u16"));
    backend_ = createCpuBackend();
  }

  using Run = TrainedRun;

  /// A run of `plan` for `steps` steps from the weights of seed 5.
  Run train(const Plan &plan, int64_t steps) {
    return trainRanks(plan, *backend_, path("tokens.u16"), 16,
                      options(steps));
  }

  static TrainingOptions options(int64_t steps) {
    TrainingOptions o;
    o.steps = steps;
    o.schedule.lr = 0.02;
    o.optimizer.weightDecay = 0.01;
    o.shuffle = true;
    o.seed = 3;
    return o;
  }

  /// Expects `sharded` to have trained like `single`: every step's loss and
  /// gradient norm, the step-1 gradients and the final weights within
  /// `tolerance` (normwise relative).
  static void expectSameTraining(const Run &sharded, const Run &single,
                                 double tolerance) {
    ASSERT_EQ(sharded.steps.size(), single.steps.size());
    for (size_t s = 0; s < single.steps.size(); ++s) {
      EXPECT_NEAR(sharded.steps[s].loss, single.steps[s].loss,
                  tolerance * single.steps[s].loss)
          << "step " << s + 1;
      EXPECT_NEAR(sharded.steps[s].gradNorm, single.steps[s].gradNorm,
                  tolerance * single.steps[s].gradNorm)
          << "step " << s + 1;
      EXPECT_EQ(sharded.steps[s].tokens, single.steps[s].tokens);
    }
    expectTensorsNear(sharded.gradients, single.gradients, tolerance,
                      "step-1 gradient");
    expectTensorsNear(sharded.weights, single.weights, tolerance,
                      "final weight");
  }

  std::unique_ptr<Backend> backend_;
};

// Tests that a single-rank plan trains bit for bit the same through a
// RankGroup as through one Executor (the path mlt-run used before meshes).
TEST_F(MultiRankTrainingTest, SingleRankGroupIsExact) {
  Plan plan = buildTinyPlan(tinyDp(1));
  Run viaGroup = train(plan, 4);

  auto executor = Executor::create(plan, 0, *backend_);
  ASSERT_TRUE(executor);
  ASSERT_TRUE(initializeParameters(**executor, 5));
  auto data = TokenDataset::open(path("tokens.u16"), plan.model.seqLen, 16);
  ASSERT_TRUE(data);
  auto trainer = Trainer::create(**executor, plan.model, *data, options(4));
  ASSERT_TRUE(trainer);
  for (int64_t s = 1; s <= 4; ++s) {
    auto m = (*trainer)->step(s);
    ASSERT_TRUE(m) << m.status().message();
    EXPECT_EQ(m->loss, viaGroup.steps[s - 1].loss);
    EXPECT_EQ(m->gradNorm, viaGroup.steps[s - 1].gradNorm);
  }
  auto weights = parameterTensors(**executor);
  ASSERT_TRUE(weights);
  for (const auto &[name, tensor] : *weights)
    EXPECT_EQ(tensor.bytes, viaGroup.weights.at(name).bytes) << name;
}

// Tests data parallelism: dp=2 ranks, each on half the rows of every
// micro-batch, with the loss and gradients all-reduced, train like the
// single-rank plan (with 1 and 2 micro-batches per step).
TEST_F(MultiRankTrainingTest, DataParallelTinyPlan) {
  for (int64_t microbatches : {1, 2}) {
    Run single = train(buildTinyPlan(tinyDp(1, microbatches)), 5);
    Run sharded = train(buildTinyPlan(tinyDp(2, microbatches)), 5);
    ASSERT_EQ(single.steps.size(), 5u);
    EXPECT_LT(single.steps.back().loss, single.steps.front().loss);
    expectSameTraining(sharded, single, 1e-6);
  }
}

// Tests a sequence split: each of two ranks reads half the positions of
// every sequence (column blocks of the micro-batch).
TEST_F(MultiRankTrainingTest, SequenceSplitTinyPlan) {
  TinyModel split = tinyDp(2);
  split.splitSequence = true;
  Plan plan = buildTinyPlan(split);
  const BufferDesc &labels =
      plan.ranks[1].buffers[*plan.ranks[1].findBuffer(kLabelsInput)];
  EXPECT_EQ(labels.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(labels.sliceOffset, (std::vector<int64_t>{0, 2}));
  expectSameTraining(train(plan, 5), train(buildTinyPlan(tinyDp(1)), 5), 1e-6);
}

// Tests tensor parallelism: the column/row-parallel MLP over tp=2, its
// partial sums completed by all-reduces, trains like the single-rank plan;
// so does the 4-rank dp=2 x tp=2 layout.
TEST_F(MultiRankTrainingTest, TensorParallelMlpPlan) {
  Run single = train(buildMlpPlan(mlp(1, 1)), 5);
  ASSERT_EQ(single.steps.size(), 5u);
  EXPECT_LT(single.steps.back().loss, single.steps.front().loss);
  expectSameTraining(train(buildMlpPlan(mlp(1, 2)), 5), single, 1e-6);
  expectSameTraining(train(buildMlpPlan(mlp(2, 2)), 5), single, 1e-6);
}

// Tests that outputs the plan does not keep replicated are caught.
TEST_F(MultiRankTrainingTest, ReplicatedOutputsAreChecked) {
  Plan plan = buildTinyPlan(tinyDp(2));
  RankPlan &rank1 = plan.ranks[1];
  rank1.buffers[*rank1.findBuffer("loss.scale")].constantValue = 0.25;
  auto group = RankGroup::create(plan, *backend_);
  ASSERT_TRUE(group);
  ASSERT_TRUE(initializeParameters(**group, 5));
  auto data = TokenDataset::open(path("tokens.u16"), plan.model.seqLen, 16);
  ASSERT_TRUE(data);
  auto trainer = Trainer::create(**group, plan.model, *data, options(2));
  ASSERT_TRUE(trainer);
  auto metrics = (*trainer)->step(1);
  ASSERT_FALSE(metrics);
  EXPECT_THAT(metrics.status().message(),
              StartsWith("the loss at step 1 differs between ranks: rank 0 "
                         "has "));
  EXPECT_THAT(metrics.status().message(),
              HasSubstr(" (the plan must compute it replicated)"));

  TrainingOptions unchecked = options(2);
  unchecked.checkReplicatedOutputs = false;
  auto lenient = Trainer::create(**group, plan.model, *data, unchecked);
  ASSERT_TRUE(lenient);
  EXPECT_TRUE((*lenient)->step(2));
}

// Tests that a NaN loss stops every rank, reported by rank 0 which reads it.
TEST_F(MultiRankTrainingTest, NaNLossStopsEveryRank) {
  Plan plan = buildMlpPlan(mlp(2, 2));
  auto group = RankGroup::create(plan, *backend_);
  ASSERT_TRUE(group);
  ASSERT_TRUE(initializeParameters(**group, 5));
  Executor &rank2 = (*group)->executor(2);
  size_t head = *rank2.findBuffer(std::string(kParameterPrefix) + kTinyHead);
  std::vector<float> nan(16 * 8, std::numeric_limits<float>::quiet_NaN());
  ASSERT_TRUE(rank2.writeFloats(head, nan.data(), int64_t(nan.size())));
  auto data = TokenDataset::open(path("tokens.u16"), plan.model.seqLen, 16);
  ASSERT_TRUE(data);
  auto trainer = Trainer::create(**group, plan.model, *data, options(2));
  ASSERT_TRUE(trainer);
  auto metrics = (*trainer)->step(1);
  ASSERT_FALSE(metrics);
  EXPECT_EQ(metrics.status().message(), "rank 0: loss is NaN at step 1");
}

//===----------------------------------------------------------------------===//
// Sharded parameters
//===----------------------------------------------------------------------===//

// Tests that fresh initialization gives each rank its block of the whole
// tensors that a single-rank plan gets, that snapshots assemble them back,
// and that loading and saving a checkpoint round-trips through the blocks.
TEST_F(MultiRankTrainingTest, ShardedParametersRoundTrip) {
  Plan single = buildMlpPlan(mlp(1, 1));
  Plan sharded = buildMlpPlan(mlp(2, 2));
  EXPECT_EQ(countParameters(sharded), countParameters(single));
  EXPECT_EQ(countParameters(sharded), 16 * 8 * 2 + 12 * 8 * 2 + 8);
  EXPECT_EQ(countParameters(sharded.ranks[0]), 16 * 8 * 2 + 6 * 8 * 2 + 8);
  ASSERT_EQ(planParameters(sharded).size(), planParameters(single).size());
  for (size_t i = 0; i < planParameters(single).size(); ++i) {
    EXPECT_EQ(planParameters(sharded)[i].name, planParameters(single)[i].name);
    EXPECT_EQ(planParameters(sharded)[i].shape,
              planParameters(single)[i].shape);
  }

  auto group = RankGroup::create(sharded, *backend_);
  ASSERT_TRUE(group);
  ASSERT_TRUE(initializeParameters(**group, 11));
  auto whole = parameterTensors(**group);
  ASSERT_TRUE(whole) << whole.status().message();
  EXPECT_EQ(whole->size(), 5u);
  for (const ExpectedTensor &p : planParameters(single)) {
    EXPECT_EQ(whole->at(p.name).shape, p.shape);
    EXPECT_EQ(*toFloat32(p.name, whole->at(p.name)),
              initialParameterValues(p.name, p.shape, 11))
        << p.name;
  }
  // Rank 3 (dp 1, tp 1) holds rows 6..11 of up_proj and columns 6..11 of
  // down_proj.
  Executor &rank3 = (*group)->executor(3);
  std::vector<float> up = initialParameterValues(kMlpUp, {12, 8}, 11);
  EXPECT_EQ(*rank3.readFloats(
                *rank3.findBuffer(std::string(kParameterPrefix) + kMlpUp)),
            std::vector<float>(up.begin() + 48, up.end()));
  std::vector<float> down = initialParameterValues(kMlpDown, {8, 12}, 11);
  std::vector<float> downBlock;
  for (int row = 0; row < 8; ++row)
    for (int col = 6; col < 12; ++col)
      downBlock.push_back(down[row * 12 + col]);
  EXPECT_EQ(*rank3.readFloats(
                *rank3.findBuffer(std::string(kParameterPrefix) + kMlpDown)),
            downBlock);

  // Through a checkpoint on disk into a fresh group: the same whole tensors.
  TensorMap changed = *whole;
  std::vector<float> values = *toFloat32(kMlpDown, changed.at(kMlpDown));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = float(i) * 0.5f;
  changed[kMlpDown] = Tensor::fromFloats(DType::F32, {8, 12}, values);
  ASSERT_TRUE(
      writeCheckpointDir(path("ckpt"), sharded.model.hfConfig, changed));
  auto loaded = readCheckpoint(path("ckpt"));
  ASSERT_TRUE(loaded) << loaded.status().message();
  auto fresh = RankGroup::create(sharded, *backend_);
  ASSERT_TRUE(fresh);
  Status status = loadParameters(**fresh, *loaded);
  ASSERT_TRUE(status) << status.message();
  auto reread = parameterTensors(**fresh);
  ASSERT_TRUE(reread);
  for (const auto &[name, tensor] : changed)
    EXPECT_EQ(reread->at(name).bytes, tensor.bytes) << name;

  // A checkpoint with a misshapen tensor is rejected by name.
  changed[kMlpUp] =
      Tensor::fromFloats(DType::F32, {6, 8}, std::vector<float>(48, 0.0f));
  status = loadParameters(**fresh, changed);
  ASSERT_FALSE(status);
  EXPECT_THAT(status.message(), HasSubstr(kMlpUp));

  // One executor of a sharded plan cannot give whole tensors.
  auto partial = parameterTensors((*group)->executor(1));
  ASSERT_FALSE(partial);
  EXPECT_THAT(partial.status().message(),
              HasSubstr("the ranks hold only 48 of its 96 elements"));
}

} // namespace
