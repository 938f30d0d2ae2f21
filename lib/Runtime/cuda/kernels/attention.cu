//===- attention.cu - flash attention CUDA launchers ----------------------===//
//
// Part of mlt. Host side of the attention family: the CPU kernels' argument
// checks, the head-dim bucket, the shared-memory opt-in of the larger tiles
// and the grids; for bf16, the tensor-core kernels' configurations (chosen by
// measurement, bench/attention-notes.md), their alignment checks and the
// layout of the backward's scratch.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention.h"

#include "CudaCheck.h"
#include "kernels/attention.cuh"
#include "kernels/rope.h"

using namespace mlt;
using namespace mlt::cuda;
using namespace mlt::cuda::attn;

static_assert(kBwdBr == kBwdBc, "dk/dv are staged in the query tiles");

namespace {

/// Whether row r of the queries and of the keys is position r, with as many
/// keys as queries (not a context-parallel rank's block).
bool naturalOrder(const AttentionShape &p) {
  return p.keyRows() == p.seq && p.queries.isIdentity() && p.keys.isIdentity();
}

/// The CPU kernels' check, then the CUDA kernels' own limits.
Status checkShape(const char *kernel, const AttentionShape &p) {
  MLT_RETURN_IF_ERROR(cpu::checkAttentionParams(kernel, p));
  if (p.headDim > kMaxAttentionHeadDim)
    return errorf(kernel, ": head_dim ", p.headDim,
                  " is larger than the CUDA kernels' ", kMaxAttentionHeadDim);
  if (p.qHeads > 65535 || p.batch > 65535 || p.seq > INT32_MAX / 2 ||
      p.keyRows() > INT32_MAX / 2)
    return errorf(kernel, ": shape too large for the CUDA grid (batch ",
                  p.batch, ", seq ", p.seq, ", q heads ", p.qHeads, ")");
  return Status::ok();
}

template <typename... Ptrs> bool allAligned16(const Ptrs *...ptrs) {
  return (isAligned16(ptrs) && ...);
}

/// Opts the kernel into `bytes` of dynamic shared memory (above the default
/// 48 KiB) and checks the device has them.
template <typename Kernel>
Status allowShared(Kernel kernel, size_t bytes, const char *name) {
  if (bytes <= 48 * 1024)
    return Status::ok();
  int device = 0, limit = 0;
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  MLT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (size_t(limit) < bytes)
    return errorf(name, ": needs ", bytes,
                  " bytes of shared memory per block, the device has ", limit);
  MLT_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return Status::ok();
}

template <int D>
Status forward(float *out, float *lse, const float *q, const float *k,
               const float *v, const AttentionShape &p, cudaStream_t stream) {
  const size_t shared = fwdSharedBytes<D>();
  MLT_RETURN_IF_ERROR(
      allowShared(attentionFwdKernel<D>, shared, "attention_fwd"));
  const bool vec = p.headDim % 4 == 0 && allAligned16(out, q, k, v);
  const dim3 grid(unsigned((p.seq + kFwdBr - 1) / kFwdBr), unsigned(p.qHeads),
                  unsigned(p.batch));
  attentionFwdKernel<D><<<grid, kThreads, shared, stream>>>(
      out, lse, q, k, v, int(p.seq), int(p.keyRows()), int(p.qHeads),
      int(p.kvHeads), int(p.headDim), p.causal, naturalOrder(p), p.queries,
      p.keys, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_fwd");
  return Status::ok();
}

template <int D>
Status backward(float *dq, float *dk, float *dv, const float *dout,
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
      dq, dout, q, k, v, lse, delta, int(p.seq), int(p.keyRows()),
      int(p.qHeads), int(p.kvHeads), int(p.headDim), p.causal,
      naturalOrder(p), p.queries, p.keys, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_bwd (dq)");

  const dim3 dkdvGrid(unsigned((p.keyRows() + kBwdBc - 1) / kBwdBc),
                      unsigned(p.kvHeads), unsigned(p.batch));
  attentionBwdDkDvKernel<D><<<dkdvGrid, kThreads, dkdvShared, stream>>>(
      dk, dv, dout, q, k, v, lse, delta, int(p.seq), int(p.keyRows()),
      int(p.qHeads), int(p.kvHeads), int(p.headDim), p.causal,
      naturalOrder(p), p.queries, p.keys, float(p.scale), vec);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_bwd (dk, dv)");
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// bf16 tensor-core path
//===----------------------------------------------------------------------===//

/// The configurations of the tensor-core kernels for head_dim 64 and 128:
/// the fastest of those bench/attention_bench.cu measured on an H100
/// (bench/attention-notes.md, run 2).
struct Tc64 {
  using Fwd = tc::FwdConfig<64, 1, 64, 4>;
  using Dq = tc::DqConfig<64, 1, 64, 3>;
  using DkDv = tc::DkDvConfig<64, 1, 64, true, 2>;
};
struct Tc128 {
  using Fwd = tc::FwdConfig<128, 1, 64, 2>;
  using Dq = tc::DqConfig<128, 1, 64, 2>;
  using DkDv = tc::DkDvConfig<128, 1, 64, false, 2>;
};

/// The wgmma (sm_90a) kernels' configurations, the fastest measured
/// (bench/attention-notes.md, v5), and for each head dim whether the
/// launchers use them where they can run (kFwd, kBwd: they are faster than
/// the mma.sync kernels at both head dims). The forward without the
/// in-warpgroup overlap (PIPE) and without polynomial exponentials (POLY):
/// both measured slower with 4 blocks per multiprocessor.
struct Wg64 {
  using Fwd = tc::WgFwdConfig<64, 64, 4, false, 0>;
  using Dq = tc::WgDqConfig<64, 64, 2>;
  using DkDv = tc::WgDkDvConfig<64, 128, 1>;
  using FwdWs = tc::WsFwdConfig<64, 128, 2>;
  static constexpr bool kFwd = true, kBwd = true, kFwdWs = false;
};
/// At head_dim 128 the dq kernel's own statistics pass (FUSED) costs more
/// than the delta kernel it replaces (its extra out tile leaves one block
/// per multiprocessor instead of two), and LLaMA-style shapes (as many kv
/// heads as query heads) have no parts to reduce.
///
/// kFwdWs: the forward is the warp-specialized one (attention_ws.cuh) with
/// FwdWs's configuration where the scale is positive.
struct Wg128 {
  using Fwd = tc::WgFwdConfig<128, 64, 2, false>;
  using Dq = tc::WgDqConfig<128, 64, 1, false>;
  using DkDv = tc::WgDkDvConfig<128, 64, 1, false>;
  using FwdWs = tc::WsFwdConfig<128, 128, 2, true>;
  static constexpr bool kFwd = true, kBwd = true, kFwdWs = true;
};
/// The backward at head_dim 128 with the warp-specialized dq kernel
/// (attention_ws.cuh, q and dout in registers; 0.285 against 0.40 ms at
/// LLaMA-7B's shape on an H200) beside the wgmma dk/dv kernel (the
/// warp-specialized one measured slower: 0.60 against 0.54 ms).
struct Ws128 {
  using Dq = tc::WsDqConfig<128, 64, 4, true>;
  using DkDv = Wg128::DkDv;
  static constexpr bool kBwd = true;
};
/// dkdvParts prices blocks of the mma.sync and wgmma kernels' BC keys; the
/// warp-specialized dk/dv kernel (128 keys a block) takes the same parts
/// (a function of the shape only).
static_assert(Wg64::DkDv::BC == Tc64::DkDv::BC &&
                  Wg128::DkDv::BC == Tc128::DkDv::BC,
              "dkdvParts serves both families");

/// Whether the wgmma kernels can run on the current device: the library was
/// built for sm_90a (MLT_CUDA_WGMMA, set by the CMake build) and the device
/// is compute capability 9.0 (the only one sm_90a code runs on).
Status wgmmaUsable(bool &usable) {
  usable = false;
#if MLT_CUDA_WGMMA
  int device = 0, major = 0, minor = 0;
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  MLT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &major, cudaDevAttrComputeCapabilityMajor, device));
  MLT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &minor, cudaDevAttrComputeCapabilityMinor, device));
  usable = major == 9 && minor == 0;
