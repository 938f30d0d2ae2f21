//===- TransferTest.cpp - sends and receives between pipeline stages -----===//
//
// Part of mlt. Plans of two pipeline stages (mesh pp=2, ranks as threads
// over the in-process communicator) that exchange values with send and
// recv: a stage that computes, sends, and gets a result back, checked
// against the same arithmetic on the host on fresh random inputs (and
// printed); a transfer program run alone; a 1F1B-like step whose transfer
// groups mix sends and receives of different micro-batches' slots (rank 0:
// send h0 | send h1 + recv g0 | recv g1; rank 1: recv h0 | send g0 + recv
// h1 | send g1), verified, run and profiled; and the verifier's refusals: an
// unmatched send, a count mismatch, a transfer program with another kernel, a
// peer outside the axis, a group whose transfers conflict (and the same group
// made valid by the copies its calls select), a step that deadlocks, a cycle of
// collectives over two axes, and a rank without a communicator.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtil.h"

#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Runtime/exec/Executor.h"
#include "mlt/Runtime/exec/Profile.h"
#include "mlt/Runtime/exec/RankGroup.h"
#include "mlt/Runtime/exec/Trace.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <sstream>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;

namespace {

constexpr int64_t kN = 37;

std::vector<float> randomFloats(std::mt19937 &rng, int64_t n) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float &v : values)
    v = dist(rng);
  return values;
}

/// Adds a launch of a send or a receive of buffer `buffer` (n elements) on
/// axis 0 to the peer `shift` away.
void transfer(PlanBuilder &b, const std::string &program, Kernel kernel,
              uint32_t buffer, int64_t shift, int64_t n = kN) {
  const std::vector<int64_t> ints =
      transferInts(kernel, TransferAttrs{n, 0, shift});
  if (kernel == Kernel::Send)
    b.launch(program, kernel, {buffer}, {}, ints);
  else
    b.launch(program, kernel, {}, {buffer}, ints);
}

/// The index of rank `rank`'s program named `name`.
uint32_t program(const RankPlan &rank, const std::string &name) {
  for (uint32_t p = 0; p < rank.programs.size(); ++p)
    if (rank.programs[p].name == name)
      return p;
  ADD_FAILURE() << "no program '" << name << "'";
  return 0;
}

/// Sets `rank`'s step: calls of the programs named, each with a micro-batch
/// and a slot (-1: none).
struct Call {
  std::string program;
  int32_t microbatch = -1;
  int32_t slot = -1;
};
void setStep(RankPlan &rank, const std::vector<Call> &calls) {
  rank.step.clear();
  for (const Call &call : calls) {
    CallDesc desc;
    desc.program = program(rank, call.program);
    desc.microbatch = call.microbatch;
    desc.slot = call.slot;
    rank.step.push_back(desc);
  }
}

/// Gives buffer `name` of `rank` `copies` copies selected by `index`, moved
/// to the end of the arena with room for them.
void giveCopies(RankPlan &rank, const std::string &name, uint32_t copies,
                CopyIndex index) {
  BufferDesc &buffer = rank.buffers[*rank.findBuffer(name)];
  buffer.copies = copies;
  buffer.copyIndex = index;
  buffer.offset = rank.arenaBytes;
  rank.arenaBytes += buffer.copyStride() * copies;
}

/// Two stages: rank 0 computes h = a + b and sends it; rank 1 receives it,
/// computes y = h * w and sends y back; rank 0 receives it as g and computes
/// out = g * a. Rank 0's send of h and receive of g are consecutive calls:
/// one transfer group.
Plan roundTripPlan() {
  std::vector<PlanBuilder> ranks(2);
  PlanBuilder &first = ranks[0], &second = ranks[1];
  const uint32_t a = first.add("a", BufferKind::Input, {kN});
  const uint32_t b = first.add("b", BufferKind::Input, {kN});
  const uint32_t h = first.temp("h", {kN}), g = first.temp("g", {kN});
  const uint32_t out = first.add("out", BufferKind::Output, {kN});
  first.launch("forward", Kernel::Add, {a, b}, {h}, {kN});
  transfer(first, "send_h", Kernel::Send, h, +1);
  transfer(first, "recv_g", Kernel::Recv, g, +1);
  first.launch("finish", Kernel::Mul, {g, a}, {out}, {kN});

  const uint32_t w = second.add("w", BufferKind::Input, {kN});
  const uint32_t h1 = second.temp("h", {kN});
  const uint32_t y = second.add("y", BufferKind::Output, {kN});
  transfer(second, "recv_h", Kernel::Recv, h1, -1);
  second.launch("compute", Kernel::Mul, {h1, w}, {y}, {kN});
  transfer(second, "send_y", Kernel::Send, y, -1);

  Plan plan = multiRankPlan(ModelInfo(), {{"pp", 2}}, ranks);
  setStep(plan.ranks[0], {{"forward"}, {"send_h"}, {"recv_g"}, {"finish"}});
  setStep(plan.ranks[1], {{"recv_h"}, {"compute"}, {"send_y"}});
  return plan;
}

