//===- attention.cuh - flash attention CUDA kernels ------------*- CUDA -*-===//
//
// Part of mlt. Device code of the attention family (launchers in
// attention.cu, declared in attention.h), one header per kernel family:
// attention_common.cuh (the family, the invariants every kernel keeps and
// the tensor-core building blocks), attention_f32.cuh (f32 on CUDA cores),
// attention_mma.cuh (bf16 on mma.sync) and attention_wgmma.cuh (bf16 on
// wgmma, sm_90a). Here, for the launchers and bench/attention_bench.cu: the
// host templates that queue the bf16 forward and backward of either
// tensor-core family in a given configuration.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH

#include "kernels/attention_common.cuh"
#include "kernels/attention_f32.cuh"
#include "kernels/attention_mma.cuh"
#include "kernels/attention_wgmma.cuh"
#include "kernels/attention_ws.cuh"

namespace mlt::cuda::attn {

namespace tc {

#ifdef __CUDACC__

/// Queues the bf16 forward with configuration Cfg (after raising the
/// kernel's dynamic shared-memory limit). Shapes were checked by the caller.
/// Threads of a block of Cfg's kernel: the wgmma configurations say (one
/// or two warpgroups), the mma.sync kernels take kTcThreads.
template <class Cfg, bool WG> constexpr int blockThreads() {
  if constexpr (WG)
    return Cfg::kThreads;
  else
    return kTcThreads;
}

/// With amax.bits[0], out's amax merged into it (zeroed by the caller).
template <class Cfg, bool WG = false>
cudaError_t enqueueForward(bf16 *out, float *lse, const bf16 *q,
                           const bf16 *k, const bf16 *v, int batch, int seq,
                           int qHeads, int kvHeads, bool causal, float scale,
                           cudaStream_t stream,
                           const AmaxOutputs &amax = AmaxOutputs{}) {
  auto *kernel = [] {
    if constexpr (WG)
      return attentionFwdWgKernel<Cfg>;
    else
      return attentionFwdTcKernel<Cfg>;
  }();
  cudaError_t err = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Cfg::kShared));
  if (err != cudaSuccess)
    return err;
  const dim3 grid(unsigned((seq + Cfg::BR - 1) / Cfg::BR), unsigned(qHeads),
                  unsigned(batch));
  kernel<<<grid, blockThreads<Cfg, WG>(), Cfg::kShared, stream>>>(
      out, lse, q, k, v, seq, qHeads, kvHeads, causal,
      scale * 1.4426950408889634f, amax);
  return cudaGetLastError();
}