#endif
  return Status::ok();
}

/// The dk/dv kernel splits a kv head's group of query heads over `parts`
/// blocks when the grid would otherwise be too small to fill the device and
/// balance the causal blocks' unequal work: the smallest divisor of the group
/// that reaches kDkDvTargetBlocks blocks (or the whole group). A function of
/// the shape only, so that results are the same on every device.
constexpr int64_t kDkDvTargetBlocks = 2048;
int64_t dkdvParts(const AttentionShape &p) {
  const int64_t bc = p.headDim == 64 ? Tc64::DkDv::BC : Tc128::DkDv::BC;
  const int64_t base = (p.seq + bc - 1) / bc * p.kvHeads * p.batch;
  const int64_t group = p.qHeads / p.kvHeads;
  for (int64_t parts = 1; parts < group; ++parts)
    if (group % parts == 0 && base * parts >= kDkDvTargetBlocks)
      return parts;
  return group;
}

/// The backward's scratch, in order: the row statistics (negLse2 and delta,
/// batch * qHeads * seq f32 each, rounded up to 256 bytes), the wgmma dk/dv
/// kernel's part counters (batch * kvHeads * ceil(seq / 64) ints, rounded up
/// to 256 bytes), then with parts > 1 the f32 partial dk and dv (parts *
/// batch * seq * kvHeads * headDim each).
struct TcScratch {
  size_t statBytes = 0, counterBytes = 0, partFloats = 0;
  int64_t parts = 1;
  size_t total() const {
    return statBytes + counterBytes + 2 * partFloats * sizeof(float);
  }
};
TcScratch tcScratch(const AttentionShape &p) {
  TcScratch s;
  s.statBytes = (2 * size_t(p.batch) * size_t(p.qHeads) * size_t(p.seq) *
                     sizeof(float) +
                 255) /
                256 * 256;
  s.counterBytes = (size_t(p.batch) * size_t(p.kvHeads) *
                        size_t((p.seq + 63) / 64) * sizeof(int) +
                    255) /
                   256 * 256;
  s.parts = dkdvParts(p);
  if (s.parts > 1)
    s.partFloats = size_t(s.parts) * size_t(p.batch) * size_t(p.seq) *
                   size_t(p.kvHeads) * size_t(p.headDim);
  return s;
}

