//===- MappedFile.h - data files mapped while a run reads them --*- C++ -*-===//
//
// Part of mlt. Token files and indexed datasets are read through read-only
// mappings of the whole file, which a run keeps for its whole length. A
// file that changes under the mapping is a problem of its own kind: one
// truncated while mapped makes the next read of a page past its new end a
// SIGBUS, which killed the run without a word; one rewritten in place
// changes what the mapping reads from then on, silently.
//
// A MappedFile keeps the file open, and
//  - registers its mapping with a SIGBUS handler (installed once): a fault
//    inside a registered mapping prints "<tool>: error: <path>: changed
//    while the run reads it (truncated...)" and exits 1, in one line; a
//    fault anywhere else is the default action, as before;
//  - checkUnchanged() compares the open file's size and modification time
//    with those at opening: the trainer asks before every step, so a file
//    rewritten or truncated between steps is one line, not wrong data.
// Plain C++17 and POSIX.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_MAPPEDFILE_H
#define MLT_RUNTIME_IO_MAPPEDFILE_H

#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mlt::rt {

class MappedFile {
public:
  /// Maps the whole of `path`, which must be a regular file (an empty one
  /// maps nothing: data() is null). Errors name the file.
  static StatusOr<MappedFile> open(const std::string &path);

  MappedFile() = default;
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();

  const std::string &path() const { return path_; }
  const uint8_t *data() const { return static_cast<const uint8_t *>(mapping_); }
  size_t size() const { return size_; }

  /// Whether the file is as it was when it was opened (size and
  /// modification time); else one line naming it and what changed.
  Status checkUnchanged() const;

private:
  void release();

  std::string path_;
  int fd_ = -1;
  void *mapping_ = nullptr;
  size_t size_ = 0;
  int64_t modifiedSeconds_ = 0, modifiedNanoseconds_ = 0;
  int guardSlot_ = -1;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_MAPPEDFILE_H
