//===- InProcessCommTest.cpp - in-process collectives tests ---------------===//
//
// Part of mlt. Tests the in-process collectives with one real thread per
// rank: every collective on every axis of the 1x1, 4, 2x2, 2x3 and 3x2x2
// meshes, in f32, f64, bf16 (and i32 for the copies), out of place and in
// place, permute by every shift of the group, on fresh seeded random data
// of mixed magnitudes (so that the order of a sum shows in its bits),
// compared bit for bit with a serial reference that sums in group order;
// thousands of small collectives in a row (barrier reuse); mismatched calls
// (permute's shift among them) and bad arguments (a permute shift outside
// the group) failing on every rank of the group with the same message;
// abort and timeout waking blocked ranks; a world of one rank; the in-place
// reduce-scatter and all-gather chained on one bucket, as a partitioned
// optimizer uses them.
//
//===----------------------------------------------------------------------===//

#include "CommTestUtil.h"

#include "mlt/Runtime/comm/InProcessComm.h"

#include "mlt/Support/Bf16.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::testing;

namespace {

/// The serial reference of a sum: element by element, in the order of
/// `inputs` (group order); bf16 accumulated in f32 and rounded once.
Bytes referenceSum(ElementType type, const std::vector<const uint8_t *> &inputs,
                   size_t count) {
  Bytes out(count * bytesOf(type));
  for (size_t j = 0; j < count; ++j) {
    if (type == ElementType::F64) {
      double s, x;
      std::memcpy(&s, inputs[0] + j * 8, 8);
      for (size_t k = 1; k < inputs.size(); ++k) {
        std::memcpy(&x, inputs[k] + j * 8, 8);
        s += x;
      }
      std::memcpy(&out[j * 8], &s, 8);
    } else if (type == ElementType::F32) {
      float s, x;
      std::memcpy(&s, inputs[0] + j * 4, 4);
      for (size_t k = 1; k < inputs.size(); ++k) {
        std::memcpy(&x, inputs[k] + j * 4, 4);
        s += x;
      }
      std::memcpy(&out[j * 4], &s, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, inputs[0] + j * 2, 2);
      float s = mlt::bf16ToFloat(h);
      for (size_t k = 1; k < inputs.size(); ++k) {
        std::memcpy(&h, inputs[k] + j * 2, 2);
        s += mlt::bf16ToFloat(h);
      }
      h = mlt::floatToBF16(s);
      std::memcpy(&out[j * 2], &h, 2);
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Every collective on every axis
//===----------------------------------------------------------------------===//

/// One collective of a scripted sequence, the same on every rank.
struct Step {
  CollectiveKind kind;
  ElementType dtype;
  size_t count;
  std::string axis;
  int root = 0;
  bool inPlace = false;
  /// Permute's shift (0 < shift < group size); 0 for the other kinds.
  int shift = 0;
  /// All-to-all's order of blocks.
  BlockOrder order = BlockOrder::Blocks;
};

std::string describe(const Step &step) {
  CollectiveCall call{step.kind, step.dtype, step.count, step.root,
                      nullptr,   nullptr,    step.shift, step.order};
  return call.describe() + " on " + step.axis +
         (step.inPlace ? " in place" : "");
}

/// The steps for `mesh`: on every axis, for a few counts (one, a handful
/// that no group size divides, and more than one block of the summation),
/// every collective in every type it takes, out of place and in place,
/// broadcast from every root and permute by every shift.
std::vector<Step> allSteps(const Mesh &mesh) {
  std::vector<Step> steps;
  const ElementType floats[] = {ElementType::F32, ElementType::F64,
                                ElementType::BF16};
  const ElementType any[] = {ElementType::F32, ElementType::F64,
                             ElementType::BF16, ElementType::I32};
  for (const MeshAxis &axis : mesh.axes()) {
    for (size_t count : {size_t(1), size_t(7), size_t(2500)}) {
      for (ElementType type : floats)
        for (bool inPlace : {false, true}) {
          steps.push_back({CollectiveKind::AllReduceSum, type, count, axis.name,
                           0, inPlace});
          steps.push_back({CollectiveKind::ReduceScatterSum, type, count,
                           axis.name, 0, inPlace});
        }
      for (ElementType type : any)
        for (bool inPlace : {false, true})
          steps.push_back(
              {CollectiveKind::AllGather, type, count, axis.name, 0, inPlace});
      for (ElementType type : any) {
        steps.push_back(
            {CollectiveKind::AllToAll, type, count, axis.name, 0, false});
        // Blocks of two chunks into and out of the natural order.
        for (BlockOrder order : {BlockOrder::ToNatural, BlockOrder::FromNatural})
          steps.push_back({CollectiveKind::AllToAll, type, 2 * count,
                           axis.name, 0, false, 0, order});
      }
      for (int root = 0; root < axis.size; ++root)
        steps.push_back({CollectiveKind::Broadcast, any[root % 4], count,
                         axis.name, root, true});
      for (int shift = 1; shift < axis.size; ++shift)
        for (ElementType type : any)
          steps.push_back({CollectiveKind::Permute, type, count, axis.name, 0,
                           false, shift});
    }
  }
  return steps;
}

/// What rank `rank` passes into step `s`.
Bytes stepInput(const Mesh &mesh, const Step &step, size_t s, int rank) {
  int groupSize = mesh.axes()[*mesh.findAxis(step.axis)].size;
  size_t count = step.kind == CollectiveKind::ReduceScatterSum ||
                         step.kind == CollectiveKind::AllToAll
                     ? step.count * groupSize
                     : step.count;
  return randomElements(step.dtype, count, 1000003 * s + 7919 * rank + 17);
}

/// What rank `rank` must hold after step `s`, from the inputs of its group.
Bytes expectedOutput(const Mesh &mesh, const Step &step, size_t s, int rank) {
  MeshGroup group = *mesh.groupOf(rank, step.axis);
  std::vector<Bytes> inputs;
  for (int peer : group.ranks)
    inputs.push_back(stepInput(mesh, step, s, peer));
  const size_t chunk = step.count * bytesOf(step.dtype);
  std::vector<const uint8_t *> pointers;
  switch (step.kind) {
  case CollectiveKind::AllReduceSum:
    for (const Bytes &in : inputs)
      pointers.push_back(in.data());
    return referenceSum(step.dtype, pointers, step.count);
  case CollectiveKind::ReduceScatterSum:
    for (const Bytes &in : inputs)
      pointers.push_back(in.data() + group.index * chunk);
    return referenceSum(step.dtype, pointers, step.count);
  case CollectiveKind::AllGather: {
    Bytes out;
    for (const Bytes &in : inputs)
      out.insert(out.end(), in.begin(), in.end());
    return out;
  }
  case CollectiveKind::Broadcast:
    return inputs[step.root];
  case CollectiveKind::AllToAll: {
    // Block k from member k: its block of this rank's index. Read as the
    // natural order's 2G chunks, block k is chunks k and 2G - 1 - k.
    const size_t half = chunk / 2;
    const size_t g = group.size();
    auto naturalBlock = [&](const Bytes &in, size_t k) {
      Bytes block(in.begin() + k * half, in.begin() + (k + 1) * half);
      block.insert(block.end(), in.begin() + (2 * g - 1 - k) * half,
                   in.begin() + (2 * g - k) * half);
      return block;
    };
    Bytes out;
    for (const Bytes &in : inputs) {
      Bytes block = step.order == BlockOrder::FromNatural
                        ? naturalBlock(in, group.index)
                        : Bytes(in.begin() + group.index * chunk,
                                in.begin() + (group.index + 1) * chunk);
      out.insert(out.end(), block.begin(), block.end());
    }
    if (step.order != BlockOrder::ToNatural)
      return out;
    Bytes natural(out.size());
    for (size_t k = 0; k < g; ++k) {
      std::memcpy(&natural[k * half], &out[k * chunk], half);
      std::memcpy(&natural[(2 * g - 1 - k) * half], &out[k * chunk + half],
                  half);
    }
    return natural;
  }
  case CollectiveKind::Permute:
    // The input of the member `shift` places before this one, cyclically.
    return inputs[(group.index - step.shift + group.size()) % group.size()];
  }
  return {};
}

/// Runs `step` on one rank, in place or not, and returns what it received
/// (for in-place reduce-scatter, the chunk where the result lands).
Bytes runStep(Communicator &comm, const Step &step, const Bytes &input,
              Status &status) {
  MeshGroup group = *comm.mesh().groupOf(comm.rank(), step.axis);
  const size_t chunk = step.count * bytesOf(step.dtype);
  const uint8_t garbage = 0xA5;
  switch (step.kind) {
  case CollectiveKind::AllReduceSum: {
    if (step.inPlace) {
      Bytes buffer = input;
      status = comm.allReduceSum(buffer.data(), buffer.data(), step.count,
                                 step.dtype, step.axis);
      return buffer;
    }
    Bytes out(chunk, garbage);
    status = comm.allReduceSum(input.data(), out.data(), step.count, step.dtype,
                               step.axis);
    return out;
  }
  case CollectiveKind::ReduceScatterSum: {
    if (step.inPlace) {
      Bytes buffer = input;
      uint8_t *out = buffer.data() + group.index * chunk;
      status = comm.reduceScatterSum(buffer.data(), out, step.count, step.dtype,
                                     step.axis);
      return Bytes(out, out + chunk);
    }
    Bytes out(chunk, garbage);
    status = comm.reduceScatterSum(input.data(), out.data(), step.count,
                                   step.dtype, step.axis);
    return out;
  }
  case CollectiveKind::AllGather: {
    Bytes out(chunk * group.size(), garbage);
    const void *in = input.data();
    if (step.inPlace) {
      std::memcpy(out.data() + group.index * chunk, input.data(), chunk);
      in = out.data() + group.index * chunk;
    }
    status = comm.allGather(in, out.data(), step.count, step.dtype, step.axis);
    return out;
  }
  case CollectiveKind::Broadcast: {
    Bytes buffer = input;
    status = comm.broadcast(buffer.data(), step.count, step.dtype, step.axis,
                            step.root);
    return buffer;
  }
  case CollectiveKind::AllToAll: {
    Bytes out(chunk * group.size(), garbage);
    status = comm.allToAll(input.data(), out.data(), step.count, step.dtype,
                           step.axis, step.order);
    return out;
  }
  case CollectiveKind::Permute: {
    Bytes out(chunk, garbage);
    status = comm.permute(input.data(), out.data(), step.count, step.dtype,
                          step.axis, step.shift);
    return out;
  }
  }
  return {};
}

class CollectivesTest : public ::testing::TestWithParam<const char *> {};

// Tests every collective on every axis of the mesh against the serial
// reference, bit for bit: all ranks run the same script of collectives on
// their own threads, then the main thread compares.
TEST_P(CollectivesTest, EveryCollectiveOnEveryAxisMatchesTheReference) {
  Mesh mesh = parseOrDie(GetParam());
  std::vector<Step> steps = allSteps(mesh);
  const int world = mesh.worldSize();
  std::vector<std::vector<Bytes>> received(world,
                                           std::vector<Bytes>(steps.size()));
  std::vector<std::vector<std::string>> errors(
      world, std::vector<std::string>(steps.size()));

  std::unique_ptr<InProcessWorld> comms = makeWorld(GetParam());
  runRanks(*comms, [&](int rank, Communicator &comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.mesh(), mesh);
    for (size_t s = 0; s < steps.size(); ++s) {
      Status status;
      received[rank][s] =
          runStep(comm, steps[s], stepInput(mesh, steps[s], s, rank), status);
      if (!status)
        errors[rank][s] = status.message();
    }
    Status done = comm.barrier();
    if (!done)
      errors[rank].back() = done.message();
  });

  for (size_t s = 0; s < steps.size(); ++s) {
    for (int rank = 0; rank < world; ++rank) {
      ASSERT_EQ(errors[rank][s], "")
          << "rank " << rank << ", step " << s << ": " << describe(steps[s]);
      Bytes expected = expectedOutput(mesh, steps[s], s, rank);
      ASSERT_EQ(received[rank][s], expected)
          << "rank " << rank << ", step " << s << ": " << describe(steps[s]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, CollectivesTest,
                         ::testing::Values("a=1,b=1", "dp=4", "dp=2,tp=2",
                                           "dp=2,tp=3", "pp=3,dp=2,tp=2"));

// Tests that the order of a sum is the group's: with a, b, c chosen so that
// (a + b) + c differs from a + (b + c) and from (b + c) + a, every rank gets
// (a + b) + c, whatever order the threads arrive in.
TEST(InProcessCommTest, SumsInGroupOrder) {
  std::unique_ptr<InProcessWorld> world = makeWorld("tp=3");
  InProcessWorld &comms = *world;
  const float inputs[3] = {1.0f, 1e8f, -1e8f};
  ASSERT_NE((inputs[0] + inputs[1]) + inputs[2],
            inputs[0] + (inputs[1] + inputs[2]));
  const float expected = (inputs[0] + inputs[1]) + inputs[2];
  for (int round = 0; round < 20; ++round) {
    std::vector<float> results(3, -1.0f);
    runRanks(comms, [&](int rank, Communicator &comm) {
      // Stagger the arrivals differently each round.
      std::this_thread::sleep_for(
          std::chrono::microseconds(((rank + round) % 3) * 200));
      float value = inputs[rank];
      EXPECT_TRUE(comm.allReduceSum(&value, &value, 1, ElementType::F32, "tp"));
      results[rank] = value;
    });
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_EQ(results[rank], expected) << "round " << round;
  }
}

// Tests the in-place forms as a partitioned optimizer (ZeRO) chains them on
// one flat bucket per rank, over groups of 2 and 3 ranks, many rounds of
// fresh random data (so that a race between a rank writing its chunk and a
// peer reading it would show): reduce_scatter_sum from the bucket into the
// rank's own chunk of it (output = bucket + index * count) leaves the sum
// there, bit for bit the serial reference, and the other chunks as they
// were; then, the chunk updated, all_gather from it into the bucket
// (input = bucket + index * count) leaves every rank's chunk in place.
TEST(InProcessCommTest, InPlaceReduceScatterThenAllGather) {
  for (const char *spec : {"dp=2", "dp=3"}) {
    std::unique_ptr<InProcessWorld> world = makeWorld(spec);
    const int size = world->mesh().worldSize();
    for (ElementType type :
         {ElementType::F32, ElementType::BF16, ElementType::F64})
      for (size_t count : {size_t(1), size_t(7), size_t(2500)}) {
        const size_t chunk = count * bytesOf(type);
        for (int round = 0; round < 8; ++round) {
          const uint64_t seed = 7777 * round + 31 * count + uint64_t(type);
          auto bucketOf = [&](int rank) {
            return randomElements(type, count * size, seed + 101 * rank);
          };
          // What each rank's chunk becomes between the two collectives.
          auto updatedChunk = [&](int rank) {
            return randomElements(type, count, seed + 977 + 101 * rank);
          };
          std::vector<Bytes> reduced(size), gathered(size);
          std::vector<std::string> errors(size);
          runRanks(*world, [&](int rank, Communicator &comm) {
            Bytes bucket = bucketOf(rank);
            uint8_t *mine = bucket.data() + rank * chunk;
            Status status =
                comm.reduceScatterSum(bucket.data(), mine, count, type, "dp");
            reduced[rank] = bucket;
            if (status) {
              Bytes update = updatedChunk(rank);
              std::memcpy(mine, update.data(), chunk);
              status = comm.allGather(mine, bucket.data(), count, type, "dp");
            }
            gathered[rank] = bucket;
            if (!status)
              errors[rank] = status.message();
          });
          for (int rank = 0; rank < size; ++rank) {
            SCOPED_TRACE(std::string(spec) + " " + elementTypeName(type) +
                         " count " + std::to_string(count) + " round " +
                         std::to_string(round) + " rank " +
                         std::to_string(rank));
            ASSERT_EQ(errors[rank], "");
            std::vector<Bytes> buckets;
            std::vector<const uint8_t *> chunks;
            for (int peer = 0; peer < size; ++peer)
              buckets.push_back(bucketOf(peer));
            for (const Bytes &b : buckets)
              chunks.push_back(b.data() + rank * chunk);
            Bytes expected = buckets[rank];
            Bytes sum = referenceSum(type, chunks, count);
            std::copy(sum.begin(), sum.end(), expected.begin() + rank * chunk);
            EXPECT_EQ(reduced[rank], expected) << "after reduce_scatter_sum";
            Bytes all;
            for (int peer = 0; peer < size; ++peer) {
              Bytes update = updatedChunk(peer);
              all.insert(all.end(), update.begin(), update.end());
            }
            EXPECT_EQ(gathered[rank], all) << "after all_gather";
          }
        }
      }
  }
}

//===----------------------------------------------------------------------===//
// Many small collectives
//===----------------------------------------------------------------------===//

/// Input element j of rank `rank` at iteration `iteration`: a function of the
/// three, so every rank can compute its peers' inputs and check its result.
float smallInput(int iteration, int rank, int j) {
  uint32_t h = uint32_t(iteration) * 2654435761u ^ uint32_t(rank) * 40503u ^
               uint32_t(j) * 97u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return std::ldexp(float(h % 1000003) + 1.0f, int(h % 17) - 8) *
         (h & 1u ? 1.0f : -1.0f);
}

// Tests thousands of small collectives in a row, cycling through the axes,
// the kinds and the mesh-wide barrier, each result checked against its
// reference; a bug in reusing a barrier (a fast rank entering the next
// collective while a slow one still reads the previous) shows up as a wrong
// value, an error or (caught by the world's timeout) a hang.
class ManyCollectivesTest
    : public ::testing::TestWithParam<std::pair<const char *, int>> {};

TEST_P(ManyCollectivesTest, ThousandsOfSmallCollectives) {
  Mesh mesh = parseOrDie(GetParam().first);
  const int iterations = GetParam().second;
  std::unique_ptr<InProcessWorld> world = makeWorld(mesh.toString());
  InProcessWorld &comms = *world;
  const int count = 3;
  std::vector<int> wrong(mesh.worldSize(), 0);
  std::vector<std::string> firstError(mesh.worldSize());
  runRanks(comms, [&](int rank, Communicator &comm) {
    const int numAxes = int(mesh.numAxes());
    for (int it = 0; it < iterations; ++it) {
      const std::string &axis = mesh.axes()[it % numAxes].name;
      MeshGroup group = *mesh.groupOf(rank, axis);
      const int g = group.size();
      // Inputs for reduce-scatter (g chunks), or one chunk for the others.
      float in[16], out[16];
      for (int j = 0; j < count * g; ++j)
        in[j] = smallInput(it, rank, j);
      // Element j of the group-order sum of the peers' inputs.
      auto sum = [&](int j) {
        float s = smallInput(it, group.ranks[0], j);
        for (int k = 1; k < g; ++k)
          s += smallInput(it, group.ranks[k], j);
        return s;
      };
      Status status;
      switch ((it / numAxes) % 4) {
      case 0:
        status = comm.allReduceSum(in, out, count, ElementType::F32, axis);
        for (int j = 0; j < count; ++j)
          wrong[rank] += out[j] != sum(j);
        break;
      case 1:
        status = comm.reduceScatterSum(in, out, count, ElementType::F32, axis);
        for (int j = 0; j < count; ++j)
          wrong[rank] += out[j] != sum(group.index * count + j);
        break;
      case 2:
        status = comm.allGather(in, out, count, ElementType::F32, axis);
        for (int k = 0; k < g; ++k)
          for (int j = 0; j < count; ++j)
            wrong[rank] +=
                out[k * count + j] != smallInput(it, group.ranks[k], j);
        break;
      case 3: {
        const int root = it % g;
        status = comm.broadcast(in, count, ElementType::F32, axis, root);
        for (int j = 0; j < count; ++j)
          wrong[rank] += in[j] != smallInput(it, group.ranks[root], j);
        break;
      }
      }
      if (status && it % 100 == 99)
        status = comm.barrier();
      if (!status) {
        firstError[rank] = status.message();
        comms.abort("rank " + std::to_string(rank) + " failed");
        return;
      }
    }
  });
  for (int rank = 0; rank < mesh.worldSize(); ++rank) {
    EXPECT_EQ(firstError[rank], "") << "rank " << rank;
    EXPECT_EQ(wrong[rank], 0) << "rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, ManyCollectivesTest,
                         ::testing::Values(std::make_pair("dp=2,tp=2", 4000),
                                           std::make_pair("pp=3,dp=2,tp=2",
                                                          3000)));

//===----------------------------------------------------------------------===//
// Mismatches and bad arguments
//===----------------------------------------------------------------------===//

/// Checks that after a failed collective the world still works: an
/// all-reduce over both axes gives the right sums everywhere.
void expectStillUsable(InProcessWorld &comms) {
  std::vector<float> results(comms.mesh().worldSize());
  runRanks(comms, [&](int rank, Communicator &comm) {
    float value = float(rank + 1);
    EXPECT_TRUE(comm.allReduceSum(&value, &value, 1, ElementType::F32, "tp"));
    EXPECT_TRUE(comm.allReduceSum(&value, &value, 1, ElementType::F32, "dp"));
    results[rank] = value;
  });
  for (float result : results)
    EXPECT_EQ(result, 10.0f);
}

// Tests that different counts within a group fail on every rank of that
// group with one message, that the other group is unaffected, and that the
// world keeps working.
TEST(InProcessCommTest, MismatchedCountsFailOnEveryRankOfTheGroup) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,tp=2");
  InProcessWorld &comms = *world;
  std::vector<std::string> messages =
      messagesOf(comms, [](int rank, Communicator &comm) {
        std::vector<float> in(9, 1.0f), out(9);
        size_t count = rank == 1 ? 9 : 8;
        return comm.allReduceSum(in.data(), out.data(), count, ElementType::F32,
                                 "tp");
      });
  const std::string expected =
      "collective #0 on axis 'tp' (ranks 0,1): mismatched calls: rank 0 "
      "called all_reduce_sum of 8 f32, rank 1 called all_reduce_sum of 9 f32";
  EXPECT_EQ(messages[0], expected);
  EXPECT_EQ(messages[1], expected);
  EXPECT_EQ(messages[2], "");
  EXPECT_EQ(messages[3], "");
  expectStillUsable(comms);
}

// Tests mismatched element types, kinds and roots, each failing on every
// rank of the group with the same message.
TEST(InProcessCommTest, MismatchedTypesKindsAndRootsFail) {
  std::unique_ptr<InProcessWorld> world = makeWorld("tp=3");
  InProcessWorld &comms = *world;
  auto expectAllFail = [](const std::vector<std::string> &messages,
                          const std::string &expected) {
    for (const std::string &message : messages)
      EXPECT_EQ(message, expected);
  };

  expectAllFail(
      messagesOf(comms,
                 [](int rank, Communicator &comm) {
                   double buffer[4] = {1, 2, 3, 4};
                   return comm.allReduceSum(
                       buffer, buffer, 4,
                       rank == 2 ? ElementType::F64 : ElementType::F32, "tp");
                 }),
      "collective #0 on axis 'tp' (ranks 0-2): mismatched calls: rank 0 "
      "called all_reduce_sum of 4 f32, rank 2 called all_reduce_sum of 4 f64");

  expectAllFail(
      messagesOf(comms,
                 [](int rank, Communicator &comm) {
                   float in[2] = {1, 2}, out[6];
                   if (rank == 1)
                     return comm.allGather(in, out, 2, ElementType::F32, "tp");
                   return comm.allReduceSum(in, out, 2, ElementType::F32, "tp");
                 }),
      "collective #1 on axis 'tp' (ranks 0-2): mismatched calls: rank 0 "
      "called all_reduce_sum of 2 f32, rank 1 called all_gather of 2 f32 per "
      "rank");

  expectAllFail(
      messagesOf(comms,
                 [](int rank, Communicator &comm) {
                   float buffer[2] = {1, 2};
                   return comm.broadcast(buffer, 2, ElementType::F32, "tp",
                                         rank == 0 ? 0 : 1);
                 }),
      "collective #2 on axis 'tp' (ranks 0-2): mismatched calls: rank 0 "
      "called broadcast of 2 f32 from index 0, rank 1 called broadcast of 2 "
      "f32 from index 1");
}

// Tests that bad arguments on one rank (a null buffer, an overlap that is
// not in place, a root outside the group) or on all of them (a type that
// cannot be summed) fail on every rank of the group, naming the rank.
TEST(InProcessCommTest, BadArgumentsFailOnEveryRankOfTheGroup) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,tp=2");
  InProcessWorld &comms = *world;
  std::vector<std::string> messages =
      messagesOf(comms, [](int rank, Communicator &comm) {
        float in[8] = {}, out[8];
        return comm.allReduceSum(rank == 3 ? nullptr : in, out, 8,
                                 ElementType::F32, "dp");
      });
  const std::string nullInput = "collective #0 on axis 'dp' (ranks 1,3): rank "
                                "3: all_reduce_sum input is null with a count "
                                "of 8";
  EXPECT_EQ(messages, (std::vector<std::string>{"", nullInput, "", nullInput}));

  messages = messagesOf(comms, [](int, Communicator &comm) {
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    return comm.allReduceSum(in, out, 4, ElementType::I32, "tp");
  });
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(messages[rank],
              "collective #0 on axis 'tp' (ranks " +
                  std::string(rank < 2 ? "0,1" : "2,3") + "): rank " +
                  (rank < 2 ? "0" : "2") +
                  ": all_reduce_sum cannot sum i32 (only f32, f64 and bf16)");

  messages = messagesOf(comms, [](int rank, Communicator &comm) {
    float buffer[8] = {};
    // All-gather with the input inside the output, but not at this rank's
    // chunk, on rank 0 only.
    float *in = rank == 0 ? buffer + 1 : buffer + 2 * (rank % 2);
    return comm.allGather(in, buffer, 2, ElementType::F32, "tp");
  });
  const std::string overlap = "collective #1 on axis 'tp' (ranks 0,1): rank 0: "
                              "all_gather input and output overlap without "
                              "being in place";
  EXPECT_EQ(messages, (std::vector<std::string>{overlap, overlap, "", ""}));

  messages = messagesOf(comms, [](int, Communicator &comm) {
    float buffer[2] = {};
    return comm.broadcast(buffer, 2, ElementType::F32, "dp", 2);
  });
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(messages[rank].find(
                  "broadcast root index 2 is outside the group of 2 ranks"),
              std::string::npos)
        << messages[rank];

  expectStillUsable(comms);
}

// Tests permute's checks: a shift that differs between the members of a
// group is a mismatch, naming permute and both shifts, on every rank of the
// group; a shift of 0, one of the group's size or more, or a negative one
// fails on every rank of the group, naming permute, the shift and the
// group; an output overlapping the input fails too (permute is never in
// place); the other group of the mesh is unaffected and the world keeps
// working.
TEST(InProcessCommTest, PermuteShiftsOutsideTheGroupOrMismatchedFail) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,tp=3");
  InProcessWorld &comms = *world;
  // Ranks 0-2 form the tp group of dp coordinate 0, ranks 3-5 the other.
  std::vector<std::string> messages = messagesOf(comms, [](int rank,
                                                           Communicator &comm) {
    float in[4] = {1, 2, 3, 4}, out[4];
    return comm.permute(in, out, 4, ElementType::F32, "tp", rank == 1 ? 2 : 1);
  });
  const std::string mismatch =
      "collective #0 on axis 'tp' (ranks 0-2): mismatched calls: rank 0 "
      "called permute of 4 f32 by 1, rank 1 called permute of 4 f32 by 2";
  EXPECT_EQ(messages, (std::vector<std::string>{mismatch, mismatch, mismatch,
                                                "", "", ""}));

  for (int shift : {0, 3, 4, -1}) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    messages = messagesOf(comms, [shift](int, Communicator &comm) {
      float in[4] = {1, 2, 3, 4}, out[4];
      return comm.permute(in, out, 4, ElementType::F32, "tp", shift);
    });
    for (int rank = 0; rank < 6; ++rank) {
      EXPECT_NE(messages[rank].find("permute shift " + std::to_string(shift) +
                                    " is outside [1, 3) for a group of 3 "
                                    "ranks"),
                std::string::npos)
          << messages[rank];
      EXPECT_NE(messages[rank].find(rank < 3 ? "(ranks 0-2)" : "(ranks 3-5)"),
                std::string::npos)
          << messages[rank];
    }
  }

  // Shift 1 is in the group of 2 ranks on dp, but the output overlaps the
  // input on rank 4.
  messages = messagesOf(comms, [](int rank, Communicator &comm) {
    float buffer[8] = {};
    return comm.permute(buffer, rank == 4 ? buffer + 2 : buffer + 4, 4,
                        ElementType::F32, "dp", 1);
  });
  const std::string overlap = "collective #0 on axis 'dp' (ranks 1,4): rank 4: "
                              "permute input and output overlap without being "
                              "in place";
  EXPECT_EQ(messages,
            (std::vector<std::string>{"", overlap, "", "", overlap, ""}));

  // Still usable: permute by 2 on tp and by 1 on dp bring the right ranks'
  // inputs.
  std::vector<std::vector<int32_t>> received(6);
  runRanks(comms, [&](int rank, Communicator &comm) {
    int32_t in[3] = {rank, 10 * rank, 100 * rank}, out[3] = {-1, -1, -1};
    EXPECT_TRUE(comm.permute(in, out, 3, ElementType::I32, "tp", 2));
    int32_t back[3] = {-1, -1, -1};
    EXPECT_TRUE(comm.permute(out, back, 3, ElementType::I32, "dp", 1));
    received[rank].assign(back, back + 3);
  });
  for (int rank = 0; rank < 6; ++rank) {
    // tp member index i (rank % 3) receives from index i - 2 = i + 1; then
    // dp member d (rank / 3) receives from the other one.
    const int from = (1 - rank / 3) * 3 + (rank % 3 + 1) % 3;
    EXPECT_EQ(received[rank],
              (std::vector<int32_t>{from, 10 * from, 100 * from}))
        << "rank " << rank;
  }
}

// Tests that an axis the mesh lacks fails on the calling rank at once.
TEST(InProcessCommTest, UnknownAxisFailsLocally) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,tp=2");
  InProcessWorld &comms = *world;
  Communicator *comm = *comms.communicator(2);
  float value = 1.0f;
  Status status = comm->allReduceSum(&value, &value, 1, ElementType::F32, "pp");
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "all_reduce_sum: mesh dp=2,tp=2 has no axis 'pp'");
  EXPECT_EQ(comms.communicator(4).status().message(),
            "rank 4 is outside mesh dp=2,tp=2 of 4 ranks");
}

//===----------------------------------------------------------------------===//
// Abort and timeout
//===----------------------------------------------------------------------===//

// Tests that abort wakes ranks blocked in the mesh barrier and in an axis
// collective, every blocked call returning the abort's message, and that
// every later call fails at once.
TEST(InProcessCommTest, AbortWakesBlockedRanks) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=2,tp=2");
  InProcessWorld &comms = *world;
  std::vector<std::string> messages(4);
  runRanks(comms, [&](int rank, Communicator &comm) {
    float value = 1.0f;
    Status status;
    if (rank == 3) {
      // Rank 3 fails before its collectives; its peers are blocked by then.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      comms.abort("rank 3 failed: out of memory");
      status = comm.barrier();
    } else if (rank == 1) {
      // Waits for rank 3 in the dp group {1, 3}.
      status = comm.allReduceSum(&value, &value, 1, ElementType::F32, "dp");
    } else {
      // Waits for ranks 1 and 3.
      status = comm.barrier();
    }
    if (!status)
      messages[rank] = status.message();
  });
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_EQ(messages[rank],
              "collectives aborted: rank 3 failed: out of memory");
  EXPECT_TRUE(comms.isAborted());
  EXPECT_EQ(comms.abortMessage(), "rank 3 failed: out of memory");

