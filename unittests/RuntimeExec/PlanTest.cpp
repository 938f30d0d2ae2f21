//===- PlanTest.cpp - reading, writing and verifying plans ----------------===//
//
// Part of mlt. A plan survives serialization unchanged; every class of bad
// plan is rejected with one line that names the problem: not a plan, another
// format version, a corrupt file, an unknown kernel, buffers outside the arena
// or mis-sized, bad instructions, a missing part of the training contract.
// Ranks share what the file writes once, and the sharing never shows.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Plan/Plan_generated.h"
#include "mlt/Support/Checksum.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;
using ::testing::HasSubstr;

namespace {

Plan tinyPlan() { return buildTinyPlan(TinyModel()); }

RankPlan &rank0(Plan &plan) { return plan.ranks[0]; }

ProgramDesc &optimizerStep(RankPlan &rank) {
  for (ProgramDesc &program : rank.programs)
    if (program.name == kOptimizerStepProgram)
      return program;
  ADD_FAILURE() << "no optimizer_step";
  return rank.programs.back();
}

InstructionDesc &firstMicroInstruction(Plan &plan) {
  for (ProgramDesc &program : rank0(plan).programs)
    if (program.name == kMicroStepProgram)
      return program.instructions[0];
  ADD_FAILURE() << "no micro_step";
  return rank0(plan).programs[0].instructions[0];
}

// Tests that a plan round-trips through the file format unchanged.
TEST(PlanTest, RoundTrip) {
  Plan plan = tinyPlan();
  plan.target = "sm_90";
  ASSERT_TRUE(verifyPlan(plan).isOk()) << verifyPlan(plan).message();
  std::string bytes = serializePlan(plan);
  EXPECT_TRUE(hasPlanIdentifier(bytes.data(), bytes.size()));
  EXPECT_EQ(bytes.substr(4, 4), "MLTP");
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();

  EXPECT_EQ(parsed->formatVersion, kPlanFormatVersion);
  EXPECT_EQ(parsed->producer, plan.producer);
  EXPECT_EQ(parsed->target, "sm_90");
  EXPECT_EQ(parsed->model.hfConfig, plan.model.hfConfig);
  EXPECT_EQ(parsed->model.vocabSize, plan.model.vocabSize);
  EXPECT_EQ(parsed->model.microBatch, plan.model.microBatch);
  EXPECT_EQ(parsed->model.seqLen, plan.model.seqLen);
  EXPECT_EQ(parsed->model.microbatches, plan.model.microbatches);
  ASSERT_EQ(parsed->ranks.size(), 1u);
  const RankPlan &a = parsed->ranks[0], &b = plan.ranks[0];
  EXPECT_EQ(a.arenaBytes, b.arenaBytes);
  ASSERT_EQ(a.buffers.size(), b.buffers.size());
  for (size_t i = 0; i < a.buffers.size(); ++i) {
    EXPECT_EQ(a.buffers[i].name, b.buffers[i].name);
    EXPECT_EQ(a.buffers[i].kind, b.buffers[i].kind);
    EXPECT_EQ(a.buffers[i].dtype, b.buffers[i].dtype);
    EXPECT_EQ(a.buffers[i].shape, b.buffers[i].shape);
    EXPECT_EQ(a.buffers[i].offset, b.buffers[i].offset);
    EXPECT_EQ(a.buffers[i].bytes, b.buffers[i].bytes);
    EXPECT_EQ(a.buffers[i].parameter, b.buffers[i].parameter);
    EXPECT_EQ(a.buffers[i].decay, b.buffers[i].decay);
    EXPECT_EQ(a.buffers[i].constantValue, b.buffers[i].constantValue);
  }
  ASSERT_EQ(a.programs.size(), b.programs.size());
  for (size_t p = 0; p < a.programs.size(); ++p) {
    ASSERT_EQ(a.programs[p].instructions.size(),
              b.programs[p].instructions.size());
    for (size_t i = 0; i < a.programs[p].instructions.size(); ++i) {
      const InstructionDesc &x = a.programs[p].instructions[i];
      const InstructionDesc &y = b.programs[p].instructions[i];
      EXPECT_EQ(x.kernel, y.kernel);
      EXPECT_EQ(x.inputs, y.inputs);
      EXPECT_EQ(x.outputs, y.outputs);
      EXPECT_EQ(x.ints, y.ints);
      EXPECT_EQ(x.floats, y.floats);
    }
  }
}

// Tests that the kernel table mirrors Kernels.def.
TEST(PlanTest, KernelTable) {
  const KernelSignature *matmul = lookupKernel("matmul");
  ASSERT_NE(matmul, nullptr);
  EXPECT_EQ(matmul->kernel, Kernel::Matmul);
  EXPECT_EQ(matmul->inputs, 2);
  EXPECT_EQ(matmul->ints, 7);
  EXPECT_EQ(lookupKernel("global_norm")->inputs, -1);
  EXPECT_EQ(lookupKernel("nope"), nullptr);
  for (size_t i = 0; i < numKernels(); ++i) {
    const KernelSignature &signature = kernelSignature(Kernel(i));
    EXPECT_EQ(lookupKernel(signature.name), &signature);
  }
}

// Tests the in-place pairs of Kernels.def (mayAlias): listed pairs only,
// by output and input position, nothing past a kernel's arity.
TEST(PlanTest, InPlaceTable) {
  EXPECT_TRUE(mayAlias(Kernel::CrossEntropyBwd, 1, 0, 1));  // dlogits, logits
  EXPECT_FALSE(mayAlias(Kernel::CrossEntropyBwd, 1, 0, 0)); // dloss
  EXPECT_TRUE(mayAlias(Kernel::CrossEntropyBwdStats, 1, 0, 1));
  EXPECT_TRUE(mayAlias(Kernel::MatmulAdd, 1, 0, 2)); // c, addend
  EXPECT_FALSE(mayAlias(Kernel::MatmulAdd, 1, 0, 0));
  EXPECT_FALSE(mayAlias(Kernel::Matmul, 1, 0, 0));
  EXPECT_TRUE(mayAlias(Kernel::SwiGLUBwd, 3, 1, 2));   // dup, up
  EXPECT_TRUE(mayAlias(Kernel::SwiGLUBwd, 3, 2, 0));   // the forward's y, dy
  EXPECT_FALSE(mayAlias(Kernel::SwiGLUBwd, 3, 3, 0));  // no fourth output
  EXPECT_FALSE(mayAlias(Kernel::Add, 1, 0, 2));        // no third input
  EXPECT_TRUE(mayAlias(Kernel::RMSNormBwd, 2, 0, 0));  // dx, dy
  EXPECT_FALSE(mayAlias(Kernel::RMSNormBwd, 2, 1, 0)); // dw
  EXPECT_FALSE(mayAlias(Kernel::RMSNormBwd, 2, 0, 1)); // x
  EXPECT_TRUE(mayAlias(Kernel::RMSNormBwdAdd, 2, 0, 0));  // dx, dy
  EXPECT_TRUE(mayAlias(Kernel::RMSNormBwdAdd, 2, 0, 3));  // dx, addend
  EXPECT_FALSE(mayAlias(Kernel::RMSNormBwdAdd, 2, 0, 1)); // x
  EXPECT_FALSE(mayAlias(Kernel::RMSNormBwdAdd, 2, 1, 3)); // dw
  EXPECT_TRUE(mayAlias(Kernel::Rope, 1, 0, 0));
  EXPECT_TRUE(mayAlias(Kernel::AllReduceSum, 1, 0, 0));
  EXPECT_FALSE(mayAlias(Kernel::AllGather, 1, 0, 0));
  EXPECT_FALSE(mayAlias(Kernel::Accumulate, 1, 0, 0)); // y accumulates
  EXPECT_FALSE(mayAlias(Kernel::Cast, 1, 0, 0));
  EXPECT_FALSE(mayAlias(Kernel::AdamW, 3, 0, 0));
  // A fused amax output (Kernels.def's amax) aliases nothing.
  EXPECT_TRUE(mayAlias(Kernel::RMSNormFwd, 2, 0, 0));   // y, x
  EXPECT_FALSE(mayAlias(Kernel::RMSNormFwd, 2, 1, 0));  // amax(y)
  EXPECT_TRUE(mayAlias(Kernel::SwiGLUFwd, 2, 0, 1));    // y, up
  EXPECT_FALSE(mayAlias(Kernel::SwiGLUFwd, 2, 1, 1));   // amax(y)
  EXPECT_FALSE(mayAlias(Kernel::SwiGLUBwd, 4, 2, 0));   // amax(dgate)
  EXPECT_TRUE(mayAlias(Kernel::SwiGLUBwd, 6, 2, 0));    // the forward's y
  EXPECT_FALSE(mayAlias(Kernel::SwiGLUBwd, 6, 5, 0));   // amax(y)
  EXPECT_FALSE(mayAlias(Kernel::RMSNormBwdAdd, 3, 2, 3)); // amax(dx)
}

// Tests which outputs are fused amaxes (f32 scalars whatever the compute
// type) for each output count a kernel allows.
TEST(PlanTest, FusedAmaxOutputs) {
  EXPECT_EQ(fusedAmaxOutputs(Kernel::RMSNormFwd, 1), 0u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::RMSNormFwd, 2), 1u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::RMSNormBwd, 2), 0u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::RMSNormBwdAdd, 3), 1u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::SwiGLUFwd, 2), 1u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::SwiGLUBwd, 3), 0u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::SwiGLUBwd, 4), 2u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::SwiGLUBwd, 6), 3u);
  EXPECT_EQ(fusedAmaxOutputs(Kernel::Add, 2), 0u);
  // swiglu_bwd's inputs are operands 0-2: with 4 outputs, dgate and dup are
  // computed (3, 4) and their amaxes f32 (5, 6); with 3, y is computed.
  EXPECT_FALSE(isFixedF32Scalar(Kernel::SwiGLUBwd, 3, 4, 4));
  EXPECT_TRUE(isFixedF32Scalar(Kernel::SwiGLUBwd, 3, 4, 5));
  EXPECT_FALSE(isFixedF32Scalar(Kernel::SwiGLUBwd, 3, 3, 5));
  EXPECT_TRUE(isFixedF32Scalar(Kernel::RMSNormBwdAdd, 4, 3, 6));
  EXPECT_FALSE(isFixedF32Scalar(Kernel::RMSNormBwdAdd, 4, 3, 5)); // dw
  EXPECT_EQ(operandPrecision(Kernel::RMSNormFwd, 2, 2, 3),
            OperandPrecision::FixedF32);
}

