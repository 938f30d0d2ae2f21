//===- TransferCheckTest.cpp - the deadlock check and its reference -------===//
//
// Part of mlt. The deadlock check of TransferCheck.h on its own model of a
// step: hand-made steps (two ranks that receive first, the 1F1B pattern,
// a collective between transfers, a transfer without a partner); a long
// pipeline whose 1F1B step must finish and which one swapped group turns
// into a deadlock at a known place; and thousands of random steps (ranks,
// matched transfers in random groups, collectives of the whole line and of
// pairs, some transfers left without a partner) on which simulateStep and
// the naive simulateStepNaive must stop every rank at the same event, with
// both outcomes, finished and stuck, well represented.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/TransferCheck.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <random>

using namespace mlt::rt;
using namespace mlt::rt::transfer_check;

namespace {

using Transfer = BlockingEvent::Transfer;

BlockingEvent group(std::vector<Transfer> transfers) {
  BlockingEvent event;
  event.transfers = std::move(transfers);
  return event;
}

BlockingEvent collective(size_t axis, std::vector<uint32_t> ranks) {
  BlockingEvent event;
  event.axis = axis;
  event.group =
      std::make_shared<const std::vector<uint32_t>>(std::move(ranks));
  return event;
}

Transfer send(uint32_t peer) { return {true, peer}; }
Transfer receive(uint32_t peer) { return {false, peer}; }

/// Both simulations, which must agree; the fast one's answer.
std::vector<size_t> simulate(const StepEvents &events) {
  const std::vector<size_t> fast = simulateStep(events);
  EXPECT_EQ(fast, simulateStepNaive(events));
  return fast;
}

// Tests small steps whose outcome is known.
TEST(TransferCheckTest, HandMadeSteps) {
  // Both receive first, in groups of their own: neither moves.
  StepEvents deadlock = {{group({receive(1)}), group({send(1)})},
                         {group({receive(0)}), group({send(0)})}};
  EXPECT_EQ(simulate(deadlock), (std::vector<size_t>{0, 0}));
  // One sends first: both finish.
  StepEvents fixed = {{group({send(1)}), group({receive(1)})},
                      {group({receive(0)}), group({send(0)})}};
  EXPECT_EQ(simulate(fixed), (std::vector<size_t>{2, 2}));
  // A send and a receive in one group each: posted together, both finish.
  StepEvents together = {{group({receive(1), send(1)})},
                         {group({receive(0), send(0)})}};
  EXPECT_EQ(simulate(together), (std::vector<size_t>{1, 1}));
  // 1F1B on two stages, two micro-batches.
  StepEvents oneFOneB = {
      {group({send(1)}), group({send(1), receive(1)}), group({receive(1)})},
      {group({receive(0)}), group({send(0), receive(0)}), group({send(0)})}};
  EXPECT_EQ(simulate(oneFOneB), (std::vector<size_t>{3, 3}));
  // A collective of both ranks after a transfer on both: fine. Before the
  // receive on rank 1, after the send on rank 0: a send waits for its
  // receive to be posted, so rank 0 stops at its send, rank 1 at the
  // collective.
  StepEvents collectiveOk = {{group({send(1)}), collective(0, {0, 1})},
                             {group({receive(0)}), collective(0, {0, 1})}};
  EXPECT_EQ(simulate(collectiveOk), (std::vector<size_t>{2, 2}));
  StepEvents collectiveStuck = {{group({send(1)}), collective(0, {0, 1})},
                                {collective(0, {0, 1}), group({receive(0)})}};
  EXPECT_EQ(simulate(collectiveStuck), (std::vector<size_t>{0, 0}));
  // A send whose peer never receives: stuck, and its peer goes on.
  StepEvents unmatched = {{group({send(1)}), group({send(1)})},
                          {group({receive(0)})}};
  EXPECT_EQ(simulate(unmatched), (std::vector<size_t>{1, 1}));
}

/// The 1F1B step of a pipeline of `stages` stages and `microbatches`
/// micro-batches (>= stages) as transfer groups: stage s does its warm-up
/// forwards, then steady one-forward-one-backward, then the cool-down
/// backwards; each forward receives its input from s - 1 (but the first
/// stage) and sends its output to s + 1 (but the last), each backward
/// receives its gradient from s + 1 and sends one to s - 1; a stage's
/// send after a forward and its receive before the next backward are one
/// group, as the compiler groups consecutive transfer calls.
StepEvents oneFOneBPipeline(uint32_t stages, uint32_t microbatches) {
  StepEvents events(stages);
  for (uint32_t s = 0; s < stages; ++s) {
    std::vector<BlockingEvent> &out = events[s];
    std::vector<Transfer> pending; // transfers of the group being built
    auto flush = [&] {
      if (!pending.empty())
        out.push_back(group(std::move(pending)));
      pending.clear();
    };
    auto forward = [&] {
      if (s > 0)
        pending.push_back(receive(s - 1));
      flush(); // the forward's compute
      if (s + 1 < stages)
        pending.push_back(send(s + 1));
    };
    auto backward = [&] {
      if (s + 1 < stages)
        pending.push_back(receive(s + 1));
      flush();
      if (s > 0)
        pending.push_back(send(s - 1));
    };
    const uint32_t warmup = std::min(stages - 1 - s, microbatches);
    for (uint32_t m = 0; m < warmup; ++m)
      forward();
    for (uint32_t m = warmup; m < microbatches; ++m) {
      forward();
      backward();
    }
    for (uint32_t m = 0; m < warmup; ++m)
      backward();
    flush();
  }
  return events;
}

// Tests a long pipeline: its 1F1B step finishes on every stage; and
// splitting the first steady groups of the last two stages, each to
// receive before it sends (the last stage micro-batch 1's input before
// micro-batch 0's gradient, the one before it that gradient before that
// input), deadlocks the two there.
TEST(TransferCheckTest, LongPipeline) {
  const uint32_t stages = 8, microbatches = 256;
  StepEvents events = oneFOneBPipeline(stages, microbatches);
  std::vector<size_t> finished(stages);
  for (uint32_t s = 0; s < stages; ++s)
    finished[s] = events[s].size();
  EXPECT_EQ(simulateStep(events), finished);

  // The last stage's group 1 sends micro-batch 0's gradient and receives
  // micro-batch 1; the stage before's group 2 sends micro-batch 1 and
  // receives that gradient. Posted whole, each meets the other; split with
  // the receives first, each waits for the other's send.
  auto receiveFirst = [&](uint32_t stage, size_t index) {
    std::vector<BlockingEvent> &out = events[stage];
    const BlockingEvent steady = out[index];
    ASSERT_EQ(steady.transfers.size(), 2u);
    ASSERT_TRUE(steady.transfers[0].send);
    ASSERT_FALSE(steady.transfers[1].send);
    out[index] = group({steady.transfers[1]});
    out.insert(out.begin() + long(index) + 1, group({steady.transfers[0]}));
  };
  receiveFirst(stages - 1, 1);
  receiveFirst(stages - 2, 2);
  const std::vector<size_t> stopped = simulateStep(events);
  EXPECT_EQ(stopped[stages - 1], 1u);
  EXPECT_EQ(stopped[stages - 2], 2u);
  // The stages before stop once they need those two.
  for (uint32_t s = 0; s + 2 < stages; ++s)
    EXPECT_LT(stopped[s], events[s].size()) << "stage " << s;
  // Small enough for the reference too.
  StepEvents small = oneFOneBPipeline(4, 6);
  EXPECT_EQ(simulateStep(small), simulateStepNaive(small));
}

/// A random step of `ranks` ranks: messages between random pairs, each
/// rank's transfers (those it sends and receives) in a random order cut
/// into groups of 1 to 3, collectives of every rank (axis 0) and of the
/// pair {0, 1} (axis 1, when there are 3 ranks or more) inserted at random
/// places in the same number on each member; with `dropRate`, a transfer
/// dropped now and then, leaving its partner unmatched.
StepEvents randomStep(std::mt19937 &rng, uint32_t ranks, double dropRate) {
  std::uniform_int_distribution<uint32_t> rank(0, ranks - 1);
  std::vector<std::vector<Transfer>> transfers(ranks);
  const uint32_t messages = std::uniform_int_distribution<uint32_t>(1, 12)(rng);
  std::bernoulli_distribution drop(dropRate);
  for (uint32_t m = 0; m < messages; ++m) {
    const uint32_t src = rank(rng);
    uint32_t dst = rank(rng);
    if (dst == src)
      dst = (src + 1) % ranks;
    if (!drop(rng))
      transfers[src].push_back(send(dst));
    if (!drop(rng))
      transfers[dst].push_back(receive(src));
  }
  StepEvents events(ranks);
  std::uniform_int_distribution<size_t> groupSize(1, 3);
  for (uint32_t r = 0; r < ranks; ++r) {
    std::shuffle(transfers[r].begin(), transfers[r].end(), rng);
    for (size_t i = 0; i < transfers[r].size();) {
      const size_t n = std::min(groupSize(rng), transfers[r].size() - i);
      events[r].push_back(group(std::vector<Transfer>(
          transfers[r].begin() + i, transfers[r].begin() + i + n)));
      i += n;
    }
  }
  // Collectives at random places, in order per axis on each member.
  std::vector<uint32_t> everyone(ranks);
  for (uint32_t r = 0; r < ranks; ++r)
    everyone[r] = r;
  auto insertCollectives = [&](size_t axis, const std::vector<uint32_t> &of,
                               size_t count) {
    for (uint32_t r : of)
      for (size_t k = 0; k < count; ++k) {
        std::vector<BlockingEvent> &out = events[r];
        const size_t at =
            std::uniform_int_distribution<size_t>(0, out.size())(rng);
        out.insert(out.begin() + long(at), collective(axis, of));
      }
  };
  insertCollectives(0, everyone,
                    std::uniform_int_distribution<size_t>(0, 2)(rng));
  if (ranks >= 3)
    insertCollectives(1, {0, 1},
                      std::uniform_int_distribution<size_t>(0, 2)(rng));
  return events;
}

// Tests the algorithm against the naive reference on random steps, matched
// and not: every rank stops at the same event in both; and both outcomes
// come up often enough for the comparison to mean something.
TEST(TransferCheckTest, MatchesNaiveReferenceOnRandomSteps) {
  std::mt19937 rng(2024);
  size_t finished = 0, stuck = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    const uint32_t ranks = std::uniform_int_distribution<uint32_t>(2, 5)(rng);
    const double dropRate = trial % 4 == 3 ? 0.1 : 0.0;
    const StepEvents events = randomStep(rng, ranks, dropRate);
    const std::vector<size_t> fast = simulateStep(events);
    const std::vector<size_t> naive = simulateStepNaive(events);
    ASSERT_EQ(fast, naive) << "trial " << trial;
    bool done = true;
    for (uint32_t r = 0; r < ranks; ++r)
      done &= fast[r] == events[r].size();
    (done ? finished : stuck) += 1;
  }
  EXPECT_GT(finished, 400u);
  EXPECT_GT(stuck, 400u);
}

} // namespace
