//===- CostModelTest.cpp - calibrations and predicted timelines -----------===//
//
// Part of mlt. Curves interpolate as Calibration.h says; calibration files
// round-trip and bad ones are refused with the field named; launches of
// classes never measured are priced by the nearest measured refinement or
// the fallback rates; measureCalibration takes a collective's least time
// over its members. scheduleStep gives the hand-computed timelines of small
// plans (streams, tokens, a collective's slowest member, a pipeline's
// transfers) and equals its reference, scheduleStepBySweep, on random
// plans of several ranks.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/Calibration.h"
#include "mlt/Analysis/LayoutSpace.h"
#include "mlt/Layout/LayoutOptions.h"
#include "mlt/Analysis/Timeline.h"
#include "mlt/Plan/KernelInfo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace mlt;
using namespace mlt::cost;
using namespace mlt::rt;

namespace {

//===----------------------------------------------------------------------===//
// Curves and calibrations
//===----------------------------------------------------------------------===//

TEST(CurveTest, InterpolatesInLogLogAndExtendsAsDocumented) {
  Curve curve;
  curve.points = {{1e6, 1e-5}, {1e8, 1e-4}, {1e10, 1e-2}};
  EXPECT_DOUBLE_EQ(curve.seconds(1e6), 1e-5);
  EXPECT_DOUBLE_EQ(curve.seconds(1e8), 1e-4);
  // Halfway in log(work) is halfway in log(time): sqrt(1e-5 * 1e-4).
  EXPECT_NEAR(curve.seconds(1e7), std::sqrt(1e-9), 1e-15);
  EXPECT_NEAR(curve.seconds(1e9), 1e-3, 1e-15);
  // Below the first point: its time (the latency floor).
  EXPECT_DOUBLE_EQ(curve.seconds(10.0), 1e-5);
  // Above the last: the last point's rate.
  EXPECT_DOUBLE_EQ(curve.seconds(3e10), 3e-2);
  EXPECT_EQ(Curve().seconds(5.0), 0.0);
}

Calibration sampleCalibration() {
  Calibration c;
  c.device = "test device";
  c.backend = "cpu";
  c.launchGaps = {2e-6, 1e-6, 4e-6};
  c.overlapSlowdowns = {0.25};
  c.curves["matmul"].points = {{1e9, 1e-5}, {1e12, 2e-3}};
  c.curves["attention_fwd/hd64/s1024"].points = {{1e9, 4e-5}};
  c.curves["attention_fwd/hd128/s1024"].points = {{1e9, 2e-5}};
  c.curves["add"].points = {{1e3, 2e-6}, {1e9, 1e-3}};
  c.curves["all_reduce_sum/g2"].points = {{1e6, 1e-4}, {1e9, 1e-2}};
  return c;
}

TEST(CalibrationTest, RoundTripsThroughItsFile) {
  const Calibration c = sampleCalibration();
  StatusOr<Calibration> back = Calibration::parse(c.toJson());
  ASSERT_TRUE(back) << back.status().message();
  EXPECT_EQ(back->device, c.device);
  EXPECT_EQ(back->backend, c.backend);
  ASSERT_EQ(back->launchGaps.size(), 3u);
  EXPECT_NEAR(back->launchGap(), 2e-6, 1e-18);
  EXPECT_EQ(back->overlapSlowdown(), 0.25);
  ASSERT_EQ(back->curves.size(), c.curves.size());
  for (const auto &[key, curve] : c.curves) {
    ASSERT_EQ(back->curves[key].points.size(), curve.points.size()) << key;
    for (size_t i = 0; i < curve.points.size(); ++i) {
      EXPECT_DOUBLE_EQ(back->curves[key].points[i].first,
                       curve.points[i].first);
      EXPECT_NEAR(back->curves[key].points[i].second, curve.points[i].second,
                  1e-18);
    }
  }
}

TEST(CalibrationTest, RefusesBadFilesNamingTheField) {
  auto error = [](const std::string &text) {
    StatusOr<Calibration> c = Calibration::parse(text);
    return c ? std::string("accepted") : c.status().message();
  };
  const std::string head = R"({"format": "mlt-calibration", "version": 1,
      "device": "d", "backend": "cpu", "launch_gaps_us": [1.0],
      "overlap_slowdowns": [0.5], )";
  EXPECT_EQ(error("{"), "not JSON");
  EXPECT_EQ(error("{}"),
            "not a calibration (no \"format\": \"mlt-calibration\")");
  EXPECT_NE(error(R"({"format": "mlt-calibration", "version": 2})")
                .find("format version 2"),
            std::string::npos);
  EXPECT_NE(error(head + R"("curves": {"add": {"points": [[2, 1], [1, 1]]}}})")
                .find("curve 'add': points are not in increasing order"),
            std::string::npos);
  EXPECT_NE(error(head + R"("curves": {"add": {"points": [[2, -1]]}}})")
                .find("is not [work, microseconds], both positive"),
            std::string::npos);
  EXPECT_NE(error(head + R"("curves": {"add": {"points": []}}})")
                .find("between 1 and"),
            std::string::npos);
  EXPECT_NE(error(std::string(1000, '[') + std::string(1000, ']'))
                .find("nested deeper"),
            std::string::npos);
  EXPECT_EQ(error(head + R"("curves": {"add": {"points": [[1, 1]]}}})"),
            "accepted");
}

TEST(CalibrationTest, PricesUnmeasuredClassesByTheirNearestOrTheFallback) {
  const Calibration c = sampleCalibration();
  bool calibrated = false;
  // Measured.
  EXPECT_DOUBLE_EQ(c.seconds({"matmul", 1e9, true, false}, &calibrated),
                   1e-5);
  EXPECT_TRUE(calibrated);
  // Head dimension 80: the nearest measured one by ratio (64), and a
  // longer sequence at the nearest length.
  EXPECT_DOUBLE_EQ(
      c.seconds({"attention_fwd/hd80/s1024", 1e9, true, false}, &calibrated),
      4e-5);
  EXPECT_TRUE(calibrated);
  EXPECT_DOUBLE_EQ(
      c.seconds({"attention_fwd/hd128/s4096", 1e9, true, false}), 2e-5);
  // Four ranks: the ring moves (2 * 3/4) / (2 * 1/2) = 1.5 times the bytes
  // of two ranks' all-reduce.
  EXPECT_NEAR(
      c.seconds({"all_reduce_sum/g4", 1e6, false, true}, &calibrated),
      Curve{c.curves.at("all_reduce_sum/g2")}.seconds(1.5e6), 1e-15);
  EXPECT_TRUE(calibrated);
  // A kernel never measured: its bytes at the median memory rate (add's
  // largest point: 1e9 bytes in 1 ms), at least the latency floor.
  EXPECT_NEAR(c.seconds({"rope", 1e9, false, false}, &calibrated), 1e-3,
              1e-15);
  EXPECT_FALSE(calibrated);
  EXPECT_DOUBLE_EQ(c.seconds({"rope", 1.0, false, false}), c.latencyFloor());
  EXPECT_DOUBLE_EQ(c.latencyFloor(), 2e-6);
}

