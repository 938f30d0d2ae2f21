//===- ContentHashTest.cpp - XXH3 content hashes ---------------------------===//
//
// Part of mlt. The hashes checkpoints carry are xxHash's XXH3-64 (seed 0):
// the values of xxHash's own tool, hashing in pieces equals hashing whole,
// and the 16-digit text round-trips.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/ContentHash.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

using namespace mlt;

namespace {

TEST(ContentHashTest, IsXXH3) {
  // `printf abc | xxhsum -H3` and `printf '' | xxhsum -H3`.
  EXPECT_EQ(formatContentHash(contentHash("abc", 3)), "78af5f94892f3950");
  EXPECT_EQ(formatContentHash(contentHash("", 0)), "2d06800538d394c2");
}

TEST(ContentHashTest, PiecesHashAsTheWhole) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint8_t> bytes(rng() % 5000);
    for (uint8_t &byte : bytes)
      byte = uint8_t(rng());
    ContentHasher hasher;
    for (size_t at = 0; at < bytes.size();) {
      const size_t piece = std::min<size_t>(rng() % 700, bytes.size() - at);
      hasher.update(bytes.data() + at, piece);
      at += piece;
    }
    EXPECT_EQ(hasher.digest(), contentHash(bytes.data(), bytes.size()));
  }
}

TEST(ContentHashTest, TextRoundTrips) {
  EXPECT_EQ(parseContentHash("00000000000000ff"), uint64_t(255));
  EXPECT_EQ(parseContentHash(formatContentHash(0x8000000000000001ULL)),
            uint64_t(0x8000000000000001ULL));
  for (const char *bad : {"", "ff", "00000000000000FF", "00000000000000fg",
                          "000000000000000ff"})
    EXPECT_FALSE(parseContentHash(bad)) << bad;
}

} // namespace
