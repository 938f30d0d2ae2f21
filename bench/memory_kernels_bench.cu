//===- memory_kernels_bench.cu - timing of the memory-bound kernels -------===//
//
// Part of mlt. Times the memory-bound kernels of a TinyLlama-1.1B training
// step (bf16 activations, micro-batch 4 x 2048 tokens) through their
// production launchers: rms_norm_fwd and rms_norm_bwd (rows 8192, dim 2048;
// the backward also with its addend, rms_norm_bwd_add), rope on the query
// ([4, 2048, 32, 64]) and key ([4, 2048, 4, 64]) tensors, forward and
// inverse, and sum_squares over the 201 f32 gradients of the model; then
// alternative configurations of the new kernels (rows per block, blocks,
// units per thread). Each timing captures a CUDA graph of many launches (the
// step runs as a graph, so the gaps between kernel nodes count), rotating
// over enough input sets that no launch finds its inputs in the 50 MB L2,
// replays it after 3 warm-ups and takes the median replay over the launches
// in it. Inputs are random (a hash of the index), never zeros. Rates count
// every input read once and every output written once; the device-to-device
// copy (read + write) is the ceiling.
//
// Usage: MLTMemoryKernelsBench [reps] [sum_squares | 125m]   (results:
// bench/memory-kernels-notes.md) Built with -DMLT_BENCH_OLD_API against the
// launchers before the addend (rms_norm_bwd without one), it times the
// production launchers only: the "before" column of the notes.
//
//===----------------------------------------------------------------------===//

#include "BenchUtil.cuh"
#include "kernels/optimizer.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#ifndef MLT_BENCH_OLD_API
#include "kernels/optimizer.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;
using mlt::bench::fillUniform;
using bf16 = __nv_bfloat16;

namespace {

template <typename T> struct Buf {
  T *p = nullptr;
  int64_t n = 0;
  explicit Buf(int64_t n, uint32_t seed = 0, float lo = -1.f, float hi = 1.f)
      : n(n) {
    CHECK_CUDA(cudaMalloc(&p, size_t(n) * sizeof(T)));
    fillUniform<<<4096, 256>>>(p, n, seed * 7919u + 17u, lo, hi);
    CHECK_CUDA(cudaGetLastError());
  }
  ~Buf() { cudaFree(p); }
  Buf(const Buf &) = delete;
  Buf &operator=(const Buf &) = delete;
};

int gReps = 20;

/// Median milliseconds per launch: `enqueue(k, stream)` queues launch k of
/// `perGraph` into a captured graph, replayed gReps times after 3 warm-ups.
double graphMs(int perGraph, const std::function<void(int, cudaStream_t)> &f) {
  CHECK_CUDA(cudaDeviceSynchronize()); // the inputs' fills, on stream 0
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < perGraph; ++k)
    f(k, stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i)
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
  std::vector<cudaEvent_t> ev(gReps + 1);
  for (auto &e : ev)
    CHECK_CUDA(cudaEventCreate(&e));
  CHECK_CUDA(cudaEventRecord(ev[0], stream));
  for (int i = 0; i < gReps; ++i) {
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(ev[i + 1], stream));
  }
  CHECK_CUDA(cudaEventSynchronize(ev[gReps]));
  std::vector<float> ms(gReps);
  for (int i = 0; i < gReps; ++i)
    CHECK_CUDA(cudaEventElapsedTime(&ms[i], ev[i], ev[i + 1]));
  for (auto &e : ev)
    CHECK_CUDA(cudaEventDestroy(e));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::sort(ms.begin(), ms.end());
  return ms[gReps / 2] / perGraph;
}

struct Row {
  std::string name;
  double us, gbps, perStepMs;
};
std::vector<Row> gRows;

void report(const std::string &name, double ms, double bytes,
            int launchesPerStep) {
  Row r{name, ms * 1e3, bytes / (ms * 1e-3) / 1e9, ms * launchesPerStep};
  std::printf("%-52s %9.2f us %8.1f GB/s", name.c_str(), r.us, r.gbps);
  if (launchesPerStep)
    std::printf("  x%-3d = %.3f ms/step", launchesPerStep, r.perStepMs);
  std::printf("\n");
  std::fflush(stdout);
  gRows.push_back(r);
}