  // The first message wins; every call fails from now on.
  comms.abort("another failure");
  float value = 1.0f;
  Status later =
      (*comms.communicator(0))->broadcast(&value, 1, ElementType::F32, "tp", 0);
  ASSERT_FALSE(later);
  EXPECT_EQ(later.message(),
            "collectives aborted: rank 3 failed: out of memory");
}

// Tests an abort at an arbitrary moment while every rank runs collectives
// back to back: every rank stops with the abort's message (none hangs), and
// every collective that succeeded before it was right.
TEST(InProcessCommTest, AbortAtAnyMomentStopsEveryRank) {
  Mesh mesh = parseOrDie("dp=2,tp=3");
  for (int trial = 0; trial < 4; ++trial) {
    std::unique_ptr<InProcessWorld> world = makeWorld(mesh.toString());
    InProcessWorld &comms = *world;
    std::vector<std::string> messages(mesh.worldSize());
    std::vector<int> wrong(mesh.worldSize(), 0);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2 + 5 * trial));
      comms.abort("stop");
    });
    runRanks(comms, [&](int rank, Communicator &comm) {
      const int count = 1000;
      std::vector<float> in(count), out(count);
      for (int it = 0;; ++it) {
        const char *axis = it % 2 ? "dp" : "tp";
        for (int j = 0; j < count; ++j)
          in[j] = smallInput(it, rank, j);
        Status status = comm.allReduceSum(in.data(), out.data(), count,
                                          ElementType::F32, axis);
        if (!status) {
          messages[rank] = status.message();
          return;
        }
        MeshGroup group = *mesh.groupOf(rank, axis);
        for (int j = 0; j < count; ++j) {
          float sum = smallInput(it, group.ranks[0], j);
          for (int k = 1; k < group.size(); ++k)
            sum += smallInput(it, group.ranks[k], j);
          wrong[rank] += out[j] != sum;
        }
      }
    });
    aborter.join();
    for (int rank = 0; rank < mesh.worldSize(); ++rank) {
      EXPECT_EQ(messages[rank], "collectives aborted: stop") << "rank " << rank;
      EXPECT_EQ(wrong[rank], 0) << "rank " << rank;
    }
  }
}