class TransferTest : public ::testing::Test {
protected:
  void SetUp() override { backend_ = createCpuBackend(); }

  /// The ranks of `plan`, a failed test if it does not verify; a timeout
  /// far above the tests' needs, so that a hang fails instead.
  std::unique_ptr<RankGroup> group(const Plan &plan) {
    RankGroup::Options options;
    options.collectiveTimeout = std::chrono::seconds(30);
    auto created = RankGroup::create(plan, *backend_, options);
    EXPECT_TRUE(created) << created.status().message();
    return created ? std::move(*created) : nullptr;
  }

  static void write(Executor &executor, const std::string &name,
                    const std::vector<float> &values, uint32_t copy = 0) {
    Status status = executor.writeRaw(*executor.findBuffer(name), values.data(),
                                      values.size() * sizeof(float), copy);
    ASSERT_TRUE(status) << status.message();
  }
  static std::vector<float> read(Executor &executor, const std::string &name,
                                 uint32_t copy = 0) {
    const size_t index = *executor.findBuffer(name);
    std::vector<float> values(
        static_cast<size_t>(executor.buffer(index).numElements()));
    Status status = executor.readRaw(index, values.data(),
                                     values.size() * sizeof(float), copy);
    EXPECT_TRUE(status) << status.message();
    return values;
  }

  std::unique_ptr<Backend> backend_;
};

// Tests the round trip of roundTripPlan on fresh random inputs, twice:
// rank 1's y and rank 0's out are the host's arithmetic, bit for bit (one
// f32 add or multiply per element, as the host does it).
TEST_F(TransferTest, StagesSendAndReceive) {
  Plan plan = roundTripPlan();
  ASSERT_TRUE(verifyPlanStructure(plan)) << verifyPlanStructure(plan).message();
  std::ostringstream printed;
  printPlan(plan, printed);
  EXPECT_THAT(printed.str(),
              ::testing::HasSubstr("send (h) -> () ints [37, 0, 1] axis pp\n"));
  EXPECT_THAT(printed.str(), ::testing::HasSubstr(
                                 "recv () -> (h) ints [37, 0, -1] axis pp\n"));
  std::unique_ptr<RankGroup> ranks = group(plan);
  ASSERT_TRUE(ranks);
  std::mt19937 rng(11);
  for (int step = 0; step < 2; ++step) {
    const std::vector<float> a = randomFloats(rng, kN),
                             b = randomFloats(rng, kN),
                             w = randomFloats(rng, kN);
    write(ranks->executor(0), "a", a);
    write(ranks->executor(0), "b", b);
    write(ranks->executor(1), "w", w);
    Status status =
        ranks->parallel([](Executor &executor) { return executor.runStep(); });
    ASSERT_TRUE(status) << status.message();
    std::vector<float> y(kN), out(kN);
    for (int64_t i = 0; i < kN; ++i) {
      y[size_t(i)] = (a[size_t(i)] + b[size_t(i)]) * w[size_t(i)];
      out[size_t(i)] = y[size_t(i)] * a[size_t(i)];
    }
    EXPECT_EQ(read(ranks->executor(1), "y"), y) << "step " << step;
    EXPECT_EQ(read(ranks->executor(0), "out"), out) << "step " << step;
  }
}

// Tests a transfer program run alone (Executor::run): a group of its own.
TEST_F(TransferTest, TransferProgramRunAlone) {
  std::unique_ptr<RankGroup> ranks = group(roundTripPlan());
  ASSERT_TRUE(ranks);
  std::mt19937 rng(12);
  const std::vector<float> h = randomFloats(rng, kN);
  write(ranks->executor(0), "h", h);
  Status status = ranks->parallel([](Executor &executor) {
    return executor.run(executor.rankPlan().rank == 0 ? "send_h" : "recv_h");
  });
  ASSERT_TRUE(status) << status.message();
  EXPECT_EQ(read(ranks->executor(1), "h"), h);
}