/// Queues the bf16 backward: the statistics into `stats` (negLse2 then
/// delta, each [batch, qHeads, seq] f32), dq, then dk/dv over `parts`
/// blocks per kv head (parts divides qHeads / kvHeads; with parts > 1,
/// dkPart and dvPart each hold parts * batch * seq * kvHeads * D floats)
/// and, then, their reduction. WG: the wgmma kernels; with a FUSED dq
/// configuration the dq kernel computes the statistics (no delta kernel),
/// with a REDUCE dk/dv one the dk/dv kernel reduces the parts itself
/// (partCounters: batch * kvHeads * ceil(seq / 64) ints, zeroed by the dq
/// kernel). With `rope` enabled (WG only: the mma.sync kernels have no
/// such epilogue) dq and dk are rotated by rope's inverse before they are
/// written. With amax.bits[0], [1] and [2], dq's, dk's and dv's amaxes
/// merged into them (zeroed by the caller). Returns the first launch error
/// and the name of the kernel it came from.
/// One tensor of [batch][seq][columns] bf16 and the rows of its boxes.
struct TileMapSpec {
  const bf16 *base;
  int64_t columns;
  int boxRows;
};
/// The tensor maps of the warp-specialized kernels' operands (tma.cuh).
template <int N>
cudaError_t encodeTileMaps(CUtensorMap (&maps)[N],
                           const TileMapSpec (&specs)[N], int batch, int seq) {
  for (int i = 0; i < N; ++i) {
    const cudaError_t err =
        tma::encodeBf16TileMap(&maps[i], specs[i].base, batch, seq,
                               specs[i].columns, specs[i].boxRows);
    if (err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

/// The warp-specialized forward (attention_ws.cuh): the tensor maps of q,
/// k and v, then the launch. scale must be positive.
template <class Cfg>
cudaError_t enqueueForwardWs(bf16 *out, float *lse, const bf16 *q,
                             const bf16 *k, const bf16 *v, int batch, int seq,
                             int qHeads, int kvHeads, bool causal, float scale,
                             cudaStream_t stream,
                             const AmaxOutputs &amax = AmaxOutputs{}) {
  const int64_t qCols = int64_t(qHeads) * Cfg::D,
                kvCols = int64_t(kvHeads) * Cfg::D;
  CUtensorMap maps[3];
  cudaError_t err = encodeTileMaps(
      maps, {{q, qCols, Cfg::BR}, {k, kvCols, Cfg::BC}, {v, kvCols, Cfg::BC}},
      batch, seq);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(attentionFwdWsKernel<Cfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(Cfg::kShared));
  if (err != cudaSuccess)
    return err;
  const dim3 grid(unsigned((seq + Cfg::BR - 1) / Cfg::BR), unsigned(qHeads),
                  unsigned(batch));
  attentionFwdWsKernel<Cfg><<<grid, Cfg::kThreads, Cfg::kShared, stream>>>(
      out, lse, maps[0], maps[1], maps[2], seq, qHeads, kvHeads, causal,
      scale * 1.4426950408889634f, amax);
  return cudaGetLastError();
}

template <class DqCfg, class DkDvCfg, bool WG = false>
cudaError_t enqueueBackward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                            const bf16 *q, const bf16 *k, const bf16 *v,
                            const bf16 *out, const float *lse, float *stats,
                            float *dkPart, float *dvPart, int parts, int batch,
                            int seq, int qHeads, int kvHeads, bool causal,
                            float scale, cudaStream_t stream,
                            const char **failed, int *partCounters = nullptr,
                            const RopeEpilogue &rope = RopeEpilogue{},
                            const AmaxOutputs &amax = AmaxOutputs{}) {
  static_assert(DqCfg::D == DkDvCfg::D, "one head dim");
  constexpr bool kFused = [] {
    if constexpr (WG)
      return DqCfg::FUSED;
    else
      return false;
  }();
  constexpr bool kReduce = [] {
    if constexpr (WG)
      return DkDvCfg::REDUCE;
    else
      return false;
  }();
  static_assert(!kReduce || kFused, "the fused dq kernel zeroes the counters");
  constexpr int D = DqCfg::D;
  const float scaleLog2 = scale * 1.4426950408889634f;
  cudaError_t err = cudaSuccess;
  auto check = [&](const char *name) {
    if (err == cudaSuccess)
      err = cudaGetLastError();
    if (err != cudaSuccess)
      *failed = name;
    return err == cudaSuccess;
  };

  const int64_t rows = int64_t(batch) * seq * qHeads;
  float *negLse2 = stats, *delta = stats + rows;
  // (the warp-specialized kernels' tensor maps)
  [[maybe_unused]] const int64_t qCols = int64_t(qHeads) * D,
                                 kvCols = int64_t(kvHeads) * D;
  if (!kFused) {
    const int64_t deltaThreads = rows * (D / 8);
    attentionDeltaTcKernel<D><<<unsigned((deltaThreads + 255) / 256), 256, 0,
                                stream>>>(delta, negLse2, dout, out, lse, rows,
                                          seq, qHeads);
    if (!check("attention_bwd (bf16 delta)"))
      return err;
  }

  const dim3 dqGrid(unsigned((seq + DqCfg::BR - 1) / DqCfg::BR),
                    unsigned(qHeads), unsigned(batch));
  if constexpr (IsWsDq<DqCfg>::value) {
    CUtensorMap maps[4];
    err = encodeTileMaps(maps,
                         {{q, qCols, DqCfg::BR},
                          {dout, qCols, DqCfg::BR},
                          {k, kvCols, DqCfg::BC},
                          {v, kvCols, DqCfg::BC}},
                         batch, seq);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(attentionBwdDqWsKernel<DqCfg>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(DqCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDqWsKernel<DqCfg>
          <<<dqGrid, DqCfg::kThreads, DqCfg::kShared, stream>>>(
              dq, negLse2, delta, maps[0], maps[1], maps[2], maps[3], seq, qHeads,
              kvHeads, causal, scale, scaleLog2, rope, amax);
  } else if constexpr (WG) {
    err = cudaFuncSetAttribute(attentionBwdDqWgKernel<DqCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DqCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDqWgKernel<DqCfg>
          <<<dqGrid, DqCfg::kThreads, DqCfg::kShared, stream>>>(
              dq, dout, q, k, v, out, lse, negLse2, delta, partCounters, seq,
              qHeads, kvHeads, causal, scale, scaleLog2, rope, amax);
  } else {
    err = cudaFuncSetAttribute(attentionBwdDqTcKernel<DqCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DqCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDqTcKernel<DqCfg>
          <<<dqGrid, kTcThreads, DqCfg::kShared, stream>>>(
              dq, dout, q, k, v, negLse2, delta, seq, qHeads, kvHeads, causal,
              scale, scaleLog2, amax);
  }
  if (!check("attention_bwd (bf16 dq)"))
    return err;

  const dim3 dkdvGrid(unsigned((seq + DkDvCfg::BC - 1) / DkDvCfg::BC),
                      unsigned(kvHeads * parts), unsigned(batch));
  if constexpr (IsWsDkDv<DkDvCfg>::value) {
    CUtensorMap maps[4];
    err = encodeTileMaps(maps,
                         {{k, kvCols, DkDvCfg::BC},
                          {v, kvCols, DkDvCfg::BC},
                          {q, qCols, DkDvCfg::BR},
                          {dout, qCols, DkDvCfg::BR}},
                         batch, seq);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(attentionBwdDkDvWsKernel<DkDvCfg>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(DkDvCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDkDvWsKernel<DkDvCfg>
          <<<dkdvGrid, DkDvCfg::kThreads, DkDvCfg::kShared, stream>>>(
              dk, dv, dkPart, dvPart, negLse2, delta, maps[0], maps[1], maps[2],
              maps[3],
              seq, qHeads, kvHeads, parts, causal, scale, scaleLog2, rope,
              amax);
  } else if constexpr (WG) {
    err = cudaFuncSetAttribute(attentionBwdDkDvWgKernel<DkDvCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DkDvCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDkDvWgKernel<DkDvCfg>
          <<<dkdvGrid, DkDvCfg::kThreads, DkDvCfg::kShared, stream>>>(
              dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq,
              qHeads, kvHeads, parts, causal, scale, scaleLog2, partCounters,
              rope, amax);
  } else {
    err = cudaFuncSetAttribute(attentionBwdDkDvTcKernel<DkDvCfg>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                               int(DkDvCfg::kShared));
    if (err == cudaSuccess)
      attentionBwdDkDvTcKernel<DkDvCfg>
          <<<dkdvGrid, kTcThreads, DkDvCfg::kShared, stream>>>(
              dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq,
              qHeads, kvHeads, parts, causal, scale, scaleLog2, amax);
  }
  if (!check("attention_bwd (bf16 dk, dv)"))
    return err;

  if (parts > 1 && !kReduce) {
    const int64_t n = int64_t(batch) * seq * kvHeads * D;
    const int64_t blocks = (n / 4 + 255) / 256;
    attentionDkDvReduceTcKernel<D><<<unsigned(blocks < 65536 ? blocks : 65536),
                                  256, 0, stream>>>(dk, dv, dkPart, dvPart, n,
                                                    parts, amax);
    if (!check("attention_bwd (bf16 dk, dv reduction)"))
      return err;
  }
  return cudaSuccess;
}

/// The backward with dq from atomic reductions in the dk/dv kernel
/// (ATOMIC_DQ) instead of the dq kernel: not bit-reproducible, measured by
/// bench/attention_bench.cu against enqueueBackward. dqAccum: batch * seq *
/// qHeads * D floats, zeroed here.
template <class DkDvCfg>
cudaError_t enqueueBackwardAtomicDq(
    bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
    const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
    float *stats, float *dkPart, float *dvPart, float *dqAccum, int parts,
    int batch, int seq, int qHeads, int kvHeads, bool causal, float scale,
    cudaStream_t stream) {
  constexpr int D = DkDvCfg::D;
  const float scaleLog2 = scale * 1.4426950408889634f;
  const int64_t rows = int64_t(batch) * seq * qHeads;
  float *negLse2 = stats, *delta = stats + rows;
  cudaError_t err = cudaMemsetAsync(dqAccum, 0, rows * D * sizeof(float),
                                    stream);
  if (err != cudaSuccess)
    return err;
  attentionDeltaTcKernel<D><<<unsigned((rows * (D / 8) + 255) / 256), 256, 0,
                              stream>>>(delta, negLse2, dout, out, lse, rows,
                                        seq, qHeads);
  const size_t shared =
      DkDvCfg::kShared + size_t(DkDvCfg::BC) * DkDvCfg::BR * 2;
  err = cudaFuncSetAttribute(attentionBwdDkDvTcKernel<DkDvCfg, true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(shared));
  if (err != cudaSuccess)
    return err;
  const dim3 grid(unsigned((seq + DkDvCfg::BC - 1) / DkDvCfg::BC),
                  unsigned(kvHeads * parts), unsigned(batch));
  attentionBwdDkDvTcKernel<DkDvCfg, true>
      <<<grid, kTcThreads, shared, stream>>>(
          dk, dv, dkPart, dvPart, dout, q, k, v, negLse2, delta, seq, qHeads,
          kvHeads, parts, causal, scale, scaleLog2, AmaxOutputs{}, dqAccum);
  const int64_t n = int64_t(batch) * seq * kvHeads * D;
  if (parts > 1)
    attentionDkDvReduceTcKernel<D><<<4096, 256, 0, stream>>>(
        dk, dv, dkPart, dvPart, n, parts, AmaxOutputs{});
  attentionDqConvertTcKernel<D>
      <<<4096, 256, 0, stream>>>(dq, dqAccum, rows * D, scale);
  return cudaGetLastError();
}

#endif // __CUDACC__

} // namespace tc

} // namespace mlt::cuda::attn

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ATTENTION_CUH
