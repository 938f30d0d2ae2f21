//===- PartitionedOptimizerTest.cpp - views, segments and ZeRO-1 ----------===//
//
// Part of mlt. The flat buffers of a partitioned optimizer (plan format 6),
// on the tiny model laid out as the compiler lays ZeRO-1 out
// (buildTinyZeroPlan): gradients and parameters as views of flat buckets,
// each rank's slice of a bucket a view at its own offset or a buffer of its
// own, holding segments of several parameters. The plans round-trip and
// verify; each rule of the verifier on views, segments and their holders
// fails with its one line; parameters initialize, load and assemble
// through the segments (padding written as zeros); and the plans train as
// the replicated data-parallel plan does, bit for bit where the arithmetic
// is the same.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"
#include "TrainingTestUtil.h"

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/train/Training.h"
#include "mlt/Support/Bf16.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cmath>
#include <limits>
#include <sstream>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using ::testing::HasSubstr;

namespace {

/// The tiny model with a vocabulary of 20 and a hidden size of 16: the
/// embedding and the head have 320 elements each, so that with 128-element
/// alignment the decay bucket has padding inside (after E) and, over three
/// ranks, slices that cut through both E and W.
TinyModel zeroModel(int64_t dp, int64_t microbatches = 1) {
  TinyModel m;
  m.vocab = 20;
  m.hidden = 16;
  m.microBatch = 6;
  m.microbatches = microbatches;
  m.dp = dp;
  return m;
}

BufferDesc &buffer(Plan &plan, uint32_t rank, const std::string &name) {
  RankPlan &r = plan.ranks[rank];
  std::optional<size_t> index = r.findBuffer(name);
  if (!index) {
    ADD_FAILURE() << "rank " << rank << " has no buffer '" << name << "'";
    return r.buffers.front();
  }
  return r.buffers[*index];
}

std::string segmentsString(const std::vector<SegmentDesc> &segments) {
  std::ostringstream os;
  for (const SegmentDesc &s : segments)
    os << s.parameter << '[' << s.begin << ':' << s.begin + s.count << ")@"
       << s.offset << ' ';
  return os.str();
}

//===----------------------------------------------------------------------===//
// The format and the verifier
//===----------------------------------------------------------------------===//

// Tests that the ZeRO-1 plans (f32 and bf16, over 1, 2 and 3 ranks) verify
// and round-trip with their views and segments, and that the three-rank
// layout is the one the comments describe: slices cutting through E and
// W, padding inside and at the end of a bucket, a slice of padding alone.
TEST(ZeroPlanTest, VerifiesAndRoundTrips) {
  for (bool bf16 : {false, true})
    for (int64_t dp : {1, 2, 3}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "f32") + " dp " +
                   std::to_string(dp));
      Plan plan = buildTinyZeroPlan(zeroModel(dp), bf16);
      std::string bytes = serializePlan(plan);
      StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
      ASSERT_TRUE(parsed) << parsed.status().message();
      for (size_t r = 0; r < plan.ranks.size(); ++r) {
        const RankPlan &a = parsed->ranks[r], &b = plan.ranks[r];
        ASSERT_EQ(a.buffers.size(), b.buffers.size());
        for (size_t i = 0; i < a.buffers.size(); ++i) {
          const BufferDesc &x = a.buffers[i], &y = b.buffers[i];
          EXPECT_EQ(x.viewOf, y.viewOf) << x.name;
          ASSERT_EQ(x.segments.size(), y.segments.size()) << x.name;
          for (size_t s = 0; s < x.segments.size(); ++s) {
            EXPECT_EQ(x.segments[s].parameter, y.segments[s].parameter);
            EXPECT_EQ(x.segments[s].fullShape, y.segments[s].fullShape);
            EXPECT_EQ(x.segments[s].sliceOffset, y.segments[s].sliceOffset);
            EXPECT_EQ(x.segments[s].blockShape, y.segments[s].blockShape);
            EXPECT_EQ(x.segments[s].begin, y.segments[s].begin);
            EXPECT_EQ(x.segments[s].count, y.segments[s].count);
            EXPECT_EQ(x.segments[s].offset, y.segments[s].offset);
          }
        }
      }
    }

  // Segments with a block round-trip too (the tiny plans' are whole).
  Plan plan = buildTinyZeroPlan(zeroModel(3));
  SegmentDesc &blocked = buffer(plan, 1, "@grad_slice.0").segments[1];
  blocked.fullShape = {20, 16};
  blocked.sliceOffset = {0, 0};
  blocked.blockShape = {20, 16};
  std::string bytes = serializePlan(plan);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();
  const SegmentDesc &back = parsed->ranks[1]
                                .buffers[*parsed->ranks[1].findBuffer(
                                    "@grad_slice.0")]
                                .segments[1];
  EXPECT_EQ(back.fullShape, (std::vector<int64_t>{20, 16}));
  EXPECT_EQ(back.sliceOffset, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(back.blockShape, (std::vector<int64_t>{20, 16}));

  // Bucket 0 is E at [0, 320), padding, W at [384, 704), padding: 768
  // elements, a slice of 256 each.
  Plan three = buildTinyZeroPlan(zeroModel(3), /*bf16=*/true);
  EXPECT_EQ(segmentsString(buffer(three, 0, "@param_slice.0").segments),
            "model.embed_tokens.weight[0:256)@0 ");
  EXPECT_EQ(segmentsString(buffer(three, 1, "@param_slice.0").segments),
            "model.embed_tokens.weight[256:320)@0 lm_head.weight[0:128)@128 ");
  EXPECT_EQ(segmentsString(buffer(three, 2, "@param_slice.0").segments),
            "lm_head.weight[128:320)@0 ");
  EXPECT_EQ(segmentsString(buffer(three, 0, "@param_slice.1").segments),
            "model.norm.weight[0:16)@0 ");
  EXPECT_TRUE(buffer(three, 2, "@param_slice.1").segments.empty());
  // The rank's slice of the gradients is a view at its own offset.
  const BufferDesc &bucket = buffer(three, 2, "@grad_bucket.0");
  const BufferDesc &slice = buffer(three, 2, "@grad_slice.0");
  EXPECT_EQ(slice.offset, bucket.offset + 2 * 256 * 4);
  EXPECT_EQ(size_t(slice.viewOf), *three.ranks[2].findBuffer("@grad_bucket.0"));
  // No parameter buffer names a parameter in bf16: the master weights are
  // the slices.
  for (const RankPlan &rank : three.ranks)
    for (const BufferDesc &b : rank.buffers)
      if (b.kind == BufferKind::Parameter)
        EXPECT_EQ(b.parameter, "") << b.name;
}

