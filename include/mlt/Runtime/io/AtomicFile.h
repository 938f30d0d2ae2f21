//===- AtomicFile.h - whole files written or not at all ---------*- C++ -*-===//
//
// Part of mlt. Output files that readers must never see half written (plans,
// traces, tuned matmul tables): the bytes go to a temporary file beside the
// path, which is then renamed over it, so the path holds the old file or
// the new one. Plain C++17 and POSIX.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_IO_ATOMICFILE_H
#define MLT_RUNTIME_IO_ATOMICFILE_H

#include "mlt/Runtime/Status.h"

#include <string>

namespace mlt::rt {

/// Writes `bytes` to `path` through a temporary file (`path`.tmp.PID)
/// renamed over it; on failure the temporary is removed and the error
/// names the path.
Status writeFileAtomically(const std::string &path, const std::string &bytes);

} // namespace mlt::rt

#endif // MLT_RUNTIME_IO_ATOMICFILE_H