// Tests reading a plan file from disk, whatever its name.
TEST(PlanTest, ReadPlanFile) {
  std::string path = ::testing::TempDir() + "mlt-plan-test-" +
                     std::to_string(::getpid()) + ".json";
  std::string bytes = serializePlan(tinyPlan());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
  }
  std::string read;
  StatusOr<Plan> plan = readPlanFile(path, &read);
  std::remove(path.c_str());
  ASSERT_TRUE(plan) << plan.status().message();
  EXPECT_EQ(read, bytes);
  EXPECT_EQ(plan->ranks[0].buffers.size(), tinyPlan().ranks[0].buffers.size());

  StatusOr<Plan> missing = readPlanFile(path);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().message(), path + ": does not exist");
}

// Tests that files that are not plans are rejected by their identifier.
TEST(PlanTest, BadIdentifier) {
  std::string text = "hello, this is not a plan at all";
  StatusOr<Plan> parsed = parsePlan(text.data(), text.size(), "plan.mltplan");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.status().message(),
            "plan.mltplan: not an mlt plan (bad file identifier)");
  StatusOr<Plan> tiny = parsePlan("MLTP", 4, "short");
  ASSERT_FALSE(tiny);
  EXPECT_EQ(tiny.status().message(),
            "short: not an mlt plan (bad file identifier)");
}

// Tests that another format version is reported as such.
TEST(PlanTest, WrongVersion) {
  Plan plan = tinyPlan();
  const std::string reads =
      ", this mlt-run reads version " + std::to_string(kPlanFormatVersion);
  plan.formatVersion = kPlanFormatVersion + 1;
  EXPECT_EQ(parseError(plan), "plan.mltplan: plan format version " +
                                  std::to_string(kPlanFormatVersion + 1) +
                                  reads);
  // Older plans (version 1: no mesh, no blocks, no collectives; version 2:
  // no parameter copies) are rejected by name too: their fields mean the
  // same, but a reader must not guess.
  plan.formatVersion = 1;
  EXPECT_EQ(parseError(plan), "plan.mltplan: plan format version 1" + reads);
}

// Tests that a truncated or damaged file is refused by its checksum before
// anything else is read, and that damage behind a forged checksum fails
// FlatBuffers' verifier.
TEST(PlanTest, Corrupt) {
  std::string bytes = serializePlan(tinyPlan());
  std::string truncated = bytes.substr(0, bytes.size() / 2);
  StatusOr<Plan> parsed =
      parsePlan(truncated.data(), truncated.size(), "plan.mltplan");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.status().message(),
            "plan.mltplan: corrupt plan (it does not end with its checksum: "
            "truncated, or damaged at the end)");

  // One flipped bit anywhere in the content.
  std::string flipped = bytes;
  flipped[flipped.size() / 3] ^= 0x10;
  parsed = parsePlan(flipped.data(), flipped.size(), "plan.mltplan");
  ASSERT_FALSE(parsed);
  EXPECT_THAT(parsed.status().message(),
              ::testing::StartsWith("plan.mltplan: checksum mismatch (the "
                                    "file changed after it was written: its "
                                    "content's CRC-32 is 0x"));

  // A root offset pointing past the end, sealed with a matching checksum.
  std::string bad = bytes.substr(0, bytes.size() - kPlanTrailerBytes);
  bad[0] = '\xff';
  bad[1] = '\xff';
  bad[2] = '\xff';
  bad[3] = '\x7f';
  appendPlanChecksum(bad);
  parsed = parsePlan(bad.data(), bad.size(), "plan.mltplan");
  ASSERT_FALSE(parsed);
  EXPECT_THAT(parsed.status().message(), HasSubstr("corrupt plan"));
}