bool tcHeadDim(int64_t headDim) { return headDim == 64 || headDim == 128; }

/// checkShape, then the tensor-core kernels' own limits: head_dim 64 or 128
/// and every bf16 tensor 16-byte aligned (16-byte cp.async and stores).
template <typename... Ptrs>
Status checkTc(const char *kernel, const AttentionShape &p,
               const Ptrs *...ptrs) {
  MLT_RETURN_IF_ERROR(checkShape(kernel, p));
  if (!naturalOrder(p))
    return errorf(kernel, ": the bf16 tensor-core kernels take no "
                          "context-parallel positions (the f32 kernels do)");
  if (!tcHeadDim(p.headDim))
    return errorf(kernel, ": head_dim ", p.headDim,
                  " is not supported by the bf16 tensor-core kernels "
                  "(64 and 128 are)");
  if (!allAligned16(ptrs...))
    return errorf(kernel, ": bf16 q, k, v, out (and the gradients) must be "
                          "16-byte aligned");
  return Status::ok();
}

/// The kernels' view of `amax` (null: none wanted), each pointer zeroed
/// first (the kernels merge into it) and marked taken, except dq's and dk's
/// when `rotatedAfter` (rope's launches rotate them after the kernels: the
/// caller takes their amax after the launch).
StatusOr<tc::AmaxOutputs> kernelAmax(AttentionAmax *amax, cudaStream_t stream,
                                     bool rotatedAfter = false) {
  tc::AmaxOutputs bits;
  if (!amax)
    return bits;
  float *zeroed[3] = {nullptr, nullptr, nullptr};
  for (int i = rotatedAfter ? 2 : 0; i < 3; ++i) {
    if (!amax->of[i])
      continue;
    zeroed[i] = amax->of[i];
    bits.bits[i] = amaxBits(amax->of[i]);
    amax->taken[i] = true;
  }
  MLT_CUDA_RETURN_IF_ERROR(
      zeroAmaxes({zeroed[0], zeroed[1], zeroed[2]}, stream));
  return bits;
}

