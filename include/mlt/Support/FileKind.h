//===- FileKind.h - what a path names, before it is opened ------*- C++ -*-===//
//
// Part of mlt. The checks every reader and writer of the runtime and the
// tools make before they open a path, so that what is not a file fails
// with one line naming what it is instead of blocking or doing harm: a
// FIFO given as an input blocks forever in open(), a device node or a
// symbolic link given as an output would be replaced, an output that is
// an input (a log written onto the data) destroys it. Header-only, plain
// POSIX: the plan library, the IO library and the tools include it
// without linking anything new.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_SUPPORT_FILEKIND_H
#define MLT_SUPPORT_FILEKIND_H

#include "mlt/Support/FormatBytes.h"
#include "mlt/Support/Status.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace mlt {

/// "a FIFO (named pipe)", "a directory", ... for what is not a regular
/// file; nullopt for a regular file.
inline std::optional<std::string> nonRegularKind(const struct stat &st) {
  if (S_ISREG(st.st_mode))
    return std::nullopt;
  if (S_ISDIR(st.st_mode))
    return "a directory";
  if (S_ISFIFO(st.st_mode))
    return "a FIFO (named pipe)";
  if (S_ISSOCK(st.st_mode))
    return "a socket";
  if (S_ISCHR(st.st_mode))
    return "a character device";
  if (S_ISBLK(st.st_mode))
    return "a block device";
  if (S_ISLNK(st.st_mode))
    return "a symbolic link";
  return "not a regular file";
}

/// Why `path` cannot be read as a file (through symbolic links), in words
/// that follow the path: "does not exist", "is a FIFO (named pipe), not a
/// file", "is a symbolic link loop"; ok for a regular file. A directory is
/// accepted where `directoryToo`.
inline Status checkInputPath(const std::string &path,
                             bool directoryToo = false) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT)
      return errorf(path, ": does not exist");
    if (error == ELOOP)
      return errorf(path, ": is a symbolic link loop");
    return errorf(path, ": cannot be read: ", std::strerror(error));
  }
  if (directoryToo && S_ISDIR(st.st_mode))
    return Status::ok();
  if (std::optional<std::string> kind = nonRegularKind(st))
    return errorf(path, ": is ", *kind, ", not a file");
  return Status::ok();
}

/// Why `path` cannot be written as a new file (`directory`: a new
/// directory) that replaces what is there: ok where nothing is there or a
/// regular file (a directory) is; else what is in the way (a device node,
/// a FIFO, a symbolic link, which the write would replace rather than
/// write through), a parent directory that does not exist, a name longer
/// than file systems allow, a directory that is the root, '.' or '..', or
/// a path under /proc, /sys or /dev.
inline Status checkOutputPath(const std::string &path,
                              bool directory = false) {
  if (path.empty())
    return errorf("an empty path");
  // Names the file system cannot hold, found now rather than at the write.
  for (size_t begin = 0; begin < path.size();) {
    size_t end = path.find('/', begin);
    if (end == std::string::npos)
      end = path.size();
    if (end - begin > 255)
      return errorf(path, ": a name of ", end - begin,
                    " bytes, longer than file systems allow (255)");
    begin = end + 1;
  }
  // Directories no run writes into: the root, '.', '..', and the kernel's
  // file systems.
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  const size_t lastSlash = trimmed.find_last_of('/');
  const std::string last =
      lastSlash == std::string::npos ? trimmed : trimmed.substr(lastSlash + 1);
  if (directory && (trimmed == "/" || last == "." || last == ".."))
    return errorf(path, ": the root directory, '.' or '..', which a run "
                        "does not write its directories into; name one of "
                        "its own");
  char resolved[PATH_MAX];
  const std::string probe =
      ::realpath(path.c_str(), resolved) ? std::string(resolved) : trimmed;
  for (const char *special : {"/proc", "/sys", "/dev"}) {
    const std::string prefix(special);
    if ((probe == prefix || probe.rfind(prefix + "/", 0) == 0) &&
        probe != "/dev/null")
      return errorf(path, ": is under ", prefix,
                    ", a file system of the kernel, not for a run's output");
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    const bool fits = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
    if (!fits) {
      std::optional<std::string> kind = nonRegularKind(st);
      return errorf(path, ": is ", kind ? *kind : std::string("a file"),
                    ", which writing ",
                    directory ? "a directory" : "a file",
                    " there would replace");
    }
    return Status::ok();
  }
  const size_t slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return errorf(path, ": the directory ", parent, " does not exist");
  return Status::ok();
}

