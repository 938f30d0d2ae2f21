//===- AtomicFile.h - whole files written or not at all ---------*- C++ -*-===//
//
// Part of mlt. Output files that readers must never see half written, nor
// lose to a crash once they were reported written (plans, traces, tuned
// matmul tables, safetensors files, a checkpoint's `latest`): the bytes go to
// a new temporary file beside the path, which is flushed to the disk (fsync)
// and closed, then renamed over the path, and the directory is flushed so
// that the rename lasts too. The path holds the old file or the new one,
// whole. Every such file of mlt is written here, and the helpers of the
// directories written the same way (a checkpoint's files, flushed, then the
// directory renamed into place) are the ones below. Plain C++17 and POSIX.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_ATOMICFILE_H
#define MLT_SUPPORT_ATOMICFILE_H

#include "mlt/Support/Status.h"

#include <cstddef>
#include <functional>
#include <string>

namespace mlt {

/// Appends `size` bytes at `data` to the file being written.
using AppendBytes = std::function<Status(const void *data, size_t size)>;

/// Writes `path` whole or not at all: `contents` appends the file's bytes,
/// in as many pieces as it likes (a file larger than memory), to a new
/// temporary file beside `path` (".<name>.tmp-<temporarySuffix>"), which is
/// flushed to the disk, closed and renamed over `path`; the directory is
/// flushed after the rename. On any failure, of `contents` or of the file
/// system, the temporary is removed, `path` is left as it was, and the error
/// (`contents`'s own, or one naming the file) comes back.
Status writeFileAtomicallyWith(
    const std::string &path,
    const std::function<Status(const AppendBytes &append)> &contents);

/// writeFileAtomicallyWith of the bytes `bytes`.
Status writeFileAtomically(const std::string &path, const std::string &bytes);

/// Creates the file `path` (which must not exist) holding `bytes`, flushed to
/// the disk: a file of a directory that is renamed into place whole.
Status writeDurably(const std::string &path, const std::string &bytes);

/// Flushes a directory's entries (the effect of a rename) to disk; best
/// effort, since not every file system supports it. An empty `dir` is the
/// working directory.
void syncDirectory(const std::string &dir);

/// "<pid>-<random hex>": what makes the name of a temporary file or
/// directory unique. Several processes (ranks) may write beside the same
/// target at once, so the pid alone is not enough; the pid leads, so that
/// what a killed writer left can be told from a living one's.
std::string temporarySuffix();

} // namespace mlt

#endif // MLT_SUPPORT_ATOMICFILE_H
