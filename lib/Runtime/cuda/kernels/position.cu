//===- position.cu - the device's place, written by the device ------------===//
//
// Part of mlt. The kernel and launcher of position.h.
//
//===----------------------------------------------------------------------===//

#include "kernels/position.h"

#include "CudaCheck.h"

using namespace mlt;
using namespace mlt::cuda;

namespace {

__global__ void writePositionKernel(volatile uint64_t *word, uint64_t value) {
  *word = value;
  __threadfence_system();
}

} // namespace

Status mlt::cuda::launchWritePosition(volatile uint64_t *word, uint64_t value,
                                      cudaStream_t stream) {
  writePositionKernel<<<1, 1, 0, stream>>>(word, value);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("write_position");
  return Status::ok();
}