// The step's shapes: TinyLlama-1.1B's (micro-batch 4 x 2048) by default, the
// reference's llama-125m (micro-batch 16 x 1024) with the argument "125m".
int64_t kRows = 8192, kDim = 2048;
int64_t kBatch = 4, kSeq = 2048, kQHeads = 32, kKvHeads = 4;
constexpr int64_t kHeadDim = 64;
int kLayers = 22;
constexpr double kEps = 1e-5, kTheta = 10000.0;

void useSmallShape() {
  kRows = 16384;
  kDim = 768;
  kBatch = 16;
  kSeq = 1024;
  kQHeads = 12;
  kKvHeads = 12;
  kLayers = 12;
}

std::string normShape() {
  return std::to_string(kRows) + "x" + std::to_string(kDim);
}
std::string ropeShape(int64_t heads) {
  return "[" + std::to_string(kBatch) + "," + std::to_string(kSeq) + "," +
         std::to_string(heads) + "," + std::to_string(kHeadDim) + "]";
}

/// Sets of rms-norm tensors: two are 256 MiB of traffic per round, past L2.
constexpr int kNormSets = 2;

void copyCeiling() {
  const int64_t bytes = int64_t(1) << 30;
  Buf<char> a(bytes, 1), b(bytes, 2);
  const double ms = graphMs(4, [&](int, cudaStream_t s) {
    CHECK_CUDA(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s));
  });
  report("device-to-device copy 1 GiB (read + write)", ms, 2.0 * bytes, 0);
}

void rmsNormBench() {
  const int64_t n = kRows * kDim;
  std::vector<std::unique_ptr<Buf<bf16>>> x, dy, add, out;
  for (int k = 0; k < kNormSets; ++k) {
    x.push_back(std::make_unique<Buf<bf16>>(n, 10 + k, -2.f, 2.f));
    dy.push_back(std::make_unique<Buf<bf16>>(n, 20 + k));
    add.push_back(std::make_unique<Buf<bf16>>(n, 30 + k));
    out.push_back(std::make_unique<Buf<bf16>>(n, 40 + k));
  }
  Buf<bf16> w(kDim, 50, 0.5f, 1.5f);
  Buf<float> dw(kDim, 51);
  const size_t scratchBytes = rmsNormBwdScratchBytes(kRows, kDim);
  Buf<char> scratch(int64_t(scratchBytes), 52);
  const double act = double(n) * sizeof(bf16);
  const int perGraph = 10;

  double ms = graphMs(perGraph, [&](int k, cudaStream_t s) {
    const int i = k % kNormSets;
    CHECK_STATUS(launchRmsNormFwd(out[i]->p, nullptr, x[i]->p, w.p, kRows, kDim,
                                  kEps, s));
  });
  report("rms_norm_fwd bf16 " + normShape(), ms, 2 * act + kDim * 2,
         2 * kLayers + 1);

  ms = graphMs(perGraph, [&](int k, cudaStream_t s) {
    const int i = k % kNormSets;
#ifdef MLT_BENCH_OLD_API
    CHECK_STATUS(launchRmsNormBwd(out[i]->p, dw.p, dy[i]->p, x[i]->p, w.p,
                                  kRows, kDim, kEps, scratch.p, scratchBytes,
                                  s));
#else
    CHECK_STATUS(launchRmsNormBwd(out[i]->p, dw.p, dy[i]->p, x[i]->p, w.p,
                                  nullptr, kRows, kDim, kEps, scratch.p,
                                  scratchBytes, s));
#endif
  });
  report("rms_norm_bwd bf16 " + normShape(), ms, 3 * act + kDim * 6,
         2 * kLayers + 1);

#ifndef MLT_BENCH_OLD_API
  ms = graphMs(perGraph, [&](int k, cudaStream_t s) {
    const int i = k % kNormSets;
    CHECK_STATUS(launchRmsNormBwd(out[i]->p, dw.p, dy[i]->p, x[i]->p, w.p,
                                  add[i]->p, kRows, kDim, kEps, scratch.p,
                                  scratchBytes, s));
  });
  report("rms_norm_bwd_add bf16 " + normShape() + " (addend)", ms,
         4 * act + kDim * 6, 2 * kLayers + 1);
#endif
}

