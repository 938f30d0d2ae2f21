//===- HangReportTest.cpp - every rank's place, in words ------------------===//
//
// Part of mlt. describeHang (HangReport.h) on the MLP test plan at dp=2 x
// tp=2 (TestPlans.h: a step of zero_gradients, 5 launches; micro_step, 26;
// optimizer_step, 19), from positions made by hand: the ranks as threads of
// the CPU (the host's place is the rank's), as processes on GPUs (the
// device's words say which collective it is in), and the states between.
// The lines and the summary are checked whole: they are what a user reads.
//
//===----------------------------------------------------------------------===//

#include "TestPlans.h"

#include "mlt/Runtime/exec/HangReport.h"

#include <gtest/gtest.h>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;

namespace {

Plan mlpPlan() {
  MlpModel m;
  m.dp = 2;
  m.tp = 2;
  return buildMlpPlan(m);
}

/// Rank `rank` in step `step`, its host at instruction `instruction` of call
/// `call` doing `activity`; `gpu`: with the device words of a GPU (none
/// written unless set after).
PositionSnapshot at(int rank, int64_t step, uint32_t call,
                    uint32_t instruction, RankActivity activity,
                    bool gpu = false) {
  PositionSnapshot s;
  s.rank = rank;
  s.step = step;
  s.host = uint64_t(activity) << 60 | launchPlace(call, instruction);
  s.deviceStreams = gpu ? kPlanMaxStreams : 0;
  return s;
}

TEST(HangReportTest, PlacesAreWordsOfOneRankPlan) {
  // The encodings of Position.h, round trip.
  const uint64_t place = launchPlace(12, 345);
  EXPECT_EQ(placeCall(place), 12u);
  EXPECT_EQ(placeInstruction(place), 345u);
  EXPECT_EQ(deviceEnteredWord(place) & 1, 0u);
  EXPECT_EQ(deviceLeftWord(place) >> 1, place + 1);
  const PositionSnapshot s = at(0, 1, kStepCall, kWholeCall,
                                RankActivity::Stalled);
  EXPECT_EQ(s.activity(), RankActivity::Stalled);
  EXPECT_EQ(placeCall(s.place()), kStepCall);
  EXPECT_EQ(placeInstruction(s.place()), kWholeCall);
  const std::vector<uint64_t> offsets = stepLaunchOffsets(mlpPlan().ranks[0]);
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 5, 31, 50}));
}

TEST(HangReportTest, ThreadsOfTheCpu) {
  // Rank 1 held before its up projection; rank 0 waits for it in the tp
  // all-reduce, and ranks 2 and 3 wait in theirs (of the other tp group),
  // which rank 1 does not hold up: one clause for both.
  const Plan plan = mlpPlan();
  const HangReport report = describeHang(
      plan,
      {at(0, 3, 1, 4, RankActivity::Waiting),
       at(1, 3, 1, 1, RankActivity::Stalled),
       at(2, 3, 1, 4, RankActivity::Waiting),
       at(3, 3, 1, 4, RankActivity::Waiting)},
      600);
  EXPECT_EQ(report.ranks,
            (std::vector<std::string>{
                "rank 0: step 3, launch 9 of 50 (call 1, instruction 4): "
                "waits in all_reduce_sum 'y.partial' of tp group 0,1",
                "rank 1: step 3, launch 6 of 50 (call 1, instruction 1): in "
                "matmul 1 of micro_step (F0.0 B0.0) (held there by "
                "MLT_FAULT_STALL)",
                "rank 2: step 3, launch 9 of 50 (call 1, instruction 4): "
                "waits in all_reduce_sum 'y.partial' of tp group 2,3",
                "rank 3: step 3, launch 9 of 50 (call 1, instruction 4): "
                "waits in all_reduce_sum 'y.partial' of tp group 2,3"}));
  EXPECT_EQ(report.summary,
            "no progress for 600 s: rank 1 is in matmul 1 of micro_step "
            "(F0.0 B0.0) (held there by MLT_FAULT_STALL); rank 0 waits in "
            "all_reduce_sum 'y.partial' of tp group 0,1; ranks 2,3 wait in "
            "all_reduce_sum 'y.partial' of tp group 2,3");
}

