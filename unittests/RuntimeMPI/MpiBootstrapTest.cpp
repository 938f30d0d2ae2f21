//===- MpiBootstrapTest.cpp - the bootstrap of one process per GPU --------===//
//
// Part of mlt. The launcher detection (no MPI: runs anywhere), and, when the
// test runs under `mpirun -np N` (N > 1; ctest's MLTRuntimeMPITests.mpirun
// does it with 3 processes), the MPI session on every process at once: the
// ranks and the node-local ranks, the broadcast of NCCL's unique id, the
// agreement on failures that lets every rank stop cleanly and one report,
// and the hang watchdogs' channel (an alarm from one thread to the others,
// every position to rank 0, a silent rank reported as such).
// Started without mpirun, those tests skip, visibly. Every process runs the
// same tests in the same order, as the session's collectives need.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/mpi/HangChannel.h"
#include "mlt/Runtime/mpi/MpiBootstrap.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// The session of this process when mpirun started several; null otherwise.
MpiSession *session = nullptr;

StatusOr<LaunchEnvironment>
detectFrom(const std::map<std::string, std::string> &variables) {
  return detectLaunch([&](const char *name) -> const char * {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(LaunchTest, DetectsTheLauncher) {
  StatusOr<LaunchEnvironment> none = detectFrom({});
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->launched());
  EXPECT_EQ(none->worldSize, 1);
  EXPECT_EQ(none->rank, 0);

  StatusOr<LaunchEnvironment> ompi = detectFrom(
      {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}});
  ASSERT_TRUE(ompi) << ompi.status().message();
  EXPECT_EQ(ompi->launcher, "mpirun");
  EXPECT_EQ(ompi->worldSize, 4);
  EXPECT_EQ(ompi->rank, 3);

  // mpirun -np 1 is a launch of one process (which needs no MPI).
  StatusOr<LaunchEnvironment> one = detectFrom(
      {{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  ASSERT_TRUE(one);
  EXPECT_TRUE(one->launched());
  EXPECT_EQ(one->worldSize, 1);

  StatusOr<LaunchEnvironment> pmi =
      detectFrom({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
  ASSERT_TRUE(pmi);
  EXPECT_EQ(pmi->launcher, "PMI");
  EXPECT_EQ(pmi->rank, 1);
}

TEST(LaunchTest, RejectsMalformedVariables) {
  StatusOr<LaunchEnvironment> launch = detectFrom(
      {{"OMPI_COMM_WORLD_SIZE", "two"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  ASSERT_FALSE(launch);
  EXPECT_EQ(launch.status().message(),
            "the launcher's OMPI_COMM_WORLD_SIZE is 'two', not a number of "
            "processes");
  launch = detectFrom(
      {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}});
  ASSERT_FALSE(launch);
  EXPECT_EQ(launch.status().message(),
            "the launcher's OMPI_COMM_WORLD_RANK is '2', not a rank below its "
            "OMPI_COMM_WORLD_SIZE 2");
  launch = detectFrom({{"PMI_SIZE", "0"}, {"PMI_RANK", "0"}});
  ASSERT_FALSE(launch);
}

#define MLT_REQUIRE_MPIRUN()                                                   \
  do {                                                                         \
    if (!session)                                                              \
      GTEST_SKIP() << "not started by mpirun -np N with N > 1";                \
  } while (0)

TEST(MpiSessionTest, RanksAndBroadcast) {
  MLT_REQUIRE_MPIRUN();
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  ASSERT_NE(size, nullptr);
  EXPECT_EQ(session->size(), std::atoi(size));
  EXPECT_GE(session->rank(), 0);
  EXPECT_LT(session->rank(), session->size());
  // One node: the node-local ranks are the ranks.
  EXPECT_EQ(session->localSize(), session->size());
  EXPECT_EQ(session->localRank(), session->rank());

  char id[128] = {};
  if (session->rank() == 0)
    for (int i = 0; i < 128; ++i)
      id[i] = char(i * 7 + 1);
  ASSERT_TRUE(session->broadcast(id, sizeof(id), 0));
  for (int i = 0; i < 128; ++i)
    ASSERT_EQ(id[i], char(i * 7 + 1)) << "byte " << i;
}

TEST(MpiSessionTest, AgreementStopsEveryRank) {
  MLT_REQUIRE_MPIRUN();
  EXPECT_TRUE(session->agree(Status::ok()));
  EXPECT_TRUE(session->agree(Status::ok(), std::chrono::seconds(30)));
  EXPECT_FALSE(session->timedOut());

  // Rank 1 fails alone: it keeps its failure, the others stop for it.
  const bool fails = session->rank() == 1;
  Status agreed =
      session->agree(fails ? errorf("cannot read data.u16") : Status::ok());
  ASSERT_FALSE(agreed);
  EXPECT_EQ(agreed.message(),
            fails ? "cannot read data.u16" : "stopped: rank 1 failed");

  // ... and reports, once, naming itself.
  StatusOr<MpiSession::Outcome> outcome = session->conclude(agreed);
  ASSERT_TRUE(outcome) << outcome.status().message();
  EXPECT_TRUE(outcome->failed);
  EXPECT_EQ(outcome->reportHere, fails);
  if (fails)
    EXPECT_EQ(outcome->message, "rank 1: cannot read data.u16");
}

TEST(MpiSessionTest, ConcludeElectsOneReporter) {
  MLT_REQUIRE_MPIRUN();
  // Every rank fails the same way on its own: rank 0 reports, unprefixed.
  StatusOr<MpiSession::Outcome> outcome =
      session->conclude(errorf("no CUDA device is visible"));
  ASSERT_TRUE(outcome);
  EXPECT_TRUE(outcome->failed);
  EXPECT_EQ(outcome->reportHere, session->rank() == 0);
  if (session->rank() == 0)
    EXPECT_EQ(outcome->message, "no CUDA device is visible");

  // The last rank fails alone, without an agreement before.
  const int last = session->size() - 1;
  outcome = session->conclude(session->rank() == last ? errorf("disk full")
                                                      : Status::ok());
  ASSERT_TRUE(outcome);
  EXPECT_TRUE(outcome->failed);
  EXPECT_EQ(outcome->reportHere, session->rank() == last);
  if (session->rank() == last)
    EXPECT_EQ(outcome->message, "rank " + std::to_string(last) + ": disk full");

  outcome = session->conclude(Status::ok());
  ASSERT_TRUE(outcome);
  EXPECT_FALSE(outcome->failed);
  EXPECT_FALSE(outcome->reportHere);
}

//===----------------------------------------------------------------------===//
// The hang watchdogs' channel (HangChannel.h)
//===----------------------------------------------------------------------===//

/// This rank's position as a test sends it: step 100 + rank.
PositionSnapshot positionOf(int rank) {
  PositionSnapshot position;
  position.rank = rank;
  position.step = 100 + rank;
  position.host = launchPlace(3, uint32_t(rank));
  return position;
}

TEST(HangChannelTest, AnAlarmReachesEveryRankAndPositionsRankZero) {
  MLT_REQUIRE_MPIRUN();
  ASSERT_TRUE(session->threadMultiple());
  StatusOr<std::unique_ptr<HangChannel>> channel = HangChannel::open(*session);
  ASSERT_TRUE(channel) << channel.status().message();
  const int rank = session->rank(), last = session->size() - 1;
  // As the watchdogs do, each on a thread of its own: the last rank raises
  // the alarm, the others hear it, and every position reaches rank 0. The
  // main threads meanwhile are in MPI calls of their own, the last one
  // after a sleep (a host stuck in a call), which the others' wait for.
  std::vector<std::optional<PositionSnapshot>> positions;
  bool heard = false;
  std::thread watchdog([&] {
    if (rank == last) {
      (*channel)->raise();
    } else {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!(heard = (*channel)->alarmed()) &&
             std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    positions = (*channel)->gather(
        positionOf(rank),
        std::chrono::steady_clock::now() + std::chrono::seconds(20));
  });
  if (rank == last)
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StatusOr<int> largest = session->maxOf(rank);
  watchdog.join();
  ASSERT_TRUE(largest);
  EXPECT_EQ(*largest, last);
  if (rank != last)
    EXPECT_TRUE(heard) << "rank " << rank << " heard no alarm";
  if (rank != 0) {
    EXPECT_TRUE(positions.empty());
  } else {
    ASSERT_EQ(positions.size(), size_t(session->size()));
    for (int r = 0; r < session->size(); ++r) {
      ASSERT_TRUE(positions[size_t(r)]) << "no position from rank " << r;
      EXPECT_EQ(positions[size_t(r)]->rank, r);
      EXPECT_EQ(positions[size_t(r)]->step, 100 + r);
      EXPECT_EQ(positions[size_t(r)]->place(), launchPlace(3, uint32_t(r)));
    }
  }
  channel->reset(); // collective: every rank closes its channel
}

TEST(HangChannelTest, RankZeroReportsASilentRankAsMissing) {
  MLT_REQUIRE_MPIRUN();
  StatusOr<std::unique_ptr<HangChannel>> channel = HangChannel::open(*session);
  ASSERT_TRUE(channel) << channel.status().message();
  const int rank = session->rank(), last = session->size() - 1;
  // The last rank sends nothing: rank 0 gives up on it at the deadline.
  std::vector<std::optional<PositionSnapshot>> positions;
  const auto start = std::chrono::steady_clock::now();
  if (rank != last)
    positions = (*channel)->gather(positionOf(rank),
                                   start + std::chrono::milliseconds(500));
  if (rank == 0) {
    ASSERT_EQ(positions.size(), size_t(session->size()));
    for (int r = 0; r < last; ++r)
      EXPECT_TRUE(positions[size_t(r)]) << "no position from rank " << r;
    EXPECT_FALSE(positions[size_t(last)]);
    EXPECT_GE(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(500));
    EXPECT_FALSE((*channel)->alarmed());
  }
  ASSERT_TRUE(session->agree(Status::ok()));
  channel->reset();
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<MpiSession> owned;
  StatusOr<LaunchEnvironment> launch =
      detectLaunch([](const char *name) { return std::getenv(name); });
  if (launch && launch->worldSize > 1) {
    StatusOr<std::unique_ptr<MpiSession>> created =
        MpiSession::init(argc, argv);
    if (!created) {
      std::fprintf(stderr, "MPI init: %s\n",
                   created.status().message().c_str());
      return 1;
    }
    owned = std::move(*created);
    session = owned.get();
  }
  return RUN_ALL_TESTS();
}