TEST(CalibrationTest, ExtendsACurvePastItsLastPointAtTheBetterRate) {
  Calibration c = sampleCalibration();
  // A curve measured once, at 1 KB in 5 us (within four times the least
  // launch, 2 us: latency-bound): 1 MB more goes at the median memory rate
  // (of add's 1 TB/s and rope's own), not at rope's 0.2 GB/s.
  c.curves["rope"].points = {{1e3, 5e-6}};
  EXPECT_DOUBLE_EQ(c.memoryRate(), 0.5 * (1e12 + 2e8));
  EXPECT_NEAR(c.seconds({"rope", 1e6 + 1e3, false, false}),
              5e-6 + 1e6 / c.memoryRate(), 1e-15);
  // Measured once at 10 us, beyond latency: at its own rate.
  c.curves["rope"].points = {{1e3, 1e-5}};
  EXPECT_NEAR(c.seconds({"rope", 2e3, false, false}), 2e-5, 1e-18);
  // Where the curve's own rate is the better one (10 TB/s), its own.
  c.curves["rope"].points = {{1e6, 1e-7}};
  EXPECT_NEAR(c.seconds({"rope", 2e6, false, false}), 2e-7, 1e-18);
  // A curve of several points goes on at its last two points' marginal
  // rate (1 MB more per 0.1 ms: 10 GB/s), whatever the kind's.
  c.curves["rope"].points = {{1e3, 1e-5}, {1e6 + 1e3, 1.1e-4}};
  EXPECT_NEAR(c.seconds({"rope", 3e6 + 1e3, false, false}), 3.1e-4, 1e-15);
}

// Tests a curve below its first point: the point's time where it is within
// 64 launch latencies (latency-bound), at its rate where it is far beyond
// (a work-bound launch: attention at a long sequence measured with every
// head, run with a rank's share of them), no lower than the least launch.
TEST(CalibrationTest, ShrinksBelowAWorkBoundFirstPoint) {
  Calibration c = sampleCalibration(); // least launch 2 us
  c.curves["attention_fwd/hd64/s32768"].points = {{4e12, 1e-2}};
  EXPECT_NEAR(c.seconds({"attention_fwd/hd64/s32768", 2e12, true, false}),
              5e-3, 1e-15);
  EXPECT_DOUBLE_EQ(c.seconds({"attention_fwd/hd64/s32768", 1e3, true, false}),
                   c.latencyFloor());
  // 100 us: 50 latencies, latency-bound; the same time below it.
  c.curves["attention_fwd/hd64/s32768"].points = {{4e12, 1e-4}};
  EXPECT_DOUBLE_EQ(c.seconds({"attention_fwd/hd64/s32768", 2e12, true, false}),
                   1e-4);
}

// Tests that a collective on the compute stream, past its curve's last
// point, is priced no slower than the same collective beside compute: the
// H200's all_gather/g2, measured at 16 and 32 KB
// (24.8 and 24.1 us), gathering 32 MiB took 24 ms by its own average rate,
// 110 us beside compute.
TEST(CalibrationTest, ACollectivePastItsCurveIsNoSlowerThanBesideCompute) {
  Calibration c = sampleCalibration();
  c.curves["all_gather/g2"].points = {{16384, 24.8e-6}, {32768, 24.1e-6}};
  c.curves["all_gather/g2/side"].points = {{184320, 18e-6},
                                           {18874368, 109.5e-6},
                                           {131072000, 273.1e-6}};
  const double work = 33554432;
  const double side = c.seconds({"all_gather/g2/side", work, false, true});
  EXPECT_GT(side, 109.5e-6);
  EXPECT_LT(side, 273.1e-6);
  EXPECT_DOUBLE_EQ(c.seconds({"all_gather/g2", work, false, true}), side);
  // Past the side curve's last point too, its extrapolation; within its
  // own points, its own.
  EXPECT_DOUBLE_EQ(c.seconds({"all_gather/g2", 2e8, false, true}),
                   c.seconds({"all_gather/g2/side", 2e8, false, true}));
  EXPECT_GT(c.seconds({"all_gather/g2", 2e8, false, true}), 273.1e-6);
  EXPECT_NEAR(c.seconds({"all_gather/g2", 16384, false, true}), 24.8e-6,
              1e-15);
  // Not a collective: no side curve is read.
  c.curves["rope"].points = {{1e3, 1e-5}};
  c.curves["rope/side"].points = {{1e9, 1e-6}};
  EXPECT_NEAR(c.seconds({"rope", 2e3, false, false}), 2e-5, 1e-18);
}

TEST(CalibrationTest, MergesRunsOfOneDeviceOnly) {
  Calibration a = sampleCalibration(), b = sampleCalibration();
  b.curves["add"].points = {{1e3, 4e-6}, {1e6, 1e-5}};
  b.launchGaps = {3e-6};
  ASSERT_TRUE(a.merge(b));
  EXPECT_EQ(a.launchGaps.size(), 4u);
  ASSERT_EQ(a.curves["add"].points.size(), 3u);
  EXPECT_DOUBLE_EQ(a.curves["add"].points[0].second, 3e-6);
  b.device = "another";
  Status status = a.merge(b);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("cannot be merged"), std::string::npos);
}

//===----------------------------------------------------------------------===//
// Plans by hand
//===----------------------------------------------------------------------===//

InstructionDesc compute(uint8_t stream = 0) {
  InstructionDesc inst;
  inst.kernel = Kernel::Add;
  inst.stream = stream;
  return inst;
}

InstructionDesc allReduce(uint32_t buffer, uint8_t stream = 0) {
  InstructionDesc inst;
  inst.kernel = Kernel::AllReduceSum;
  inst.inputs = {buffer};
  inst.outputs = {buffer};
  inst.ints = collectiveInts(Kernel::AllReduceSum, CollectiveAttrs{256, 0});
  inst.stream = stream;
  return inst;
}

