//===- QuantizationReuseTest.cpp - tests of shareQuantizations ------------===//
//
// Part of mlt. shareQuantizations on a layer's forward and backward (one
// quantization of the normalized input for q, k and v, another, transposed,
// for their weight gradients), after a write of the source and at a
// barrier, and on random programs against the naive reference
// (checkSharing: every request looks back).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/QuantizationReuse.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt::analysis;

namespace {

// Forms: the amax, the plain e4m3 copy, the transposed e4m3 copy.
constexpr uint64_t kAmax = 0, kPlain = 1, kTransposed = 2;

TEST(QuantizationReuseTest, OneCopyForTheLayersProducts) {
  // Buffers: 1 x (the normalized input), 2/3/4 the weights, 5/6/7 q, k, v,
  // 8 an unrelated launch's output, 9 dW_q.
  const std::vector<QuantizeItem> items = {
      {{5}, false, {{1, kAmax}, {1, kPlain}, {2, kAmax}, {2, kPlain}}}, // q
      {{6}, false, {{1, kAmax}, {1, kPlain}, {3, kAmax}, {3, kPlain}}}, // k
      {{8}, false, {}}, // a rope, say
      {{7}, false, {{1, kAmax}, {1, kPlain}, {4, kAmax}, {4, kPlain}}}, // v
      {{9}, false, {{1, kAmax}, {1, kTransposed}}}, // dW_q reads x^T
  };
  const auto origins = shareQuantizations(items);
  EXPECT_EQ(checkSharing(items, origins), "");
  // k and v read q's copy of x and its amax; their weights are their own.
  EXPECT_EQ(origins[1][1], (RequestRef{0, 1}));
  EXPECT_EQ(origins[3][0], (RequestRef{0, 0}));
  EXPECT_EQ(origins[3][1], (RequestRef{0, 1}));
  EXPECT_EQ(origins[1][3], (RequestRef{1, 3}));
  // The transposed copy is new, but its amax is the first one.
  EXPECT_EQ(origins[4][0], (RequestRef{0, 0}));
  EXPECT_EQ(origins[4][1], (RequestRef{4, 1}));
}

TEST(QuantizationReuseTest, WritesAndBarriersMakeNewCopies) {
  const std::vector<QuantizeItem> items = {
      {{5}, false, {{1, kPlain}}},
      {{1}, false, {}},            // writes the source
      {{6}, false, {{1, kPlain}}}, // a new copy
      {{7}, true, {}},             // a barrier
      {{8}, false, {{1, kPlain}}}, // a new copy
      {{1}, false, {{1, kPlain}}}, // reuses, then writes its source
      {{9}, false, {{1, kPlain}}}, // a new copy
  };
  const auto origins = shareQuantizations(items);
  EXPECT_EQ(checkSharing(items, origins), "");
  EXPECT_EQ(origins[2][0], (RequestRef{2, 0}));
  EXPECT_EQ(origins[4][0], (RequestRef{4, 0}));
  EXPECT_EQ(origins[5][0], (RequestRef{4, 0}));
  EXPECT_EQ(origins[6][0], (RequestRef{6, 0}));
}

TEST(QuantizationReuseTest, CheckSharingFindsAWrongOrigin) {
  const std::vector<QuantizeItem> items = {
      {{5}, false, {{1, kPlain}}},
      {{1}, false, {}},
      {{6}, false, {{1, kPlain}}},
  };
  auto origins = shareQuantizations(items);
  origins[2][0] = {0, 0}; // reads a copy made stale by item 1
  EXPECT_NE(checkSharing(items, origins), "");
}

TEST(QuantizationReuseTest, RandomProgramsMatchTheNaiveReference) {
  std::mt19937 rng(41);
  for (int program = 0; program < 500; ++program) {
    std::uniform_int_distribution<int> count(1, 40), buffers(0, 7), forms(0, 2),
        requests(0, 4), writes(0, 2), coin(0, 9);
    std::vector<QuantizeItem> items(count(rng));
    for (QuantizeItem &item : items) {
      item.barrier = coin(rng) == 0;
      for (int w = writes(rng); w > 0; --w)
        item.writes.push_back(buffers(rng));
      for (int r = requests(rng); r > 0; --r)
        item.requests.push_back({buffers(rng), uint64_t(forms(rng))});
    }
    const auto origins = shareQuantizations(items);
    ASSERT_EQ(checkSharing(items, origins), "") << "program " << program;
  }
}

} // namespace