/// The 1F1B-like step of two stages and two micro-batches: stage 0 computes
/// h_k = x_k * c and sends it, stage 1 returns g_k = h_k * w, stage 0
/// computes out_k = g_k + x_k. The activations h and g have a copy per
/// slot (micro-batch k in slot k), the inputs x and outputs out a copy per
/// micro-batch. The groups:
///   rank 0: F0 | send h0 | F1 | send h1 + recv g0 | B0 | recv g1 | B1
///   rank 1: recv h0 | FB0 | send g0 + recv h1 | FB1 | send g1
Plan oneFOneBPlan() {
  std::vector<PlanBuilder> ranks(2);
  PlanBuilder &first = ranks[0], &second = ranks[1];
  const uint32_t x = first.add("x", BufferKind::Input, {kN});
  const uint32_t c = first.add("c", BufferKind::Input, {kN});
  const uint32_t h = first.temp("h", {kN}), g = first.temp("g", {kN});
  const uint32_t out = first.add("out", BufferKind::Output, {kN});
  first.launch("forward", Kernel::Mul, {x, c}, {h}, {kN});
  transfer(first, "send_h", Kernel::Send, h, +1);
  transfer(first, "recv_g", Kernel::Recv, g, +1);
  first.launch("backward", Kernel::Add, {g, x}, {out}, {kN});

  const uint32_t w = second.add("w", BufferKind::Input, {kN});
  const uint32_t h1 = second.temp("h", {kN}), g1 = second.temp("g", {kN});
  transfer(second, "recv_h", Kernel::Recv, h1, -1);
  second.launch("forward_backward", Kernel::Mul, {h1, w}, {g1}, {kN});
  transfer(second, "send_g", Kernel::Send, g1, -1);

  ModelInfo model;
  model.microbatches = 2;
  Plan plan = multiRankPlan(model, {{"pp", 2}}, ranks);
  for (RankPlan &rank : plan.ranks)
    for (const char *name : {"h", "g"})
      giveCopies(rank, name, 2, CopyIndex::Slot);
  giveCopies(plan.ranks[0], "x", 2, CopyIndex::MicroBatch);
  giveCopies(plan.ranks[0], "out", 2, CopyIndex::MicroBatch);
  setStep(plan.ranks[0], {{"forward", 0, 0},
                          {"send_h", 0, 0},
                          {"forward", 1, 1},
                          {"send_h", 1, 1},
                          {"recv_g", 0, 0},
                          {"backward", 0, 0},
                          {"recv_g", 1, 1},
                          {"backward", 1, 1}});
  setStep(plan.ranks[1], {{"recv_h", 0, 0},
                          {"forward_backward", 0, 0},
                          {"send_g", 0, 0},
                          {"recv_h", 1, 1},
                          {"forward_backward", 1, 1},
                          {"send_g", 1, 1}});
  return plan;
}

// Tests that the 1F1B-like step verifies and computes, for each
// micro-batch, what the host does.
TEST_F(TransferTest, OneFOneBGroups) {
  Plan plan = oneFOneBPlan();
  ASSERT_TRUE(verifyPlanStructure(plan)) << verifyPlanStructure(plan).message();
  EXPECT_EQ(transferGroups(plan.ranks[0]).size(), 3u);
  EXPECT_EQ(transferGroups(plan.ranks[1]).size(), 3u);
  std::unique_ptr<RankGroup> ranks = group(plan);
  ASSERT_TRUE(ranks);
  std::mt19937 rng(13);
  const std::vector<float> c = randomFloats(rng, kN), w = randomFloats(rng, kN);
  const std::vector<float> x[2] = {randomFloats(rng, kN),
                                   randomFloats(rng, kN)};
  write(ranks->executor(0), "c", c);
  write(ranks->executor(1), "w", w);
  for (uint32_t k = 0; k < 2; ++k)
    write(ranks->executor(0), "x", x[k], k);
  Status status =
      ranks->parallel([](Executor &executor) { return executor.runStep(); });
  ASSERT_TRUE(status) << status.message();
  for (uint32_t k = 0; k < 2; ++k) {
    std::vector<float> g(kN), out(kN);
    for (size_t i = 0; i < size_t(kN); ++i) {
      g[i] = x[k][i] * c[i] * w[i];
      out[i] = g[i] + x[k][i];
    }
    EXPECT_EQ(read(ranks->executor(1), "g", k), g) << "micro-batch " << k;
    EXPECT_EQ(read(ranks->executor(0), "out", k), out) << "micro-batch " << k;
  }
}

