//===- EventFile.h - TensorBoard event files (--tensorboard) ----*- C++ -*-===//
//
// Part of mlt. The scalars of a run written as TensorBoard reads them: an
// event file (events.out.tfevents.<seconds>.<host>.mlt) in a directory,
// holding TFRecords (a little-endian 64-bit length, its masked CRC-32C, the
// record, its masked CRC-32C), each an `Event` protocol buffer
// (tensorflow/core/util/event.proto): first one naming the file's version
// ("brain.Event:2"), then one per step with its wall time, step and a
// `Summary` of tagged simple values. The few fields it writes are encoded
// here (varints, fixed 32- and 64-bit words, length-delimited fields): a
// protobuf library and TensorFlow's schemas would be far more than that.
// TensorBoard's own reader (EventAccumulator) reads the files back in
// test/Training/tensorboard.test. A resumed run writes a new file beside the
// old ones, which TensorBoard reads as one run.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_EVENTFILE_H
#define MLT_RUNTIME_IO_EVENTFILE_H

#include "mlt/Support/Status.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mlt::rt {

class EventFileWriter {
public:
  /// Creates `dir` where missing (its parent must exist) and a new event
  /// file in it, which it starts with the version event.
  static StatusOr<std::unique_ptr<EventFileWriter>>
  open(const std::string &dir);
  ~EventFileWriter();

  /// Writes one event of `step` at `wallTime` (seconds since the epoch)
  /// holding the scalars `values` (tag, value), and flushes it: a killed
  /// run's file holds every step written.
  Status scalars(int64_t step, double wallTime,
                 const std::vector<std::pair<std::string, double>> &values);

  /// The event file's path.
  const std::string &path() const { return path_; }

private:
  EventFileWriter(std::string path, std::FILE *file)
      : path_(std::move(path)), file_(file) {}
  Status writeRecord(const std::string &record);

  std::string path_;
  std::FILE *file_;
};

/// The bytes of one TFRecord framing `record`, and of an `Event` protocol
/// buffer: exposed for the tests.
std::string tfRecord(const std::string &record);
std::string scalarEvent(int64_t step, double wallTime,
                        const std::vector<std::pair<std::string, double>> &values);

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_EVENTFILE_H
