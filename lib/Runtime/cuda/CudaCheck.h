//===- CudaCheck.h - CUDA and cuBLASLt errors as Status ---------*- C++ -*-===//
//
// Part of mlt. Every CUDA runtime and cuBLASLt call of the CUDA backend goes
// through these macros, so that a failure becomes one line naming the call
// and the library's own message (never an abort), and every kernel launch is
// checked right after it is queued (cudaGetLastError).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_CUDACHECK_H
#define MLT_LIB_RUNTIME_CUDA_CUDACHECK_H

#include "mlt/Support/Status.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace mlt::cuda {

/// "cudaMalloc: out of memory" for a failed call; ok for cudaSuccess.
inline Status cudaStatus(cudaError_t error, const char *call) {
  if (error == cudaSuccess)
    return Status::ok();
  return errorf(call, ": ", cudaGetErrorString(error));
}

inline Status cublasStatus(cublasStatus_t status, const char *call) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return errorf(call, ": ", cublasLtGetStatusString(status));
}

} // namespace mlt::cuda

/// Returns the failure of a CUDA runtime call as a Status naming it.
#define MLT_CUDA_RETURN_IF_ERROR(call)                                         \
  MLT_RETURN_IF_ERROR(::mlt::cuda::cudaStatus((call), #call))

/// Returns the failure of a cuBLASLt call as a Status naming it.
#define MLT_CUBLAS_RETURN_IF_ERROR(call)                                       \
  MLT_RETURN_IF_ERROR(::mlt::cuda::cublasStatus((call), #call))

/// Checks the kernel launch just queued (configuration errors surface here;
/// errors inside the kernel surface at the next synchronization).
#define MLT_CUDA_RETURN_IF_LAUNCH_FAILED(kernelName)                           \
  MLT_RETURN_IF_ERROR(                                                         \
      ::mlt::cuda::cudaStatus(cudaGetLastError(), "launch of " kernelName))

#endif // MLT_LIB_RUNTIME_CUDA_CUDACHECK_H