// Tests that with a timeout, a rank whose peer never comes aborts the world
// naming the collective and the missing rank, instead of hanging.
TEST(InProcessCommTest, TimeoutNamesTheMissingRanks) {
  InProcessWorld::Options options;
  options.timeout = std::chrono::milliseconds(50);
  InProcessWorld comms(parseOrDie("dp=3"), options);
  std::vector<std::string> messages(3);
  runRanks(comms, [&](int rank, Communicator &comm) {
    if (rank == 2)
      return; // Stops without calling anything (and without aborting).
    float value = 1.0f;
    Status status =
        comm.allReduceSum(&value, &value, 1, ElementType::F32, "dp");
    if (!status)
      messages[rank] = status.message();
  });
  // Whichever of ranks 0 and 1 timed out first wrote the message.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(messages[rank].find("collectives aborted: rank "),
              std::string::npos)
        << messages[rank];
    EXPECT_NE(messages[rank].find(" waited over 50 ms in all_reduce_sum #0 on "
                                  "axis 'dp' for ranks 2"),
              std::string::npos)
        << messages[rank];
  }
  EXPECT_EQ(messages[0], messages[1]);
  EXPECT_TRUE(comms.isAborted());
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

// Tests that in a world of one rank every collective is a copy (or nothing,
// for broadcast and in place), with no other thread.
TEST(InProcessCommTest, WorldOfOneCopies) {
  std::unique_ptr<InProcessWorld> world = makeWorld("dp=1");
  InProcessWorld &comms = *world;
  Communicator &comm = **comms.communicator(0);
  Bytes in = randomElements(ElementType::BF16, 33, 5);
  Bytes out(in.size(), 0);
  ASSERT_TRUE(
      comm.allReduceSum(in.data(), out.data(), 33, ElementType::BF16, "dp"));
  EXPECT_EQ(out, in);
  Bytes buffer = in;
  ASSERT_TRUE(comm.allReduceSum(buffer.data(), buffer.data(), 33,
                                ElementType::BF16, "dp"));
  EXPECT_EQ(buffer, in);
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(comm.reduceScatterSum(in.data(), out.data(), 33,
                                    ElementType::BF16, "dp"));
  EXPECT_EQ(out, in);
  std::fill(out.begin(), out.end(), 0);
  ASSERT_TRUE(
      comm.allGather(in.data(), out.data(), 33, ElementType::BF16, "dp"));
  EXPECT_EQ(out, in);
  ASSERT_TRUE(comm.broadcast(buffer.data(), 33, ElementType::BF16, "dp", 0));
  EXPECT_EQ(buffer, in);
  EXPECT_TRUE(comm.barrier());
  Status badRoot =
      comm.broadcast(buffer.data(), 33, ElementType::BF16, "dp", 1);
  ASSERT_FALSE(badRoot);
  EXPECT_EQ(badRoot.message(),
            "collective #5 on axis 'dp' (ranks 0): rank 0: broadcast root "
            "index 1 is outside the group of 1 ranks");
  // A group of one has no shift for permute: 0 < shift < 1.
  Status badShift =
      comm.permute(in.data(), out.data(), 33, ElementType::BF16, "dp", 1);
  ASSERT_FALSE(badShift);
  EXPECT_EQ(badShift.message(),
            "collective #6 on axis 'dp' (ranks 0): rank 0: permute shift 1 is "
            "outside [1, 1) for a group of 1 ranks");
}

} // namespace