void ropeBench() {
  const int64_t qn = kBatch * kSeq * kQHeads * kHeadDim;
  const int64_t kn = kBatch * kSeq * kKvHeads * kHeadDim;
  // Query sets: 2 x 64 MiB of traffic; key sets: 12 x 8 MiB.
  constexpr int kQSets = 2, kKSets = 12;
  std::vector<std::unique_ptr<Buf<bf16>>> qIn, qOut, kIn, kOut;
  for (int k = 0; k < kQSets; ++k) {
    qIn.push_back(std::make_unique<Buf<bf16>>(qn, 60 + k, -2.f, 2.f));
    qOut.push_back(std::make_unique<Buf<bf16>>(qn, 70 + k));
  }
  for (int k = 0; k < kKSets; ++k) {
    kIn.push_back(std::make_unique<Buf<bf16>>(kn, 80 + k, -2.f, 2.f));
    kOut.push_back(std::make_unique<Buf<bf16>>(kn, 100 + k));
  }
  for (bool inverse : {false, true}) {
    double ms = graphMs(10, [&](int k, cudaStream_t s) {
      const int i = k % kQSets;
      CHECK_STATUS(launchRope(qOut[i]->p, qIn[i]->p, kBatch, kSeq, kQHeads,
                              kHeadDim, inverse, 0, kTheta, rt::RopeScaling(),
                              s));
    });
    report("rope bf16 q " + ropeShape(kQHeads) +
               (inverse ? " inverse" : " forward"),
           ms, 2.0 * qn * sizeof(bf16), kLayers);
    ms = graphMs(24, [&](int k, cudaStream_t s) {
      const int i = k % kKSets;
      CHECK_STATUS(launchRope(kOut[i]->p, kIn[i]->p, kBatch, kSeq, kKvHeads,
                              kHeadDim, inverse, 0, kTheta, rt::RopeScaling(),
                              s));
    });
    report("rope bf16 k " + ropeShape(kKvHeads) +
               (inverse ? " inverse" : " forward"),
           ms, 2.0 * kn * sizeof(bf16), kLayers);
  }
}

/// The f32 gradients of TinyLlama-1.1B, in parameter order: the embedding,
/// 22 layers (norm, q, k, v, o, norm, gate, up, down), the final norm, the
/// LM head.
std::vector<int64_t> gradientSizes() {
  const int64_t h = 2048, kv = 256, inter = 5632, vocab = 32000;
  std::vector<int64_t> sizes = {vocab * h};
  for (int l = 0; l < 22; ++l)
    for (int64_t n :
         {h, h * h, kv * h, kv * h, h * h, h, inter * h, inter * h, h * inter})
      sizes.push_back(n);
  sizes.push_back(h);
  sizes.push_back(vocab * h);
  return sizes;
}

struct Gradients {
  std::vector<int64_t> sizes = gradientSizes();
  std::vector<int64_t> offsets;
  std::unique_ptr<Buf<float>> all;
  Buf<float> out{int64_t(256), 3};
  std::unique_ptr<Buf<char>> scratch;
  Gradients() {
    int64_t total = 0;
    size_t scratchBytes = 8;
    for (int64_t n : sizes) {
      offsets.push_back(total);
      total += (n + 63) / 64 * 64; // 256-byte aligned, as allocations are
      scratchBytes = std::max(scratchBytes, sumSquaresScratchBytes(n));
    }
    all = std::make_unique<Buf<float>>(total, 4, -1e-2f, 1e-2f);
    // Room for the variants' partials too (up to 2048 blocks).
    scratch = std::make_unique<Buf<char>>(int64_t(64) << 10, 5);
    (void)scratchBytes;
  }
  const float *tensor(size_t k) const { return all->p + offsets[k]; }
};

