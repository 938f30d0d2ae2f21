//===- EventFileTest.cpp - TensorBoard event files ------------------------===//
//
// Part of mlt. Tests EventFile.h's encoding and Checksum.h's CRC-32C against
// published values; test/Training/tensorboard.test reads a run's event file
// back with TensorBoard's own reader.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/EventFile.h"
#include "mlt/Support/Checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

using namespace mlt;
using namespace mlt::rt;

namespace {

// Tests CRC-32C on the check value of the CRC catalogue and RFC 3720's
// (iSCSI) test vectors, beside CRC-32's check value.
TEST(Crc32cTest, MatchesPublishedValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  unsigned char bytes[32];
  std::memset(bytes, 0, sizeof bytes);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x8A9136AAu);
  std::memset(bytes, 0xFF, sizeof bytes);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i)
    bytes[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(bytes, sizeof bytes), 0x46DD794Eu);
  // Continued over two parts as over one.
  EXPECT_EQ(crc32c(bytes + 5, 27, crc32c(bytes, 5)), 0x46DD794Eu);
}

// Tests the Event protocol buffer of one scalar, byte by byte.
TEST(EventFileTest, EncodesAScalarEvent) {
  const std::string event = scalarEvent(3, 0.0, {{"a", 1.0}});
  const std::string expected(
      "\x09\0\0\0\0\0\0\0\0"     // wall_time (1, fixed64) 0.0
      "\x10\x03"                 // step (2, varint) 3
      "\x2a\x0a"                 // summary (5, 10 bytes)
      "\x0a\x08"                 //   value (1, 8 bytes)
      "\x0a\x01"
      "a"                        //     tag (1) "a"
      "\x15\x00\x00\x80\x3f",    //     simple_value (2, fixed32) 1.0f
      23);
  EXPECT_EQ(event, expected);
  // A step past 127 takes two bytes of varint.
  EXPECT_EQ(scalarEvent(300, 0.0, {}).substr(9, 3), std::string("\x10\xac\x02"));
}

// Tests a TFRecord's framing: the length, its masked CRC-32C, the record and
// its masked CRC-32C.
TEST(EventFileTest, FramesRecords) {
  const std::string record = "event";
  const std::string framed = tfRecord(record);
  ASSERT_EQ(framed.size(), 8 + 4 + record.size() + 4);
  uint64_t length = 0;
  std::memcpy(&length, framed.data(), 8);
  EXPECT_EQ(length, record.size());
  EXPECT_EQ(framed.substr(12, record.size()), record);
  auto masked = [](const std::string &bytes) {
    const uint32_t crc = crc32c(bytes.data(), bytes.size());
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  };
  uint32_t lengthCrc = 0, recordCrc = 0;
  std::memcpy(&lengthCrc, framed.data() + 8, 4);
  std::memcpy(&recordCrc, framed.data() + 12 + record.size(), 4);
  EXPECT_EQ(lengthCrc, masked(framed.substr(0, 8)));
  EXPECT_EQ(recordCrc, masked(record));
}

// Tests a writer's file: in the directory it creates, named for
// TensorBoard, starting with the version event, a step's record after it.
TEST(EventFileTest, WritesTheVersionThenEachStep) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "mlt-event-file-test";
  std::filesystem::remove_all(dir);
  StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::open(dir.string());
  ASSERT_TRUE(writer) << writer.status().message();
  ASSERT_TRUE((*writer)->scalars(1, 12.5, {{"loss", 2.5}}));
  const std::string path = (*writer)->path();
  EXPECT_NE(std::filesystem::path(path).filename().string().find(
                "events.out.tfevents."),
            std::string::npos);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  const std::string step = tfRecord(scalarEvent(1, 12.5, {{"loss", 2.5}}));
  ASSERT_GE(bytes.size(), step.size());
  EXPECT_EQ(bytes.substr(bytes.size() - step.size()), step);
  // A directory whose parent is missing is refused, in one line.
  StatusOr<std::unique_ptr<EventFileWriter>> missing =
      EventFileWriter::open((dir / "no" / "such").string());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("cannot create the directory"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

} // namespace
