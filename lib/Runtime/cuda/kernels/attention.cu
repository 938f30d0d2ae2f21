//===- attention.cu - flash attention CUDA launchers ----------------------===//
//
// Part of mlt. Host side of the attention family: the CPU kernels' argument
// checks, the head-dim bucket, the shared-memory opt-in of the larger tiles
// and the grids.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention.h"

#include "CudaCheck.h"
#include "kernels/attention.cuh"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::attn;

static_assert(kBwdBr == kBwdBc, "dk/dv are staged in the query tiles");

namespace {

/// The CPU kernels' check, then the CUDA kernels' own limits.
rt::Status checkShape(const char *kernel, const AttentionShape &p) {
  MLT_RETURN_IF_ERROR(cpu::checkAttentionParams(kernel, p));
  if (p.headDim > kMaxAttentionHeadDim)
    return rt::errorf(kernel, ": head_dim ", p.headDim,
                      " is larger than the CUDA kernels' ",
                      kMaxAttentionHeadDim);
  if (p.qHeads > 65535 || p.batch > 65535 || p.seq > INT32_MAX / 2)
    return rt::errorf(kernel, ": shape too large for the CUDA grid (batch ",
                      p.batch, ", seq ", p.seq, ", q heads ", p.qHeads, ")");
  return rt::Status::ok();
}

template <typename... Ptrs> bool allAligned16(const Ptrs *...ptrs) {
  return (isAligned16(ptrs) && ...);
}

/// Opts the kernel into `bytes` of dynamic shared memory (above the default
/// 48 KiB) and checks the device has them.
template <typename Kernel>
rt::Status allowShared(Kernel kernel, size_t bytes, const char *name) {
  if (bytes <= 48 * 1024)
    return rt::Status::ok();
  int device = 0, limit = 0;
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  MLT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (size_t(limit) < bytes)
    return rt::errorf(name, ": needs ", bytes,
                      " bytes of shared memory per block, the device has ",
                      limit);
  MLT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return rt::Status::ok();
}

template <int D>
rt::Status forward(float *out, float *lse, const float *q, const float *k,
                   const float *v, const AttentionShape &p,
                   cudaStream_t stream) {
  const size_t shared = fwdSharedBytes<D>();
  MLT_RETURN_IF_ERROR(
      allowShared(attentionFwdKernel<D>, shared, "attention_fwd"));
  const bool vec = p.headDim % 4 == 0 && allAligned16(out, q, k, v);
  const dim3 grid(unsigned((p.seq + kFwdBr - 1) / kFwdBr), unsigned(p.qHeads),
                  unsigned(p.batch));
  attentionFwdKernel<D><<<grid, kThreads, shared, stream>>>(
      out, lse, q, k, v, int(p.seq), int(p.qHeads), int(p.kvHeads),
      int(p.headDim), p.causal, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_fwd");
  return rt::Status::ok();
}

template <int D>
rt::Status backward(float *dq, float *dk, float *dv, const float *dout,
                    const float *q, const float *k, const float *v,
                    const float *out, const float *lse, float *delta,
                    const AttentionShape &p, cudaStream_t stream) {
  const size_t dqShared = dqSharedBytes<D>(), dkdvShared = dkdvSharedBytes<D>();
  MLT_RETURN_IF_ERROR(allowShared(attentionBwdDqKernel<D>, dqShared,
                                  "attention_bwd (dq)"));
  MLT_RETURN_IF_ERROR(allowShared(attentionBwdDkDvKernel<D>, dkdvShared,
                                  "attention_bwd (dk, dv)"));
  const bool vec =
      p.headDim % 4 == 0 && allAligned16(dq, dk, dv, dout, q, k, v);

  const int64_t rows = p.batch * p.seq * p.qHeads;
  const int64_t deltaBlocks = (rows + 7) / 8; // 8 warps of 256 threads
  attentionDeltaKernel<<<unsigned(deltaBlocks < 65536 ? deltaBlocks : 65536),
                         256, 0, stream>>>(delta, dout, out, rows, int(p.seq),
                                           int(p.qHeads), int(p.headDim));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_bwd (delta)");

  const dim3 dqGrid(unsigned((p.seq + kTileRows - 1) / kTileRows),
                    unsigned(p.qHeads), unsigned(p.batch));
  attentionBwdDqKernel<D><<<dqGrid, kThreads, dqShared, stream>>>(
      dq, dout, q, k, v, lse, delta, int(p.seq), int(p.qHeads),
      int(p.kvHeads), int(p.headDim), p.causal, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_bwd (dq)");

  const dim3 dkdvGrid(unsigned((p.seq + kBwdBc - 1) / kBwdBc),
                      unsigned(p.kvHeads), unsigned(p.batch));
  attentionBwdDkDvKernel<D><<<dkdvGrid, kThreads, dkdvShared, stream>>>(
      dk, dv, dout, q, k, v, lse, delta, int(p.seq), int(p.qHeads),
      int(p.kvHeads), int(p.headDim), p.causal, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_bwd (dk, dv)");
  return rt::Status::ok();
}

} // namespace

rt::Status mlt::cuda::launchAttentionFwd(float *out, float *lse,
                                         const float *q, const float *k,
                                         const float *v,
                                         const AttentionShape &shape,
                                         cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("attention", shape));
  if (shape.headDim <= 32)
    return forward<32>(out, lse, q, k, v, shape, stream);
  if (shape.headDim <= 64)
    return forward<64>(out, lse, q, k, v, shape, stream);
  return forward<128>(out, lse, q, k, v, shape, stream);
}

size_t mlt::cuda::attentionBwdScratchBytes(const AttentionShape &shape) {
  if (shape.batch <= 0 || shape.seq <= 0 || shape.qHeads <= 0)
    return 0;
  return size_t(shape.batch) * size_t(shape.qHeads) * size_t(shape.seq) *
         sizeof(float);
}

rt::Status mlt::cuda::launchAttentionBwd(
    float *dq, float *dk, float *dv, const float *dout, const float *q,
    const float *k, const float *v, const float *out, const float *lse,
    const AttentionShape &shape, void *scratch, size_t scratchBytes,
    cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("attention backward", shape));
  const size_t needed = attentionBwdScratchBytes(shape);
  if (!scratch || scratchBytes < needed)
    return rt::errorf("attention backward: ", scratchBytes,
                      " bytes of scratch given, ", needed, " needed");
  float *delta = static_cast<float *>(scratch);
  if (shape.headDim <= 32)
    return backward<32>(dq, dk, dv, dout, q, k, v, out, lse, delta, shape,
                        stream);
  if (shape.headDim <= 64)
    return backward<64>(dq, dk, dv, dout, q, k, v, out, lse, delta, shape,
                        stream);
  return backward<128>(dq, dk, dv, dout, q, k, v, out, lse, delta, shape,
                       stream);
}
