//===- MappedFile.cpp - data files mapped while a run reads them ----------===//
//
// Part of mlt. MappedFile.h: the mapping, the check of the open file, and
// the SIGBUS guard. The guard's table is fixed-size and lock-free, so that
// the handler reads it without locks or allocation: each slot holds an
// address range and the message made when the file was mapped.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/MappedFile.h"

#include "mlt/Support/FileKind.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

using namespace mlt;
using namespace mlt::rt;

extern "C" char *program_invocation_short_name; // (glibc)

namespace {

/// A mapping the SIGBUS handler knows, and what it says of it. The
/// message lives in the slot (no allocation: nothing to free, nothing for a
/// leak checker to find, and nothing a handler could see freed).
struct GuardedRange {
  /// 0: free; 1: taken by a mapping.
  std::atomic<int> taken{0};
  /// The mapping's bytes, published once the message is written (0 and 0:
  /// none).
  std::atomic<uintptr_t> begin{0}, end{0};
  size_t length = 0;
  /// "<tool>: error: <path>: changed while the run reads it ...\n".
  char message[PATH_MAX + 256];
};

/// Mappings held at once: a blend's datasets, each its .idx and .bin.
constexpr int kGuardSlots = 64;
GuardedRange guarded[kGuardSlots];
std::once_flag handlerInstalled;
struct sigaction previousAction;

void onBusError(int signal, siginfo_t *info, void *context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardedRange &range : guarded) {
    if (address >= range.begin.load() && address < range.end.load()) {
      // (write and _exit: what a signal handler may call)
      ssize_t ignored = ::write(STDERR_FILENO, range.message, range.length);
      (void)ignored;
      ::_exit(1);
    }
  }
  // Not a mapping of a data file: what would have happened without us.
  if (previousAction.sa_flags & SA_SIGINFO) {
    if (previousAction.sa_sigaction) {
      previousAction.sa_sigaction(signal, info, context);
      return;
    }
  } else if (previousAction.sa_handler != SIG_DFL &&
             previousAction.sa_handler != SIG_IGN) {
    previousAction.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

/// Registers a mapping; the slot, or -1 when the table is full (the
/// mapping then faults as before).
int guard(const void *mapping, size_t size, const std::string &path) {
  std::call_once(handlerInstalled, [] {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = onBusError;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &previousAction);
  });
  const char *tool = program_invocation_short_name
                         ? program_invocation_short_name
                         : "mlt";
  const std::string message =
      std::string(tool) + ": error: " + printableText(path) +
      ": changed while the run reads it (truncated: a read past its new "
      "end); a data file must stay as it is while a run trains on it\n";
  for (int slot = 0; slot < kGuardSlots; ++slot) {
    int untaken = 0;
    if (!guarded[slot].taken.compare_exchange_strong(untaken, 1))
      continue;
    GuardedRange &range = guarded[slot];
    range.length = std::min(message.size(), sizeof(range.message));
    std::memcpy(range.message, message.data(), range.length);
    range.end = reinterpret_cast<uintptr_t>(mapping) + size;
    range.begin = reinterpret_cast<uintptr_t>(mapping);
    return slot;
  }
  return -1;
}

void unguard(int slot) {
  if (slot < 0)
    return;
  guarded[slot].begin = 0;
  guarded[slot].end = 0;
  guarded[slot].taken = 0;
}

} // namespace

StatusOr<MappedFile> MappedFile::open(const std::string &path) {
  MLT_RETURN_IF_ERROR(checkInputPath(path));
  // (O_NONBLOCK: a FIFO put in place after the check opens at once, to be
  // refused below, rather than blocking until a writer comes)
  MappedFile file;
  file.path_ = path;
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd_ < 0)
    return errorf(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(file.fd_, &st) != 0)
    return errorf(path, ": cannot stat: ", std::strerror(errno));
  if (std::optional<std::string> kind = nonRegularKind(st))
    return errorf(path, ": is ", *kind, ", not a file");
  file.size_ = size_t(st.st_size);
  file.modifiedSeconds_ = int64_t(st.st_mtim.tv_sec);
  file.modifiedNanoseconds_ = int64_t(st.st_mtim.tv_nsec);
  if (file.size_ > 0) {
    void *mapping =
        ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, file.fd_, 0);
    if (mapping == MAP_FAILED)
      return errorf(path, ": cannot map: ", std::strerror(errno));
    file.mapping_ = mapping;
    file.guardSlot_ = guard(mapping, file.size_, path);
  }
  return file;
}

MappedFile::MappedFile(MappedFile &&other) noexcept {
  *this = std::move(other);
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    mapping_ = std::exchange(other.mapping_, nullptr);
    size_ = std::exchange(other.size_, 0);
    modifiedSeconds_ = other.modifiedSeconds_;
    modifiedNanoseconds_ = other.modifiedNanoseconds_;
    guardSlot_ = std::exchange(other.guardSlot_, -1);
  }
  return *this;
}

MappedFile::~MappedFile() { release(); }

void MappedFile::release() {
  unguard(std::exchange(guardSlot_, -1));
  if (mapping_)
    ::munmap(std::exchange(mapping_, nullptr), size_);
  if (fd_ >= 0)
    ::close(std::exchange(fd_, -1));
}

Status MappedFile::checkUnchanged() const {
  if (fd_ < 0)
    return Status::ok();
  struct stat st;
  if (::fstat(fd_, &st) != 0)
    return errorf(path_, ": cannot stat: ", std::strerror(errno));
  if (uint64_t(st.st_size) != uint64_t(size_))
    return errorf(path_, ": changed while the run reads it (", st.st_size,
                  " bytes, ", size_, " when it was opened); a data file must ",
                  "stay as it is while a run trains on it");
  if (int64_t(st.st_mtim.tv_sec) != modifiedSeconds_ ||
      int64_t(st.st_mtim.tv_nsec) != modifiedNanoseconds_)
    return errorf(path_, ": changed while the run reads it (written since ",
                  "it was opened); a data file must stay as it is while a ",
                  "run trains on it");
  return Status::ok();
}
