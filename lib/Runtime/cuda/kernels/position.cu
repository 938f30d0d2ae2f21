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

__global__ void writePositionKernel(volatile uint64_t *word, uint64_t value,
                                    volatile uint64_t *clock, bool leaving) {
  if (clock) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (leaving)
      clock[1] = clock[1] + (now - clock[0]);
    else
      clock[0] = now;
  }
  *word = value;
  __threadfence_system();
}

} // namespace

Status mlt::cuda::launchWritePosition(volatile uint64_t *word, uint64_t value,
                                      volatile uint64_t *clock, bool leaving,
                                      cudaStream_t stream) {
  writePositionKernel<<<1, 1, 0, stream>>>(word, value, clock, leaving);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("write_position");
  return Status::ok();
}