void sumSquaresBench(Gradients &g) {
  const std::vector<int64_t> &sizes = g.sizes;
  double bytes = 0;
  for (int64_t n : sizes)
    bytes += 4.0 * n;
  double ms = graphMs(int(sizes.size()), [&](int k, cudaStream_t s) {
    CHECK_STATUS(
        launchSumSquares(g.out.p + k, g.tensor(k), sizes[k], g.scratch->p, s));
  });
  report("sum_squares f32, the 201 gradients (total per step)",
         ms * sizes.size(), bytes, 0);
#ifndef MLT_BENCH_OLD_API
  // The same sums in one sum_squares_multi call (what mlt-multi-tensor
  // now emits): checked bit for bit against the 201 launches.
  {
    std::vector<const float *> xs;
    std::vector<float *> outs;
    for (size_t k = 0; k < sizes.size(); ++k) {
      xs.push_back(g.tensor(k));
      outs.push_back(g.out.p + k);
    }
    const std::vector<const void *> xsAny(xs.begin(), xs.end());
    Buf<char> multiScratch(int64_t(sumSquaresMultiScratchBytes(
                               sizes.data(), int64_t(sizes.size()))) +
                               8,
                           6);
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<float> single(sizes.size()), multi(sizes.size());
    CHECK_CUDA(cudaMemcpy(single.data(), g.out.p, sizes.size() * 4,
                          cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemset(g.out.p, 0xFF, sizes.size() * 4));
    const double multiMs = graphMs(1, [&](int, cudaStream_t s) {
      CHECK_STATUS(launchSumSquaresMulti(outs.data(), xsAny.data(), nullptr,
                                         sizes.data(), int64_t(sizes.size()),
                                         multiScratch.p, s));
    });
    CHECK_CUDA(cudaMemcpy(multi.data(), g.out.p, sizes.size() * 4,
                          cudaMemcpyDeviceToHost));
    const bool same =
        std::memcmp(single.data(), multi.data(), sizes.size() * 4) == 0;
    report(std::string("sum_squares_multi, the 201 gradients (") +
               (same ? "same bits" : "MISMATCH") + ")",
           multiMs, bytes, 0);
    if (!same)
      std::exit(1);
  }
#endif
  // Each size class alone.
  for (int64_t cls : {int64_t(2048), int64_t(256 * 2048), int64_t(2048 * 2048),
                      int64_t(5632 * 2048), int64_t(32000 * 2048)}) {
    std::vector<int> members;
    for (size_t k = 0; k < sizes.size(); ++k)
      if (sizes[k] == cls)
        members.push_back(int(k));
    ms = graphMs(int(members.size()), [&](int k, cudaStream_t s) {
      const int t = members[k];
      CHECK_STATUS(launchSumSquares(g.out.p + t, g.tensor(t), sizes[t],
                                    g.scratch->p, s));
    });
    report("sum_squares f32 n=" + std::to_string(cls), ms, 4.0 * cls,
           int(members.size()));
  }
}

#ifndef MLT_BENCH_OLD_API

//===----------------------------------------------------------------------===//
// Alternative configurations of the new kernels
//===----------------------------------------------------------------------===//

/// Ceilings: a 16-byte copy, a 16-byte read of two tensors and write of one
/// (the backward's mix), and a 16-byte read-only sum, on 32 MiB tensors.
__global__ void copyKernel(float4 *out, const float4 *in, int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}
__global__ void read2Write1Kernel(float4 *out, const float4 *a, const float4 *b,
                                  int64_t n4) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}
__global__ void readKernel(float *out, const float4 *in, int64_t n4) {
  float s = 0.f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float4 x = in[i];
    s += x.x + x.y + x.z + x.w;
  }
  if (s == 12345.f)
    *out = s;
}