TEST(HangReportTest, ProcessesOnGpus) {
  // Rank 0's host waits for its GPU (the step replayed as a graph), whose
  // word on plan stream 1 says it entered the optimizer's first dp
  // all-reduce; rank 1's host is held, its GPU idle; rank 2's GPU left the
  // tp all-reduce and is in no collective; rank 3 never answered.
  const Plan plan = mlpPlan();
  PositionSnapshot rank0 =
      at(0, 7, kStepCall, kWholeCall, RankActivity::Waiting, true);
  rank0.device[0] = deviceLeftWord(launchPlace(1, 8));
  rank0.device[1] = deviceEnteredWord(launchPlace(2, 0));
  PositionSnapshot rank2 =
      at(2, 7, kStepCall, kWholeCall, RankActivity::Waiting, true);
  rank2.device[0] = deviceLeftWord(launchPlace(1, 4));
  const HangReport report = describeHang(
      plan,
      {rank0, at(1, 7, 1, 1, RankActivity::Stalled, true), rank2,
       std::nullopt},
      2);
  EXPECT_EQ(report.ranks,
            (std::vector<std::string>{
                "rank 0: step 7, launch 31 of 50 (call 2, instruction 0): "
                "its GPU waits in all_reduce_sum "
                "'grad:model.embed_tokens.weight' of dp group 0,2",
                "rank 1: step 7, launch 6 of 50 (call 1, instruction 1): in "
                "matmul 1 of micro_step (F0.0 B0.0) (held there by "
                "MLT_FAULT_STALL)",
                "rank 2: step 7: its host waits for its GPU, which computes "
                "after all_reduce_sum 4 of micro_step (F0.0 B0.0) and is in "
                "no collective",
                "rank 3: no report (its process did not answer)"}));
  EXPECT_EQ(report.summary,
            "no progress for 2 s: rank 1 is in matmul 1 of micro_step (F0.0 "
            "B0.0) (held there by MLT_FAULT_STALL); rank 2 is in compute on "
            "its GPU (after all_reduce_sum 4 of micro_step (F0.0 B0.0)); "
            "rank 3 is silent (no report came from its process); rank 0 "
            "waits in all_reduce_sum 'grad:model.embed_tokens.weight' of dp "
            "group 0,2");
}

TEST(HangReportTest, RanksElsewhere) {
  // Between steps and before the first; a host setting a program up; a
  // host queuing the step's graph; equal places grouped.
  const Plan plan = mlpPlan();
  const HangReport report = describeHang(
      plan,
      {at(0, 4, 2, 18, RankActivity::Outside),
       at(1, 4, 2, 18, RankActivity::Outside),
       at(2, 1, 1, 6, RankActivity::Setup, true),
       at(3, 5, kStepCall, kWholeCall, RankActivity::Running, true)},
      0.5);
  EXPECT_EQ(report.ranks,
            (std::vector<std::string>{
                "rank 0: between steps (after step 4)",
                "rank 1: between steps (after step 4)",
                "rank 2: step 1, launch 11 of 50 (call 1, instruction 6): in "
                "matmul 6 of micro_step (F0.0 B0.0) (its host setting up: a "
                "first run or a capture)",
                "rank 3: step 5: in the step's captured graph (its host "
                "queuing it)"}));
  EXPECT_EQ(report.summary,
            "no progress for 0.5 s: ranks 0,1 are between steps (after step "
            "4); rank 2 is in matmul 6 of micro_step (F0.0 B0.0) (its host "
            "setting up: a first run or a capture); rank 3 is in the step's "
            "captured graph (its host queuing it)");
  const HangReport first = describeHang(
      plan,
      {at(0, 0, 0, 0, RankActivity::Outside),
       at(1, 1, 0, 2, RankActivity::Running),
       at(2, 1, 2, 0, RankActivity::Waiting),
       at(3, 1, 2, 0, RankActivity::Waiting)},
      600);
  EXPECT_EQ(first.ranks[0], "rank 0: before its first step");
  EXPECT_EQ(first.summary,
            "no progress for 600 s: rank 0 is before its first step; rank 1 "
            "is in fill 2 of zero_gradients; rank 2 waits in all_reduce_sum "
            "'grad:model.embed_tokens.weight' of dp group 0,2; rank 3 waits "
            "in all_reduce_sum 'grad:model.embed_tokens.weight' of dp group "
            "1,3");
}

} // namespace