// Tests a profiled 1F1B step: every send and receive is a launch of the
// profile, those of one group with the group's time; the profile has rows
// for them and the trace puts them in the category "transfer".
TEST_F(TransferTest, ProfileShowsTransfers) {
  std::unique_ptr<RankGroup> ranks = group(oneFOneBPlan());
  ASSERT_TRUE(ranks);
  std::vector<std::vector<Executor::LaunchTime>> launches(2);
  Status status = ranks->parallel([&](Executor &executor) -> Status {
    MLT_RETURN_IF_ERROR(executor.beginProfile());
    MLT_RETURN_IF_ERROR(executor.runStep());
    StatusOr<std::vector<Executor::LaunchTime>> times = executor.endProfile();
    if (!times)
      return times.takeStatus();
    launches[executor.rankPlan().rank] = std::move(*times);
    return Status::ok();
  });
  ASSERT_TRUE(status) << status.message();
  const RankPlan &first = ranks->executor(0).rankPlan();
  // forward, send h0, forward, send h1 + recv g0, backward, recv g1,
  // backward: one launch each.
  ASSERT_EQ(launches[0].size(), 8u);
  auto kernelOf = [&](const Executor::LaunchTime &launch) {
    return first.programs[launch.program]
        .instructions[launch.instruction]
        .kernel;
  };
  EXPECT_EQ(kernelOf(launches[0][3]), Kernel::Send);
  EXPECT_EQ(kernelOf(launches[0][4]), Kernel::Recv);
  EXPECT_EQ(launches[0][3].start, launches[0][4].start);
  EXPECT_EQ(launches[0][3].milliseconds, launches[0][4].milliseconds);
  EXPECT_LE(launches[0][2].start, launches[0][3].start);
  EXPECT_THAT(formatProfile(first, launches[0]),
              ::testing::HasSubstr("  send "));
  const nlohmann::json events =
      nlohmann::json::parse(traceEvents(first, launches[0]));
  size_t transfers = 0;
  for (const nlohmann::json &event : events)
    if (event["ph"] == "X") {
      const bool transfer = event["name"] == "send" || event["name"] == "recv";
      EXPECT_EQ(event["cat"], transfer ? "transfer" : "compute");
      transfers += transfer;
    }
  EXPECT_EQ(transfers, 4u);
}

// Tests the refusals of sends and receives that do not match across ranks:
// a send without its receive, a receive without its send, a count that
// differs.
TEST_F(TransferTest, UnmatchedTransfersAreRefused) {
  Plan plan = roundTripPlan();
  setStep(plan.ranks[1], {{"compute"}, {"send_y"}});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "the step: rank 0's send #0 to rank 1 (37 f32) has no matching "
            "receive on rank 1 (it receives 0 from rank 0)");

  plan = roundTripPlan();
  setStep(plan.ranks[1], {{"recv_h"}, {"compute"}});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "the step: rank 0's receive #0 from rank 1 (37 f32) has no "
            "matching send on rank 1 (it sends 0 to rank 0)");

  // Rank 1 receives 2n elements into a buffer of its own size.
  plan = roundTripPlan();
  RankPlan &second = plan.ranks[1];
  BufferDesc wide = second.buffers[*second.findBuffer("h")];
  wide.name = "wide";
  wide.shape = {2 * kN};
  wide.bytes = 2 * kN * sizeof(float);
  wide.offset = second.arenaBytes;
  second.arenaBytes += wide.copyStride();
  second.buffers.push_back(wide);
  InstructionDesc &recv =
      second.programs[program(second, "recv_h")].instructions[0];
  recv.outputs = {uint32_t(second.buffers.size() - 1)};
  recv.ints = transferInts(Kernel::Recv, TransferAttrs{2 * kN, 0, -1});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "the step: rank 1's receive #0 from rank 0 is 74 f32, rank 0 "
            "sends 37 f32");
}