// Tests the checksum trailer: the CRC-32 of zlib (its check value), what
// serializePlan appends, and that readPlanTrailer tells a matching trailer
// from a damaged one and from none.
TEST(PlanTest, ChecksumTrailer) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  // Continuing from a prefix's CRC gives the whole's.
  EXPECT_EQ(crc32("6789", 4, crc32("12345", 5)), 0xCBF43926u);

  const std::string bytes = serializePlan(tinyPlan());
  std::optional<PlanTrailer> trailer =
      readPlanTrailer(bytes.data(), bytes.size());
  ASSERT_TRUE(trailer);
  EXPECT_TRUE(trailer->matches());
  EXPECT_EQ(trailer->contentSize, bytes.size() - kPlanTrailerBytes);
  EXPECT_EQ(bytes.substr(trailer->contentSize, 4), kPlanChecksumMagic);

  std::string damaged = bytes;
  damaged[damaged.size() - 1] ^= 1; // the stored checksum itself
  trailer = readPlanTrailer(damaged.data(), damaged.size());
  ASSERT_TRUE(trailer);
  EXPECT_FALSE(trailer->matches());
  EXPECT_FALSE(readPlanTrailer(bytes.data(), bytes.size() - 1));
  EXPECT_FALSE(readPlanTrailer("MLTC", 3));

  // The layer below the checksum reads the content alone.
  StatusOr<Plan> content = parsePlanContent(
      bytes.data(), bytes.size() - kPlanTrailerBytes, "plan.mltplan");
  EXPECT_TRUE(content) << content.status().message();
}

// Tests that a plan read from an unaligned address still parses.
TEST(PlanTest, UnalignedInput) {
  std::string bytes = " " + serializePlan(tinyPlan());
  StatusOr<Plan> parsed = parsePlan(bytes.data() + 1, bytes.size() - 1, "p");
  EXPECT_TRUE(parsed) << parsed.status().message();
}

// Tests that a kernel that Kernels.def does not list is rejected by name.
TEST(PlanTest, UnknownKernel) {
  flatbuffers::FlatBufferBuilder fbb;
  auto inst = plan::CreateInstructionDirect(fbb, "frobnicate");
  std::vector<flatbuffers::Offset<plan::Instruction>> insts = {inst};
  auto program = plan::CreateProgramDirect(fbb, "micro_step", &insts);
  std::vector<flatbuffers::Offset<plan::Program>> programs = {program};
  auto rank = plan::CreateRankDirect(fbb, 0, 0, nullptr, &programs);
  std::vector<flatbuffers::Offset<plan::Rank>> ranks = {rank};
  auto model = plan::CreateModelInfoDirect(fbb, "{}", 16, 64, 1, 4, 1);
  auto root =
      plan::CreatePlanDirect(fbb, kPlanFormatVersion, "test", model, 1, &ranks);
  plan::FinishPlanBuffer(fbb, root);
  std::string bytes(reinterpret_cast<const char *>(fbb.GetBufferPointer()),
                    fbb.GetSize());
  appendPlanChecksum(bytes);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "plan.mltplan");
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.status().message(),
            "plan.mltplan: program 'micro_step' instruction 0: unknown kernel "
            "'frobnicate' (not in Kernels.def)");
}

// Tests that a buffer must lie inside the arena.
TEST(PlanTest, BufferPastArena) {
  Plan plan = tinyPlan();
  BufferDesc &last = rank0(plan).buffers.back();
  last.offset = rank0(plan).arenaBytes;
  std::ostringstream expected;
  expected << "plan.mltplan: buffer '" << last.name << "' ends at byte "
           << last.offset + last.bytes << ", past the arena of "
           << rank0(plan).arenaBytes << " bytes";
  EXPECT_EQ(parseError(plan), expected.str());
}

// Tests that a buffer's byte size must match its shape and dtype.
TEST(PlanTest, BufferBytesMismatch) {
  Plan plan = tinyPlan();
  BufferDesc &logits = rank0(plan).buffers[*rank0(plan).findBuffer("logits")];
  logits.bytes -= 4;
  EXPECT_THAT(parseError(plan),
              HasSubstr("buffer 'logits' has 508 bytes, but its shape [8, 16] "
                        "of f32 needs 512"));
}

// Tests that offsets must be aligned.
TEST(PlanTest, MisalignedBuffer) {
  Plan plan = tinyPlan();
  rank0(plan).buffers[*rank0(plan).findBuffer("x")].offset += 4;
  EXPECT_THAT(parseError(plan), HasSubstr("buffer 'x' at offset"));
  EXPECT_THAT(parseError(plan), HasSubstr("is not aligned to 256 bytes"));
}

// Tests that persistent buffers may not overlap anything, while temporaries
// may share ranges among themselves.
TEST(PlanTest, Overlaps) {
  Plan plan = tinyPlan();
  RankPlan &rank = rank0(plan);
  BufferDesc &grad = rank.buffers[*rank.findBuffer("grad:lm_head.weight")];
  grad.offset = rank.buffers[*rank.findBuffer("param:lm_head.weight")].offset;
  EXPECT_THAT(parseError(plan), HasSubstr("overlap in the arena"));

  plan = tinyPlan();
  RankPlan &rank2 = rank0(plan);
  // Temporaries sharing a range: allowed.
  rank2.buffers[*rank2.findBuffer("dh")].offset =
      rank2.buffers[*rank2.findBuffer("x")].offset;
  EXPECT_EQ(parseError(plan), "");
  // A temporary partly over a parameter: rejected.
  rank2.buffers[*rank2.findBuffer("dg")].offset =
      rank2.buffers[*rank2.findBuffer("param:lm_head.weight")].offset;
  EXPECT_THAT(parseError(plan), HasSubstr("temporary 'dg' at ["));
  EXPECT_THAT(parseError(plan), HasSubstr("overlaps parameter"));
}