InstructionDesc transfer(Kernel kernel, int64_t shift, uint32_t buffer) {
  InstructionDesc inst;
  inst.kernel = kernel;
  (kernel == Kernel::Send ? inst.inputs : inst.outputs) = {buffer};
  inst.ints = transferInts(kernel, TransferAttrs{256, 0, shift});
  return inst;
}

BufferDesc buffer() {
  BufferDesc b;
  b.name = "x";
  b.shape = {256};
  b.bytes = 1024;
  return b;
}

/// Two ranks of dp=2 running the same program `instructions` (over one
/// buffer of `bytes`) in `calls` calls.
Plan dp2Plan(const std::vector<InstructionDesc> &instructions,
             size_t calls = 1, uint64_t bytes = 1024) {
  Plan plan;
  plan.mesh = {{"dp", 2}};
  plan.worldSize = 2;
  for (uint32_t r = 0; r < 2; ++r) {
    RankPlan rank;
    rank.rank = r;
    rank.buffers = {buffer()};
    rank.buffers[0].bytes = bytes;
    ProgramDesc p;
    p.name = "p";
    p.instructions = instructions;
    rank.programs = {p};
    rank.step.assign(calls, CallDesc{});
    plan.ranks.push_back(rank);
  }
  return plan;
}

/// Costs of `seconds[r][p][i]` with `gap`.
LaunchCosts costsOf(std::vector<std::vector<std::vector<double>>> seconds,
                    double gap) {
  LaunchCosts costs;
  costs.seconds = std::move(seconds);
  costs.gap = gap;
  return costs;
}

/// Both schedulers' timeline, checked equal.
StepTimeline schedule(const Plan &plan, const LaunchCosts &costs) {
  StatusOr<StepTimeline> graph = scheduleStep(plan, costs);
  StatusOr<StepTimeline> sweep = scheduleStepBySweep(plan, costs);
  EXPECT_TRUE(graph) << graph.status().message();
  EXPECT_TRUE(sweep) << sweep.status().message();
  if (!graph || !sweep)
    return {};
  EXPECT_EQ(graph->ranks.size(), sweep->ranks.size());
  for (size_t r = 0; r < graph->ranks.size(); ++r) {
    const RankTimeline &a = graph->ranks[r], &b = sweep->ranks[r];
    EXPECT_EQ(a.end, b.end) << "rank " << r;
    EXPECT_EQ(a.launches.size(), b.launches.size()) << "rank " << r;
    for (size_t k = 0; k < std::min(a.launches.size(), b.launches.size());
         ++k) {
      EXPECT_EQ(a.launches[k].call, b.launches[k].call);
      EXPECT_EQ(a.launches[k].instruction, b.launches[k].instruction);
      EXPECT_EQ(a.launches[k].start, b.launches[k].start)
          << "rank " << r << " launch " << k;
      EXPECT_EQ(a.launches[k].seconds, b.launches[k].seconds);
    }
  }
  return *graph;
}

TEST(TimelineTest, StreamsTokensAndCallsInOrder) {
  Plan plan;
  RankPlan rank;
  ProgramDesc p;
  p.name = "p";
  // Stream 0: a (1 s), b (2 s); stream 1: c (4 s) after a's token; d on
  // stream 0 (1 s) waits for c.
  InstructionDesc a = compute(0), b = compute(0), c = compute(1),
                  d = compute(0);
  a.token = 0;
  c.waits = {0};
  c.token = 1;
  d.waits = {1};
  p.instructions = {a, b, c, d};
  rank.programs = {p};
  rank.step = {CallDesc{}, CallDesc{}};
  plan.ranks = {rank};
  const StepTimeline t =
      schedule(plan, costsOf({{{1.0, 2.0, 4.0, 1.0}}}, 0.25));
  ASSERT_EQ(t.ranks.size(), 1u);
  const std::vector<PredictedLaunch> &l = t.ranks[0].launches;
  ASSERT_EQ(l.size(), 8u);
  EXPECT_EQ(l[0].start, 0.25);          // a
  EXPECT_EQ(l[1].start, 1.5);           // b after a
  EXPECT_EQ(l[2].start, 1.5);           // c after a's token, beside b
  EXPECT_EQ(l[3].start, 5.75);          // d after c (5.5) and b (3.5)
  EXPECT_EQ(l[4].start, 6.75 + 0.25);   // the next call after d's end
  EXPECT_EQ(t.ranks[0].end, 2 * 6.75);
  EXPECT_EQ(t.seconds(), 13.5);

  const StepBreakdown b0 = breakdown(plan, t, 0);
  EXPECT_EQ(b0.step, 13.5);
  // Each call: a [0.25, 1.25], b and c from 1.5 to 5.5, d [5.75, 6.75];
  // idle: the gaps before a, between a and b, and before d.
  EXPECT_DOUBLE_EQ(b0.idle, 2 * 0.75);
  EXPECT_DOUBLE_EQ(b0.compute, 2 * 6.0);
  EXPECT_EQ(b0.exposedCommunication, 0.0);
  ASSERT_EQ(b0.byKernel.size(), 1u);
  EXPECT_EQ(b0.byKernel[0].first, "add");
  EXPECT_DOUBLE_EQ(b0.byKernel[0].second, 16.0);
}

TEST(TimelineTest, ACollectiveWaitsForItsSlowestMember) {
  // Compute, then the all-reduce on stream 1 after its token, then more
  // compute on stream 0 beside it.
  InstructionDesc first = compute(0);
  first.token = 0;
  InstructionDesc reduce = allReduce(0, 1);
  reduce.waits = {0};
  const Plan plan = dp2Plan({first, reduce, compute(0)});
  // Rank 1's first launch takes 3 s, rank 0's 1 s: the all-reduce starts
  // at 3 on both; rank 0's last compute does not wait for it.
  const StepTimeline t = schedule(
      plan, costsOf({{{1.0, 2.0, 1.0}}, {{3.0, 2.0, 1.0}}}, 0.0));
  ASSERT_EQ(t.ranks.size(), 2u);
  EXPECT_EQ(t.ranks[0].launches[1].start, 3.0);
  EXPECT_EQ(t.ranks[1].launches[1].start, 3.0);
  EXPECT_EQ(t.ranks[0].launches[2].start, 1.0);
  EXPECT_EQ(t.ranks[0].end, 5.0);
  EXPECT_EQ(t.seconds(), 5.0);
  const StepBreakdown b0 = breakdown(plan, t, 0);
  EXPECT_EQ(b0.compute, 2.0);
  EXPECT_EQ(b0.communication, 2.0);
  EXPECT_EQ(b0.exposedCommunication, 2.0);
  EXPECT_EQ(b0.idle, 1.0);
  const StepBreakdown b1 = breakdown(plan, t, 1);
  EXPECT_EQ(b1.compute, 4.0);
  EXPECT_EQ(b1.exposedCommunication, 1.0);
  EXPECT_EQ(b1.idle, 0.0);
}