// Tests the per-rank refusals: a transfer program with another kernel, a
// transfer off stream 0, a peer outside the axis, and a shift of 0.
TEST_F(TransferTest, TransferProgramsAreChecked) {
  Plan plan = roundTripPlan();
  RankPlan &first = plan.ranks[0];
  InstructionDesc add =
      first.programs[program(first, "forward")].instructions[0];
  first.programs[program(first, "send_h")].instructions.push_back(add);
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "rank 0: program 'send_h' instruction 1 (add) is no send or "
            "receive, but the program launches them: a transfer program "
            "launches sends and receives alone");

  plan = roundTripPlan();
  plan.ranks[0]
      .programs[program(plan.ranks[0], "recv_g")]
      .instructions[0]
      .stream = 1;
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "rank 0: program 'recv_g' instruction 0 (recv) runs on stream 1; "
            "a transfer program runs on stream 0 alone");

  plan = roundTripPlan();
  plan.ranks[1]
      .programs[program(plan.ranks[1], "send_y")]
      .instructions[0]
      .ints = transferInts(Kernel::Send, TransferAttrs{kN, 0, 1});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "rank 1: program 'send_y' instruction 0 (send) has rank 1's peer "
            "at coordinate 2 on axis 'pp' (its own 1 plus shift 1), outside "
            "[0, 2)");
  // Executor::create checks the rank alone, with the same message.
  std::unique_ptr<Backend> backend = createCpuBackend();
  auto executor = Executor::create(plan, 1, *backend);
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "program 'send_y' instruction 0 (send) has rank 1's peer at "
            "coordinate 2 on axis 'pp' (its own 1 plus shift 1), outside [0, "
            "2)");

  plan = roundTripPlan();
  plan.ranks[1]
      .programs[program(plan.ranks[1], "send_y")]
      .instructions[0]
      .ints = transferInts(Kernel::Send, TransferAttrs{kN, 0, 0});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "rank 1: program 'send_y' instruction 0 (send): shift must not be "
            "0 (a rank does not send to itself), got ints [37, 0, 0]");
}

// Tests a group whose receive writes what its send reads: refused on one
// copy, accepted when the calls select different copies of the buffer.
TEST_F(TransferTest, ConflictingGroupIsRefused) {
  // Rank 0 receives g into h, which the same group sends.
  Plan plan = roundTripPlan();
  RankPlan &first = plan.ranks[0];
  first.programs[program(first, "recv_g")].instructions[0].outputs = {
      uint32_t(*first.findBuffer("h"))};
  const uint64_t h = first.buffers[*first.findBuffer("h")].offset;
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "rank 0: step calls 1..2 (transfer group 0), whose transfers are "
            "not ordered: call 2 (program 'recv_g') instruction 0 (recv) "
            "writes 'h' at [" +
                std::to_string(h) + ", " + std::to_string(h + 4 * kN) +
                "), where call 1 (program 'send_h') instruction 0 (send) reads "
                "'h' at [" +
                std::to_string(h) + ", " + std::to_string(h + 4 * kN) + ")");

  // In the 1F1B plan, rank 1's group "send g0 + recv h1" may become "send
  // h0 + recv h1": slots 0 and 1 of h, disjoint. Both in slot 0 conflict.
  plan = oneFOneBPlan();
  RankPlan &second = plan.ranks[1];
  second.programs[program(second, "send_g")].instructions[0].inputs = {
      uint32_t(*second.findBuffer("h"))};
  EXPECT_TRUE(verifyRank(second, plan.mesh))
      << verifyRank(second, plan.mesh).message();
  second.step[3].slot = 0; // recv h1 into slot 0, which send h0 reads
  const BufferDesc &h1 = second.buffers[*second.findBuffer("h")];
  EXPECT_EQ(verifyRank(second, plan.mesh).message(),
            "step calls 2..3 (transfer group 1), whose transfers are not "
            "ordered: call 3 (program 'recv_h') instruction 0 (recv) writes "
            "'h' (copy 0) at [" +
                std::to_string(h1.offset) + ", " +
                std::to_string(h1.offset + 4 * kN) +
                "), where call 2 (program 'send_g') instruction 0 (send) reads "
                "'h' (copy 0) at [" +
                std::to_string(h1.offset) + ", " +
                std::to_string(h1.offset + 4 * kN) + ")");
}