// Tests that an instruction's output may share memory with another of its
// operands only in place, as Kernels.def allows it (mayAlias): exactly over
// an input the kernel may overwrite, never over another input, partly, or
// over another output.
TEST(PlanTest, InPlaceOutputs) {
  auto moved = [](const char *name, const char *onto, uint64_t shift = 0) {
    Plan plan = tinyPlan();
    RankPlan &rank = rank0(plan);
    rank.buffers[*rank.findBuffer(name)].offset =
        rank.buffers[*rank.findBuffer(onto)].offset + shift;
    return plan;
  };
  // cross_entropy_bwd's dlogits over its logits, rms_norm_bwd's dx over dy.
  EXPECT_EQ(parseError(moved("dlogits", "logits")), "");
  EXPECT_EQ(parseError(moved("dx", "dh")), "");
  const std::string bwd =
      "plan.mltplan: program 'micro_step' instruction 4 (cross_entropy_bwd): "
      "output 0 'dlogits' at [";
  std::string partly = parseError(moved("dlogits", "logits", 256));
  EXPECT_THAT(partly, HasSubstr(bwd));
  EXPECT_THAT(partly, HasSubstr("overlaps input 1 'logits' at ["));
  EXPECT_THAT(partly, HasSubstr(", but not exactly (in place needs the same "
                                "offset, size and element type)"));
  // A matmul's output over its operand, a weight gradient over the input
  // gradient's dy, and one output over another.
  EXPECT_THAT(parseError(moved("dW", "dlogits")),
              HasSubstr("instruction 5 (matmul): output 0 'dW' at ["));
  EXPECT_THAT(parseError(moved("dW", "dlogits")),
              HasSubstr("overlaps input 0 'dlogits' at ["));
  EXPECT_THAT(parseError(moved("dW", "dlogits")),
              HasSubstr(", which the kernel may not overwrite in place"));
  EXPECT_THAT(parseError(moved("dg", "dh")), HasSubstr("output 1 'dg' at ["));
  EXPECT_THAT(parseError(moved("dg", "dh")),
              HasSubstr("which the kernel may not overwrite in place"));
  EXPECT_THAT(parseError(moved("dg", "dx")),
              HasSubstr("overlaps output 0 'dx' at ["));
  EXPECT_THAT(parseError(moved("dg", "dx")),
              HasSubstr("; outputs never share memory"));
}

// Tests that a launch of many operands, whose overlaps are checked by
// offset rather than pair by pair (a deep model's multi-tensor launches have
// tens of thousands), is judged as one of a few operands: inputs may share
// bytes; an output may share none with another output, nor with an input
// it may not overwrite; the first offending pair is named.
TEST(PlanTest, ManyOperandOverlaps) {
  constexpr int kTensors = 20;
  auto withSumSquaresMulti = [](auto &&place) {
    Plan plan = tinyPlan();
    RankPlan &rank = rank0(plan);
    auto temporary = [&](const std::string &name, std::vector<int64_t> shape) {
      BufferDesc buffer;
      buffer.name = name;
      buffer.kind = BufferKind::Temporary;
      buffer.shape = std::move(shape);
      buffer.bytes = uint64_t(buffer.numElements()) * 4;
      buffer.offset = rank.arenaBytes;
      rank.arenaBytes += (buffer.bytes + kPlanBufferAlignment - 1) /
                         kPlanBufferAlignment * kPlanBufferAlignment;
      rank.buffers.push_back(buffer);
      return uint32_t(rank.buffers.size() - 1);
    };
    InstructionDesc multi;
    multi.kernel = Kernel::SumSquaresMulti;
    for (int i = 0; i < kTensors; ++i) {
      multi.inputs.push_back(temporary("x" + std::to_string(i), {128}));
      multi.ints.push_back(128);
    }
    for (int i = 0; i < kTensors; ++i)
      multi.outputs.push_back(temporary("s" + std::to_string(i), {}));
    auto at = [&](const char *name) -> BufferDesc & {
      return rank.buffers[*rank.findBuffer(name)];
    };
    place(at);
    std::vector<InstructionDesc> &insts = optimizerStep(rank).instructions;
    insts.insert(insts.begin(), multi);
    return parseError(plan);
  };
  using At = std::function<BufferDesc &(const char *)>;
  EXPECT_EQ(withSumSquaresMulti([](At) {}), "");
  EXPECT_EQ(withSumSquaresMulti([](At at) {
              at("x3").offset = at("x1").offset;
              at("x4").offset = at("x1").offset + 256;
            }),
            "");
  std::string outputs = withSumSquaresMulti([](At at) {
    at("s5").offset = at("s2").offset;
    at("s9").offset = at("s1").offset;
  });
  EXPECT_THAT(outputs, HasSubstr("instruction 0 (sum_squares_multi): output 5 "
                                 "'s5' at ["));
  EXPECT_THAT(outputs, HasSubstr("overlaps output 2 's2' at ["));
  EXPECT_THAT(outputs, HasSubstr("; outputs never share memory"));
  std::string inputs = withSumSquaresMulti([](At at) {
    at("s0").offset = at("x7").offset;
    at("s3").offset = at("x2").offset;
  });
  EXPECT_THAT(inputs, HasSubstr("output 0 's0' at ["));
  EXPECT_THAT(inputs, HasSubstr("overlaps input 7 'x7' at ["));
  EXPECT_THAT(inputs, HasSubstr("which the kernel may not overwrite in place"));
  std::string within = withSumSquaresMulti(
      [](At at) { at("s6").offset = at("x8").offset + 256; });
  EXPECT_THAT(within, HasSubstr("output 6 's6' at ["));
  EXPECT_THAT(within, HasSubstr("overlaps input 8 'x8' at ["));
}