void ceilings() {
  const int64_t n = kRows * kDim / 2; // floats: 32 MiB
  const int64_t n4 = n / 4;
  Buf<float> a0(n, 301), a1(n, 302), b0(n, 303), b1(n, 304), c0(n, 305),
      c1(n, 306), sink(1, 307);
  for (int blocks : {1056, 2112, 4224}) {
    double ms = graphMs(10, [&](int k, cudaStream_t s) {
      copyKernel<<<blocks, 256, 0, s>>>(
          reinterpret_cast<float4 *>(k % 2 ? c1.p : c0.p),
          reinterpret_cast<const float4 *>(k % 2 ? a1.p : a0.p), n4);
      CHECK_CUDA(cudaGetLastError());
    });
    report("  ceiling copy 32 MiB, " + std::to_string(blocks) + " blocks", ms,
           2.0 * n * 4, 0);
  }
  double ms = graphMs(10, [&](int k, cudaStream_t s) {
    read2Write1Kernel<<<2112, 256, 0, s>>>(
        reinterpret_cast<float4 *>(k % 2 ? c1.p : c0.p),
        reinterpret_cast<const float4 *>(k % 2 ? a1.p : a0.p),
        reinterpret_cast<const float4 *>(k % 2 ? b1.p : b0.p), n4);
    CHECK_CUDA(cudaGetLastError());
  });
  report("  ceiling read 2 x 32 MiB + write 32 MiB", ms, 3.0 * n * 4, 0);
  ms = graphMs(10, [&](int k, cudaStream_t s) {
    readKernel<<<2112, 256, 0, s>>>(
        sink.p, reinterpret_cast<const float4 *>(k % 2 ? a1.p : a0.p), n4);
    CHECK_CUDA(cudaGetLastError());
  });
  report("  ceiling read 32 MiB", ms, 1.0 * n * 4, 0);
}

/// The cached forward with `threadsPerRow` threads of kPacks packs per row,
/// teams of them in blocks of `blockThreads`; `pdl`: launched as the
/// launcher does (programmatic dependent launch), else plainly.
template <int kPacks, int kRowsPerTeam>
void fwdVariant(int threadsPerRow, int blockThreads, bool pdl = true) {
  const int64_t n = kRows * kDim;
  Buf<bf16> x0(n, 11, -2.f, 2.f), x1(n, 12, -2.f, 2.f), y0(n, 13), y1(n, 14),
      w(kDim, 15, 0.5f, 1.5f);
  const int teams = blockThreads / threadsPerRow;
  const int64_t blocks = kRows / (int64_t(teams) * kRowsPerTeam);
  const size_t shared = rmsnorm::fwdCachedSharedBytes(teams, kRowsPerTeam);
  auto kernel = rmsnorm::rmsNormFwdCachedKernel<bf16, kPacks, kRowsPerTeam>;
  const double ms = graphMs(10, [&](int k, cudaStream_t s) {
    bf16 *y = k % 2 ? y1.p : y0.p;
    const bf16 *x = k % 2 ? x1.p : x0.p;
    if (pdl)
      CHECK_CUDA(launchDependent(kernel, dim3(unsigned(blocks)),
                                 dim3(blockThreads), shared, s, y, nullptr, x,
                                 w.p, kRows, kDim, kEps, threadsPerRow));
    else
      kernel<<<unsigned(blocks), blockThreads, shared, s>>>(
          y, nullptr, x, w.p, kRows, kDim, kEps, threadsPerRow);
    CHECK_CUDA(cudaGetLastError());
  });
  report("  fwd " + std::to_string(threadsPerRow) + " thr x " +
             std::to_string(kPacks) + " packs/row, " +
             std::to_string(kRowsPerTeam) + " rows/team, block " +
             std::to_string(blockThreads) + (pdl ? "" : ", no PDL"),
         ms, 2.0 * n * 2, 0);
}

