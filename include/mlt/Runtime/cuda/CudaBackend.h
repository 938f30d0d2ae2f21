//===- CudaBackend.h - the CUDA backend -------------------------*- C++ -*-===//
//
// Part of mlt. The CUDA backend runs a rank's instructions on one GPU: its
// arena is one cudaMalloc, its launches are queued on the context's compute
// stream in program order (no host synchronization inside a program), and
// `synchronize` waits for them and reports both CUDA errors and the data
// errors kernels found (token ids outside the vocabulary, ...). Only in
// builds with MLT_ENABLE_CUDA (the library MLTRuntimeCUDA; users test
// MLT_HAVE_CUDA where they may be built without it).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CUDABACKEND_H
#define MLT_RUNTIME_CUDABACKEND_H

#include "mlt/Runtime/exec/Backend.h"

#include <memory>
#include <string>

namespace mlt::rt {

/// Choices of the CUDA backend that are not the plan's (mlt-run's flags).
struct CudaBackendOptions {
  /// A table of tuned cuBLASLt algorithms to run the products with
  /// (--matmul-algorithms; mlt/Runtime/io/MatmulTable.h), or
  /// empty.
  std::string matmulAlgorithms;
  /// Time cuBLASLt's candidates for every product shape the table lacks,
  /// on its first run, and write the fastest into the table
  /// (--tune-matmuls).
  bool tuneMatmuls = false;
};

/// The CUDA backend. Each instruction computes in f32 (fp32 parity mode: no
/// TF32); cast, transpose and shard_slice move any type. A context serves one
/// rank on one device: a single-rank plan runs on device 0; a rank whose
/// communicator is a CudaCommunicator (NcclCommunicator.h: one process per
/// GPU, under mpirun) runs on that communicator's device, and its
/// collectives go through NCCL on a communication stream; a plan of N ranks
/// run as threads of one process runs rank r on device r (and fails to
/// create its contexts when fewer devices are visible), but cannot launch
/// collectives. Setting MLT_CUDA_SYNC_EACH_LAUNCH=1 synchronizes after every
/// launch, so that a fault inside a kernel is reported against its
/// instruction.
std::unique_ptr<Backend> createCudaBackend(CudaBackendOptions options = {});

/// The number of CUDA devices this process sees; fails with one line, "no
/// CUDA device is visible (cudaGetDeviceCount: ...)", when there is none
/// or the driver cannot be reached.
Status probeCudaDevices(int &count);

} // namespace mlt::rt

#endif // MLT_RUNTIME_CUDABACKEND_H