// Tests streams and tokens: they round-trip; a launch on another stream
// must be ordered by tokens against every launch that touches its bytes
// (one of them writing); tokens are signalled once, before their waits; and
// streams stay below kPlanMaxStreams.
TEST(PlanTest, StreamsAndTokens) {
  // micro_step: 5 matmul (dlogits, h) -> dW, 6 accumulate dW -> grad:W,
  // 7 matmul (dlogits, W) -> dh (TestPlans.h).
  auto withSideAccumulate = [](bool ordered) {
    Plan plan = tinyPlan();
    RankPlan &rank = rank0(plan);
    std::vector<InstructionDesc> &insts = rank.programs[0].instructions;
    EXPECT_EQ(insts[6].kernel, Kernel::Accumulate);
    insts[6].stream = 1;
    if (ordered) {
      insts[5].token = 0;
      insts[6].waits = {0};
      insts[6].token = 1;
    }
    return plan;
  };
  Plan ordered = withSideAccumulate(true);
  EXPECT_EQ(parseError(ordered), "");
  std::string bytes = serializePlan(ordered);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();
  const InstructionDesc &side = parsed->ranks[0].programs[0].instructions[6];
  EXPECT_EQ(side.stream, 1);
  EXPECT_EQ(side.waits, std::vector<uint32_t>{0});
  EXPECT_EQ(side.token, 1);
  EXPECT_EQ(parsed->ranks[0].programs[0].instructions[5].token, 0);
  EXPECT_EQ(parsed->ranks[0].programs[0].instructions[7].token, -1);

  // Without the token, matmul's write of dW races the accumulate's read.
  EXPECT_THAT(
      parseError(withSideAccumulate(false)),
      HasSubstr("program 'micro_step': instruction 5 (matmul, stream 0) and "
                "instruction 6 (accumulate, stream 1) touch the same bytes "
                "('dW' and 'dW'), one writing them, but no token orders "
                "them"));
  // A later compute launch that writes what the side launch reads races it
  // too: the accumulate's gradient, written by stream 0 afterwards.
  Plan late = withSideAccumulate(true);
  InstructionDesc rewrite = late.ranks[0].programs[0].instructions[6];
  rewrite.stream = 0;
  rewrite.waits.clear();
  rewrite.token = -1;
  late.ranks[0].programs[0].instructions.push_back(rewrite);
  EXPECT_THAT(parseError(late),
              HasSubstr("instruction 6 (accumulate, stream 1) and instruction "
                        "12 (accumulate, stream 0) touch the same bytes"));
  // Waiting for the side stream's token orders them.
  late.ranks[0].programs[0].instructions.back().waits = {1};
  EXPECT_EQ(parseError(late), "");

  Plan unknown = withSideAccumulate(true);
  unknown.ranks[0].programs[0].instructions[6].waits = {5};
  EXPECT_THAT(parseError(unknown),
              HasSubstr("program 'micro_step' instruction 6 (accumulate) "
                        "waits for token 5, which no earlier instruction "
                        "signals"));
  Plan twice = withSideAccumulate(true);
  twice.ranks[0].programs[0].instructions[7].token = 0;
  EXPECT_THAT(parseError(twice),
              HasSubstr("instruction 7 (matmul) signals token 0, which "
                        "instruction 5 signals already"));
  Plan stream = withSideAccumulate(true);
  stream.ranks[0].programs[0].instructions[6].stream = 8;
  EXPECT_THAT(parseError(stream),
              HasSubstr("instruction 6 (accumulate) runs on stream 8; "
                        "streams are 0..7"));
}

// Tests the race check on random streams and tokens over the tiny plan's
// micro_step against the definition, pair by pair: two instructions on
// different streams race when one writes a byte the other touches and no
// chain of program order on a stream and waits for tokens orders them.
TEST(PlanTest, RandomStreamsRaceAsDefined) {
  std::mt19937 rng(20261126);
  int races = 0, trials = 400;
  for (int trial = 0; trial < trials; ++trial) {
    Plan plan = tinyPlan();
    RankPlan &rank = rank0(plan);
    std::vector<InstructionDesc> &insts = rank.programs[0].instructions;
    // Mostly waits for the other streams' latest tokens, which order
    // most pairs; sometimes an older one, or none.
    const unsigned streams = 2 + rng() % 2;
    std::array<int32_t, kPlanMaxStreams> latest;
    latest.fill(-1);
    int32_t tokens = 0;
    for (InstructionDesc &inst : insts) {
      inst.stream = rng() % streams;
      inst.waits.clear();
      for (unsigned other = 0; other < streams; ++other)
        if (other != inst.stream && latest[other] >= 0 && rng() % 8 != 0)
          inst.waits.push_back(uint32_t(latest[other]) -
                               (latest[other] > 0 && rng() % 6 == 0));
      inst.token = -1;
      if (rng() % 5 != 0)
        latest[inst.stream] = inst.token = tokens++;
    }
    // The definition: vector clocks, then every pair.
    using Clock = std::array<uint32_t, kPlanMaxStreams>;
    std::vector<Clock> clocks(insts.size());
    std::array<Clock, kPlanMaxStreams> streamClock{};
    std::map<uint32_t, size_t> signaller;
    for (size_t i = 0; i < insts.size(); ++i) {
      Clock clock = streamClock[insts[i].stream];
      for (uint32_t token : insts[i].waits)
        for (unsigned s = 0; s < kPlanMaxStreams; ++s)
          clock[s] = std::max(clock[s], clocks[signaller.at(token)][s]);
      ++clock[insts[i].stream];
      clocks[i] = streamClock[insts[i].stream] = clock;
      if (insts[i].token >= 0)
        signaller[uint32_t(insts[i].token)] = i;
    }
    auto touches = [&](const InstructionDesc &a, const InstructionDesc &b) {
      auto overlap = [&](uint32_t x, uint32_t y) {
        const BufferDesc &p = rank.buffers[x], &q = rank.buffers[y];
        return p.bytes && q.bytes && p.offset < q.offset + q.bytes &&
               q.offset < p.offset + p.bytes;
      };
      for (uint32_t w : a.outputs) {
        for (uint32_t x : b.inputs)
          if (overlap(w, x))
            return true;
        for (uint32_t x : b.outputs)
          if (overlap(w, x))
            return true;
      }
      for (uint32_t w : b.outputs)
        for (uint32_t x : a.inputs)
          if (overlap(w, x))
            return true;
      return false;
    };
    bool race = false;
    for (size_t j = 0; j < insts.size(); ++j)
      for (size_t i = 0; i < j; ++i)
        race |= insts[i].stream != insts[j].stream &&
                clocks[j][insts[i].stream] < clocks[i][insts[i].stream] &&
                touches(insts[i], insts[j]);
    const std::string error = parseError(plan);
    EXPECT_EQ(error.find("no token orders them") != std::string::npos, race)
        << "trial " << trial << ": " << error;
    if (!race)
      EXPECT_EQ(error, "") << "trial " << trial;
    races += race;
  }
  EXPECT_GT(races, trials / 10);
  EXPECT_LT(races, trials * 9 / 10);
}

// Tests adamw_multi's operands: the tiny plan's three adamw launches as one
// (gradients, the scalars; params, ms, vs; n and decay per tensor) passes,
// and the verifier names a wrong output count, integer count, decay flag or
// element count.
TEST(PlanTest, AdamWMulti) {
  auto multiPlan = []() {
    Plan plan = tinyPlan();
    std::vector<InstructionDesc> &insts =
        optimizerStep(rank0(plan)).instructions;
    std::vector<InstructionDesc> adamw;
    for (const InstructionDesc &inst : insts)
      if (inst.kernel == Kernel::AdamW)
        adamw.push_back(inst);
    EXPECT_EQ(adamw.size(), 3u);
    InstructionDesc multi;
    multi.kernel = Kernel::AdamWMulti;
    for (const InstructionDesc &one : adamw) {
      multi.inputs.push_back(one.inputs[0]);
      multi.ints.insert(multi.ints.end(), one.ints.begin(), one.ints.end());
    }
    multi.inputs.insert(multi.inputs.end(), adamw[0].inputs.begin() + 1,
                        adamw[0].inputs.end());
    for (size_t o = 0; o < 3; ++o)
      for (const InstructionDesc &one : adamw)
        multi.outputs.push_back(one.outputs[o]);
    insts.erase(std::remove_if(insts.begin(), insts.end(),
                               [](const InstructionDesc &inst) {
                                 return inst.kernel == Kernel::AdamW;
                               }),
                insts.end());
    insts.push_back(multi);
    return plan;
  };
  EXPECT_EQ(parseError(multiPlan()), "");
  auto broken = [&](auto &&change) {
    Plan plan = multiPlan();
    change(optimizerStep(rank0(plan)).instructions.back());
    return parseError(plan);
  };
  EXPECT_THAT(broken([](InstructionDesc &i) { i.outputs.pop_back(); }),
              HasSubstr("(adamw_multi): expects 9 outputs (the parameters, m "
                        "and v of 3 tensors) or 12 (and their compute "
                        "copies), has 8"));
  EXPECT_THAT(broken([](InstructionDesc &i) { i.ints.pop_back(); }),
              HasSubstr("expects 6 integer attributes (n and decay of 3 "
                        "tensors), has 5"));
  EXPECT_THAT(broken([](InstructionDesc &i) { i.ints[3] = 2; }),
              HasSubstr("tensor 1's decay must be 0 or 1"));
  EXPECT_THAT(broken([](InstructionDesc &i) { i.ints[0] += 1; }),
              HasSubstr("input 0 'grad:"));
  EXPECT_THAT(broken([](InstructionDesc &i) {
                i.inputs.erase(i.inputs.begin(), i.inputs.begin() + 3);
              }),
              HasSubstr("expects K gradients and 7 scalars (K >= 1), has 7 "
                        "inputs"));
}