template <class Cfg, bool WG>
Status forwardTc(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                 const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                 const AttentionShape &p, cudaStream_t stream,
                 const tc::AmaxOutputs &amax) {
  // allowShared first: its error names the shortfall.
  if constexpr (WG)
    MLT_RETURN_IF_ERROR(allowShared(tc::attentionFwdWgKernel<Cfg>,
                                    Cfg::kShared, "attention_fwd (bf16)"));
  else
    MLT_RETURN_IF_ERROR(allowShared(tc::attentionFwdTcKernel<Cfg>,
                                    Cfg::kShared, "attention_fwd (bf16)"));
  const cudaError_t err = tc::enqueueForward<Cfg, WG>(
      out, lse, q, k, v, int(p.batch), int(p.seq), int(p.qHeads),
      int(p.kvHeads), p.causal, float(p.scale), stream, amax);
  MLT_CUDA_RETURN_IF_ERROR(err);
  return Status::ok();
}

template <class Cfg>
Status forwardWs(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *q,
                 const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                 const AttentionShape &p, cudaStream_t stream,
                 const tc::AmaxOutputs &amax) {
  MLT_RETURN_IF_ERROR(allowShared(tc::attentionFwdWsKernel<Cfg>, Cfg::kShared,
                                  "attention_fwd (bf16)"));
  const cudaError_t err = tc::enqueueForwardWs<Cfg>(
      out, lse, q, k, v, int(p.batch), int(p.seq), int(p.qHeads),
      int(p.kvHeads), p.causal, float(p.scale), stream, amax);
  MLT_CUDA_RETURN_IF_ERROR(err);
  return Status::ok();
}

template <class Tc, bool WG>
Status backwardTc(__nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
                  const __nv_bfloat16 *dout, const __nv_bfloat16 *q,
                  const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                  const __nv_bfloat16 *out, const float *lse, void *scratch,
                  const TcScratch &layout, const AttentionShape &p,
                  const tc::RopeEpilogue &rope, cudaStream_t stream,
                  const tc::AmaxOutputs &amax) {
  if constexpr (WG) {
    using Dq = typename Tc::Dq;
    using DkDv = typename Tc::DkDv;
    if constexpr (tc::IsWsDq<Dq>::value)
      MLT_RETURN_IF_ERROR(allowShared(tc::attentionBwdDqWsKernel<Dq>,
                                      Dq::kShared, "attention_bwd (bf16 dq)"));
    else
      MLT_RETURN_IF_ERROR(allowShared(tc::attentionBwdDqWgKernel<Dq>,
                                      Dq::kShared, "attention_bwd (bf16 dq)"));
    if constexpr (tc::IsWsDkDv<DkDv>::value)
      MLT_RETURN_IF_ERROR(allowShared(tc::attentionBwdDkDvWsKernel<DkDv>,
                                      DkDv::kShared,
                                      "attention_bwd (bf16 dk, dv)"));
    else
      MLT_RETURN_IF_ERROR(allowShared(tc::attentionBwdDkDvWgKernel<DkDv>,
                                      DkDv::kShared,
                                      "attention_bwd (bf16 dk, dv)"));
  } else {
    MLT_RETURN_IF_ERROR(
        allowShared(tc::attentionBwdDqTcKernel<typename Tc::Dq>,
                    Tc::Dq::kShared, "attention_bwd (bf16 dq)"));
    MLT_RETURN_IF_ERROR(
        allowShared(tc::attentionBwdDkDvTcKernel<typename Tc::DkDv>,
                    Tc::DkDv::kShared, "attention_bwd (bf16 dk, dv)"));
  }
  char *base = static_cast<char *>(scratch);
  float *stats = reinterpret_cast<float *>(base);
  int *counters = reinterpret_cast<int *>(base + layout.statBytes);
  float *dkPart = reinterpret_cast<float *>(base + layout.statBytes +
                                            layout.counterBytes);
  float *dvPart = dkPart + layout.partFloats;
  const char *failed = "attention_bwd (bf16)";
  const cudaError_t err =
      tc::enqueueBackward<typename Tc::Dq, typename Tc::DkDv, WG>(
          dq, dk, dv, dout, q, k, v, out, lse, stats, dkPart, dvPart,
          int(layout.parts), int(p.batch), int(p.seq), int(p.qHeads),
          int(p.kvHeads), p.causal, float(p.scale), stream, &failed, counters,
          rope, amax);
  if (err != cudaSuccess)
    return errorf("launch of ", failed, ": ", cudaGetErrorString(err));
  return Status::ok();
}

} // namespace