TEST(TimelineTest, APipelinesTransfersJoinItsStages) {
  Plan plan;
  plan.mesh = {{"pp", 2}};
  plan.worldSize = 2;
  for (uint32_t r = 0; r < 2; ++r) {
    RankPlan rank;
    rank.rank = r;
    rank.buffers = {buffer()};
    ProgramDesc work, move;
    work.name = "work";
    work.instructions = {compute()};
    move.name = "move";
    move.instructions = {r == 0 ? transfer(Kernel::Send, 1, 0)
                                : transfer(Kernel::Recv, -1, 0)};
    rank.programs = {work, move};
    CallDesc call0, call1;
    call1.program = 1;
    // Stage 0 works then sends; stage 1 receives then works.
    rank.step = r == 0 ? std::vector<CallDesc>{call0, call1}
                       : std::vector<CallDesc>{call1, call0};
    plan.ranks.push_back(rank);
  }
  const StepTimeline t =
      schedule(plan, costsOf({{{2.0}, {0.5}}, {{2.0}, {0.5}}}, 0.0));
  ASSERT_EQ(t.ranks.size(), 2u);
  EXPECT_EQ(t.ranks[0].launches[1].start, 2.0);
  EXPECT_EQ(t.ranks[1].launches[0].start, 2.0);
  EXPECT_EQ(t.ranks[1].launches[1].start, 2.5);
  EXPECT_EQ(t.ranks[0].end, 2.5);
  EXPECT_EQ(t.ranks[1].end, 4.5);
  const StepBreakdown b0 = breakdown(plan, t, 0);
  EXPECT_EQ(b0.idle, 2.0); // stage 0 waits out the step's tail
}

TEST(TimelineTest, ANegativeGapShortensLaunchesToHalfAtMost) {
  Plan plan;
  RankPlan rank;
  ProgramDesc p;
  p.name = "p";
  p.instructions = {compute(), compute()};
  rank.programs = {p};
  rank.step = {CallDesc{}};
  plan.ranks = {rank};
  // 1 s and 0.25 s at a gap of -0.25: 0.75 and 0.125 (half of 0.25).
  const StepTimeline t = schedule(plan, costsOf({{{1.0, 0.25}}}, -0.25));
  EXPECT_EQ(t.ranks[0].launches[0].seconds, 0.75);
  EXPECT_EQ(t.ranks[0].launches[1].start, 0.75);
  EXPECT_EQ(t.ranks[0].launches[1].seconds, 0.125);
  EXPECT_EQ(t.seconds(), 0.875);
  // The fitted gap brings the step to a measured time, both ways.
  StatusOr<double> gap = fitLaunchGap(plan, costsOf({{{1.0, 0.25}}}, 0.0), 1.0);
  ASSERT_TRUE(gap) << gap.status().message();
  EXPECT_NEAR(*gap, -0.125, 1e-8);
  gap = fitLaunchGap(plan, costsOf({{{1.0, 0.25}}}, 0.0), 2.25);
  ASSERT_TRUE(gap);
  EXPECT_NEAR(*gap, 0.5, 1e-8);
}

TEST(TimelineTest, ComputeBesideCommunicationIsSlowed) {
  // One rank of dp=2 (both alike): a 4 s compute launch, an all-reduce of
  // 2 s on stream 1 from the start (no token), then a 1 s compute launch.
  const Plan plan = dp2Plan({allReduce(0, 1), compute(0), compute(0)});
  EXPECT_TRUE(overlapsCommunication(plan));
  LaunchCosts costs = costsOf({{{2.0, 4.0, 1.0}}, {{2.0, 4.0, 1.0}}}, 0.0);
  costs.overlapSlowdown = 0.5;
  StatusOr<StepTimeline> t = predictStep(plan, costs);
  ASSERT_TRUE(t) << t.status().message();
  // The first compute launch overlaps the all-reduce for 2 s: 1 s more.
  EXPECT_EQ(t->ranks[0].launches[1].seconds, 5.0);
  EXPECT_EQ(t->ranks[0].launches[2].start, 5.0);
  EXPECT_EQ(t->seconds(), 6.0);
  // Fitted back from the step it gives.
  costs.overlapSlowdown = 0.0;
  StatusOr<double> slowdown = fitOverlapSlowdown(plan, costs, 6.0);
  ASSERT_TRUE(slowdown);
  EXPECT_NEAR(*slowdown, 0.5, 1e-3);
}