// Tests the checks of a view: its base in range, not itself, not a view;
// one copy each; the same element type; inside the base; a persistent view
// of a persistent base.
TEST(ZeroPlanTest, ViewErrors) {
  auto broken = [](auto &&change) {
    Plan plan = buildTinyZeroPlan(zeroModel(2));
    change(plan.ranks[0]);
    return parseError(plan);
  };
  auto view = [](RankPlan &rank, const std::string &name) -> BufferDesc & {
    return rank.buffers[*rank.findBuffer(name)];
  };
  const std::string prefix = "plan.mltplan: rank 0: ";
  EXPECT_EQ(broken([&](RankPlan &r) { view(r, "grad:lm_head.weight").viewOf = 999; }),
            prefix + "buffer 'grad:lm_head.weight' is a view of buffer index "
                     "999, but the rank has " +
                std::to_string(buildTinyZeroPlan(zeroModel(2))
                                   .ranks[0]
                                   .buffers.size()) +
                " buffers");
  EXPECT_EQ(broken([&](RankPlan &r) {
              view(r, "grad:lm_head.weight").viewOf =
                  int32_t(*r.findBuffer("grad:lm_head.weight"));
            }),
            prefix + "buffer 'grad:lm_head.weight' is a view of itself");
  EXPECT_EQ(broken([&](RankPlan &r) {
              view(r, "grad:lm_head.weight").viewOf =
                  int32_t(*r.findBuffer("@grad_slice.0"));
            }),
            prefix + "buffer 'grad:lm_head.weight' is a view of "
                     "'@grad_slice.0', which is itself a view (a view's base "
                     "is not)");
  // A view of a temporary with a copy per slot.
  EXPECT_THAT(broken([&](RankPlan &r) {
                BufferDesc &x = view(r, "x");
                x.copies = 2;
                x.copyIndex = CopyIndex::Slot;
                r.arenaBytes += x.copyStride();
                view(r, "h").viewOf = int32_t(*r.findBuffer("x"));
                view(r, "h").offset = x.offset;
              }),
              HasSubstr("view 'h' has 1 copies and its base 'x' 2; both must "
                        "have one"));
  EXPECT_EQ(broken([&](RankPlan &r) {
              BufferDesc &grad = view(r, "grad:model.norm.weight");
              grad.dtype = ElementType::BF16;
              grad.bytes /= 2;
            }),
            prefix + "view 'grad:model.norm.weight' is bf16 but its base "
                     "'@grad_bucket.1' is f32 (a view has its base's element "
                     "type)");
  EXPECT_THAT(broken([&](RankPlan &r) {
                view(r, "grad:lm_head.weight").offset += 512 * 4;
              }),
              HasSubstr("view 'grad:lm_head.weight' at ["));
  EXPECT_THAT(broken([&](RankPlan &r) {
                view(r, "grad:lm_head.weight").offset += 512 * 4;
              }),
              HasSubstr(") is not inside its base '@grad_bucket.0' at ["));
  EXPECT_EQ(broken([&](RankPlan &r) {
              view(r, "grad:model.norm.weight").viewOf =
                  int32_t(*r.findBuffer("dE"));
              view(r, "grad:model.norm.weight").offset = view(r, "dE").offset;
            }),
            prefix + "view 'grad:model.norm.weight' (gradient) is persistent, "
                     "but its base 'dE' is a temporary");
}

// Tests the arena checks around views: a view and its base, and two views
// of one base, may share bytes; a buffer that is not declared a view may
// not; a temporary may alias a view exactly, but not cut into a bucket.
TEST(ZeroPlanTest, ViewOverlaps) {
  Plan plan = buildTinyZeroPlan(zeroModel(2));
  // The slice of rank 1 overlaps W's gradient, which overlaps the bucket.
  EXPECT_EQ(parseError(plan), "");
  buffer(plan, 0, "grad:lm_head.weight").viewOf = -1;
  EXPECT_THAT(parseError(plan),
              HasSubstr("buffers '@grad_bucket.0' and 'grad:lm_head.weight' "
                        "overlap in the arena"));

  plan = buildTinyZeroPlan(zeroModel(2));
  // dE and W's gradient have the same size and no launch in common.
  BufferDesc &dE = buffer(plan, 0, "dE");
  dE.offset = buffer(plan, 0, "grad:lm_head.weight").offset;
  EXPECT_EQ(parseError(plan), "") << "a temporary exactly over a view";
  dE.offset += 256;
  EXPECT_THAT(parseError(plan), HasSubstr("temporary 'dE' at ["));
  EXPECT_THAT(parseError(plan), HasSubstr(") overlaps gradient "
                                          "'@grad_bucket.0' at ["));
}