Status mlt::cuda::launchAttentionFwd(float *out, float *lse, const float *q,
                                     const float *k, const float *v,
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
  if (shape.batch <= 0 || shape.seq <= 0 || shape.qHeads <= 0 ||
      shape.kvHeads <= 0 || shape.qHeads % shape.kvHeads != 0)
    return 0;
  // The f32 kernels need delta only; the bf16 ones may need partial dk/dv
  // too. One size serves both (the backend does not say which it runs).
  if (tcHeadDim(shape.headDim))
    return tcScratch(shape).total();
  return size_t(shape.batch) * size_t(shape.qHeads) * size_t(shape.seq) *
         sizeof(float);
}

namespace {

/// rope's inverse on dq and dk in place (the launches a fused backward
/// stands for, where the kernels have no epilogue for it).
template <typename T>
Status rotateGradientsBack(T *dq, T *dk, const AttentionShape &p,
                           const AttentionRope &rope, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(launchRope(dq, dq, p.batch, p.seq, p.qHeads, p.headDim,
                                 true, rope.positionOffset, rope.theta,
                                 rope.scaling, stream));
  return launchRope(dk, dk, p.batch, p.seq, p.kvHeads, p.headDim, true,
                    rope.positionOffset, rope.theta, rope.scaling, stream);
}

} // namespace

Status mlt::cuda::launchAttentionBwd(float *dq, float *dk, float *dv,
                                     const float *dout, const float *q,
                                     const float *k, const float *v,
                                     const float *out, const float *lse,
                                     const AttentionShape &shape, void *scratch,
                                     size_t scratchBytes, cudaStream_t stream,
                                     const AttentionRope *rope) {
  MLT_RETURN_IF_ERROR(launchAttentionBwd(dq, dk, dv, dout, q, k, v, out, lse,
                                         shape, scratch, scratchBytes, stream));
  return rope ? rotateGradientsBack(dq, dk, shape, *rope, stream)
              : Status::ok();
}