/// The directory an output `path` is written in: itself for a directory
/// output that exists, else its parent.
inline std::string outputDirectoryOf(const std::string &path, bool directory) {
  struct stat st;
  if (directory && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return path;
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  const size_t slash = trimmed.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/"
                                                        : trimmed.substr(0, slash);
}

/// Creates and removes a file where `path` will be written (in it, for a
/// directory output that exists; beside it otherwise), named as a killed
/// write's temporaries are (".<name>.tmp-<pid>-probe", which a later write
/// removes if this one is killed between the two): a directory the run
/// cannot write is found before the first step, not at the end.
inline Status probeOutputPath(const std::string &path, bool directory) {
  const std::string dir = outputDirectoryOf(path, directory);
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/')
    trimmed.pop_back();
  const std::string name = trimmed.substr(trimmed.find_last_of('/') + 1);
  const std::string probe = dir + "/." + name.substr(0, 200) + ".tmp-" +
                            std::to_string(::getpid()) + "-probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                        0600);
  if (fd < 0)
    return errorf(path, ": cannot write in ", dir, ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  return Status::ok();
}

/// Whether the file system an output `path` is written on has `bytes`
/// free (for the user: statvfs's f_bavail); ok where it cannot be told.
inline Status checkFreeSpace(const std::string &path, bool directory,
                             uint64_t bytes, const std::string &what) {
  struct statvfs fs;
  if (::statvfs(outputDirectoryOf(path, directory).c_str(), &fs) != 0)
    return Status::ok();
  const unsigned __int128 free =
      (unsigned __int128)fs.f_bavail * (unsigned __int128)fs.f_frsize;
  if (free >= bytes)
    return Status::ok();
  return errorf(path, ": ", what, " needs about ", formatBytes(bytes),
                ", but its file system has ", formatBytes(uint64_t(free)),
                " free");
}

/// For the MLIR tools (mlt-opt, mlt-translate), before MLIR's own main
/// opens anything (its messages lack the tool's name): an input argument
/// that does not exist or names an existing path that is not a regular
/// file (a FIFO, whose open would block forever; a directory; a device) is
/// refused, as is an output (`-o PATH`, `-o=PATH`) that is a FIFO, a
/// device or a directory. `-` is standard input or output; the options in
/// `valueOptions` take the next argument as their value (`--dtype bf16`),
/// which is no path.
inline Status
checkToolArguments(int argc, char **argv,
                   std::initializer_list<const char *> valueOptions = {}) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool takesValue = false;
    for (const char *option : valueOptions)
      takesValue = takesValue || arg == option;
    if (takesValue) {
      ++i;
      continue;
    }
    std::optional<std::string> output;
    if ((arg == "-o" || arg == "--o") && i + 1 < argc)
      output = argv[++i];
    else if (arg.rfind("-o=", 0) == 0 || arg.rfind("--o=", 0) == 0)
      output = arg.substr(arg.find('=') + 1);
    const std::string path = output ? *output : arg;
    if (path.empty() || path == "-" || (!output && path[0] == '-'))
      continue;
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      if (!output)
        return checkInputPath(path);
      continue;
    }
    if (output && (S_ISREG(st.st_mode) || path == "/dev/null"))
      continue;
    if (std::optional<std::string> kind = nonRegularKind(st))
      return errorf(path, ": is ", *kind, ", not a file");
  }
  return Status::ok();
}

/// Whether two existing paths name one file (through symbolic links).
inline bool sameFile(const std::string &a, const std::string &b) {
  struct stat x, y;
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 &&
         x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

} // namespace mlt

#endif // MLT_SUPPORT_FILEKIND_H