// Tests that the race check sees through names: a launch on a side stream
// that accumulates into W's gradient (a view) and a later compute launch
// that reads the gradient bucket touch the same bytes, and must be ordered
// by a token.
TEST(ZeroPlanTest, RacesThroughViews) {
  Plan plan = buildTinyZeroPlan(zeroModel(2));
  RankPlan &rank = plan.ranks[1];
  ProgramDesc &micro = rank.programs[0];
  ASSERT_EQ(micro.name, kMicroStepProgram);
  const uint32_t gradW = uint32_t(*rank.findBuffer("grad:lm_head.weight"));
  size_t accumulate = 0;
  while (micro.instructions[accumulate].kernel != Kernel::Accumulate ||
         micro.instructions[accumulate].outputs[0] != gradW)
    ++accumulate;
  // It waits for the matmul that computes dW.
  micro.instructions[accumulate - 1].token = 1;
  micro.instructions[accumulate].stream = 1;
  micro.instructions[accumulate].waits = {1};
  micro.instructions[accumulate].token = 0;
  // The sum of squares of the whole bucket, into a scalar of its own.
  BufferDesc scalar = rank.buffers[*rank.findBuffer("sumsq.0")];
  scalar.name = "bucket.sumsq";
  scalar.offset = rank.arenaBytes;
  rank.arenaBytes += 256;
  rank.buffers.push_back(scalar);
  InstructionDesc square;
  square.kernel = Kernel::SumSquares;
  square.inputs = {uint32_t(*rank.findBuffer("@grad_bucket.0"))};
  square.outputs = {uint32_t(rank.buffers.size() - 1)};
  square.ints = {768};
  micro.instructions.push_back(square);
  const std::string race =
      "plan.mltplan: rank 1: program 'micro_step': instruction " +
      std::to_string(accumulate) + " (accumulate, stream 1) and instruction " +
      std::to_string(micro.instructions.size() - 1) +
      " (sum_squares, stream 0) touch the same bytes ('grad:lm_head.weight' "
      "and '@grad_bucket.0'), one writing them, but no token orders them";
  EXPECT_EQ(parseError(plan), race);
  micro.instructions.back().waits = {0};
  EXPECT_EQ(parseError(plan), "");
}

// Tests the checks of a buffer's segments on their own: where segments may
// be, and each segment's parameter, count, place in the buffer, order,
// block and range.
TEST(ZeroPlanTest, SegmentErrors) {
  auto broken = [](const std::string &name, auto &&change) {
    Plan plan = buildTinyZeroPlan(zeroModel(3));
    change(buffer(plan, 1, name));
    return parseError(plan);
  };
  const std::string prefix = "plan.mltplan: rank 1: ";
  const std::string slice = "buffer '@exp_avg_slice.0' segment ";
  EXPECT_EQ(broken("x",
                   [](BufferDesc &b) {
                     b.segments.push_back(SegmentDesc{"lm_head.weight", {},
                                                      {}, {}, 0, 1, 0});
                   }),
            prefix + "buffer 'x' (temporary) has segments; only parameter, "
                     "gradient and optimizer-state buffers may");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) { b.parameter = "lm_head.weight"; }),
            prefix + "buffer '@exp_avg_slice.0' has segments but names "
                     "parameter 'lm_head.weight' (a buffer holds one "
                     "parameter or segments of several)");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) {
                     b.fullShape = {512};
                     b.sliceOffset = {256};
                   }),
            prefix + "buffer '@exp_avg_slice.0' has segments but is a block "
                     "of a larger tensor (segments give their own blocks)");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) { b.segments[1].parameter = ""; }),
            prefix + slice + "1 names no parameter");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) { b.segments[1].count = 0; }),
            prefix + slice + "1 ('lm_head.weight') has count 0 (a segment "
                             "holds at least one element)");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) { b.segments[1].offset = 200; }),
            prefix + slice + "1 ('lm_head.weight') at elements [200, 328) "
                             "lies outside the buffer's 256 elements");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) { b.segments[1].offset = 32; }),
            prefix + slice + "1 ('lm_head.weight') at elements [32, 160) "
                             "starts before segment 0 ends at 64 (segments "
                             "are in increasing offset and disjoint)");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) {
                     b.segments[1].fullShape = {20, 16};
                     b.segments[1].sliceOffset = {0};
                   }),
            prefix + slice + "1 ('lm_head.weight') has full_shape [20, 16], "
                             "slice_offset [0] and block_shape []; the three "
                             "are empty (the whole tensor) or of one rank");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) {
                     b.segments[1].fullShape = {20, 16};
                     b.segments[1].sliceOffset = {12, 0};
                     b.segments[1].blockShape = {10, 16};
                   }),
            prefix + slice + "1 ('lm_head.weight') holds the block [12:22, "
                             "0:16] of [20, 16], out of bounds in dimension 0");
  EXPECT_EQ(broken("@exp_avg_slice.0",
                   [](BufferDesc &b) {
                     b.segments[1].fullShape = {20, 16};
                     b.segments[1].sliceOffset = {0, 0};
                     b.segments[1].blockShape = {4, 16};
                   }),
            prefix + slice + "1 ('lm_head.weight') holds elements [0, 128) "
                             "of [0:4, 0:16] of [20, 16], which has 64 "
                             "elements");
}

