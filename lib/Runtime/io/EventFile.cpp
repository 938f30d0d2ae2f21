//===- EventFile.cpp - TensorBoard event files ----------------------------===//
//
// Part of mlt. See EventFile.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/EventFile.h"

#include "mlt/Support/Checksum.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

using namespace mlt;
using namespace mlt::rt;
namespace fs = std::filesystem;

namespace {

// Protocol buffer wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                   kFixed32 = 5;

void putVarint(std::string &out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char(uint8_t(value) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}

void putKey(std::string &out, uint32_t field, uint32_t wireType) {
  putVarint(out, (uint64_t(field) << 3) | wireType);
}

template <typename T> void putLittleEndian(std::string &out, T value) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

void putBytes(std::string &out, uint32_t field, const std::string &bytes) {
  putKey(out, field, kLengthDelimited);
  putVarint(out, bytes.size());
  out += bytes;
}

// Event's fields (event.proto), Summary's and Summary.Value's (summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3,
                   kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;

std::string eventHead(double wallTime) {
  std::string event;
  putKey(event, kEventWallTime, kFixed64);
  putLittleEndian(event, wallTime);
  return event;
}

/// TFRecord's masked CRC-32C: rotated right by 15 bits, plus a constant.
uint32_t maskedCrc(const std::string &bytes) {
  const uint32_t crc = crc32c(bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

} // namespace

std::string mlt::rt::tfRecord(const std::string &record) {
  std::string length;
  putLittleEndian(length, uint64_t(record.size()));
  std::string out = length;
  putLittleEndian(out, maskedCrc(length));
  out += record;
  putLittleEndian(out, maskedCrc(record));
  return out;
}

std::string mlt::rt::scalarEvent(
    int64_t step, double wallTime,
    const std::vector<std::pair<std::string, double>> &values) {
  std::string summary;
  for (const auto &[tag, value] : values) {
    std::string entry;
    putBytes(entry, kValueTag, tag);
    putKey(entry, kValueSimpleValue, kFixed32);
    putLittleEndian(entry, float(value));
    putBytes(summary, kSummaryValue, entry);
  }
  std::string event = eventHead(wallTime);
  putKey(event, kEventStep, kVarint);
  putVarint(event, uint64_t(step));
  putBytes(event, kEventSummary, summary);
  return event;
}

StatusOr<std::unique_ptr<EventFileWriter>>
EventFileWriter::open(const std::string &dir) {
  std::error_code error;
  fs::create_directory(dir, error);
  if (error)
    return errorf(dir, ": cannot create the directory (", error.message(),
                  ")");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const double now = double(std::time(nullptr));
  const std::string path =
      (fs::path(dir) / ("events.out.tfevents." +
                        std::to_string(int64_t(now)) + "." + host + "." +
                        std::to_string(getpid()) + ".mlt"))
          .string();
  std::FILE *file = std::fopen(path.c_str(), "wb");
  if (!file)
    return errorf(path, ": cannot write the event file (",
                  std::strerror(errno), ")");
  std::unique_ptr<EventFileWriter> writer(new EventFileWriter(path, file));
  std::string version = eventHead(now);
  putBytes(version, kEventFileVersion, "brain.Event:2");
  MLT_RETURN_IF_ERROR(writer->writeRecord(version));
  return writer;
}

EventFileWriter::~EventFileWriter() { std::fclose(file_); }

Status EventFileWriter::scalars(
    int64_t step, double wallTime,
    const std::vector<std::pair<std::string, double>> &values) {
  return writeRecord(scalarEvent(step, wallTime, values));
}

Status EventFileWriter::writeRecord(const std::string &record) {
  const std::string bytes = tfRecord(record);
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() ||
      std::fflush(file_) != 0)
    return errorf(path_, ": write failed (", std::strerror(errno), ")");
  return Status::ok();
}
