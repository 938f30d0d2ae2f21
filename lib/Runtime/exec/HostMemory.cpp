//===- HostMemory.cpp - what a run may hold in host memory ----------------===//
//
// Part of mlt. Reads the host's bounds on this process's memory from
// /proc and /sys/fs/cgroup and getrlimit, and checks a run's uses against
// the tightest (HostMemory.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/HostMemory.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include <sys/resource.h>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// The value of `key` (e.g. "MemAvailable:") in a /proc file of "key value
/// kB" lines, in bytes.
std::optional<uint64_t> procKilobytes(const char *path, const char *key) {
  std::ifstream in(path);
  std::string name;
  uint64_t kilobytes;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (fields >> name >> kilobytes && name == key)
      return kilobytes * 1024;
  }
  return std::nullopt;
}

/// A cgroup v2 file holding one number ("max": none).
std::optional<uint64_t> cgroupNumber(const std::string &path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max")
    return std::nullopt;
  try {
    return uint64_t(std::stoull(text));
  } catch (...) {
    return std::nullopt;
  }
}

/// Keeps the tighter of `best` and a bound of `available` bytes.
void tighten(std::optional<HostMemoryLimit> &best, uint64_t available,
             std::string source) {
  if (!best || available < best->availableBytes)
    best = HostMemoryLimit{available, std::move(source)};
}

/// A limit of `limit` bytes of which `used` are taken.
std::string limitOf(const char *what, uint64_t limit, uint64_t used) {
  return std::string(what) + " of " + formatBytes(limit) + ", " +
         formatBytes(used) + " of it in use";
}

} // namespace

std::optional<HostMemoryLimit> mlt::rt::hostMemoryLimit() {
  std::optional<HostMemoryLimit> best;
  if (std::optional<uint64_t> free =
          procKilobytes("/proc/meminfo", "MemAvailable:"))
    tighten(best, *free, "MemAvailable in /proc/meminfo");

  // cgroup v2: "0::/path" in /proc/self/cgroup; every cgroup up to the root
  // bounds the process.
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    if (line.rfind("0::", 0) != 0)
      continue;
    std::string path = line.substr(3);
    while (true) {
      const std::string dir = "/sys/fs/cgroup" + path;
      std::optional<uint64_t> max = cgroupNumber(dir + "/memory.max");
      std::optional<uint64_t> current = cgroupNumber(dir + "/memory.current");
      if (max && current)
        tighten(best, *max > *current ? *max - *current : 0,
                limitOf("the cgroup's memory.max", *max, *current));
      if (path.empty() || path == "/")
        break;
      const size_t slash = path.find_last_of('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
  }

  auto rlimit = [&](int resource, const char *what, const char *vmKey) {
    struct rlimit limit;
    if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
      return;
    const uint64_t used =
        procKilobytes("/proc/self/status", vmKey).value_or(0);
    const uint64_t max = uint64_t(limit.rlim_cur);
    tighten(best, max > used ? max - used : 0, limitOf(what, max, used));
  };
  rlimit(RLIMIT_AS, "the address-space limit (ulimit -v)", "VmSize:");
  rlimit(RLIMIT_DATA, "the data limit (ulimit -d)", "VmData:");
  return best;
}

Status mlt::rt::checkHostMemory(const std::vector<HostMemoryUse> &uses,
                                std::optional<HostMemoryLimit> limit) {
  if (!limit)
    limit = hostMemoryLimit();
  if (!limit)
    return Status::ok();
  uint64_t needed = 0;
  std::string parts;
  for (const HostMemoryUse &use : uses) {
    if (use.bytes == 0)
      continue;
    // (saturating: a plan's sizes may be absurd)
    needed = needed + use.bytes < needed ? UINT64_MAX : needed + use.bytes;
    parts += (parts.empty() ? "" : ", ") + use.what + " " +
             formatBytes(use.bytes);
  }
  if (needed <= limit->availableBytes)
    return Status::ok();
  return errorf("not enough host memory: the run needs ", formatBytes(needed),
                " (", parts, "), but ", formatBytes(limit->availableBytes),
                " are free (", limit->source, ")");
}