template <int kPacks, int kRowsPerTeam>
void bwdVariant(int threadsPerRow, int blockThreads, int64_t maxBlocks,
                bool withAddend) {
  const int64_t n = kRows * kDim;
  Buf<bf16> x0(n, 21, -2.f, 2.f), x1(n, 22, -2.f, 2.f), g0(n, 23), g1(n, 24),
      a0(n, 25), a1(n, 26), d0(n, 27), d1(n, 28), w(kDim, 29, 0.5f, 1.5f);
  Buf<float> dw(kDim, 30);
  Buf<float> partial(maxBlocks * kDim, 31);
  const int64_t rowsPerBlock = (kRows + maxBlocks - 1) / maxBlocks;
  const int64_t blocks = (kRows + rowsPerBlock - 1) / rowsPerBlock;
  const int teams = blockThreads / threadsPerRow;
  const size_t shared =
      rmsnorm::bwdCachedSharedBytes(teams, kRowsPerTeam, kDim);
  if (shared > 48 * 1024)
    return; // past the default shared memory: the launcher uses fewer teams
  auto rowsKernel =
      withAddend
          ? rmsnorm::rmsNormBwdCachedKernel<bf16, kPacks, kRowsPerTeam, true>
          : rmsnorm::rmsNormBwdCachedKernel<bf16, kPacks, kRowsPerTeam, false>;
  const double ms = graphMs(10, [&](int k, cudaStream_t s) {
    const bool odd = k % 2;
    CHECK_CUDA(launchDependent(rowsKernel, dim3(unsigned(blocks)),
                               dim3(blockThreads), shared, s, odd ? d1.p : d0.p,
                               partial.p, odd ? g1.p : g0.p, odd ? x1.p : x0.p,
                               w.p, withAddend ? (odd ? a1.p : a0.p) : nullptr,
                               kRows, kDim, rowsPerBlock, kEps, threadsPerRow));
    CHECK_CUDA(
        launchDependent(rmsnorm::rmsNormBwdColumnsKernel<float>,
                        dim3(unsigned(kDim / rmsnorm::kColumnTile)),
                        dim3(rmsnorm::kColumnTile * rmsnorm::kColumnSlices), 0,
                        s, dw.p, partial.p, blocks, kDim));
  });
  report("  bwd" + std::string(withAddend ? "_add " : " ") +
             std::to_string(threadsPerRow) + " thr x " +
             std::to_string(kPacks) + " packs/row, " +
             std::to_string(kRowsPerTeam) + " rows/team, block " +
             std::to_string(blockThreads) + ", " + std::to_string(blocks) +
             " blocks",
         ms, (withAddend ? 4.0 : 3.0) * n * 2, 0);
}

void columnsAlone() {
  for (int64_t blocks : {256, 512}) {
    Buf<float> dw(kDim, 32), p0(blocks * kDim, 33), p1(blocks * kDim, 34);
    const double ms = graphMs(10, [&](int k, cudaStream_t s) {
      CHECK_CUDA(
          launchDependent(rmsnorm::rmsNormBwdColumnsKernel<float>,
                          dim3(unsigned(kDim / rmsnorm::kColumnTile)),
                          dim3(rmsnorm::kColumnTile * rmsnorm::kColumnSlices),
                          0, s, dw.p, k % 2 ? p1.p : p0.p, blocks, kDim));
    });
    report("  bwd dw columns alone, " + std::to_string(blocks) +
               " partial rows",
           ms, double(blocks) * kDim * 4, 0);
  }
}

template <int kUnitsPerThread, int kBlockThreads>
void ropeVariant(int64_t heads, int sets, bool pdl = true) {
  const int64_t n = kBatch * kSeq * heads * kHeadDim;
  std::vector<std::unique_ptr<Buf<bf16>>> in, out;
  for (int k = 0; k < sets; ++k) {
    in.push_back(std::make_unique<Buf<bf16>>(n, 200 + k, -2.f, 2.f));
    out.push_back(std::make_unique<Buf<bf16>>(n, 220 + k));
  }
  const rt::RopeScaling unscaled;
  const rope::Geometry g =
      rope::makeGeometry(kBatch, kSeq, heads, kHeadDim, 0, kTheta, unscaled,
                         false, 8, int64_t(kBlockThreads) * kUnitsPerThread);
  rope::InvFreqs freqs{};
  for (int i = 0; i < kHeadDim / 2; ++i)
    freqs.v[i] = rt::ropeInverseFrequency(kTheta, kHeadDim, unscaled, i);
  auto kernel = rope::ropeKernel<bf16, 8, kUnitsPerThread, kBlockThreads>;
  const double ms = graphMs(2 * sets, [&](int k, cudaStream_t s) {
    if (pdl)
      CHECK_CUDA(launchDependent(kernel, dim3(unsigned(g.blocks)),
                                 dim3(kBlockThreads), rope::tableBytes(g), s,
                                 out[k % sets]->p, in[k % sets]->p, g, freqs));
    else
      kernel<<<unsigned(g.blocks), kBlockThreads, rope::tableBytes(g), s>>>(
          out[k % sets]->p, in[k % sets]->p, g, freqs);
    CHECK_CUDA(cudaGetLastError());
  });
  report("  rope heads " + std::to_string(heads) + ", " +
             std::to_string(kUnitsPerThread) + " units x " +
             std::to_string(kBlockThreads) + " thr (" +
             std::to_string(g.blocks) + " blocks)" + (pdl ? "" : ", no PDL"),
         ms, 2.0 * n * 2, 0);
}

