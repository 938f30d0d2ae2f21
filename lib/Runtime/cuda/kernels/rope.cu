//===- rope.cu - rotary position embedding CUDA launcher ------------------===//
//
// Part of mlt. Host side of the rope family: the CPU kernel's argument
// checks, one block per token, and the choice between the 16-byte and the
// scalar path.
//
//===----------------------------------------------------------------------===//

#include "kernels/rope.h"

#include "CudaCheck.h"
#include "kernels/rope.cuh"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::rope;

namespace {

template <typename T>
rt::Status rotate(T *y, const T *x, int64_t batch, int64_t seq, int64_t heads,
                  int64_t headDim, bool inverse, int64_t positionOffset,
                  double theta, cudaStream_t stream) {
  const char *kernel = inverse ? "rope backward" : "rope";
  if (headDim <= 0 || headDim % 2 != 0)
    return rt::errorf(kernel, ": head_dim ", headDim,
                      " must be positive and even");
  if (!(theta > 0.0))
    return rt::errorf(kernel, ": theta ", theta, " must be positive");
  if (batch < 0 || seq < 0 || heads < 0)
    return rt::errorf(kernel, ": bad shape [", batch, ", ", seq, ", ", heads,
                      ", ", headDim, "]");
  const int64_t tokens = batch * seq;
  if (tokens == 0 || heads == 0)
    return rt::Status::ok();
  if (tokens > INT32_MAX)
    return rt::errorf(kernel, ": ", tokens, " tokens are more than one grid "
                                            "holds");
  const int64_t half = headDim / 2;
  const size_t shared = 2 * size_t(half) * sizeof(float);
  if (shared > 48 * 1024)
    return rt::errorf(kernel, ": head_dim ", headDim, " is too large");
  constexpr int W = Pack<T>::kWidth;
  const bool vec = half % W == 0 && isAligned16(x) && isAligned16(y);
  const double direction = inverse ? -1.0 : 1.0;
  if (vec)
    ropeKernel<T, true><<<unsigned(tokens), kThreads, shared, stream>>>(
        y, x, seq, heads, headDim, positionOffset, theta, direction);
  else
    ropeKernel<T, false><<<unsigned(tokens), kThreads, shared, stream>>>(
        y, x, seq, heads, headDim, positionOffset, theta, direction);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rope");
  return rt::Status::ok();
}

} // namespace

rt::Status mlt::cuda::launchRope(float *y, const float *x, int64_t batch,
                                 int64_t seq, int64_t heads, int64_t headDim,
                                 bool inverse, int64_t positionOffset,
                                 double theta, cudaStream_t stream) {
  return rotate(y, x, batch, seq, heads, headDim, inverse, positionOffset,
                theta, stream);
}

rt::Status mlt::cuda::launchRope(__nv_bfloat16 *y, const __nv_bfloat16 *x,
                                 int64_t batch, int64_t seq, int64_t heads,
                                 int64_t headDim, bool inverse,
                                 int64_t positionOffset, double theta,
                                 cudaStream_t stream) {
  return rotate(y, x, batch, seq, heads, headDim, inverse, positionOffset,
                theta, stream);
}