Status mlt::cuda::launchAttentionBwd(float *dq, float *dk, float *dv,
                                     const float *dout, const float *q,
                                     const float *k, const float *v,
                                     const float *out, const float *lse,
                                     const AttentionShape &shape, void *scratch,
                                     size_t scratchBytes, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("attention backward", shape));
  // delta only (attentionBwdScratchBytes may ask more, for the bf16 path).
  const size_t needed = size_t(shape.batch) * size_t(shape.qHeads) *
                        size_t(shape.seq) * sizeof(float);
  if (!scratch || scratchBytes < needed)
    return errorf("attention backward: ", scratchBytes,
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

Status mlt::cuda::launchAttentionFwd(__nv_bfloat16 *out, float *lse,
                                     const __nv_bfloat16 *q,
                                     const __nv_bfloat16 *k,
                                     const __nv_bfloat16 *v,
                                     const AttentionShape &shape,
                                     cudaStream_t stream,
                                     AttentionAmax *amax) {
  MLT_RETURN_IF_ERROR(checkTc("attention (bf16)", shape, out, q, k, v));
  bool wg = false;
  MLT_RETURN_IF_ERROR(wgmmaUsable(wg));
  StatusOr<tc::AmaxOutputs> bits = kernelAmax(amax, stream);
  if (!bits)
    return bits.takeStatus();
  const tc::AmaxOutputs &a = *bits;
  // The warp-specialized forward takes positive scales only.
  const bool ws = wg && shape.scale > 0;
  if (shape.headDim == 64) {
    if (ws && Wg64::kFwdWs)
      return forwardWs<Wg64::FwdWs>(out, lse, q, k, v, shape, stream, a);
    return wg && Wg64::kFwd
               ? forwardTc<Wg64::Fwd, true>(out, lse, q, k, v, shape, stream,
                                            a)
               : forwardTc<Tc64::Fwd, false>(out, lse, q, k, v, shape, stream,
                                             a);
  }
  if (ws && Wg128::kFwdWs)
    return forwardWs<Wg128::FwdWs>(out, lse, q, k, v, shape, stream, a);
  return wg && Wg128::kFwd
             ? forwardTc<Wg128::Fwd, true>(out, lse, q, k, v, shape, stream, a)
             : forwardTc<Tc128::Fwd, false>(out, lse, q, k, v, shape, stream,
                                            a);
}

Status mlt::cuda::launchAttentionBwd(
    __nv_bfloat16 *dq, __nv_bfloat16 *dk, __nv_bfloat16 *dv,
    const __nv_bfloat16 *dout, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
    const __nv_bfloat16 *v, const __nv_bfloat16 *out, const float *lse,
    const AttentionShape &shape, void *scratch, size_t scratchBytes,
    cudaStream_t stream, const AttentionRope *rope, AttentionAmax *amax) {
  MLT_RETURN_IF_ERROR(checkTc("attention backward (bf16)", shape, dq, dk, dv,
                              dout, q, k, v, out));
  const TcScratch layout = tcScratch(shape);
  if (!scratch || scratchBytes < layout.total())
    return errorf("attention backward (bf16): ", scratchBytes,
                  " bytes of scratch given, ", layout.total(), " needed");
  if (!isAligned16(scratch))
    return errorf("attention backward (bf16): scratch must be 16-byte "
                  "aligned");
  bool wg = false;
  MLT_RETURN_IF_ERROR(wgmmaUsable(wg));
  const bool fused = wg && (shape.headDim == 64 ? Wg64::kBwd : Wg128::kBwd);
  // The wgmma kernels rotate dq and dk before they write them; the others
  // are followed by rope's launches.
  tc::RopeEpilogue epilogue{};
  if (rope) {
    MLT_RETURN_IF_ERROR(
        rt::checkRopeFrequencies("attention backward (bf16, rope)", rope->theta,
                                 shape.headDim, rope->scaling));
    if (fused) {
      if (rope->positionOffset < 0 ||
          rope->positionOffset + shape.seq > (int64_t(1) << 24))
        return errorf("attention backward (bf16, rope): positions from ",
                      rope->positionOffset, " to ",
                      rope->positionOffset + shape.seq,
                      " are past the kernels' 2^24");
      for (int64_t i = 0; i < shape.headDim / 2; ++i) {
        const double f = rt::ropeInverseFrequency(rope->theta, shape.headDim,
                                                  rope->scaling, i);
        epilogue.invFreqHi[i] = float(f);
        epilogue.invFreqLo[i] = float(f - double(epilogue.invFreqHi[i]));
      }
      epilogue.positionOffset = rope->positionOffset;
      epilogue.enabled = 1;
    }
  }
  // Where rope's launches rotate dq and dk after the kernels, their amaxes
  // are left to the caller.
  const bool rotatedAfter = rope && !fused;
  StatusOr<tc::AmaxOutputs> bits = kernelAmax(amax, stream, rotatedAfter);
  if (!bits)
    return bits.takeStatus();
  const tc::AmaxOutputs &a = *bits;
  auto backward = [&]() -> Status {
    if (shape.headDim == 64)
      return fused ? backwardTc<Wg64, true>(dq, dk, dv, dout, q, k, v, out, lse,
                                            scratch, layout, shape, epilogue,
                                            stream, a)
                   : backwardTc<Tc64, false>(dq, dk, dv, dout, q, k, v, out,
                                             lse, scratch, layout, shape,
                                             epilogue, stream, a);
    if (fused && Ws128::kBwd)
      return backwardTc<Ws128, true>(dq, dk, dv, dout, q, k, v, out, lse,
                                     scratch, layout, shape, epilogue, stream,
                                     a);
    return fused ? backwardTc<Wg128, true>(dq, dk, dv, dout, q, k, v, out, lse,
                                           scratch, layout, shape, epilogue,
                                           stream, a)
                 : backwardTc<Tc128, false>(dq, dk, dv, dout, q, k, v, out, lse,
                                            scratch, layout, shape, epilogue,
                                            stream, a);
  };
  MLT_RETURN_IF_ERROR(backward());
  if (!rotatedAfter)
    return Status::ok();
  return rotateGradientsBack(dq, dk, shape, *rope, stream);
}