// Tests that two buffers may not share a name.
TEST(PlanTest, DuplicateBufferName) {
  Plan plan = tinyPlan();
  rank0(plan).buffers[*rank0(plan).findBuffer("dh")].name = "x";
  EXPECT_EQ(parseError(plan), "plan.mltplan: two buffers are named 'x'");
}

// Tests that an instruction's arity must match Kernels.def.
TEST(PlanTest, WrongArity) {
  Plan plan = tinyPlan();
  InstructionDesc &inst = firstMicroInstruction(plan); // embedding_fwd
  inst.inputs.push_back(inst.inputs[0]);
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: program 'micro_step' instruction 0 (embedding_fwd): "
            "expects 2 inputs, has 3");

  plan = tinyPlan();
  firstMicroInstruction(plan).ints.pop_back();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: program 'micro_step' instruction 0 (embedding_fwd): "
            "expects 3 integer attributes (tokens, vocab, hidden), has 2");
}

// Tests that buffer indices must be in range.
TEST(PlanTest, BadBufferIndex) {
  Plan plan = tinyPlan();
  size_t numBuffers = rank0(plan).buffers.size();
  firstMicroInstruction(plan).outputs[0] = 999;
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: program 'micro_step' instruction 0 (embedding_fwd): "
            "output 0 is buffer index 999, but the rank has " +
                std::to_string(numBuffers) + " buffers");
}

// Tests that operands must have the element counts the ints imply, and ids
// must be i32.
TEST(PlanTest, OperandSizesAndTypes) {
  Plan plan = tinyPlan();
  firstMicroInstruction(plan).ints[2] = 9; // hidden 9 instead of 8
  EXPECT_THAT(parseError(plan),
              HasSubstr("input 1 'param:model.embed_tokens.weight' has 128 "
                        "elements, but the kernel's ints [8, 16, 9] need 144"));

  plan = tinyPlan();
  InstructionDesc &inst = firstMicroInstruction(plan);
  std::swap(inst.inputs[0], inst.inputs[1]);
  EXPECT_THAT(parseError(plan), HasSubstr("input 0 'param:model.embed_tokens"));

  plan = tinyPlan();
  firstMicroInstruction(plan).ints[0] = -8;
  EXPECT_THAT(parseError(plan), HasSubstr("must not be negative"));
}

// Tests the transpose attribute checks.
TEST(PlanTest, TransposeAttributes) {
  PlanBuilder b;
  uint32_t x = b.temp("x", {2, 3}), y = b.temp("y", {3, 2});
  b.launch("p", Kernel::Transpose, {x}, {y}, {2, 2, 3, 1, 0});
  EXPECT_TRUE(verifyRank(b.plan().ranks[0]).isOk());
  b.rank().programs[0].instructions[0].ints = {2, 2, 3, 1, 1};
  EXPECT_THAT(verifyRank(b.plan().ranks[0]).message(),
              HasSubstr("is not a permutation"));
  b.rank().programs[0].instructions[0].ints = {2, 2, 3, 1};
  EXPECT_THAT(verifyRank(b.plan().ranks[0]).message(),
              HasSubstr("expects 1 + 2 * rank = 5 integer attributes"));
}