/// The 201 gradients with `blocksFor(n)` blocks each (then
/// sumPartialsKernel where there are several), launched plainly or with
/// programmatic dependent launch.
void sumSquaresVariant(Gradients &g, const std::string &name, bool pdl,
                       const std::function<int(int64_t)> &blocksFor) {
  double bytes = 0;
  for (int64_t n : g.sizes)
    bytes += 4.0 * n;
  const double ms = graphMs(int(g.sizes.size()), [&](int k, cudaStream_t s) {
    const int blocks = blocksFor(g.sizes[k]);
    double *partials = reinterpret_cast<double *>(g.scratch->p);
    if (pdl)
      CHECK_CUDA(launchDependent(sumSquaresKernel<true>, dim3(blocks),
                                 dim3(kReduceThreads), 0, s, g.out.p + k,
                                 partials, g.tensor(k), g.sizes[k]));
    else
      sumSquaresKernel<true><<<blocks, kReduceThreads, 0, s>>>(
          g.out.p + k, partials, g.tensor(k), g.sizes[k]);
    CHECK_CUDA(cudaGetLastError());
    if (blocks > 1) {
      if (pdl)
        CHECK_CUDA(launchDependent(
            sumPartialsKernel, dim3(1), dim3(kReduceThreads), 0, s, g.out.p + k,
            static_cast<const double *>(partials), blocks));
      else
        sumPartialsKernel<<<1, kReduceThreads, 0, s>>>(g.out.p + k, partials,
                                                       blocks);
      CHECK_CUDA(cudaGetLastError());
    }
  });
  report("  sum_squares all 201, " + name, ms * g.sizes.size(), bytes, 0);
}

void variants(Gradients &g) {
  std::printf("\nCeilings and variants (direct kernel launches):\n");
  ceilings();
  // Forward: the row layouts (threads x packs), block sizes, rows per team.
  fwdVariant<1, 1>(256, 256);
  fwdVariant<2, 1>(128, 256);
  fwdVariant<2, 1>(128, 256, false);
  fwdVariant<2, 1>(128, 512);
  fwdVariant<4, 1>(64, 256);
  // Backward: the same layouts, block sizes and block counts.
  for (int64_t maxBlocks : {256, 512}) {
    for (int blockThreads : {256, 512}) {
      bwdVariant<1, 2>(256, blockThreads, maxBlocks, false);
      bwdVariant<2, 1>(128, blockThreads, maxBlocks, false);
      bwdVariant<2, 2>(128, blockThreads, maxBlocks, false);
      bwdVariant<4, 1>(64, blockThreads, maxBlocks, false);
    }
  }
  bwdVariant<2, 2>(128, 256, 256, true);
  bwdVariant<2, 2>(128, 256, 512, true);
  bwdVariant<2, 1>(128, 256, 256, true);
  bwdVariant<4, 1>(64, 256, 256, true);
  columnsAlone();
  // Rope: units per thread and block sizes, query and key shapes.
  for (int64_t heads : {kQHeads, kKvHeads}) {
    const int sets = heads == kQHeads ? 2 : 12;
    ropeVariant<1, 128>(heads, sets);
    ropeVariant<1, 128>(heads, sets, false);
    ropeVariant<2, 128>(heads, sets);
    ropeVariant<4, 128>(heads, sets);
    ropeVariant<1, 256>(heads, sets);
    ropeVariant<2, 256>(heads, sets);
    ropeVariant<2, 64>(heads, sets);
    ropeVariant<4, 64>(heads, sets);
  }
  // sum_squares: programmatic dependent launch or not, block counts.
  sumSquaresVariant(g, "launcher's, no PDL", false, sumSquaresBlocks);
  sumSquaresVariant(g, "launcher's (PDL)", true, sumSquaresBlocks);
  for (int cap : {528, 2048})
    sumSquaresVariant(g, "cap " + std::to_string(cap) + ", PDL", true,
                      [cap](int64_t n) {
                        const int64_t b = (n + 4095) / 4096;
                        return int(b < 1 ? 1 : (b > cap ? cap : b));
                      });
}

