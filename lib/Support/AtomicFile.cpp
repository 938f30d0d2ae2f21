//===- AtomicFile.cpp - whole files written or not at all -----------------===//
//
// Part of mlt. See AtomicFile.h. Files are written through POSIX descriptors
// rather than streams: fsync needs the descriptor, and close's own error (a
// delayed write error on some file systems) must reach the caller.
//
//===----------------------------------------------------------------------===//

#include "mlt/Support/AtomicFile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

using namespace mlt;

namespace fs = std::filesystem;

namespace {

std::string errnoText() { return std::strerror(errno); }

/// Writes all `size` bytes at `data` to `fd` (retrying short writes and
/// interrupted calls).
Status writeAll(int fd, const void *data, size_t size,
                const std::string &path) {
  auto bytes = static_cast<const uint8_t *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, bytes, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errorf(path, ": write failed: ", errnoText());
    bytes += n;
    size -= size_t(n);
  }
  return Status::ok();
}

/// Creates the file `path`, which must not exist, with what `contents`
/// appends, flushed to the disk and closed.
Status
writeNewFile(const std::string &path,
             const std::function<Status(const AppendBytes &append)> &contents) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    return errorf(path, ": cannot create: ", errnoText());
  Status written = contents([&](const void *data, size_t size) {
    return writeAll(fd, data, size, path);
  });
  // The data must be on the disk before a rename makes the file visible.
  if (written.isOk() && ::fsync(fd) != 0)
    written = errorf(path, ": fsync failed: ", errnoText());
  if (::close(fd) != 0 && written.isOk())
    written = errorf(path, ": close failed: ", errnoText());
  return written;
}

} // namespace

Status mlt::writeFileAtomicallyWith(
    const std::string &path,
    const std::function<Status(const AppendBytes &append)> &contents) {
  const fs::path target(path);
  const fs::path temporary =
      target.parent_path() /
      ("." + target.filename().string() + ".tmp-" + temporarySuffix());
  Status written = writeNewFile(temporary.string(), contents);
  if (written.isOk() && ::rename(temporary.c_str(), path.c_str()) != 0)
    written = errorf("cannot rename ", temporary.string(), " to ", path, ": ",
                     errnoText());
  if (!written.isOk()) {
    ::unlink(temporary.c_str());
    return written;
  }
  syncDirectory(target.parent_path().string());
  return Status::ok();
}

Status mlt::writeFileAtomically(const std::string &path,
                                const std::string &bytes) {
  return writeFileAtomicallyWith(path, [&](const AppendBytes &append) {
    return append(bytes.data(), bytes.size());
  });
}

Status mlt::writeDurably(const std::string &path, const std::string &bytes) {
  return writeNewFile(path, [&](const AppendBytes &append) {
    return append(bytes.data(), bytes.size());
  });
}

void mlt::syncDirectory(const std::string &dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

std::string mlt::temporarySuffix() {
  std::random_device rd;
  std::ostringstream os;
  os << ::getpid() << '-' << std::hex << rd() << rd();
  return os.str();
}
