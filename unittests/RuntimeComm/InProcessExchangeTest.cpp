//===- InProcessExchangeTest.cpp - in-process sends and receives ----------===//
//
// Part of mlt. Tests the in-process point-to-point exchanges
// (Communicator::exchange) with one real thread per rank: rounds of groups
// in which every rank sends fresh random data of every element type to both
// neighbours on an axis and receives from both, on a line and on a 2-d
// mesh, compared byte for byte with what the peers sent; sends and
// receives of one pair matched in order across calls; count and type
// mismatches failing on both ranks with one message naming both sides, the
// world still usable; the checks of one rank's arguments; an abort waking
// a blocked receive; and a timeout naming what a deadlocked rank waits for.
//
//===----------------------------------------------------------------------===//

#include "CommTestUtil.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;

namespace {

PointToPoint send(int peer, ElementType dtype, size_t count, void *buffer) {
  return {TransferKind::Send, peer, dtype, count, buffer};
}

PointToPoint receive(int peer, ElementType dtype, size_t count, void *buffer) {
  return {TransferKind::Receive, peer, dtype, count, buffer};
}

/// The data rank `src` sends rank `dst` in round `round`: its type and count
/// vary with the round and the pair, its bytes are random.
struct Payload {
  ElementType dtype;
  size_t count;
  Bytes bytes;
};
Payload payload(int src, int dst, int round) {
  const ElementType types[] = {ElementType::F32, ElementType::BF16,
                               ElementType::I32, ElementType::F64};
  Payload p;
  p.dtype = types[size_t(round + src) % 4];
  p.count = size_t(1 + (round * 7 + src * 3 + dst) % 300);
  p.bytes = randomElements(p.dtype, p.count,
                           uint64_t(round) * 1000003u + uint64_t(src) * 1009u +
                               uint64_t(dst));
  return p;
}

// Tests groups in which every rank sends to both neighbours on an axis and
// receives from both, all posted together (so no order of the ranks can
// deadlock), for many rounds of fresh random data of every type and of
// varying counts; on a line of 4 ranks and on the pp axis of a 2x3 mesh
// (groups {0,1,2} and {3,4,5}), the other axis's groups independent.
TEST(InProcessExchangeTest, NeighboursExchangeRandomData) {
  for (const char *spec : {"pp=4", "dp=2,pp=3"}) {
    std::unique_ptr<InProcessWorld> world = makeWorld(spec);
    const Mesh &mesh = world->mesh();
    constexpr int kRounds = 40;
    std::vector<std::string> failures(size_t(mesh.worldSize()));
    runRanks(*world, [&](int rank, Communicator &comm) {
      const MeshGroup group = *mesh.groupOf(rank, "pp");
      for (int round = 0; round < kRounds; ++round) {
        std::vector<int> neighbours;
        for (int index : {group.index - 1, group.index + 1})
          if (index >= 0 && index < group.size())
            neighbours.push_back(index);
        std::vector<Payload> outgoing, incoming;
        std::vector<Bytes> received;
        for (int index : neighbours) {
          const int peer = group.ranks[size_t(index)];
          outgoing.push_back(payload(rank, peer, round));
          incoming.push_back(payload(peer, rank, round));
          received.emplace_back(incoming.back().bytes.size(), 0xEE);
        }
        // Receives first in the list: the group is posted whole anyway.
        std::vector<PointToPoint> transfers;
        for (size_t i = 0; i < neighbours.size(); ++i)
          transfers.push_back(receive(neighbours[i], incoming[i].dtype,
                                      incoming[i].count, received[i].data()));
        for (size_t i = 0; i < neighbours.size(); ++i)
          transfers.push_back(send(neighbours[i], outgoing[i].dtype,
                                   outgoing[i].count,
                                   outgoing[i].bytes.data()));
        Status status = comm.exchange("pp", transfers);
        if (!status) {
          failures[size_t(rank)] = status.message();
          return;
        }
        for (size_t i = 0; i < neighbours.size(); ++i)
          if (received[i] != incoming[i].bytes) {
            failures[size_t(rank)] = "round " + std::to_string(round) +
                                     ": wrong bytes from index " +
                                     std::to_string(neighbours[i]);
            return;
          }
      }
    });
    for (int rank = 0; rank < mesh.worldSize(); ++rank)
      EXPECT_EQ(failures[size_t(rank)], "") << spec << " rank " << rank;
  }
}

// Tests that the sends of a pair meet its receives in order across calls:
// rank 0 sends three messages in one call; rank 1 receives one, then two in
// the next call (its receives of one call also out of order with its send
// back). Rank 0's call returns only once all three were received.
TEST(InProcessExchangeTest, SendsMeetReceivesInOrder) {
  std::unique_ptr<InProcessWorld> world = makeWorld("pp=2");
  std::vector<int32_t> got(3, -1);
  int32_t back = -1;
  std::vector<std::string> messages =
      messagesOf(*world, [&](int rank, Communicator &comm) -> Status {
        if (rank == 0) {
          int32_t values[3] = {10, 20, 30};
          std::vector<PointToPoint> sends;
          for (int32_t &value : values)
            sends.push_back(send(1, ElementType::I32, 1, &value));
          MLT_RETURN_IF_ERROR(comm.exchange("pp", sends));
          return comm.exchange("pp", {receive(1, ElementType::I32, 1, &back)});
        }
        MLT_RETURN_IF_ERROR(
            comm.exchange("pp", {receive(0, ElementType::I32, 1, &got[0])}));
        int32_t reply = 99;
        return comm.exchange("pp", {send(0, ElementType::I32, 1, &reply),
                                    receive(0, ElementType::I32, 1, &got[1]),
                                    receive(0, ElementType::I32, 1, &got[2])});
      });
  EXPECT_EQ(messages, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(got, (std::vector<int32_t>{10, 20, 30}));
  EXPECT_EQ(back, 99);
}

// Tests that a send and its receive of different counts, or of different
// types, fail on both ranks with one message naming both sides, that the
// other transfers of both calls still complete, and that the pair's next
// transfers match again.
TEST(InProcessExchangeTest, MismatchFailsOnBothRanks) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,pp=2");
  struct Case {
    ElementType sentType, receivedType;
    size_t sent, received;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {ElementType::F32, ElementType::F32, 8, 9,
       "mismatched transfer on axis 'pp': rank 0's send #0 to rank 1 is 8 "
       "f32, rank 1's receive #0 from rank 0 is 9 f32"},
      {ElementType::F32, ElementType::BF16, 8, 8,
       "mismatched transfer on axis 'pp': rank 0's send #2 to rank 1 is 8 "
       "f32, rank 1's receive #2 from rank 0 is 8 bf16"}};
  for (const Case &c : cases) {
    std::vector<float> ok(4, 0.0f);
    std::vector<std::string> messages =
        messagesOf(*world, [&](int rank, Communicator &comm) -> Status {
          std::vector<float> data(16, 1.5f);
          if (rank == 0)
            return comm.exchange("pp",
                                 {send(1, c.sentType, c.sent, data.data()),
                                  receive(1, ElementType::F32, 4, ok.data())});
          if (rank == 1) {
            std::vector<float> four(4, 2.5f);
            return comm.exchange(
                "pp", {receive(0, c.receivedType, c.received, data.data()),
                       send(0, ElementType::F32, 4, four.data())});
          }
          return Status::ok(); // ranks 2 and 3 take no part
        });
    EXPECT_EQ(messages[0], c.expected);
    EXPECT_EQ(messages[1], c.expected);
    EXPECT_EQ(messages[2], "");
    EXPECT_EQ(messages[3], "");
    EXPECT_EQ(ok, std::vector<float>(4, 2.5f));
    // The pair's next transfer (#1 after the first case) matches.
    std::vector<float> value = {7.0f};
    messages = messagesOf(*world, [&](int rank, Communicator &comm) -> Status {
      if (rank == 0)
        return comm.exchange("pp", {send(1, ElementType::F32, 1, &value[0])});
      if (rank == 1)
        return comm.exchange("pp",
                             {receive(0, ElementType::F32, 1, &value[0])});
      return Status::ok();
    });
    EXPECT_EQ(messages, std::vector<std::string>(4, ""));
  }
}

// Tests the checks of one rank's arguments, which fail on that rank alone
// before anything is posted: an unknown axis, a peer outside the group, a
// null buffer, a receive overlapping another transfer of the call.
TEST(InProcessExchangeTest, BadArgumentsFailLocally) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,pp=2");
  Communicator &comm = **world->communicator(0);
  float buffer[8] = {};
  Status status = comm.exchange("tp", {send(1, ElementType::F32, 1, buffer)});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(), "exchange: mesh dp=2,pp=2 has no axis 'tp'");
  status = comm.exchange("pp", {send(2, ElementType::F32, 1, buffer)});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "exchange #0 on axis 'pp': rank 0: transfer #0 (send of 1 f32 to "
            "index 2): index 2 is outside the group of 2 ranks");
  status = comm.exchange("pp", {receive(1, ElementType::F32, 4, nullptr)});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "exchange #1 on axis 'pp': rank 0: transfer #0 (receive of 4 f32 "
            "from index 1): the buffer is null with a count of 4");
  status = comm.exchange("pp", {send(1, ElementType::F32, 4, buffer),
                                receive(1, ElementType::F32, 4, buffer + 2)});
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "exchange #2 on axis 'pp': rank 0: transfer #1 (receive of 4 f32 "
            "from index 1) writes bytes that transfer #0 (send of 4 f32 to "
            "index 1) touches; the transfers of an exchange are not ordered");
  // Two sends of one buffer are fine, and so is an empty call; the failed
  // calls posted nothing, so rank 1's first receive gets the first of them.
  std::vector<std::string> messages =
      messagesOf(*world, [&](int rank, Communicator &c) -> Status {
        if (rank == 0)
          return c.exchange("pp", {send(1, ElementType::F32, 4, buffer),
                                   send(1, ElementType::F32, 4, buffer)});
        if (rank == 1) {
          float in[8];
          MLT_RETURN_IF_ERROR(c.exchange("pp", {}));
          return c.exchange("pp", {receive(0, ElementType::F32, 4, in),
                                   receive(0, ElementType::F32, 4, in + 4)});
        }
        return Status::ok();
      });
  EXPECT_EQ(messages, std::vector<std::string>(4, ""));
}

