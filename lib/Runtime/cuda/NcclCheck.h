//===- NcclCheck.h - NCCL errors as Status ----------------------*- C++ -*-===//
//
// Part of mlt. Every NCCL call of the runtime goes through these macros, so
// that a failure becomes one line naming the call, NCCL's error string and
// its last-error message (which says what went wrong: "Duplicate GPU
// detected", a socket error, ...), and where in mlt's source the call is,
// never an abort. `ncclInProgress` is not an error here: the runtime's
// communicators are blocking, and asynchronous errors are read with
// ncclCommGetAsyncError (NcclCommunicator.h).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_NCCLCHECK_H
#define MLT_LIB_RUNTIME_CUDA_NCCLCHECK_H

#include "mlt/Support/Status.h"

#include <nccl.h>

#include <cstring>
#include <string>

namespace mlt::cuda {

/// The file name of `path`, for messages.
inline const char *sourceFileName(const char *path) {
  const char *slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/// "ncclAllReduce: unhandled cuda error (NCCL: ...) [NcclCommunicator.cpp:42]"
/// for a failed call; ok for ncclSuccess and ncclInProgress.
inline Status ncclStatus(ncclResult_t result, const char *call,
                         const char *file, int line) {
  if (result == ncclSuccess || result == ncclInProgress)
    return Status::ok();
  // The function's name, without its arguments.
  std::string name(call, std::strcspn(call, "( "));
  std::string detail;
  if (const char *last = ncclGetLastError(nullptr); last && *last)
    detail = std::string(" (NCCL: ") + last + ")";
  return errorf(name, ": ", ncclGetErrorString(result), detail, " [",
                sourceFileName(file), ":", line, "]");
}

} // namespace mlt::cuda

/// Returns the failure of a NCCL call as a Status naming it and its place.
#define MLT_NCCL_RETURN_IF_ERROR(call)                                         \
  MLT_RETURN_IF_ERROR(                                                         \
      ::mlt::cuda::ncclStatus((call), #call, __FILE__, __LINE__))

/// The Status of a NCCL call (for callers that clean up before returning).
#define MLT_NCCL_STATUS(call)                                                  \
  ::mlt::cuda::ncclStatus((call), #call, __FILE__, __LINE__)

#endif // MLT_LIB_RUNTIME_CUDA_NCCLCHECK_H