// Tests that the step, the training inputs and outputs must be there: a
// step that covers every micro-batch, calls of programs that exist, buffers
// with a copy per micro-batch only touched by calls of one in range.
TEST(PlanTest, TrainingContract) {
  Plan plan = tinyPlan();
  rank0(plan).step.clear();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: the plan has no step (a plan of format version " +
                std::to_string(kPlanFormatVersion) + " lists each rank's calls)");

  plan = tinyPlan();
  rank0(plan).step.back().program = 7;
  EXPECT_EQ(parseError(plan), "plan.mltplan: step call 2: program index 7 out "
                              "of range (3 programs)");

  // A call of micro_step without a micro-batch, or beyond the copies.
  TinyModel two;
  two.microbatches = 2;
  plan = buildTinyPlan(two);
  rank0(plan).step[1].microbatch = -1;
  rank0(plan).step[1].work.clear();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: step call 1: program 'micro_step' touches buffer "
            "'tokens', which has a copy per micro-batch, but the call has no "
            "micro-batch");
  plan = buildTinyPlan(two);
  rank0(plan).step[2].microbatch = 2;
  EXPECT_EQ(parseError(plan), "plan.mltplan: step call 2: does F1.0, which is "
                              "not work of the call's micro-batch");
  rank0(plan).step[2].work.clear();
  EXPECT_EQ(parseError(plan), "plan.mltplan: step call 2: micro-batch 2 of "
                              "buffer 'tokens', which has 2 copies");
  plan = buildTinyPlan(two);
  rank0(plan).step[2].microbatch = 0;
  rank0(plan).step[2].work.clear();
  EXPECT_EQ(parseError(plan), "plan.mltplan: the step runs no call of "
                              "micro-batch 1 (of 2)");
  plan = buildTinyPlan(two);
  rank0(plan).buffers[*rank0(plan).findBuffer("labels")].copies = 1;
  EXPECT_EQ(parseError(plan), "plan.mltplan: buffer 'labels' has 1 copies, "
                              "but a step has 2 micro-batches (a copy each)");
  plan = buildTinyPlan(two);
  rank0(plan).buffers[*rank0(plan).findBuffer("loss")].copies = 9;
  EXPECT_THAT(parseError(plan), HasSubstr("buffer 'loss' ends at byte "));

  // A temporary kept per slot: its calls must name a slot in range.
  plan = buildTinyPlan(two);
  BufferDesc &h = rank0(plan).buffers[*rank0(plan).findBuffer("h")];
  h.copies = 2;
  h.copyIndex = CopyIndex::Slot;
  rank0(plan).arenaBytes += h.copyStride();
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: step call 1: program 'micro_step' touches buffer "
            "'h', which has a copy per slot, but the call has no slot");
  rank0(plan).step[1].slot = 0;
  rank0(plan).step[2].slot = 2;
  EXPECT_EQ(parseError(plan), "plan.mltplan: step call 2: slot 2 of buffer "
                              "'h', which has 2 copies");
  rank0(plan).step[2].slot = 1;
  EXPECT_EQ(parseError(plan), "");
  rank0(plan).buffers[*rank0(plan).findBuffer("tokens")].copyIndex =
      CopyIndex::Slot;
  EXPECT_EQ(parseError(plan), "plan.mltplan: buffer 'tokens' (input) has 2 "
                              "copies per slot; only temporaries have them");
  rank0(plan).buffers[*rank0(plan).findBuffer("tokens")].copyIndex =
      CopyIndex::MicroBatch;
  h.copyIndex = CopyIndex::MicroBatch;
  EXPECT_EQ(parseError(plan), "plan.mltplan: buffer 'h' (temporary) has 2 "
                              "copies per micro-batch; only inputs and "
                              "outputs have them");

  plan = tinyPlan();
  rank0(plan).buffers[*rank0(plan).findBuffer("hyper.lr")].name = "hyper.lrr";
  EXPECT_EQ(parseError(plan),
            "plan.mltplan: the plan has no input buffer 'hyper.lr'");

  plan = tinyPlan();
  rank0(plan).buffers[*rank0(plan).findBuffer("tokens")].shape = {4, 2};
  EXPECT_EQ(parseError(plan), "plan.mltplan: buffer 'tokens' has shape [4, 2], "
                              "expected [2, 4]");

  plan = tinyPlan();
  rank0(plan).buffers[*rank0(plan).findBuffer("loss")].kind =
      BufferKind::Temporary;
  EXPECT_EQ(parseError(plan), "plan.mltplan: buffer 'loss' is a temporary "
                              "buffer, expected output");

  plan = tinyPlan();
  rank0(plan)
      .buffers[*rank0(plan).findBuffer("grad:model.norm.weight")]
      .parameter = "model.nope";
  EXPECT_THAT(parseError(plan), HasSubstr("names parameter 'model.nope', "
                                          "which has no parameter buffer"));

  plan = tinyPlan();
  plan.model.seqLen = 0;
  EXPECT_THAT(parseError(plan), HasSubstr("seq_len 0 (must be positive)"));
}

// Tests that an evaluation step round-trips, is printed after the step,
// and is held to the contract: a call of every micro-batch, forward items
// alone, no training state written, on every rank or on none.
TEST(PlanTest, EvaluationStep) {
  TinyModel two;
  two.microbatches = 2;
  Plan plan = buildTinyPlan(two);
  EXPECT_FALSE(hasEvaluation(plan));
  addTinyEvaluation(plan);
  EXPECT_TRUE(hasEvaluation(plan));
  ASSERT_EQ(parseError(plan), "");
  std::string bytes = serializePlan(plan);
  StatusOr<Plan> parsed = parsePlan(bytes.data(), bytes.size(), "p");
  ASSERT_TRUE(parsed) << parsed.status().message();
  ASSERT_EQ(parsed->ranks[0].evalStep.size(), 2u);
  EXPECT_EQ(parsed->ranks[0].evalStep[1].microbatch, 1);
  EXPECT_EQ(parsed->ranks[0].evalStep[1].work[0].str(), "F1.0");
  std::ostringstream os;
  printPlan(*parsed, os);
  EXPECT_THAT(os.str(), HasSubstr("a step of 4 calls, an evaluation step of "
                                  "2 calls\n"));
  EXPECT_THAT(os.str(), HasSubstr("evaluation step (2 calls):\n"
                                  "     0: eval_forward microbatch 0 work "
                                  "F0.0\n"));

  Plan bad = plan;
  rank0(bad).evalStep.pop_back();
  EXPECT_EQ(parseError(bad), "plan.mltplan: the evaluation step runs no call "
                             "of micro-batch 1 (of 2)");
  bad = plan;
  rank0(bad).evalStep[1].work[0].kind = WorkKind::Backward;
  EXPECT_EQ(parseError(bad), "plan.mltplan: evaluation step call 1 does "
                             "B1.0: an evaluation runs forward passes alone");
  bad = plan;
  rank0(bad).evalStep[1].microbatch = 2;
  EXPECT_EQ(parseError(bad), "plan.mltplan: evaluation step call 1: does "
                             "F1.0, which is not work of the call's "
                             "micro-batch");
  // The training body as an evaluation: it writes the gradients.
  bad = plan;
  for (size_t p = 0; p < rank0(bad).programs.size(); ++p)
    if (rank0(bad).programs[p].name == kMicroStepProgram)
      rank0(bad).evalStep[0].program = uint32_t(p);
  EXPECT_THAT(parseError(bad),
              HasSubstr("plan.mltplan: evaluation step call 0: program "
                        "'micro_step' instruction "));
  EXPECT_THAT(parseError(bad),
              HasSubstr("writes gradient buffer 'grad:lm_head.weight'; an "
                        "evaluation must leave the training state as it "
                        "finds it"));

  // On every rank or on none.
  TinyModel dp;
  dp.dp = 2;
  Plan ranks = buildTinyPlan(dp);
  ASSERT_EQ(parseError(ranks), "");
  // (a program of no launch, so that the collectives still match)
  ranks.ranks[1].programs.push_back(ProgramDesc{kEvalForwardProgram, {}});
  ranks.ranks[1].evalStep = {
      {uint32_t(ranks.ranks[1].programs.size() - 1), 0, {}, -1}};
  EXPECT_EQ(parseError(ranks), "plan.mltplan: rank 1 has an evaluation step "
                               "and rank 0 has none (a plan evaluates on "
                               "every rank or on none)");
}

// Tests the structure checks on ranks.
TEST(PlanTest, Ranks) {
  Plan plan = tinyPlan();
  plan.worldSize = 2;
  EXPECT_EQ(parseError(plan), "plan.mltplan: the plan's world size is 2, but "
                              "it has no mesh (a plan of several ranks needs "
                              "one)");
  plan.mesh = {{"dp", 2}};
  EXPECT_EQ(parseError(plan), "plan.mltplan: the plan's world size is 2 but "
                              "it has 1 ranks");
  plan = tinyPlan();
  plan.ranks[0].rank = 3;
  EXPECT_THAT(parseError(plan), HasSubstr("rank entry 0 is numbered 3"));
}