TEST(TimelineTest, ARepresentativeRankPredictsTheWholeStep) {
  // A 2x2 mesh of pp and dp: each stage's two dp ranks run one program (an
  // all-reduce over dp on a side stream beside compute), the stages joined
  // by a transfer. The plan of the ranks at dp=0 (one per stage) predicts
  // the whole plan's step and each representative's launches exactly.
  Plan whole;
  whole.mesh = {{"pp", 2}, {"dp", 2}};
  whole.worldSize = 4;
  InstructionDesc reduce = allReduce(0, 1);
  reduce.ints = collectiveInts(Kernel::AllReduceSum, CollectiveAttrs{256, 1});
  for (uint32_t r = 0; r < 4; ++r) {
    const bool first = r < 2;
    RankPlan rank;
    rank.rank = r;
    rank.buffers = {buffer()};
    ProgramDesc work, move;
    work.name = "work";
    work.instructions = {reduce, compute(0), compute(0)};
    move.name = "move";
    move.instructions = {first ? transfer(Kernel::Send, 1, 0)
                               : transfer(Kernel::Recv, -1, 0)};
    rank.programs = {work, move};
    CallDesc call0, call1;
    call1.program = 1;
    rank.step = first ? std::vector<CallDesc>{call0, call1}
                      : std::vector<CallDesc>{call1, call0};
    whole.ranks.push_back(rank);
  }
  Plan representatives = whole;
  representatives.ranks = {whole.ranks[0], whole.ranks[2]};
  EXPECT_FALSE(isRepresentativePlan(whole));
  EXPECT_TRUE(isRepresentativePlan(representatives));
  const std::vector<std::vector<double>> rankCosts = {{2.0, 4.0, 1.0}, {0.5}};
  LaunchCosts wholeCosts = costsOf({rankCosts, rankCosts, rankCosts, rankCosts}, 0.0);
  LaunchCosts someCosts = costsOf({rankCosts, rankCosts}, 0.0);
  wholeCosts.overlapSlowdown = someCosts.overlapSlowdown = 0.5;
  StatusOr<StepTimeline> a = predictStep(whole, wholeCosts);
  StatusOr<StepTimeline> b = predictStep(representatives, someCosts);
  ASSERT_TRUE(a) << a.status().message();
  ASSERT_TRUE(b) << b.status().message();
  EXPECT_EQ(a->seconds(), b->seconds());
  EXPECT_GT(a->seconds(), 5.5); // the slowed compute, the transfer
  for (auto [wholeRank, rank] : {std::pair{0, 0}, std::pair{2, 1}}) {
    ASSERT_EQ(a->ranks[wholeRank].launches.size(),
              b->ranks[rank].launches.size());
    for (size_t k = 0; k < b->ranks[rank].launches.size(); ++k) {
      EXPECT_EQ(a->ranks[wholeRank].launches[k].start,
                b->ranks[rank].launches[k].start);
      EXPECT_EQ(a->ranks[wholeRank].launches[k].seconds,
                b->ranks[rank].launches[k].seconds);
    }
  }
  // The sweep agrees on the representatives too.
  schedule(representatives, someCosts);
  const StepBreakdown last = breakdown(representatives, *b, 1);
  EXPECT_EQ(last.rank, 2u);
}

TEST(TimelineTest, PricesLaunchesByTheirClass) {
  InstructionDesc add = compute();
  add.inputs = {0, 0};
  add.outputs = {0};
  const Plan plan = dp2Plan({allReduce(0), add}, 1, 1000000);
  StatusOr<LaunchCosts> costs = priceLaunches(plan, sampleCalibration());
  ASSERT_TRUE(costs) << costs.status().message();
  EXPECT_DOUBLE_EQ(costs->seconds[0][0][0], 1e-4); // all_reduce_sum/g2 at 1 MB
  // add over 3 MB of operands on its curve.
  EXPECT_DOUBLE_EQ(costs->seconds[0][0][1],
                   sampleCalibration().curves["add"].seconds(3e6));
  EXPECT_TRUE(costs->uncalibrated.empty());
  EXPECT_DOUBLE_EQ(costs->gap, 2e-6);
  EXPECT_DOUBLE_EQ(costs->overlapSlowdown, 0.25);
}

// Tests a kernel with fused amax outputs (mlt-fuse-amax): a class of its
// own ("/amax"), priced by its curve where a calibration measured it, by the
// kernel's alone where not; the plain kernel prefers its own curve too.
TEST(CalibrationTest, PricesFusedAmaxKernelsApart) {
  Calibration c = sampleCalibration();
  c.curves["swiglu_fwd"].points = {{1e6, 1e-5}};
  bool calibrated = false;
  EXPECT_DOUBLE_EQ(c.seconds({"swiglu_fwd/amax", 1e6, false, false},
                             &calibrated),
                   1e-5);
  EXPECT_TRUE(calibrated);
  c.curves["swiglu_fwd/amax"].points = {{1e6, 3e-5}};
  EXPECT_DOUBLE_EQ(c.seconds({"swiglu_fwd/amax", 1e6, false, false}), 3e-5);
  EXPECT_DOUBLE_EQ(c.seconds({"swiglu_fwd", 1e6, false, false}), 1e-5);
  c.curves.erase("swiglu_fwd");
  EXPECT_DOUBLE_EQ(c.seconds({"swiglu_fwd", 1e6, false, false}), 3e-5);

  // The class of a launch that writes an amax of its output.
  Plan plan = dp2Plan({compute()}, 1, 1000);
  RankPlan &rank = plan.ranks[0];
  InstructionDesc swiglu;
  swiglu.kernel = Kernel::SwiGLUFwd;
  swiglu.inputs = {0, 0};
  swiglu.outputs = {0};
  swiglu.ints = {int64_t(rank.buffers[0].bytes / 4)};
  EXPECT_EQ(launchClass(rank, swiglu, 1).key, "swiglu_fwd");
  swiglu.outputs = {0, 0};
  EXPECT_EQ(launchClass(rank, swiglu, 1).key, "swiglu_fwd/amax");
}

TEST(TimelineTest, MeasuresACollectiveByItsLeastTime) {
  InstructionDesc add = compute();
  add.inputs = {0, 0};
  add.outputs = {0};
  const Plan plan = dp2Plan({add, allReduce(0)}, 2);
  // Rank 0 waited 5 ms in the first all-reduce, rank 1 in the second.
  std::vector<std::vector<MeasuredLaunch>> launches = {
      {{0, 0, 0, 1e-3}, {0, 1, 0, 6e-3}, {0, 0, 0, 3e-3}, {0, 1, 0, 1e-3}},
      {{0, 0, 0, 2e-3}, {0, 1, 0, 1e-3}, {0, 0, 0, 5e-3}, {0, 1, 0, 7e-3}}};
  StatusOr<Calibration> c = measureCalibration(plan, launches, "d", "cpu");
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_EQ(c->curves.size(), 2u);
  // add at 3 KB: the median of 1, 3, 2 and 5 ms.
  ASSERT_EQ(c->curves["add"].points.size(), 1u);
  EXPECT_DOUBLE_EQ(c->curves["add"].points[0].second, 2.5e-3);
  // all_reduce_sum/g2 at 1 KB: each instance's least (1 and 1 ms).
  ASSERT_EQ(c->curves["all_reduce_sum/g2"].points.size(), 1u);
  EXPECT_DOUBLE_EQ(c->curves["all_reduce_sum/g2"].points[0].second, 1e-3);

  launches[1].push_back({3, 0, 0, 1.0});
  StatusOr<Calibration> bad = measureCalibration(plan, launches, "d", "cpu");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().message(),
            "rank 1 launched program 3 instruction 0, which its plan does "
            "not hold");
}

