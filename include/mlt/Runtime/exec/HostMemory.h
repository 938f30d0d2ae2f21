//===- HostMemory.h - what a run may hold in host memory --------*- C++ -*-===//
//
// Part of mlt. A run that asks the host for more memory than it has does not
// fail cleanly: calloc of an arena succeeds lazily and the kernel's OOM
// killer ends the run later, std::bad_alloc aborts, and OpenBLAS retries a
// buffer it cannot allocate for ever (a worker thread spinning, which the
// process's exit then waits for). So mlt-run adds up what a run will hold
// before it allocates any of it (checkHostMemory) and refuses, naming the
// memory, what cannot fit: in the host's free memory, the cgroup's limit, or
// the process's address-space and data limits, whichever is tightest.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_EXEC_HOSTMEMORY_H
#define MLT_RUNTIME_EXEC_HOSTMEMORY_H

#include "mlt/Support/FormatBytes.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlt::rt {

/// The host memory this process may still take, and what bounds it.
struct HostMemoryLimit {
  uint64_t availableBytes = 0;
  /// What the bound is, for messages: "MemAvailable in /proc/meminfo",
  /// "the address-space limit (ulimit -v) of 1.50 GiB, 420.00 MiB of it in
  /// use", "the cgroup's memory.max of 2.00 GiB, 1.20 GiB of it in use".
  std::string source;
};

/// The tightest of the bounds this host gives (Linux: MemAvailable in
/// /proc/meminfo; cgroup v2's memory.max less memory.current, for the
/// process's cgroup and those above it; RLIMIT_AS less the process's
/// VmSize; RLIMIT_DATA less its VmData); nullopt when none can be read.
std::optional<HostMemoryLimit> hostMemoryLimit();

/// One thing a run will hold in host memory.
struct HostMemoryUse {
  /// "the arena", "OpenBLAS's buffers (2 threads)".
  std::string what;
  uint64_t bytes = 0;
};

/// Ok when `uses` together fit in `limit` (hostMemoryLimit() when not
/// given; no known limit: ok); else one line naming the memory: "not
/// enough host memory: the run needs 1.31 GiB (the arena 1.06 GiB,
/// OpenBLAS's buffers (2 threads) 256.01 MiB), but 718.00 MiB are free (the
/// address-space limit (ulimit -v) of 1.46 GiB, 775.00 MiB of it in use)".
Status checkHostMemory(const std::vector<HostMemoryUse> &uses,
                       std::optional<HostMemoryLimit> limit = std::nullopt);

} // namespace mlt::rt

#endif // MLT_RUNTIME_EXEC_HOSTMEMORY_H