/// The variants for the 125m shape (dim 768 = 96 packs of bf16, 12 heads):
/// row layouts that leave no thread of a team idle (one warp of 3 packs, 3
/// warps of 1 pack) and rope blocks sized to whole batch entries.
void smallVariants() {
  std::printf("\nVariants, 125m shape (direct kernel launches):\n");
  ceilings();
  fwdVariant<2, 1>(64, 256); // the launcher's
  fwdVariant<3, 1>(32, 256);
  fwdVariant<3, 2>(32, 256);
  fwdVariant<3, 4>(32, 256);
  fwdVariant<3, 2>(32, 128);
  fwdVariant<1, 1>(96, 192);
  fwdVariant<1, 1>(96, 384);
  fwdVariant<1, 2>(96, 384);
  fwdVariant<4, 1>(32, 256);
  for (bool add : {false, true}) {
    bwdVariant<2, 2>(64, 256, 256, add); // the launcher's
    bwdVariant<3, 1>(32, 256, 256, add);
    bwdVariant<3, 2>(32, 256, 256, add);
    bwdVariant<3, 4>(32, 256, 256, add);
    bwdVariant<3, 2>(32, 256, 512, add);
    bwdVariant<3, 2>(32, 512, 256, add);
    bwdVariant<1, 2>(96, 384, 256, add);
    bwdVariant<1, 4>(96, 384, 256, add);
    bwdVariant<2, 1>(64, 256, 256, add);
  }
  ropeVariant<1, 128>(kQHeads, 2); // the launcher's
  ropeVariant<1, 96>(kQHeads, 2);
  ropeVariant<2, 96>(kQHeads, 2);
  ropeVariant<4, 96>(kQHeads, 2);
  ropeVariant<1, 192>(kQHeads, 2);
  ropeVariant<2, 192>(kQHeads, 2);
  ropeVariant<1, 384>(kQHeads, 2);
  ropeVariant<2, 384>(kQHeads, 2);
  ropeVariant<4, 384>(kQHeads, 2);
}

#endif // MLT_BENCH_OLD_API

} // namespace

int main(int argc, char **argv) {
  if (argc > 1)
    gReps = std::max(3, std::atoi(argv[1]));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d SMs, L2 %d MiB; median of %d graph replays\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, gReps);
#ifdef MLT_BENCH_OLD_API
  std::printf("launchers: before (MLT_BENCH_OLD_API)\n\n");
#else
  std::printf("launchers: after\n\n");
#endif
  // A second argument "sum_squares" times the copy ceiling and sum_squares
  // alone.
  const bool onlySumSquares =
      argc > 2 && std::string(argv[2]) == "sum_squares";
  if (argc > 2 && std::string(argv[2]) == "125m") {
    useSmallShape();
    copyCeiling();
    rmsNormBench();
    ropeBench();
#ifndef MLT_BENCH_OLD_API
    smallVariants();
#endif
    CHECK_CUDA(cudaDeviceSynchronize());
    return 0;
  }
  copyCeiling();
  if (!onlySumSquares) {
    rmsNormBench();
    ropeBench();
  }
  {
    Gradients g;
    CHECK_CUDA(cudaDeviceSynchronize());
    sumSquaresBench(g);
#ifndef MLT_BENCH_OLD_API
    if (!onlySumSquares)
      variants(g);
#endif
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  return 0;
}