// Tests a step that deadlocks (each rank receives from the other in a group
// before the one that sends), named with what each rank waits for, and that
// sending first on one rank resolves it.
TEST_F(TransferTest, DeadlockIsRefused) {
  std::vector<PlanBuilder> ranks(2);
  for (int r = 0; r < 2; ++r) {
    PlanBuilder &b = ranks[size_t(r)];
    const uint32_t in = b.temp("in", {kN}), out = b.temp("out", {kN});
    const int64_t shift = r == 0 ? 1 : -1;
    transfer(b, "recv", Kernel::Recv, in, shift);
    b.launch("work", Kernel::Add, {in, in}, {out}, {kN});
    transfer(b, "send", Kernel::Send, out, shift);
  }
  Plan plan = multiRankPlan(ModelInfo(), {{"pp", 2}}, ranks);
  for (RankPlan &rank : plan.ranks)
    setStep(rank, {{"recv"}, {"work"}, {"send"}});
  EXPECT_EQ(verifyPlanStructure(plan).message(),
            "the step can deadlock: rank 0 waits in transfer group 0 at step "
            "call 0 (receive from rank 1), rank 1 waits in transfer group 0 "
            "at step call 0 (receive from rank 0)");

  setStep(plan.ranks[0], {{"send"}, {"recv"}, {"work"}});
  EXPECT_TRUE(verifyPlanStructure(plan)) << verifyPlanStructure(plan).message();
  std::unique_ptr<RankGroup> group = this->group(plan);
  ASSERT_TRUE(group);
  std::mt19937 rng(14);
  const std::vector<float> out0 = randomFloats(rng, kN);
  write(group->executor(0), "out", out0);
  Status status =
      group->parallel([](Executor &executor) { return executor.runStep(); });
  ASSERT_TRUE(status) << status.message();
  // Rank 1 doubles what rank 0 sent and sends it back.
  std::vector<float> doubled(kN);
  for (size_t i = 0; i < size_t(kN); ++i)
    doubled[i] = out0[i] + out0[i];
  EXPECT_EQ(read(group->executor(0), "in"), doubled);
}

// Tests a cycle of collectives over two axes that the per-axis order check
// lets through: on dp=2,tp=2, ranks 0 and 3 reduce over dp first, ranks 1
// and 2 over tp first, so each waits for a rank that waits for another.
TEST_F(TransferTest, CollectiveCycleIsRefused) {
  std::vector<PlanBuilder> ranks(4);
  for (int r = 0; r < 4; ++r) {
    PlanBuilder &b = ranks[size_t(r)];
    const uint32_t x = b.temp("x", {4});
    const bool dpFirst = r == 0 || r == 3;
    for (int64_t axis :
         dpFirst ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{1, 0})
      b.launch(axis == 0 ? "reduce_dp" : "reduce_tp", Kernel::AllReduceSum, {x},
               {x}, {4, axis});
  }
  Plan plan = multiRankPlan(ModelInfo(), {{"dp", 2}, {"tp", 2}}, ranks);
  for (int r = 0; r < 4; ++r)
    setStep(plan.ranks[size_t(r)],
            r == 0 || r == 3 ? std::vector<Call>{{"reduce_dp"}, {"reduce_tp"}}
                             : std::vector<Call>{{"reduce_tp"}, {"reduce_dp"}});
  EXPECT_EQ(
      verifyPlanStructure(plan).message(),
      "the step can deadlock: rank 0 waits in collective #0 on axis 'dp' at "
      "step call 0 (all_reduce_sum of 4 f32; for rank 2), rank 1 waits in "
      "collective #0 on axis 'tp' at step call 0 (all_reduce_sum of 4 f32; "
      "for rank 0), rank 2 waits in collective #0 on axis 'tp' at step call "
      "0 (all_reduce_sum of 4 f32; for rank 3), rank 3 waits in collective "
      "#0 on axis 'dp' at step call 0 (all_reduce_sum of 4 f32; for rank 1)");
  setStep(plan.ranks[1], {{"reduce_dp"}, {"reduce_tp"}});
  setStep(plan.ranks[2], {{"reduce_dp"}, {"reduce_tp"}});
  EXPECT_TRUE(verifyPlanStructure(plan)) << verifyPlanStructure(plan).message();
}

// Tests that a rank with transfers needs a communicator.
TEST_F(TransferTest, ExecutorNeedsCommunicator) {
  auto executor = Executor::create(roundTripPlan(), 0, *backend_);
  ASSERT_FALSE(executor);
  EXPECT_EQ(executor.status().message(),
            "rank 0 sends or receives but has no communicator");
}

} // namespace