//===----------------------------------------------------------------------===//
// Random plans: the graph equals the sweep
//===----------------------------------------------------------------------===//

/// A random plan over a dp x pp mesh: every rank runs the same step of
/// compute calls (random launches over three streams, random token waits,
/// all-reduces over dp at positions shared by the dp group) and transfer
/// groups (each stage sends to the next and receives from the previous);
/// costs random per launch and rank.
std::pair<Plan, LaunchCosts> randomPlan(std::mt19937 &rng) {
  auto uniform = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int dp = uniform(1, 3), pp = uniform(1, 3);
  Plan plan;
  plan.worldSize = uint32_t(dp * pp);
  if (plan.worldSize > 1)
    plan.mesh = {{"pp", pp}, {"dp", dp}};
  const size_t dpAxis = 1, ppAxis = 0;

  // The programs' shape, shared by every rank.
  const int numPrograms = uniform(1, 4);
  std::vector<ProgramDesc> programs;
  for (int p = 0; p < numPrograms; ++p) {
    ProgramDesc program;
    program.name = "p" + std::to_string(p);
    const int n = uniform(1, 12);
    int tokens = 0;
    for (int i = 0; i < n; ++i) {
      InstructionDesc inst = compute(uint8_t(uniform(0, 2)));
      if (dp > 1 && uniform(0, 3) == 0) {
        inst = allReduce(0, uint8_t(uniform(0, 2)));
        inst.ints = collectiveInts(Kernel::AllReduceSum,
                                   CollectiveAttrs{256, int64_t(dpAxis)});
      }
      for (int t = 0; t < tokens; ++t)
        if (uniform(0, 4) == 0)
          inst.waits.push_back(uint32_t(t));
      if (uniform(0, 1) == 0)
        inst.token = tokens++;
      program.instructions.push_back(inst);
    }
    programs.push_back(program);
  }
  std::vector<CallDesc> step;
  const int calls = uniform(1, 10);
  for (int c = 0; c < calls; ++c) {
    if (pp > 1 && uniform(0, 2) == 0) {
      // A transfer group: programs numPrograms (send) and + 1 (receive);
      // each rank's calls are filtered below to what its stage does.
      CallDesc send, receive;
      send.program = uint32_t(numPrograms);
      receive.program = uint32_t(numPrograms + 1);
      step.push_back(send);
      step.push_back(receive);
      continue;
    }
    CallDesc call;
    call.program = uint32_t(uniform(0, numPrograms - 1));
    step.push_back(call);
  }

  LaunchCosts costs;
  costs.gap = uniform(0, 1) * 0.125;
  for (uint32_t r = 0; r < plan.worldSize; ++r) {
    const int stage = int(r) / dp;
    RankPlan rank;
    rank.rank = r;
    rank.buffers = {buffer()};
    rank.programs = programs;
    ProgramDesc send, receive;
    send.name = "send";
    send.instructions = {transfer(Kernel::Send, 1, 0)};
    send.instructions[0].ints =
        transferInts(Kernel::Send, TransferAttrs{256, int64_t(ppAxis), 1});
    receive.name = "receive";
    receive.instructions = {transfer(Kernel::Recv, -1, 0)};
    receive.instructions[0].ints =
        transferInts(Kernel::Recv, TransferAttrs{256, int64_t(ppAxis), -1});
    rank.programs.push_back(send);
    rank.programs.push_back(receive);
    for (const CallDesc &call : step) {
      if (call.program == uint32_t(numPrograms) && stage == pp - 1)
        continue; // the last stage sends to none
      if (call.program == uint32_t(numPrograms + 1) && stage == 0)
        continue; // the first receives from none
      rank.step.push_back(call);
    }
    std::vector<std::vector<double>> seconds;
    for (const ProgramDesc &program : rank.programs) {
      seconds.emplace_back();
      for (size_t i = 0; i < program.instructions.size(); ++i)
        seconds.back().push_back(uniform(1, 16) * 0.0625);
    }
    costs.seconds.push_back(seconds);
    plan.ranks.push_back(rank);
  }
  return {plan, costs};
}

TEST(TimelineTest, TheGraphEqualsTheSweepOnRandomPlans) {
  std::mt19937 rng(20261126);
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    auto [plan, costs] = randomPlan(rng);
    const StepTimeline t = schedule(plan, costs);
    // Every launch of the plan's step is in the timeline, and no rank ends
    // before its launches do.
    for (const RankPlan &rank : plan.ranks) {
      size_t launches = 0;
      for (const CallDesc &call : rank.step)
        launches += rank.programs[call.program].instructions.size();
      ASSERT_EQ(t.ranks[rank.rank].launches.size(), launches);
      for (const PredictedLaunch &l : t.ranks[rank.rank].launches)
        EXPECT_LE(l.start + l.seconds, t.ranks[rank.rank].end);
      const StepBreakdown b = breakdown(plan, t, rank.rank);
      EXPECT_NEAR(b.compute + b.exposedCommunication + b.idle, b.step, 1e-9);
    }
  }
}

TEST(TimelineTest, TheSummaryIsThePredictionsSlowestRank) {
  std::mt19937 rng(20261129);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    auto [plan, costs] = randomPlan(rng);
    costs.overlapSlowdown = (trial % 3) * 0.25;
    StatusOr<StepTimeline> whole = predictStep(plan, costs);
    StatusOr<StepSummary> summary = summarizeStep(plan, costs);
    ASSERT_TRUE(whole) << whole.status().message();
    ASSERT_TRUE(summary) << summary.status().message();
    EXPECT_EQ(summary->timeline.seconds(), whole->seconds());
    ASSERT_EQ(summary->timeline.ranks.size(), whole->ranks.size());
    uint32_t slowest = 0;
    for (uint32_t r = 0; r < whole->ranks.size(); ++r) {
      EXPECT_EQ(summary->timeline.ranks[r].end, whole->ranks[r].end);
      if (whole->ranks[r].end > whole->ranks[slowest].end)
        slowest = r;
      if (r != summary->slowest)
        EXPECT_TRUE(summary->timeline.ranks[r].launches.empty());
    }
    EXPECT_EQ(summary->slowest, slowest);
    const auto &a = summary->timeline.ranks[slowest].launches;
    const auto &b = whole->ranks[slowest].launches;
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].start, b[k].start);
      EXPECT_EQ(a[k].seconds, b[k].seconds);
    }
    const StepBound bound = stepBound(plan, summary->timeline);
    const StepBound expected = stepBound(plan, *whole);
    EXPECT_EQ(bound.what, expected.what);
    EXPECT_EQ(bound.share, expected.share);
  }
}