// Tests the training contract around segments: flat buffers may name no
// parameter; parameters held by segments are covered once (replicas
// allowed, overlaps and holes not); a segment of the whole tensor needs a
// buffer giving the shape and stays inside it; one full shape and decay
// across named buffers and segments; gradients and compute copies of a
// parameter held only by segments; segments of gradients name parameters.
TEST(ZeroPlanTest, ContractErrors) {
  // A flat buffer with no views, no segments and no parameter holds
  // nothing the runtime can name.
  for (BufferKind kind : {BufferKind::Parameter, BufferKind::Gradient,
                          BufferKind::OptimizerState}) {
    Plan plan = buildTinyZeroPlan(zeroModel(2));
    BufferDesc stray = buffer(plan, 0, "@exp_avg_slice.1");
    stray.name = "stray";
    stray.kind = kind;
    stray.segments.clear();
    stray.offset = plan.ranks[0].arenaBytes;
    plan.ranks[0].arenaBytes += stray.copyStride();
    plan.ranks[0].buffers.push_back(stray);
    EXPECT_EQ(parseError(plan), std::string("plan.mltplan: rank 0: ") +
                                    bufferKindName(kind) +
                                    " buffer 'stray' does not name its "
                                    "parameter");
  }

  // A slice of padding alone is flat when a buffer of its name has
  // segments elsewhere; with no segments anywhere, it names nothing.
  Plan padding = buildTinyZeroPlan(zeroModel(3), true);
  EXPECT_TRUE(buffer(padding, 2, "@exp_avg_slice.1").segments.empty());
  buffer(padding, 0, "@exp_avg_slice.1").segments.clear();
  EXPECT_EQ(parseError(padding),
            "plan.mltplan: rank 0: optimizer_state buffer '@exp_avg_slice.1' "
            "does not name its parameter");

  // A hole: rank 1 no longer holds its part of E.
  Plan plan = buildTinyZeroPlan(zeroModel(3), true);
  std::vector<SegmentDesc> &middle = buffer(plan, 1, "@param_slice.0").segments;
  middle.erase(middle.begin());
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.embed_tokens.weight' of shape "
            "[20, 16] is not covered by the ranks' segments: they hold 256 of "
            "its 320 elements (some element is held by no rank)");

  // Overlapping ranges of one block.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 1, "@param_slice.0").segments[0].begin = 200;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.embed_tokens.weight' has the "
            "ranges [0, 256) in segment 0 of '@param_slice.0' on rank 0 and "
            "[200, 264) in segment 0 of '@param_slice.0' on rank 1 of its "
            "block [0:20, 0:16] of [20, 16], which overlap without being the "
            "same range");

  // A replica: rank 2 holds g's range too, as rank 0 does (its gradient
  // and moments with it: the optimizer updates the range from them; f32,
  // with no compute copy, which lies at the slice's place in its bucket).
  plan = buildTinyZeroPlan(zeroModel(3));
  for (const char *slice : {"@param_slice.1", "@grad_slice.1",
                            "@exp_avg_slice.1", "@exp_avg_sq_slice.1"})
    buffer(plan, 2, slice).segments = buffer(plan, 0, slice).segments;
  EXPECT_EQ(parseError(plan), "");
  // Without them, the optimizer's launch would update it from padding.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 2, "@param_slice.1").segments =
      buffer(plan, 0, "@param_slice.1").segments;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 2: program 'optimizer_step' instruction 10 "
            "(adamw) tensor 0: its gradient '@grad_slice.1' holds no "
            "parameter, but its parameter '@param_slice.1' holds segments of "
            "'model.norm.weight'");

  // Blocks of one parameter that overlap without being one block (f32:
  // the views naming E give each rank its shape and block).
  plan = buildTinyZeroPlan(zeroModel(3));
  for (uint32_t r : {0u, 1u}) {
    SegmentDesc &e = buffer(plan, r, "@param_slice.0").segments[0];
    e.fullShape = {20, 16};
    e.sliceOffset = {0, 0};
    e.blockShape = r == 0 ? std::vector<int64_t>{16, 16}
                          : std::vector<int64_t>{4, 16};
    if (r == 1) {
      e.sliceOffset = {12, 0};
      e.begin = 0;
    }
  }
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.embed_tokens.weight' has the "
            "blocks [0:16, 0:16] of [20, 16] in segment 0 of '@param_slice.0' "
            "on rank 0 and [12:16, 0:16] of [20, 16] in segment 0 of "
            "'@param_slice.0' on rank 1, which overlap without being the same "
            "block");

  // A whole-tensor segment past the tensor's end (the buffer cannot tell).
  plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 0, "@param_slice.1").segments[0].count = 20;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 0: buffer '@param_slice.1' segment 0 "
            "('model.norm.weight') holds elements [0, 20) of the whole "
            "tensor, which has 16 elements");

  // No buffer names g any more, and no segment gives its shape.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  for (RankPlan &rank : plan.ranks)
    for (BufferDesc &b : rank.buffers)
      if (b.parameter == kTinyNorm)
        b.parameter.clear();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.norm.weight' is held by segments "
            "of the whole tensor (in segment 0 of '@param_slice.1' on rank "
            "0), but no buffer names it and no segment gives its shape");

  // One full shape: a segment's block says another.
  plan = buildTinyZeroPlan(zeroModel(3));
  SegmentDesc &w = buffer(plan, 2, "@param_slice.0").segments[0];
  w.fullShape = {40, 8};
  w.sliceOffset = {0, 0};
  w.blockShape = {40, 8};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'lm_head.weight' has full shape [20, 16] "
            "on rank 0 but [40, 8] in segment 0 of '@param_slice.0' on rank "
            "2");

  // One decay: the views naming E and the slice holding it agree.
  plan = buildTinyZeroPlan(zeroModel(3));
  buffer(plan, 1, "@param_slice.0").decay = false;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: parameter 'model.embed_tokens.weight' has decay on "
            "on rank 0 but off in segment 0 of '@param_slice.0' on rank 1");

  // A compute copy of a parameter held only by segments holds a block that
  // the segments are of.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  BufferDesc &copy = buffer(plan, 2, "param_bf16:model.norm.weight");
  copy.fullShape = {32};
  copy.sliceOffset = {0};
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 2: parameter_copy buffer "
            "'param_bf16:model.norm.weight' holds the block [0:16] of [32], "
            "but the segments holding its parameter are of the whole tensor");
  // ... and is narrower than their f32.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  for (RankPlan &rank : plan.ranks)
    for (BufferDesc &b : rank.buffers)
      if (b.kind == BufferKind::Parameter) {
        b.dtype = ElementType::BF16;
        b.bytes /= 2;
      }
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 0: parameter_copy buffer "
            "'param_bf16:model.embed_tokens.weight' is bf16 of an bf16 "
            "parameter; expected bf16 or f16 of an f32 parameter");

  // A gradient naming a parameter that nothing holds.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 2, "grad:model.norm.weight").parameter = "model.nope";
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 2: gradient buffer 'grad:model.norm.weight' "
            "names parameter 'model.nope', which has no parameter buffer on "
            "this rank and no parameter segments");
  // A gradient segment of a parameter that nothing holds.
  plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 1, "@grad_slice.0").segments[1].parameter = "model.nope";
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: rank 1: gradient buffer '@grad_slice.0' segment 1 "
            "names parameter 'model.nope', which has no parameter buffer and "
            "no parameter segments");
}