// Tests that the printer names buffers and kernels.
TEST(PlanTest, Print) {
  std::ostringstream os;
  printPlan(tinyPlan(), os);
  std::string text = os.str();
  EXPECT_THAT(text, HasSubstr("rank 0: arena"));
  EXPECT_THAT(text, HasSubstr("param:lm_head.weight"));
  EXPECT_THAT(text, HasSubstr("program micro_step (12 instructions)"));
  EXPECT_THAT(text, HasSubstr("embedding_fwd (tokens, "
                              "param:model.embed_tokens.weight) -> (x) ints "
                              "[8, 16, 8]"));
  EXPECT_THAT(text, HasSubstr("rms_norm_fwd (x, param:model.norm.weight) -> "
                              "(h) ints [8, 8] floats [1e-05]"));
}

} // namespace

//===----------------------------------------------------------------------===//
// Ranks sharing what they have alike (SharedVector.h)
//===----------------------------------------------------------------------===//

namespace {

// Tests that a list's sharing never shows: a shared element is one object
// in both lists until one of them writes it, a copy of a list shares
// nothing, and reading a list (through a const reference) writes nothing.
TEST(SharedVectorTest, SharingNeverShows) {
  auto shared = std::make_shared<const std::string>("x");
  SharedVector<std::string> a, b;
  a.pushShared(shared);
  b.pushShared(shared);
  a.push_back("a");
  b.push_back("b");
  EXPECT_TRUE(a.sameElement(0, b, 0));
  EXPECT_FALSE(a.sameElement(1, b, 1));
  const SharedVector<std::string> &reader = a;
  for (const std::string &value : reader)
    EXPECT_FALSE(value.empty());
  EXPECT_TRUE(a.sameElement(0, b, 0));

  SharedVector<std::string> copy = a;
  EXPECT_FALSE(copy.sameElement(0, a, 0));
  EXPECT_EQ(copy[0], "x");

  a[0] += "y"; // a's own copy first
  EXPECT_EQ(a[0], "xy");
  EXPECT_EQ(b[0], "x");
  EXPECT_EQ(*shared, "x");
  EXPECT_FALSE(a.sameElement(0, b, 0));
  for (std::string &value : b)
    value += "!";
  EXPECT_EQ(b[0], "x!");
  EXPECT_EQ(*shared, "x");
  EXPECT_EQ(std::vector<std::string>(b.begin(), b.end()),
            (std::vector<std::string>{"x!", "b!"}));
}

/// Whether two buffers are alike in every field (a test of sharing, not of
/// the verifier).
bool alike(const BufferDesc &a, const BufferDesc &b) {
  auto segmentsAlike = [&] {
    if (a.segments.size() != b.segments.size())
      return false;
    for (size_t s = 0; s < a.segments.size(); ++s) {
      const SegmentDesc &x = a.segments[s], &y = b.segments[s];
      if (x.parameter != y.parameter || x.fullShape != y.fullShape ||
          x.sliceOffset != y.sliceOffset || x.blockShape != y.blockShape ||
          x.begin != y.begin || x.count != y.count || x.offset != y.offset)
        return false;
    }
    return true;
  };
  return a.name == b.name && a.kind == b.kind && a.dtype == b.dtype &&
         a.shape == b.shape && a.offset == b.offset && a.bytes == b.bytes &&
         a.parameter == b.parameter && a.constantValue == b.constantValue &&
         a.decay == b.decay && a.fullShape == b.fullShape &&
         a.sliceOffset == b.sliceOffset && a.copies == b.copies &&
         a.copyIndex == b.copyIndex && a.viewOf == b.viewOf &&
         segmentsAlike();
}

std::string printed(const Plan &plan) {
  std::ostringstream os;
  printPlan(plan, os);
  return os.str();
}

// Tests that a plan whose ranks share buffers and programs is written with
// each of them once, read back with its ranks sharing them again (what a
// plan of thousands of ranks needs to fit in memory), the same plan as the
// one written; and that writing a rank of it leaves the others alone.
TEST(PlanTest, RanksShareWhatTheFileWritesOnce) {
  TinyModel model;
  model.dp = 2;
  const Plan separate = buildTinyZeroPlan(model);
  ASSERT_TRUE(verifyPlan(separate).isOk()) << verifyPlan(separate).message();
  ASSERT_EQ(separate.ranks.size(), 2u);
  // The same plan, the ranks sharing what they have alike.
  Plan shared = separate;
  const RankPlan &first = separate.ranks[0], &second = separate.ranks[1];
  ASSERT_EQ(first.buffers.size(), second.buffers.size());
  ASSERT_EQ(first.programs.size(), second.programs.size());
  for (RankPlan &rank : shared.ranks) {
    rank.buffers.clear();
    rank.programs.clear();
  }
  size_t alikeBuffers = 0;
  for (size_t i = 0; i < first.buffers.size(); ++i) {
    if (!alike(first.buffers[i], second.buffers[i])) {
      shared.ranks[0].buffers.push_back(first.buffers[i]);
      shared.ranks[1].buffers.push_back(second.buffers[i]);
      continue;
    }
    ++alikeBuffers;
    auto buffer = std::make_shared<const BufferDesc>(first.buffers[i]);
    shared.ranks[0].buffers.pushShared(buffer);
    shared.ranks[1].buffers.pushShared(buffer);
  }
  ASSERT_GT(alikeBuffers, 0u);
  ASSERT_LT(alikeBuffers, first.buffers.size()); // (the slices differ)
  for (size_t p = 0; p < first.programs.size(); ++p) {
    auto program = std::make_shared<const ProgramDesc>(first.programs[p]);
    shared.ranks[0].programs.pushShared(program);
    shared.ranks[1].programs.pushShared(program);
  }
  ASSERT_EQ(printed(shared), printed(separate));

  const std::string bytes = serializePlan(shared);
  EXPECT_LT(bytes.size(), serializePlan(separate).size());
  StatusOr<Plan> read = parsePlan(bytes.data(), bytes.size(), "shared");
  ASSERT_TRUE(read) << read.status().message();
  EXPECT_EQ(printed(*read), printed(separate));
  const RankPlan &a = read->ranks[0], &b = read->ranks[1];
  for (size_t i = 0; i < a.buffers.size(); ++i)
    EXPECT_EQ(a.buffers.sameElement(i, b.buffers, i),
              alike(first.buffers[i], second.buffers[i]))
        << a.buffers[i].name;
  for (size_t p = 0; p < a.programs.size(); ++p)
    EXPECT_TRUE(a.programs.sameElement(p, b.programs, p));

  // A copy shares nothing; a write to one rank leaves the other alone.
  Plan copy = *read;
  EXPECT_FALSE(copy.ranks[0].programs.sameElement(0, copy.ranks[1].programs,
                                                  0));
  Plan written = std::move(*read);
  written.ranks[1].programs[0].name = "renamed";
  EXPECT_NE(written.ranks[0].programs[0].name, "renamed");
  EXPECT_EQ(printed(copy), printed(separate));
}

} // namespace