// Tests that an abort wakes a receive blocked on a send that never comes,
// with the abort's message, and that later exchanges fail at once.
TEST(InProcessExchangeTest, AbortWakesABlockedReceive) {
  std::unique_ptr<InProcessWorld> world = makeWorld("pp=2");
  std::vector<std::string> messages =
      messagesOf(*world, [&](int rank, Communicator &comm) -> Status {
        if (rank == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          world->abort("rank 0 failed: out of memory");
          return Status::ok();
        }
        float value = 0.0f;
        return comm.exchange("pp", {receive(0, ElementType::F32, 1, &value)});
      });
  EXPECT_EQ(messages[0], "");
  EXPECT_EQ(messages[1], "collectives aborted: rank 0 failed: out of memory");
  float value = 0.0f;
  Status later = (*world->communicator(0))
                     ->exchange("pp", {send(1, ElementType::F32, 1, &value)});
  ASSERT_FALSE(later);
  EXPECT_EQ(later.message(),
            "collectives aborted: rank 0 failed: out of memory");
}

// Tests a deadlock (both ranks receive from the other in a call before the
// one holding their send): the first rank to time out aborts the world,
// naming what it waits for, and both return.
TEST(InProcessExchangeTest, TimeoutNamesWhatARankWaitsFor) {
  InProcessWorld::Options options;
  options.timeout = std::chrono::milliseconds(100);
  InProcessWorld world(parseOrDie("pp=2"), options);
  std::vector<std::string> messages =
      messagesOf(world, [&](int rank, Communicator &comm) -> Status {
        float in = 0.0f, out = 1.0f;
        MLT_RETURN_IF_ERROR(
            comm.exchange("pp", {receive(1 - rank, ElementType::F32, 1, &in)}));
        return comm.exchange("pp", {send(1 - rank, ElementType::F32, 1, &out)});
      });
  const std::string abort = world.abortMessage();
  EXPECT_TRUE(abort == "rank 0 waited over 100 ms in exchange #0 on axis 'pp' "
                       "for receive #0 from rank 1" ||
              abort == "rank 1 waited over 100 ms in exchange #0 on axis 'pp' "
                       "for receive #0 from rank 0")
      << abort;
  EXPECT_EQ(messages[0], "collectives aborted: " + abort);
  EXPECT_EQ(messages[1], "collectives aborted: " + abort);
}

} // namespace