// Tests that --print-plan shows views and segments, and nothing new for a
// plan without them.
TEST(ZeroPlanTest, Print) {
  Plan plan = buildTinyZeroPlan(zeroModel(3), true);
  buffer(plan, 1, "@grad_slice.0").segments[1].fullShape = {20, 16};
  buffer(plan, 1, "@grad_slice.0").segments[1].sliceOffset = {0, 0};
  buffer(plan, 1, "@grad_slice.0").segments[1].blockShape = {20, 16};
  std::ostringstream os;
  printPlan(plan, os);
  const std::string text = os.str();
  EXPECT_THAT(text, HasSubstr("  view of @grad_bucket.0\n"));
  EXPECT_THAT(text, HasSubstr("parameter model.norm.weight  view of "
                              "@param_bf16_bucket.1\n"));
  EXPECT_THAT(text,
              HasSubstr("  segments: model.embed_tokens.weight[256:320)@0, "
                        "lm_head.weight[0:128)@128\n"));
  EXPECT_THAT(text, HasSubstr("  view of @grad_bucket.0  segments: "
                              "model.embed_tokens.weight[256:320)@0, "
                              "lm_head.weight{[0:20, 0:16] of [20, "
                              "16]}[0:128)@128\n"));

  std::ostringstream plain;
  printPlan(buildTinyPlan(TinyModel()), plain);
  EXPECT_THAT(plain.str(), ::testing::Not(HasSubstr("view of")));
  EXPECT_THAT(plain.str(), ::testing::Not(HasSubstr("segments")));
}

//===----------------------------------------------------------------------===//
// Parameters and training
//===----------------------------------------------------------------------===//

class ZeroTrainingTest : public ScratchDirTest {
protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    writeLearnableTokens(path("tokens.u16"));
    backend_ = createCpuBackend();
  }

  /// A run (TrainedRun), with rank 0's gradient buffer of the head at step
  /// 1, as the executor holds it.
  struct Run : TrainedRun {
    std::vector<float> rank0HeadGradient;
  };

  Run train(const Plan &plan, int64_t steps, double maxGradNorm) {
    TrainingOptions o;
    o.steps = steps;
    o.schedule.lr = 0.02;
    o.optimizer.weightDecay = 0.01;
    o.optimizer.maxGradNorm = maxGradNorm;
    o.seed = 3;
    Run result;
    static_cast<TrainedRun &>(result) = trainRanks(
        plan, *backend_, path("tokens.u16"), plan.model.vocabSize, o,
        [&](RankGroup &group) -> Status {
          Executor &rank0 = group.executor(0);
          auto head = rank0.readFloats(
              *rank0.findBuffer(std::string(kGradientPrefix) + kTinyHead));
          if (!head)
            return head.takeStatus();
          result.rank0HeadGradient = std::move(*head);
          return Status::ok();
        });
    return result;
  }

  std::unique_ptr<Backend> backend_;
};

