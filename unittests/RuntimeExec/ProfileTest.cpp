//===- ProfileTest.cpp - a profiled step's timeline and trace -------------===//
//
// Part of mlt. The timeline lines of mlt-run --profile-step (each side
// stream's time beside the compute stream's launches) and the trace events
// of --trace, from launch times made up to cover the cases: overlapping,
// touching and separate intervals, a side stream that starts before the
// first compute launch.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/Profile.h"
#include "mlt/Runtime/exec/Trace.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <nlohmann/json.hpp>

using namespace mlt;
using namespace mlt::rt;
using ::testing::HasSubstr;

namespace {

InstructionDesc launchOn(Kernel kernel, std::vector<int64_t> ints,
                         uint8_t stream) {
  InstructionDesc inst;
  inst.kernel = kernel;
  inst.ints = std::move(ints);
  inst.stream = stream;
  return inst;
}

/// Rank 1: three compute launches and two reduce-scatters on stream 1.
RankPlan twoStreams() {
  RankPlan rank;
  rank.rank = 1;
  ProgramDesc body;
  body.name = "micro_step_first";
  body.instructions = {launchOn(Kernel::Fill, {4}, 0),
                       launchOn(Kernel::Fill, {4}, 0),
                       launchOn(Kernel::ReduceScatterSum, {4, 0}, 1),
                       launchOn(Kernel::Fill, {4}, 0),
                       launchOn(Kernel::ReduceScatterSum, {4, 0}, 1)};
  rank.programs = {body};
  return rank;
}

/// Compute [1, 11), [11, 15) (touching: busy [1, 15)) and [20, 30); stream 1
/// [0, 12), of which [1, 12) beside compute, and [16, 18) alone.
std::vector<Executor::LaunchTime> twoStreamTimes() {
  return {{0, 0, 1.0, 10.0},  {0, 1, 11.0, 4.0}, {0, 2, 0.0, 12.0},
          {0, 3, 20.0, 10.0}, {0, 4, 16.0, 2.0}};
}

TEST(ProfileTest, TimelineSaysWhatRanBesideTheComputeStream) {
  const std::string report = formatProfile(twoStreams(), twoStreamTimes());
  // From stream 1's start at 0 to the last compute launch's end at 30.
  EXPECT_THAT(report, HasSubstr("timeline: 30.00 ms from the first launch's "
                                "start to the last's end; stream 0 busy "
                                "24.00 ms\n"));
  EXPECT_THAT(report, HasSubstr("  stream 1 busy 14.00 ms: 11.00 beside "
                                "stream 0's launches, 3.00 alone\n"));
  EXPECT_THAT(report, HasSubstr("profile: 5 launches, 38.00 ms of device "
                                "time"));
}

TEST(ProfileTest, OneStreamHasNoSideStreamLines) {
  RankPlan rank = twoStreams();
  rank.programs[0].instructions.resize(2);
  const std::string report =
      formatProfile(rank, {{0, 0, 2.0, 3.0}, {0, 1, 7.0, 1.0}});
  EXPECT_THAT(report, HasSubstr("timeline: 6.00 ms from the first launch's "
                                "start to the last's end; stream 0 busy "
                                "4.00 ms\n"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("stream 1")));
}

TEST(TraceTest, EveryLaunchIsAnEventOfItsRankAndStream) {
  const nlohmann::json events =
      nlohmann::json::parse(traceEvents(twoStreams(), twoStreamTimes()));
  ASSERT_TRUE(events.is_array());
  std::map<std::string, std::string> names; // "pid/tid" -> thread name
  std::vector<nlohmann::json> launches;
  for (const nlohmann::json &e : events) {
    EXPECT_EQ(e["pid"], 1);
    if (e["ph"] == "M" && e["name"] == "process_name")
      EXPECT_EQ(e["args"]["name"], "rank 1");
    if (e["ph"] == "M" && e["name"] == "thread_name")
      names[std::to_string(int(e["tid"]))] = e["args"]["name"];
    if (e["ph"] == "X")
      launches.push_back(e);
  }
  EXPECT_EQ(names["0"], "stream 0 (compute)");
  EXPECT_EQ(names["1"], "stream 1 (collectives)");
  ASSERT_EQ(launches.size(), 5u);
  // Microseconds from the earliest start (stream 1's, at 0 ms).
  EXPECT_EQ(launches[0]["name"], "fill");
  EXPECT_EQ(launches[0]["cat"], "compute");
  EXPECT_DOUBLE_EQ(launches[0]["ts"], 1000.0);
  EXPECT_DOUBLE_EQ(launches[0]["dur"], 10000.0);
  EXPECT_EQ(launches[0]["args"]["program"], "micro_step_first");
  EXPECT_EQ(launches[2]["name"], "reduce_scatter_sum");
  EXPECT_EQ(launches[2]["cat"], "collective");
  EXPECT_EQ(launches[2]["tid"], 1);
  EXPECT_DOUBLE_EQ(launches[2]["ts"], 0.0);
  EXPECT_EQ(launches[4]["args"]["instruction"], 4);
  EXPECT_EQ(launches[4]["args"]["ints"], nlohmann::json::array({4, 0}));
}

TEST(TraceTest, FileJoinsTheRanksAndRefusesWhatIsNoArray) {
  RankPlan other = twoStreams();
  other.rank = 0;
  StatusOr<std::string> file =
      formatTrace({traceEvents(other, twoStreamTimes()),
                   traceEvents(twoStreams(), twoStreamTimes())});
  ASSERT_TRUE(file) << file.status().message();
  const nlohmann::json trace = nlohmann::json::parse(*file);
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  std::set<int> pids;
  size_t launches = 0;
  for (const nlohmann::json &e : trace["traceEvents"]) {
    pids.insert(int(e["pid"]));
    launches += e["ph"] == "X";
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(launches, 10u);

  StatusOr<std::string> cut = formatTrace({"[{\"ph\": \"X\""});
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.status().message(),
            "the trace events of process 0 are not a JSON array");
}

} // namespace