TEST(TimelineTest, RefusesCostsOfAnotherPlan) {
  std::mt19937 rng(7);
  auto [plan, costs] = randomPlan(rng);
  costs.seconds.pop_back();
  costs.seconds.push_back({});
  StatusOr<StepTimeline> t = scheduleStep(plan, costs);
  ASSERT_FALSE(t);
  EXPECT_NE(t.status().message().find("costs of"), std::string::npos);
}

} // namespace

//===----------------------------------------------------------------------===//
// The planner's layouts
//===----------------------------------------------------------------------===//

namespace {

/// Every layout LayoutSpace.h describes, by brute force over all values up
/// to the GPUs and the batch: the reference enumerateLayouts is held to.
std::vector<Layout> layoutsByBruteForce(int64_t gpus, int64_t batch,
                                        int64_t seqLen) {
  std::vector<Layout> layouts;
  for (int64_t tp = 1; tp <= gpus; ++tp)
    for (int64_t cp = 1; cp <= gpus; ++cp)
      for (int64_t pp = 1; pp <= gpus; ++pp)
        for (int64_t dp = 1; dp <= gpus; ++dp)
          for (int64_t vp = 1; vp <= 2; ++vp)
            for (int64_t zero = 0; zero <= 2; ++zero)
              for (int64_t m = 1; m <= batch; ++m)
                for (ContextExchange exchange :
                     {ContextExchange::AllGather, ContextExchange::AllToAll,
                      ContextExchange::Ring}) {
                  if (tp * cp * pp * dp != gpus || (vp == 2 && pp == 1) ||
                      (zero > 0 && dp == 1 && cp == 1) || batch % m != 0 ||
                      (batch / m) % dp != 0 || (pp > 1 && m < pp) ||
                      (cp > 1 && (seqLen % (2 * cp) != 0 ||
                                  seqLen / (2 * cp) < kContextChunkTokens)) ||
                      (cp == 1 && exchange != ContextExchange::AllGather))
                    continue;
                  Layout l;
                  l.tp = tp;
                  l.cp = cp;
                  l.cpComm = exchange;
                  l.pp = pp;
                  l.vp = vp;
                  l.dp = dp;
                  l.zero = zero;
                  l.microbatches = m;
                  layouts.push_back(l);
                }
  return layouts;
}

TEST(LayoutSpaceTest, EnumeratesWhatTheBruteForceFinds) {
  for (int64_t gpus : {1, 2, 3, 4, 6, 8, 12})
    for (int64_t batch : {1, 4, 6, 16, 24})
      for (int64_t seqLen : {2048, 4096, 24576}) {
      SCOPED_TRACE(std::to_string(gpus) + " GPUs, batch " +
                   std::to_string(batch) + ", seq " + std::to_string(seqLen));
      std::vector<Layout> fast =
          enumerateLayouts({gpus, batch, seqLen, Layout()});
      std::vector<Layout> slow = layoutsByBruteForce(gpus, batch, seqLen);
      ASSERT_EQ(fast.size(), slow.size());
      for (const Layout &l : slow)
        EXPECT_NE(std::find(fast.begin(), fast.end(), l), fast.end())
            << layoutFlags(l);
    }
  // Two GPUs, a batch of 8: dp=2 (ZeRO 0-2, 1, 2 or 4 micro-batches), tp=2
  // (1-8), pp=2 (2-8, with and without vp=2).
  EXPECT_EQ(enumerateLayouts({2, 8, 2048, Layout()}).size(), 9u + 4u + 3u + 3u);
  EXPECT_EQ(enumerateLayouts({0, 8, 2048, Layout()}).size(), 0u);
  // Every candidate keeps the user's own options.
  Layout bf16;
  bf16.dtype = Precision::BF16;
  for (const Layout &l : enumerateLayouts({4, 8, 2048, bf16}))
    EXPECT_EQ(l.dtype, Precision::BF16) << layoutFlags(l);
  // With FP8, each layout of several micro-batches and no pipeline comes
  // twice, keeping the transposed FP8 copy of each weight through the step
  // and keeping both, in that order; the others keep the transposed one.
  Layout fp8 = bf16;
  fp8.fp8 = true;
  const std::vector<Layout> plain = enumerateLayouts({4, 8, 2048, bf16});
  const std::vector<Layout> withFp8 = enumerateLayouts({4, 8, 2048, fp8});
  size_t keepBoth = 0, next = 0;
  for (Layout l : plain) {
    l.fp8 = true;
    ASSERT_LT(next, withFp8.size());
    EXPECT_EQ(withFp8[next++], l) << layoutFlags(l);
    if (l.microbatches > 1 && l.pp == 1) {
      l.fp8Recipe.weightCache = "both";
      ASSERT_LT(next, withFp8.size());
      EXPECT_EQ(withFp8[next++], l) << layoutFlags(l);
      ++keepBoth;
    }
  }
  EXPECT_EQ(next, withFp8.size());
  EXPECT_GT(keepBoth, 0u);
  for (const Layout &l : plain)
    EXPECT_EQ(l.fp8Recipe.weightCache, "transposed") << layoutFlags(l);
}

// Tests that an FP8 layout that keeps both of the weights' FP8 copies keeps
// them in its memory-saving variants (keeping the transposed one alone is
// a layout of its own, which the planner weighs beside it): at LLaMA-2-7B
// with 16 micro-batches of 4,096 tokens, both copies with SwiGLU recomputed
// ran 1.9% faster than the transposed copy alone with nothing recomputed.
TEST(LayoutSpaceTest, Fp8WeightCopiesStayInTheVariants) {
  Layout l;
  l.dtype = Precision::BF16;
  l.fp8 = true;
  l.fp8Recipe.weightCache = "both";
  l.microbatches = 4;
  const std::vector<Layout> variants = memorySavingVariants(l);
  Layout plain = l;
  plain.fp8Recipe.weightCache = "transposed";
  ASSERT_EQ(variants.size(), memorySavingVariants(plain).size());
  ASSERT_FALSE(variants.empty());
  for (const Layout &v : variants)
    EXPECT_EQ(v.fp8Recipe.weightCache, "both") << layoutFlags(v);
  EXPECT_EQ(layoutFlags(variants[0]), "--microbatches 4 --recompute swiglu "
                                      "--dtype bf16 --fp8 "
                                      "--fp8-weight-cache both");
}

// Tests that context parallelism is tried only where its chunks hold
// kContextChunkTokens or more: none at 2,048 tokens on 2 GPUs (chunks of
// 512), cp 2 at 4,096 (the one-GPU layouts, each at cp 2 with ZeRO 0, 1
// and 2 over cp and with each exchange), cp 2 and 4 at
// 8,192 on 4 GPUs.
TEST(LayoutSpaceTest, ContextParallelWhereChunksAreLong) {
  auto maxCp = [](const std::vector<Layout> &layouts) {
    int64_t cp = 0;
    for (const Layout &l : layouts)
      cp = std::max(cp, l.cp);
    return cp;
  };
  EXPECT_EQ(maxCp(enumerateLayouts({2, 1, 2048, Layout()})), 1);
  std::vector<Layout> two = enumerateLayouts({2, 1, 4096, Layout()});
  EXPECT_EQ(maxCp(two), 2);
  std::vector<Layout> one = enumerateLayouts({1, 1, 4096, Layout()});
  // (each with ZeRO 0, 1 and 2 over cp, dp being 1, and each of the three
  // exchanges)
  size_t withCp[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  for (const Layout &l : two)
    withCp[size_t(l.cpComm)][l.zero] += l.cp == 2 && l.dp == 1;
  for (auto &exchange : withCp)
    for (size_t count : exchange)
      EXPECT_EQ(count, one.size());
  EXPECT_EQ(maxCp(enumerateLayouts({4, 1, 8192, Layout()})), 4);
  EXPECT_EQ(maxCp(enumerateLayouts({4, 1, 6144, Layout()})), 2); // 6144 / 8 < 1024
}

TEST(LayoutSpaceTest, ExtrapolatesFiguresAlongTheirDepth) {
  // Two and three layers a virtual stage: 10 and 13 bytes on stage 0, 7
  // and 9 on stage 1, 1.0 and 1.5 s; five more layers on from three.
  LayoutFigures two{{10, 7}, {4, 3}, 1.0}, three{{13, 9}, {6, 4}, 1.5};
  const LayoutFigures eight = extrapolateDepth(two, three, 5);
  EXPECT_EQ(eight.arenas, (std::vector<uint64_t>{28, 19}));
  EXPECT_EQ(eight.persistent, (std::vector<uint64_t>{16, 9}));
  EXPECT_DOUBLE_EQ(eight.step, 4.0);
  EXPECT_EQ(eight.arena(), 28u);
  EXPECT_EQ(eight.mostPersistent(), 16u);
  // Bytes that would shrink stay where they are.
  const LayoutFigures odd = extrapolateDepth(three, two, 5);
  EXPECT_EQ(odd.arenas, two.arenas);
  EXPECT_EQ(extrapolateDepth(two, three, 0).arenas, three.arenas);
  // Every other layer recomputed whole: two and four layers a virtual
  // stage, a period apart (10 and 16 bytes, 1.0 and 2.0 s); six more
  // layers on from four are three periods: 34 bytes, 5.0 s. (A line
  // through three layers, 15 bytes, would have given 16 + 6 x 5 = 46.)
  LayoutFigures four{{16, 12}, {8, 5}, 2.0};
  const LayoutFigures ten = extrapolateDepth(two, four, 6, 2);
  EXPECT_EQ(ten.arenas, (std::vector<uint64_t>{34, 27}));
  EXPECT_DOUBLE_EQ(ten.step, 5.0);
}

TEST(LayoutSpaceTest, ExtrapolatesFiguresAlongTheMicrobatches) {
  // 8 and 12 micro-batches (pp 4): 100 and 104 bytes of arena (a little
  // more data a step), persistent bytes unchanged, 2.0 and 2.8 s; 48
  // micro-batches is 9 steps of 4 on from 12.
  LayoutFigures eight{{100, 90}, {40, 40}, 2.0}, twelve{{104, 91}, {40, 40}, 2.8};
  const LayoutFigures many = extrapolateMicrobatches(eight, twelve, 8, 12, 48);
  EXPECT_EQ(many.arenas, (std::vector<uint64_t>{140, 100}));
  EXPECT_EQ(many.persistent, (std::vector<uint64_t>{40, 40}));
  EXPECT_DOUBLE_EQ(many.step, 10.0);
  // A count between the steps: a fraction of one, bytes rounded up.
  const LayoutFigures between = extrapolateMicrobatches(eight, twelve, 8, 12, 14);
  EXPECT_DOUBLE_EQ(between.step, 3.2);
  EXPECT_EQ(between.arenas, (std::vector<uint64_t>{106, 92}));
  // Bytes that would shrink stay at the larger count's.
  EXPECT_EQ(extrapolateMicrobatches(twelve, eight, 8, 12, 48).arenas,
            eight.arenas);
}

TEST(LayoutSpaceTest, FlagsNameTheLayout) {
  Layout l;
  EXPECT_EQ(layoutFlags(l), "one GPU");
  l.tp = 2;
  l.sequenceParallel = true;
  l.dp = 4;
  l.zero = 1;
  l.microbatches = 4;
  l.recompute = {"mlt.swiglu"};
  EXPECT_EQ(layoutFlags(l), "--tp 2 --sequence-parallel --dp 4 --zero 1 "
                       "--microbatches 4 --recompute swiglu");
  const std::vector<Layout> variants = memorySavingVariants(l);
  ASSERT_EQ(variants.size(), 7u);
  // Least costly first: every other layer recomputed whole (and the others'
  // SwiGLU and norms), then every layer, with sequence parallelism last of
  // all (what saves the most).
  EXPECT_EQ(layoutFlags(variants[3]),
            "--tp 2 --sequence-parallel --dp 4 --zero 1 --microbatches 4 "
            "--recompute swiglu,rms_norm --recompute-layers every:2");
  EXPECT_TRUE(variants[4].sequenceParallel);
  EXPECT_EQ(variants[4].recomputeLayers, 2);
  EXPECT_EQ(variants[5].recomputeLayers, 1);
  EXPECT_EQ(layoutFlags(variants.back()),
            "--tp 2 --sequence-parallel --dp 4 --zero 1 --microbatches 4 "
            "--recompute swiglu --recompute-layers all");
}

} // namespace