// Tests initialization through segments: every rank's slice holds its
// ranges of the whole tensors that a single-rank plan gets, zeros in its
// padding (even over garbage), the views naming a parameter hold it whole
// (f32), the compute copies hold it rounded once refreshed (bf16), and
// snapshots assemble the whole tensors back from the segments.
TEST_F(ZeroTrainingTest, InitializeThroughSegments) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    Plan plan = buildTinyZeroPlan(zeroModel(3), bf16);
    const std::vector<ExpectedTensor> parameters = planParameters(plan);
    ASSERT_EQ(parameters.size(), 3u);
    EXPECT_EQ(countParameters(plan), 20 * 16 * 2 + 16);
    // Rank 1 holds E[256:320) and W[0:128).
    // Rank 1's segments of E and W, and in f32 the view of g (which no
    // segment of rank 1 holds).
    EXPECT_EQ(countParameters(plan.ranks[1]), bf16 ? 64 + 128 : 64 + 128 + 16);
    // Every rank knows every parameter (its compute copies, its views).
    EXPECT_EQ(planParameters(plan.ranks[2]).size(), 3u);

    auto group = RankGroup::create(plan, *backend_);
    ASSERT_TRUE(group) << group.status().message();
    // Garbage where the padding is, to see it written: in every slice
    // with segments (a slice of padding alone, as rank 1's and 2's of g's
    // bucket, holds nothing and is left as the arena started: zero).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (uint32_t r = 0; r < 3; ++r)
      for (const char *name : {"@param_slice.0", "@param_slice.1"}) {
        Executor &executor = (*group)->executor(r);
        size_t index = *executor.findBuffer(name);
        if (executor.buffer(index).segments.empty())
          continue;
        std::vector<float> junk(executor.buffer(index).numElements(), nan);
        ASSERT_TRUE(executor.writeFloats(index, junk.data(),
                                         int64_t(junk.size())));
      }
    ASSERT_TRUE(initializeParameters(**group, 11));

    std::map<std::string, std::vector<float>> values;
    for (const ExpectedTensor &p : parameters)
      values[p.name] = initialParameterValues(p.name, p.shape, 11);
    for (uint32_t r = 0; r < 3; ++r) {
      Executor &executor = (*group)->executor(r);
      for (const char *name : {"@param_slice.0", "@param_slice.1"}) {
        const BufferDesc &slice = executor.buffer(*executor.findBuffer(name));
        std::vector<float> expected(size_t(slice.numElements()), 0.0f);
        for (const SegmentDesc &s : slice.segments)
          std::copy(values[s.parameter].begin() + s.begin,
                    values[s.parameter].begin() + s.begin + s.count,
                    expected.begin() + s.offset);
        EXPECT_EQ(*executor.readFloats(*executor.findBuffer(name)), expected)
            << "rank " << r << " " << name;
      }
      if (!bf16)
        for (const ExpectedTensor &p : parameters)
          EXPECT_EQ(*executor.readFloats(*executor.findBuffer(
                        std::string(kParameterPrefix) + p.name)),
                    values[p.name])
              << "rank " << r << " " << p.name;
    }
    if (bf16) {
      // The first program the ranks run refreshes the copies: cast, then
      // the all-gather of every rank's slice.
      ASSERT_TRUE((*group)->parallel([](Executor &executor) {
        return executor.run(kRefreshCopiesProgram);
      }));
      for (uint32_t r = 0; r < 3; ++r) {
        Executor &executor = (*group)->executor(r);
        for (const ExpectedTensor &p : parameters) {
          std::vector<float> rounded = values[p.name];
          for (float &x : rounded)
            x = bf16ToFloat(floatToBF16(x));
          EXPECT_EQ(*executor.readFloats(
                        *executor.findBuffer("param_bf16:" + p.name)),
                    rounded)
              << "rank " << r << " " << p.name;
        }
      }
    }

    auto whole = parameterTensors(**group);
    ASSERT_TRUE(whole) << whole.status().message();
    ASSERT_EQ(whole->size(), 3u);
    for (const ExpectedTensor &p : parameters) {
      EXPECT_EQ(whole->at(p.name).shape, p.shape);
      EXPECT_EQ(*toFloat32(p.name, whole->at(p.name)), values[p.name])
          << p.name;
    }
    // The optimizer states of a parameter held by segments, by slice.
    auto moments = parameterTensors(**group, BufferKind::OptimizerState);
    ASSERT_TRUE(moments) << moments.status().message();
    EXPECT_EQ(moments->size(), 6u);
    EXPECT_EQ(moments->at("@exp_avg_slice.0[lm_head.weight]").shape,
              (std::vector<int64_t>{20, 16}));
  }
}

