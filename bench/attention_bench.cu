//===- attention_bench.cu - timing of the bf16 attention kernels ----------===//
//
// Part of mlt. Times the bf16 tensor-core flash attention forward and
// backward (kernels/attention.cuh) at the LLaMA training shapes: the
// production launchers (launchAttentionFwd / launchAttentionBwd) and
// alternative kernel configurations, each checked against the production
// output (normwise error) before it is timed. CUDA events around each call,
// warm-up, median of the repetitions. FLOPs count causal work as half of the
// full product: forward 2 * 2 * b * h * s * s * d / 2, backward 2.5 times
// that (the convention of the FlashAttention papers; the deterministic
// backward actually recomputes s and dp in both kernels, 3.5 times).
//
// Usage: MLTAttentionBench [reps] [125m]   (results:
// bench/attention-notes.md)
//
//===----------------------------------------------------------------------===//

#include "BenchUtil.cuh"
#include "kernels/attention.cuh"
#include "kernels/attention.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;
using mlt::bench::fillUniform;
using namespace mlt::cuda::attn;
using bf16 = __nv_bfloat16;

namespace {

struct Shape {
  const char *name;
  int b, s, hq, hkv, d;
  bool causal;
  int64_t qn() const { return int64_t(b) * s * hq * d; }
  int64_t kvn() const { return int64_t(b) * s * hkv * d; }
  AttentionShape params() const {
    AttentionShape p;
    p.batch = b;
    p.seq = s;
    p.qHeads = hq;
    p.kvHeads = hkv;
    p.headDim = d;
    p.causal = causal;
    p.scale = 1.0 / std::sqrt(double(d));
    return p;
  }
  double fwdFlops() const {
    return 4.0 * b * hq * double(s) * s * d / (causal ? 2.0 : 1.0);
  }
};

template <typename T> struct Buf {
  T *p = nullptr;
  int64_t n = 0;
  explicit Buf(int64_t n) : n(n) { CHECK_CUDA(cudaMalloc(&p, n * sizeof(T))); }
  ~Buf() { cudaFree(p); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

float toFloat(bf16 x) { return __bfloat162float(x); }
float toFloat(float x) { return x; }

/// ||a - b|| / ||b||; infinity when a has a non-finite element.
template <typename T>
double normError(const std::vector<T> &a, const std::vector<T> &b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = toFloat(a[i]), y = toFloat(b[i]);
    if (!std::isfinite(x))
      return INFINITY;
    d += (x - y) * (x - y);
    r += y * y;
  }
  return std::sqrt(d / r);
}

int gReps = 20;

/// Median milliseconds of `f` over gReps timed calls after 3 warm-ups.
template <class F> double medianMs(F &&f) {
  for (int i = 0; i < 3; ++i)
    f();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(gReps + 1);
  for (auto &e : ev)
    CHECK_CUDA(cudaEventCreate(&e));
  CHECK_CUDA(cudaEventRecord(ev[0]));
  for (int i = 0; i < gReps; ++i) {
    f();
    CHECK_CUDA(cudaEventRecord(ev[i + 1]));
  }
  CHECK_CUDA(cudaEventSynchronize(ev[gReps]));
  std::vector<float> ms(gReps);
  for (int i = 0; i < gReps; ++i)
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  for (auto &e : ev)
    CHECK_CUDA(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  return ms[gReps / 2];
}

/// One shape's tensors and the production results to check variants with.
struct Problem {
  Shape sh;
  Buf<bf16> q, k, v, out, dout, dq, dk, dv;
  Buf<float> lse;
  Buf<char> scratch;
  Buf<float> dqAccum; // the atomic-dq variant's f32 dq
  std::vector<bf16> refOut, refDq, refDk, refDv;
  std::vector<float> refLse;
  explicit Problem(const Shape &s)
      : sh(s), q(s.qn()), k(s.kvn()), v(s.kvn()), out(s.qn()), dout(s.qn()),
        dq(s.qn()), dk(s.kvn()), dv(s.kvn()), lse(int64_t(s.b) * s.hq * s.s),
        // Enough for any variant below: the statistics, 8 parts of dk/dv
        // and the part counters.
        scratch(statBytes(s) + 2 * 8 * s.kvn() * int64_t(sizeof(float)) +
                counterBytes(s)),
        dqAccum(s.qn()) {}
  static int64_t statBytes(const Shape &s) {
    return (2 * int64_t(s.b) * s.hq * s.s * 4 + 255) / 256 * 256;
  }
  static int64_t counterBytes(const Shape &s) {
    return int64_t(s.b) * s.hkv * ((s.s + 63) / 64) * 4;
  }
  int *counters() {
    return reinterpret_cast<int *>(scratch.p + statBytes(sh) +
                                   2 * 8 * sh.kvn() * int64_t(sizeof(float)));
  }
};

void poison(Problem &P) {
  CHECK_CUDA(cudaMemset(P.out.p, 0xFF, P.out.n * 2));
  CHECK_CUDA(cudaMemset(P.lse.p, 0xFF, P.lse.n * 4));
  CHECK_CUDA(cudaMemset(P.dq.p, 0xFF, P.dq.n * 2));
  CHECK_CUDA(cudaMemset(P.dk.p, 0xFF, P.dk.n * 2));
  CHECK_CUDA(cudaMemset(P.dv.p, 0xFF, P.dv.n * 2));
}

void report(const char *what, const char *variant, double ms, double flops,
            double err) {
  std::printf("  %-4s %-44s %8.3f ms %7.1f TFLOP/s   err %.1e\n", what, variant,
              ms, flops / ms * 1e-9, err);
}

template <class Cfg, bool WG = false>
void benchFwd(Problem &P, const char *name) {
  const Shape &s = P.sh;
  poison(P);
  auto run = [&] {
    CHECK_CUDA((tc::enqueueForward<Cfg, WG>(P.out.p, P.lse.p, P.q.p, P.k.p, P.v.p,
                                        s.b, s.s, s.hq, s.hkv, s.causal,
                                        float(s.params().scale), 0)));
  };
  run();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double err = std::max(normError(P.out.host(), P.refOut),
                              normError(P.lse.host(), P.refLse));
  report("fwd", name, medianMs(run), s.fwdFlops(), err);
}

/// The warp-specialized forward (attention_ws.cuh), checked and timed as
/// benchFwd does.
template <class Cfg> void benchFwdWs(Problem &P, const char *name) {
  const Shape &s = P.sh;
  poison(P);
  auto run = [&] {
    CHECK_CUDA((tc::enqueueForwardWs<Cfg>(P.out.p, P.lse.p, P.q.p, P.k.p,
                                          P.v.p, s.b, s.s, s.hq, s.hkv,
                                          s.causal, float(s.params().scale),
                                          0)));
  };
  run();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double err = std::max(normError(P.out.host(), P.refOut),
                              normError(P.lse.host(), P.refLse));
  report("fwd", name, medianMs(run), s.fwdFlops(), err);
}

template <class Dq, bool WG> constexpr bool fusedDq() {
  if constexpr (WG)
    return Dq::FUSED;
  else
    return false;
}

template <class Dq, class DkDv, bool WG = false>
void benchBwd(Problem &P, int parts, const char *name, bool stages = false) {
  const Shape &s = P.sh;
  poison(P);
  char *base = P.scratch.p;
  float *stats = reinterpret_cast<float *>(base);
  float *dkPart = reinterpret_cast<float *>(base + Problem::statBytes(s));
  float *dvPart = dkPart + int64_t(parts) * s.kvn();
  auto run = [&] {
    const char *failed = "";
    const cudaError_t err = tc::enqueueBackward<Dq, DkDv, WG>(
        P.dq.p, P.dk.p, P.dv.p, P.dout.p, P.q.p, P.k.p, P.v.p, P.out.p, P.lse.p,
        stats, dkPart, dvPart, parts, s.b, s.s, s.hq, s.hkv, s.causal,
        float(s.params().scale), 0, &failed, P.counters());
    if (err != cudaSuccess) {
      std::fprintf(stderr, "%s: %s\n", failed, cudaGetErrorString(err));
      std::exit(1);
    }
  };
  // The forward's out and lse: the references (production forward).
  CHECK_CUDA(cudaMemcpy(P.out.p, P.refOut.data(), P.out.n * 2,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(P.lse.p, P.refLse.data(), P.lse.n * 4,
                        cudaMemcpyHostToDevice));
  run();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double err = std::max({normError(P.dq.host(), P.refDq),
                               normError(P.dk.host(), P.refDk),
                               normError(P.dv.host(), P.refDv)});
  char label[96];
  std::snprintf(label, sizeof label, "%s parts %d", name, parts);
  report("bwd", label, medianMs(run), 2.5 * s.fwdFlops(), err);
  if (!stages)
    return;
  // Each kernel alone (on the buffers the full run left behind).
  const int64_t rows = int64_t(s.b) * s.s * s.hq;
  const float scale = float(s.params().scale), scaleLog2 = scale * 1.4427f;
  float *negLse2 = stats, *delta = stats + rows;
  const double tDelta = medianMs([&] {
    tc::attentionDeltaTcKernel<Dq::D>
        <<<unsigned((rows * (Dq::D / 8) + 255) / 256), 256>>>(
            delta, negLse2, P.dout.p, P.out.p, P.lse.p, rows, s.s, s.hq);
  });
  const dim3 dqGrid((s.s + Dq::BR - 1) / Dq::BR, s.hq, s.b);
  // The warp-specialized dq kernel needs tensor maps: timed as the whole
  // backward less the other kernels.
  double tDq = medianMs([&] {
    if constexpr (tc::IsWsDq<Dq>::value)
      run();
    else if constexpr (WG)
      tc::attentionBwdDqWgKernel<Dq><<<dqGrid, Dq::kThreads, Dq::kShared>>>(
          P.dq.p, P.dout.p, P.q.p, P.k.p, P.v.p, P.out.p, P.lse.p, negLse2,
          delta, P.counters(), s.s, s.hq, s.hkv, s.causal, scale, scaleLog2,
          tc::RopeEpilogue{}, tc::AmaxOutputs{});
    else
      tc::attentionBwdDqTcKernel<Dq><<<dqGrid, tc::kTcThreads, Dq::kShared>>>(
          P.dq.p, P.dout.p, P.q.p, P.k.p, P.v.p, negLse2, delta, s.s, s.hq,
          s.hkv, s.causal, scale, scaleLog2, tc::AmaxOutputs{});
  });
  const dim3 dkdvGrid((s.s + DkDv::BC - 1) / DkDv::BC, s.hkv * parts, s.b);
  bool reduceInKernel = false;
  // (Not with the warp-specialized dk/dv kernel, which needs tensor maps:
  // its variants are timed whole.)
  const double tDkDv = medianMs([&] {
    if constexpr (tc::IsWsDkDv<DkDv>::value)
      run();
    else if constexpr (WG) {
      // The in-kernel reduction needs zeroed counters (the dq kernel's job).
      if (DkDv::REDUCE) {
        reduceInKernel = parts > 1;
        CHECK_CUDA(cudaMemsetAsync(P.counters(), 0, Problem::counterBytes(s)));
      }
      tc::attentionBwdDkDvWgKernel<DkDv>
          <<<dkdvGrid, DkDv::kThreads, DkDv::kShared>>>(
              P.dk.p, P.dv.p, dkPart, dvPart, P.dout.p, P.q.p, P.k.p, P.v.p,
              negLse2, delta, s.s, s.hq, s.hkv, parts, s.causal, scale,
              scaleLog2, P.counters(), tc::RopeEpilogue{}, tc::AmaxOutputs{});
    } else {
      tc::attentionBwdDkDvTcKernel<DkDv>
          <<<dkdvGrid, tc::kTcThreads, DkDv::kShared>>>(
              P.dk.p, P.dv.p, dkPart, dvPart, P.dout.p, P.q.p, P.k.p, P.v.p,
              negLse2, delta, s.s, s.hq, s.hkv, parts, s.causal, scale,
              scaleLog2, tc::AmaxOutputs{});
    }
  });
  if constexpr (tc::IsWsDq<Dq>::value)
    tDq -= tDelta + tDkDv;
  const double tReduce = parts == 1 || reduceInKernel ? 0.0 : medianMs([&] {
    tc::attentionDkDvReduceTcKernel<Dq::D>
        <<<4096, 256>>>(P.dk.p, P.dv.p, dkPart, dvPart, s.kvn(), parts,
                        tc::AmaxOutputs{});
  });
  CHECK_CUDA(cudaGetLastError());
  // dq does 3 of the backward's 7 products, dk/dv 4. A fused dq kernel
  // computes the statistics itself (delta is then not run), an in-kernel
  // reduction is part of dk/dv (including a counter memset).
  std::printf("       stages: delta %.3f%s  dq %.3f (%.0f TFLOP/s)  dk/dv %.3f "
              "(%.0f TFLOP/s)  reduce %.3f ms%s\n",
              tDelta, fusedDq<Dq, WG>() ? " (not run)" : "", tDq,
              1.5 * s.fwdFlops() / tDq * 1e-9, tDkDv,
              2.0 * s.fwdFlops() / tDkDv * 1e-9, tReduce,
              reduceInKernel ? " (in dk/dv)" : "");
}

/// The backward with dq from atomic reductions in the dk/dv kernel.
template <class DkDv>
void benchBwdAtomicDq(Problem &P, int parts, const char *name) {
  const Shape &s = P.sh;
  poison(P);
  char *base = P.scratch.p;
  float *stats = reinterpret_cast<float *>(base);
  float *dkPart = reinterpret_cast<float *>(base + Problem::statBytes(s));
  float *dvPart = dkPart + int64_t(parts) * s.kvn();
  auto run = [&] {
    CHECK_CUDA(tc::enqueueBackwardAtomicDq<DkDv>(
        P.dq.p, P.dk.p, P.dv.p, P.dout.p, P.q.p, P.k.p, P.v.p, P.out.p, P.lse.p,
        stats, dkPart, dvPart, P.dqAccum.p, parts, s.b, s.s, s.hq, s.hkv,
        s.causal, float(s.params().scale), 0));
  };
  CHECK_CUDA(cudaMemcpy(P.out.p, P.refOut.data(), P.out.n * 2,
                        cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(P.lse.p, P.refLse.data(), P.lse.n * 4,
                        cudaMemcpyHostToDevice));
  run();
  CHECK_CUDA(cudaDeviceSynchronize());
  const double err = std::max({normError(P.dq.host(), P.refDq),
                               normError(P.dk.host(), P.refDk),
                               normError(P.dv.host(), P.refDv)});
  char label[96];
  std::snprintf(label, sizeof label, "ATOMIC dq: %s parts %d", name, parts);
  report("bwd", label, medianMs(run), 2.5 * s.fwdFlops(), err);
}

/// The production launchers: reference results for the variants, and their
/// times (twice, for the spread).
void benchProduction(Problem &P) {
  const Shape &s = P.sh;
  const AttentionShape p = s.params();
  const size_t scratchBytes = attentionBwdScratchBytes(p);
  if (scratchBytes > size_t(P.scratch.n)) {
    std::fprintf(stderr, "scratch too small\n");
    std::exit(1);
  }
  poison(P);
  auto fwd = [&] {
    CHECK_STATUS(
        launchAttentionFwd(P.out.p, P.lse.p, P.q.p, P.k.p, P.v.p, p, 0));
  };
  auto bwd = [&] {
    CHECK_STATUS(launchAttentionBwd(P.dq.p, P.dk.p, P.dv.p, P.dout.p, P.q.p,
                                    P.k.p, P.v.p, P.out.p, P.lse.p, p,
                                    P.scratch.p, scratchBytes, 0));
  };
  fwd();
  bwd();
  CHECK_CUDA(cudaDeviceSynchronize());
  P.refOut = P.out.host();
  P.refLse = P.lse.host();
  P.refDq = P.dq.host();
  P.refDk = P.dk.host();
  P.refDv = P.dv.host();
  const double nonFinite =
      std::max({normError(P.refOut, P.refOut), normError(P.refLse, P.refLse),
                normError(P.refDq, P.refDq), normError(P.refDk, P.refDk),
                normError(P.refDv, P.refDv)});
  // Bit-reproducible: a second backward (and forward) gives the same bits.
  poison(P);
  fwd();
  bwd();
  CHECK_CUDA(cudaDeviceSynchronize());
  auto same = [](const auto &a, const auto &b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
  };
  const bool reproducible = same(P.out.host(), P.refOut) &&
                            same(P.lse.host(), P.refLse) &&
                            same(P.dq.host(), P.refDq) &&
                            same(P.dk.host(), P.refDk) &&
                            same(P.dv.host(), P.refDv);
  std::printf("  production outputs %s, second run %s (scratch %.1f MiB)\n",
              nonFinite == 0 ? "finite" : "NOT FINITE",
              reproducible ? "bit-identical" : "DIFFERENT",
              scratchBytes / 1048576.0);
  for (int i = 0; i < 2; ++i) {
    report("fwd", "production", medianMs(fwd), s.fwdFlops(), 0);
    report("bwd", "production", medianMs(bwd), 2.5 * s.fwdFlops(), 0);
  }
  auto both = [&] {
    fwd();
    bwd();
  };
  report("f+b", "production", medianMs(both), 3.5 * s.fwdFlops(), 0);
}

Problem *setUp(const Shape &s) {
  std::printf("\n%s: batch %d seq %d q_heads %d kv_heads %d head_dim %d %s\n",
              s.name, s.b, s.s, s.hq, s.hkv, s.d, s.causal ? "causal" : "full");
  auto *P = new Problem(s);
  fillUniform<<<1024, 256>>>(P->q.p, P->q.n, 1, -2.f, 2.f);
  fillUniform<<<1024, 256>>>(P->k.p, P->k.n, 2, -2.f, 2.f);
  fillUniform<<<1024, 256>>>(P->v.p, P->v.n, 3, -1.f, 1.f);
  fillUniform<<<1024, 256>>>(P->dout.p, P->dout.n, 4, -1.f, 1.f);
  CHECK_CUDA(cudaGetLastError());
  benchProduction(*P);
  return P;
}

/// The head-dim-64 configurations (mma.sync and wgmma), dk/dv over `parts`
/// blocks per kv head (1 for MHA; the GQA group's divisors beyond).
void headDim64Variants(Problem &P, int parts) {
  using namespace tc;
  benchFwd<FwdConfig<64, 1, 64, 4>>(P, "mma.sync fwd MT1 BC64 minB4");
  benchFwd<WgFwdConfig<64, 64, 4, false>, true>(P, "wgmma fwd BC64 minB4");
  benchFwdWs<WsFwdConfig<64, 128, 2>>(P, "warp-specialized BC128 2 stages");
  benchFwdWs<WsFwdConfig<64, 128, 3>>(P, "warp-specialized BC128 3 stages");
  benchFwdWs<WsFwdConfig<64, 64, 4>>(P, "warp-specialized BC64 4 stages");
  benchFwdWs<WsFwdConfig<64, 128, 2, true>>(P, "ws BC128 2 stages q in registers");
  benchBwd<WsDqConfig<64, 64, 3>, WgDkDvConfig<64, 128, 1, false>, true>(
      P, parts, "ws dq 3 stages / dkdv BR128 (delta, reduce kernels)", true);
  benchBwd<WgDqConfig<64, 64, 2>, WsDkDvConfig<64, 64, 3>, true>(
      P, parts, "fused dq / ws dkdv 3 stages (reduce kernel)");
  benchBwd<WsDqConfig<64, 64, 3>, WsDkDvConfig<64, 64, 3>, true>(
      P, parts, "ws dq 3 / ws dkdv 3 (delta, reduce kernels)");
  benchFwd<WgFwdConfig<64, 64, 4, false, 1>, true>(P, "= poly 1 of 8");
  benchFwd<WgFwdConfig<64, 64, 4, false, 2>, true>(P, "= poly 2 of 8");
  benchFwd<WgFwdConfig<64, 64, 4, false, 3>, true>(P, "= poly 3 of 8");
  benchFwd<WgFwdConfig<64, 64, 4, false, 4>, true>(P, "= poly 4 of 8");
  benchFwd<WgFwdConfig<64, 64, 4, true>, true>(P, "wgmma fwd pipe BC64 minB4");
  benchFwd<WgFwdConfig<64, 64, 4, true, 2>, true>(P, "= poly 2 of 8");
  benchFwd<WgFwdConfig<64, 128, 2, false, 4>, true>(
      P, "wgmma fwd BC128 minB2 poly 4 of 16");
  benchBwd<DqConfig<64, 1, 64, 3>, DkDvConfig<64, 1, 64, true, 2>>(
      P, parts, "mma.sync dq BC64 m3 / dkdv BR64 keep m2", true);
  using WDq = WgDqConfig<64, 64, 2>;
  using WDkDv = WgDkDvConfig<64, 64, 2>;
  benchBwd<WgDqConfig<64, 64, 2, false>, WgDkDvConfig<64, 64, 2, false>, true>(
      P, parts, "wgmma v4 (delta and reduce kernels)", true);
  benchBwd<WDq, WDkDv, true>(P, parts, "wgmma fused dq m2 / reduce dkdv m2",
                             true);
  // dk/dv tiles of 128 rows over every split of the GQA group (MHA: 1).
  const int group = P.sh.hq / P.sh.hkv;
  for (int split : {1, 2, 4, 8})
    if (group % split == 0 && (split > 1 || group == 1))
      benchBwd<WDq, WgDkDvConfig<64, 128, 1>, true>(P, split,
                                                    "= / dkdv BR128 m1", true);
  benchBwd<WgDqConfig<64, 128, 1>, WgDkDvConfig<64, 128, 1>, true>(
      P, parts, "dq BC128 m1 / dkdv BR128 m1", true);
  // Two warpgroups a block sharing the other operand's tiles (BR 128 in
  // the forward and dq, BC 128 in dk/dv): half the tile loads.
  benchFwd<WgFwdConfig<64, 64, 2, false, 0, 2>, true>(P, "wgmma fwd 2WG BC64 minB2");
  benchFwd<WgFwdConfig<64, 128, 1, false, 0, 2>, true>(P, "wgmma fwd 2WG BC128 minB1");
  benchBwd<WgDqConfig<64, 64, 1, true, 2>, WgDkDvConfig<64, 128, 1>, true>(
      P, parts, "dq 2WG m1 / dkdv BR128 m1", true);
  benchBwd<WgDqConfig<64, 64, 1, true, 2>, WgDkDvConfig<64, 64, 1, true, 2>,
           true>(P, parts, "dq 2WG m1 / dkdv 2WG BR64 m1", true);
  benchBwd<WgDqConfig<64, 64, 1, true, 2>, WgDkDvConfig<64, 128, 1, true, 2>,
           true>(P, parts, "dq 2WG m1 / dkdv 2WG BR128 m1", true);
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 1)
    gReps = std::max(1, std::atoi(argv[1]));
  // "125m": the reference's llama-125m shape only.
  const bool only125m = argc > 2 && std::string(argv[2]) == "125m";
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; median of %d reps\n", prop.name,
              prop.multiProcessorCount, gReps);

  // The production launchers first (setUp), then the mma.sync kernels'
  // production configurations and the wgmma ones, all in this one run.
  if (only125m) {
    Problem *P = setUp({"125m", 16, 1024, 12, 12, 64, true});
    headDim64Variants(*P, 1);
    delete P;
    return 0;
  }
  {
    Problem *P = setUp({"TinyLlama", 4, 2048, 32, 4, 64, true});
    headDim64Variants(*P, 4);
    delete P;
  }
  {
    Problem *P = setUp({"LLaMA-7B", 1, 4096, 32, 32, 128, true});
    using namespace tc;
    benchFwd<FwdConfig<128, 1, 64, 2>>(*P, "mma.sync fwd MT1 BC64 minB2");
    benchFwd<WgFwdConfig<128, 64, 2, false>, true>(*P, "wgmma fwd BC64 minB2");
    benchFwd<WgFwdConfig<128, 64, 2, false, 1>, true>(*P, "= poly 1 of 8");
    benchFwd<WgFwdConfig<128, 64, 2, false, 2>, true>(*P, "= poly 2 of 8");
    benchFwd<WgFwdConfig<128, 64, 2, true>, true>(*P, "wgmma fwd pipe BC64 minB2");
    benchFwd<WgFwdConfig<128, 128, 1, false>, true>(*P, "wgmma fwd BC128 minB1");
    benchFwdWs<WsFwdConfig<128, 128, 2>>(*P, "warp-specialized BC128 2 stages");
    benchFwdWs<WsFwdConfig<128, 128, 3>>(*P, "warp-specialized BC128 3 stages");
    benchFwdWs<WsFwdConfig<128, 128, 2, true>>(*P, "= q in registers");
    benchFwdWs<WsFwdConfig<128, 128, 3, true>>(*P, "= q in registers, 3 stages");
    benchFwdWs<WsFwdConfig<128, 128, 2, true, false>>(
        *P, "= q in registers, no ping-pong");
    benchFwdWs<WsFwdConfig<128, 64, 2>>(*P, "warp-specialized BC64 2 stages");
    benchFwdWs<WsFwdConfig<128, 64, 3>>(*P, "warp-specialized BC64 3 stages");
    benchBwd<DqConfig<128, 1, 64, 2>, DkDvConfig<128, 1, 64, false, 2>>(
        *P, 1, "mma.sync dq BC64 m2 / dkdv BR64 m2", true);
    benchBwd<WgDqConfig<128, 64, 1, false>, WgDkDvConfig<128, 64, 1, false>,
             true>(*P, 1, "wgmma v4 (delta kernel)", true);
    benchBwd<WgDqConfig<128, 64, 2, false>, WgDkDvConfig<128, 64, 2, false>,
             true>(*P, 1, "wgmma v4, minB 2", true);
    // Warp-specialized dq (timed as the whole less delta and dk/dv) and
    // dk/dv (whole only), alone and together.
    using WgDkDv = WgDkDvConfig<128, 64, 1, false>;
    using WgDq = WgDqConfig<128, 64, 1, false>;
    benchBwd<WsDqConfig<128, 64, 3>, WgDkDv, true>(
        *P, 1, "ws dq 3 stages / dkdv v4", true);
    benchBwd<WsDqConfig<128, 64, 4>, WgDkDv, true>(
        *P, 1, "ws dq 4 stages / dkdv v4", true);
    benchBwd<WgDq, WsDkDvConfig<128, 64, 2>, true>(*P, 1,
                                                   "dq v4 / ws dkdv 2 stages");
    benchBwd<WgDq, WsDkDvConfig<128, 64, 3>, true>(*P, 1,
                                                   "dq v4 / ws dkdv 3 stages");
    benchBwd<WgDq, WsDkDvConfig<128, 64, 4, false, false>, true>(
        *P, 1, "dq v4 / ws dkdv 4 stages no ping-pong");
    benchBwd<WsDqConfig<128, 64, 4, true>, WgDkDv, true>(
        *P, 1, "ws dq 4 stages q in registers / dkdv v4", true);
    benchBwd<WsDqConfig<128, 64, 4, false, false>, WgDkDv, true>(
        *P, 1, "ws dq 4 stages no ping-pong / dkdv v4", true);
    benchBwd<WsDqConfig<128, 64, 4, true, false>, WgDkDv, true>(
        *P, 1, "ws dq 4 stages q in registers no ping-pong / dkdv v4", true);
    benchBwd<WgDq, WsDkDvConfig<128, 64, 4>, true>(*P, 1,
                                                   "dq v4 / ws dkdv 4 stages");
    benchBwd<WgDq, WsDkDvConfig<128, 64, 3, true>, true>(
        *P, 1, "dq v4 / ws dkdv 3 stages pipe (spills)");
    benchBwd<WsDqConfig<128, 64, 3>, WsDkDvConfig<128, 64, 3>, true>(
        *P, 1, "ws dq 3 / ws dkdv 3");
    benchBwd<WsDqConfig<128, 64, 4>, WsDkDvConfig<128, 64, 4>, true>(
        *P, 1, "ws dq 4 / ws dkdv 4");
    // Two warpgroups a block sharing the K/V (dq) or Q/dO (dk/dv) tiles.
    benchFwd<WgFwdConfig<128, 64, 1, false, 0, 2>, true>(*P, "wgmma fwd 2WG BC64 minB1");
    benchFwd<WgFwdConfig<128, 128, 1, false, 0, 2>, true>(*P, "wgmma fwd 2WG BC128 minB1");
    benchBwd<WgDqConfig<128, 64, 1, false, 2>, WgDkDvConfig<128, 64, 1, false>,
             true>(*P, 1, "dq 2WG / dkdv v4", true);
    benchBwd<WgDqConfig<128, 64, 1, false, 2>,
             WgDkDvConfig<128, 64, 1, false, 2>, true>(
        *P, 1, "dq 2WG / dkdv 2WG BR64", true);
    delete P;
  }
  {
    // A full (non-causal) MHA shape at head_dim 64, and TinyLlama at batch 1.
    Problem *P = setUp({"full d64", 2, 2048, 16, 16, 64, false});
    delete P;
    P = setUp({"TinyLlama b1", 1, 2048, 32, 4, 64, true});
    delete P;
  }
  return 0;
}
