//===- HostMemoryTest.cpp - sizes in messages, host memory checks ---------===//
//
// Part of mlt. Tests formatBytes (FormatBytes.h) on the sizes that wrapped
// where they were ints (2^31, 2^32, 2^64 - 1), and checkHostMemory's one
// line against a given bound.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/HostMemory.h"

#include "gtest/gtest.h"

#include <cstdint>

using namespace mlt;
using namespace mlt::rt;

namespace {

TEST(HostMemoryTest, FormatsEverySize) {
  EXPECT_EQ(formatBytes(0), "0 bytes");
  EXPECT_EQ(formatBytes(1023), "1023 bytes");
  EXPECT_EQ(formatBytes(1024), "1.00 KiB");
  EXPECT_EQ(formatBytes(uint64_t(3) << 19), "1.50 MiB");
  EXPECT_EQ(formatBytes(uint64_t(1) << 31), "2.00 GiB");
  EXPECT_EQ(formatBytes(uint64_t(1) << 32), "4.00 GiB");
  EXPECT_EQ(formatBytes((uint64_t(1) << 32) + 1), "4.00 GiB");
  EXPECT_EQ(formatBytes(uint64_t(1) << 40), "1.00 TiB");
  EXPECT_EQ(formatBytes(UINT64_MAX), "16777216.00 TiB");
}

TEST(HostMemoryTest, RefusesWhatDoesNotFitNamingTheMemory) {
  const HostMemoryLimit limit{uint64_t(1) << 30, "MemAvailable in test"};
  EXPECT_TRUE(checkHostMemory({{"the arena", uint64_t(1) << 29},
                               {"OpenBLAS's buffers (2 threads)",
                                uint64_t(1) << 28}},
                              limit));
  Status status = checkHostMemory(
      {{"the arena", uint64_t(1) << 31}, {"nothing", 0},
       {"--save-hf's weights", uint64_t(3) << 20}},
      limit);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.message(),
            "not enough host memory: the run needs 2.00 GiB (the arena 2.00 "
            "GiB, --save-hf's weights 3.00 MiB), but 1.00 GiB are free "
            "(MemAvailable in test)");
  // Sizes past 2^64 saturate instead of wrapping to a small sum.
  status = checkHostMemory({{"a", UINT64_MAX}, {"b", 2}}, limit);
  ASSERT_FALSE(status);
  EXPECT_NE(status.message().find("the run needs 16777216.00 TiB"),
            std::string::npos)
      << status.message();
}

TEST(HostMemoryTest, ReadsTheHostsBound) {
  std::optional<HostMemoryLimit> limit = hostMemoryLimit();
  ASSERT_TRUE(limit) << "Linux has /proc/meminfo";
  EXPECT_GT(limit->availableBytes, 0u);
  EXPECT_FALSE(limit->source.empty());
}

} // namespace