// Tests loading a checkpoint through the segments, and what a partial view
// of the ranks says: one rank of three cannot assemble E.
TEST_F(ZeroTrainingTest, LoadThroughSegments) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    Plan plan = buildTinyZeroPlan(zeroModel(3), bf16);
    TensorMap checkpoint;
    for (const ExpectedTensor &p : planParameters(plan)) {
      std::vector<float> values(size_t(p.shape[0] * (p.shape.size() > 1
                                                         ? p.shape[1]
                                                         : 1)));
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = float(i) * 0.25f - float(p.name.size());
      checkpoint[p.name] = Tensor::fromFloats(DType::F32, p.shape, values);
    }
    auto group = RankGroup::create(plan, *backend_);
    ASSERT_TRUE(group);
    Status loaded = loadParameters(**group, checkpoint);
    ASSERT_TRUE(loaded) << loaded.message();
    auto whole = parameterTensors(**group);
    ASSERT_TRUE(whole) << whole.status().message();
    for (const auto &[name, tensor] : checkpoint)
      EXPECT_EQ(whole->at(name).bytes, tensor.bytes) << name;

    // Each rank alone loads the same checkpoint (as each process does).
    for (uint32_t r = 0; r < 3; ++r)
      EXPECT_TRUE(loadParameters((*group)->executor(r), checkpoint))
          << "rank " << r;

    // Rank 2 alone holds W[128:320) (in f32 its views name W too, but
    // segments hold W, so they do not count).
    auto partial = parameterTensors((*group)->executor(2));
    ASSERT_FALSE(partial);
    EXPECT_EQ(partial.status().message(),
              "'lm_head.weight' of shape [20, 16]: the ranks hold only 192 "
              "of its 320 elements");
  }
}

// Tests a rank that holds no parameter at all (over 4 ranks, rank 3's
// slices are padding alone): initialization writes nothing there, yet it
// must refresh its compute copies with the others, since the refresh
// all-gathers; and the run is the one-rank run's.
TEST_F(ZeroTrainingTest, RankHoldingNoParameter) {
  TinyModel four = zeroModel(4);
  four.microBatch = 8;
  Plan plan = buildTinyZeroPlan(four, true);
  for (const BufferDesc &b : plan.ranks[3].buffers)
    EXPECT_TRUE(b.segments.empty()) << b.name;
  TinyModel one = zeroModel(1);
  one.microBatch = 8;
  Run a = train(plan, 3, 1.0), b = train(buildTinyZeroPlan(one, true), 3, 1.0);
  ASSERT_EQ(a.steps.size(), 3u);
  ASSERT_EQ(b.steps.size(), 3u);
  for (size_t s = 0; s < 3; ++s)
    EXPECT_NEAR(a.steps[s].loss, b.steps[s].loss, 1e-5 * b.steps[s].loss);
  expectTensorsNear(a.weights, b.weights, 1e-5, "final weight");
}

// Tests that assembling checks the holders the verifier leaves alone (it
// checks the coverage of parameters, not of gradients): segments of one
// gradient that overlap, or leave a hole, are named.
TEST_F(ZeroTrainingTest, GradientSegmentsAreChecked) {
  Plan plan = buildTinyZeroPlan(zeroModel(3));
  buffer(plan, 1, "@grad_slice.0").segments[0].begin = 200;
  auto group = RankGroup::create(plan, *backend_);
  ASSERT_TRUE(group) << group.status().message();
  auto grads = parameterTensors(**group, BufferKind::Gradient);
  ASSERT_FALSE(grads);
  EXPECT_EQ(grads.status().message(),
            "'model.embed_tokens.weight' of shape [20, 16]: segment 0 of "
            "'@grad_slice.0' on rank 0 holds elements [0, 256) and segment 0 "
            "of '@grad_slice.0' on rank 1 elements [200, 264) of one block, "
            "which overlap");

  plan = buildTinyZeroPlan(zeroModel(3));
  buffer(plan, 2, "@grad_slice.0").segments.clear();
  group = RankGroup::create(plan, *backend_);
  ASSERT_TRUE(group) << group.status().message();
  grads = parameterTensors(**group, BufferKind::Gradient);
  ASSERT_FALSE(grads);
  EXPECT_EQ(grads.status().message(),
            "'lm_head.weight' of shape [20, 16]: the ranks hold only 128 of "
            "its 320 elements");
}

// Tests training: the f32 ZeRO-1 plan over 3 ranks trains as the
// replicated data-parallel plan over 3 ranks: with clipping off, bit for
// bit (the reduce-scatter sums in the all-reduce's order, AdamW is the
// same per element); with clipping, within rounding (the norm sums the
// squares in another order). The step-1 gradients are the reduced ones of
// the slices, not the local ones of the views naming the parameters.
TEST_F(ZeroTrainingTest, TrainsLikeReplicatedDataParallel) {
  for (int64_t microbatches : {1, 2}) {
    SCOPED_TRACE("micro-batches " + std::to_string(microbatches));
    Plan zero = buildTinyZeroPlan(zeroModel(3, microbatches));
    Plan replicated = buildTinyPlan(zeroModel(3, microbatches));
    Run a = train(zero, 4, 0.0), b = train(replicated, 4, 0.0);
    ASSERT_EQ(a.steps.size(), 4u);
    ASSERT_EQ(b.steps.size(), 4u);
    EXPECT_LT(b.steps.back().loss, b.steps.front().loss);
    for (size_t s = 0; s < 4; ++s) {
      EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << "step " << s + 1;
      EXPECT_NEAR(a.steps[s].gradNorm, b.steps[s].gradNorm,
                  1e-6 * b.steps[s].gradNorm)
          << "step " << s + 1;
    }
    expectTensorsNear(a.gradients, b.gradients, 0, "step-1 gradient");
    expectTensorsNear(a.weights, b.weights, 0, "final weight");
    // Rank 0's view of W's gradient is its local part, not the sum.
    EXPECT_NE(a.rank0HeadGradient,
              *toFloat32(kTinyHead, a.gradients.at(kTinyHead)));

    // Clipping: the coefficient comes from a norm summed in another order.
    Run c = train(zero, 4, 0.5), d = train(replicated, 4, 0.5);
    ASSERT_EQ(c.steps.size(), 4u);
    for (size_t s = 0; s < 4; ++s)
      EXPECT_NEAR(c.steps[s].loss, d.steps[s].loss, 1e-6 * d.steps[s].loss);
    EXPECT_GT(c.steps[0].gradNorm, 0.5) << "clipping must be active";
    expectTensorsNear(c.weights, d.weights, 1e-6, "clipped final weight");
  }
}

