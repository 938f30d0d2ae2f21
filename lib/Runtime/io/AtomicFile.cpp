//===- AtomicFile.cpp - whole files written or not at all -----------------===//
//
// Part of mlt. See AtomicFile.h.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/io/AtomicFile.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

using namespace mlt;
using namespace mlt::rt;

Status mlt::rt::writeFileAtomically(const std::string &path,
                                    const std::string &bytes) {
  std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      return errorf(path, ": cannot write (", std::strerror(errno), ")");
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    if (!out) {
      std::remove(temporary.c_str());
      return errorf(path, ": write failed");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    return errorf(path, ": cannot write (", reason, ")");
  }
  return Status::ok();
}
