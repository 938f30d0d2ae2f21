//===- rope.cu - rotary position embedding CUDA launcher ------------------===//
//
// Part of mlt. Host side of the rope family: the CPU kernel's argument
// checks, the block decomposition (rope.cuh's makeGeometry), the inverse
// frequencies as the CPU computes them (rt::ropeInverseFrequencies, one
// function for both), and the choice between the 16-byte and the scalar
// path.
//
//===----------------------------------------------------------------------===//

#include "kernels/rope.h"

#include "CudaCheck.h"
#include "kernels/rope.cuh"

#include <cmath>

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::rope;

namespace {

template <typename T>
Status rotate(T *y, const T *x, int64_t batch, int64_t seq, int64_t heads,
              int64_t headDim, bool inverse, const rt::SequencePositions &order,
              double theta, const rt::RopeScaling &scaling,
              cudaStream_t stream) {
  const char *kernel = inverse ? "rope backward" : "rope";
  MLT_RETURN_IF_ERROR(
      rt::checkRopeFrequencies(kernel, theta, headDim, scaling));
  if (batch < 0 || seq < 0 || heads < 0)
    return errorf(kernel, ": bad shape [", batch, ", ", seq, ", ", heads, ", ",
                  headDim, "]");
  const int64_t tokens = batch * seq;
  if (tokens == 0 || heads == 0)
    return Status::ok();
  const int64_t half = headDim / 2;
  if (half > 6144)
    return errorf(kernel, ": head_dim ", headDim, " is too large");
  if (heads > INT32_MAX / headDim)
    return errorf(kernel, ": ", heads, " heads of ", headDim,
                  " elements are more than one token may hold");
  constexpr int W = Pack<T>::kWidth;
  const bool vec = half % W == 0 && isAligned16(x) && isAligned16(y);
  const Geometry g =
      makeGeometry(batch, seq, heads, headDim, order, theta, scaling,
                   inverse, vec ? W : 1, int64_t(kThreads) * kUnits);
  if (g.blocks > INT32_MAX)
    return errorf(kernel, ": ", g.blocks,
                  " blocks are more than one grid holds");
  // The CPU kernel's inverse frequencies, bit for bit (the same function).
  InvFreqs freqs{};
  if (g.hostFreqs)
    for (int64_t i = 0; i < half; ++i)
      freqs.v[i] = rt::ropeInverseFrequency(theta, headDim, scaling, i);
  const size_t shared = tableBytes(g);
  const dim3 threads(unsigned(blockThreads(g, vec ? W : 1, kThreads, kUnits)));
  if (vec)
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(ropeKernel<T, W, kUnits>,
                                             dim3(unsigned(g.blocks)), threads,
                                             shared, stream, y, x, g, freqs));
  else
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(ropeKernel<T, 1, kUnits>,
                                             dim3(unsigned(g.blocks)), threads,
                                             shared, stream, y, x, g, freqs));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("rope");
  return Status::ok();
}

} // namespace

Status mlt::cuda::launchRope(float *y, const float *x, int64_t batch,
                             int64_t seq, int64_t heads, int64_t headDim,
                             bool inverse, const rt::SequencePositions &order, double theta,
                             const rt::RopeScaling &scaling,
                             cudaStream_t stream) {
  return rotate(y, x, batch, seq, heads, headDim, inverse, order,
                theta, scaling, stream);
}

Status mlt::cuda::launchRope(__nv_bfloat16 *y, const __nv_bfloat16 *x,
                             int64_t batch, int64_t seq, int64_t heads,
                             int64_t headDim, bool inverse,
                             const rt::SequencePositions &order, double theta,
                             const rt::RopeScaling &scaling,
                             cudaStream_t stream) {
  return rotate(y, x, batch, seq, heads, headDim, inverse, order,
                theta, scaling, stream);
}