// Tests the bf16 ZeRO-1 plan: over 3 ranks it trains as over 1. Rows are
// independent in this model and each row's loss gradient is the same
// (1/3 of the mean over 8 rows is the mean over 24), so every bf16
// activation is the same bits on either layout; what differs is the
// order of the f32 sums over rows in the weight gradients (split over the
// ranks, then reduced), f32 rounding: about 1e-7 here. 1e-5 leaves room
// for four steps of it, while a segment read or written in the wrong place
// is off by the size of the weights.
TEST_F(ZeroTrainingTest, MixedPrecisionTrainsOverRanks) {
  Run one = train(buildTinyZeroPlan(zeroModel(1), true), 4, 1.0);
  Run three = train(buildTinyZeroPlan(zeroModel(3), true), 4, 1.0);
  ASSERT_EQ(one.steps.size(), 4u);
  ASSERT_EQ(three.steps.size(), 4u);
  EXPECT_LT(one.steps.back().loss, one.steps.front().loss);
  for (size_t s = 0; s < 4; ++s)
    EXPECT_NEAR(three.steps[s].loss, one.steps[s].loss,
                1e-5 * one.steps[s].loss)
        << "step " << s + 1;
  expectTensorsNear(three.gradients, one.gradients, 1e-5, "step-1 gradient");
  expectTensorsNear(three.weights, one.weights, 1e-5, "final weight");
}

// Tests segments of blocks: the tensor-parallel blocks of the MLP plan
// (column blocks of down_proj, row blocks of up_proj, on dp x tp = 2 x 2
// ranks, so every block is held on two ranks) held by segments of flat
// buffers instead of buffers naming their parameter. The plan computes
// the same bytes, so it trains bit for bit as the plan it came from; and
// initialization writes each segment its range of its block, which
// assembling reads back.
TEST_F(ZeroTrainingTest, SegmentsOfBlocks) {
  MlpModel m;
  m.dp = 2;
  m.tp = 2;
  const Plan plain = buildMlpPlan(m);
  const Plan segmented = withParameterSegments(plain, {kMlpUp, kMlpDown});
  ASSERT_EQ(parseError(segmented), "");
  EXPECT_EQ(countParameters(segmented), countParameters(plain));
  EXPECT_EQ(countParameters(segmented.ranks[3]),
            countParameters(plain.ranks[3]));

  auto group = RankGroup::create(segmented, *backend_);
  ASSERT_TRUE(group) << group.status().message();
  ASSERT_TRUE(initializeParameters(**group, 7));
  // Rank 3 (tp 1) holds columns 6..11 of down_proj [8, 12], elements
  // [0, 24) and [24, 48) of that block.
  Executor &rank3 = (*group)->executor(3);
  std::vector<float> down = initialParameterValues(kMlpDown, {8, 12}, 7);
  std::vector<float> block;
  for (int row = 0; row < 8; ++row)
    for (int col = 6; col < 12; ++col)
      block.push_back(down[row * 12 + col]);
  EXPECT_EQ(*rank3.readFloats(*rank3.findBuffer(
                std::string("@param_block:") + kMlpDown)),
            block);
  auto whole = parameterTensors(**group);
  ASSERT_TRUE(whole) << whole.status().message();
  for (const ExpectedTensor &p : planParameters(plain))
    EXPECT_EQ(*toFloat32(p.name, whole->at(p.name)),
              initialParameterValues(p.name, p.shape, 7))
        << p.name;

  Run a = train(segmented, 3, 1.0), b = train(plain, 3, 1.0);
  ASSERT_EQ(a.steps.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(a.steps[s].loss, b.steps[s].loss);
    EXPECT_EQ(a.steps[s].gradNorm, b.steps[s].gradNorm);
  }
  expectTensorsNear(a.gradients, b.gradients, 0, "step-1 gradient");
  expectTensorsNear(a.weights, b.weights, 0, "final weight");

  // A replica's range that differs from the other's overlaps it.
  Plan overlapping = segmented;
  BufferDesc &replica = buffer(overlapping, 3,
                               std::string("@param_block:") + kMlpDown);
  replica.segments[0].count += 1;
  replica.segments[1].begin += 1;
  replica.segments[1].offset += 1;
  replica.segments[1].count -= 1;
  EXPECT_EQ(parseError(overlapping),
            "plan.mltplan: parameter 'model.mlp.down_proj.weight' has the "
            "ranges [0, 24) in segment 0 of "
            "'@param_block:model.mlp.down_proj.weight' on rank 1 and [0, 25) "
            "in segment 0 of '@param_block:model.mlp.down_proj.weight' on "
            "rank 3 of its block [0:8, 6:12] of [8, 12], which overlap "
            "without being the same range");
}

} // namespace
