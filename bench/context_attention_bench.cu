//===- context_attention_bench.cu - a context-parallel rank's attention --===//
//
// Part of mlt. Times what a context-parallel rank's attention costs on one
// GPU beside the whole sequence's: the production launchers at a long
// sequence S, causal, bf16 (kernels/attention.h, one GPU's whole attention)
// and each rank's of cp G (kernels/attention_blocks.h: the rank's block of
// S / G queries against the S keys, blockwise on the same tensor-core
// kernels). Load balancing gives every rank 1/G of the causal work, so a
// rank at the whole attention's efficiency takes 1/G of its time; the
// ratio printed is (whole / G) / rank: 1.00 is parity, below is what the
// blocks lose (launch count, the merges and sums in f32). CUDA events
// around each call after a warm-up, the median of the repetitions.
//
// Usage: MLTContextAttentionBench [reps]   (results: bench/RESULTS.md)
//
//===----------------------------------------------------------------------===//

#include "BenchUtil.cuh"
#include "kernels/attention.h"
#include "kernels/attention_blocks.h"
#include "mlt/Plan/SequenceOrder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;
using bf16 = __nv_bfloat16;

namespace {

/// Median milliseconds of `reps` calls of `call` (after one warm-up).
double timeMs(int reps, const std::function<void()> &call) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  call();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(start));
    call();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return times[times.size() / 2];
}

template <typename T> T *deviceRandom(int64_t n, uint32_t seed) {
  T *p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, size_t(n) * sizeof(T)));
  bench::fillUniform<T><<<1024, 256>>>(p, n, seed, -1.f, 1.f);
  CHECK_CUDA(cudaGetLastError());
  return p;
}

struct Shape {
  const char *name;
  int64_t seq, qHeads, kvHeads, headDim;
};

} // namespace

int main(int argc, char **argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  // Llama-3.2-1B's and Llama-3.1-8B's attention (32 / 8 heads of 64 and of
  // 128), one sequence of 32,768 tokens.
  const Shape shapes[] = {{"llama-3.2-1b", 32768, 32, 8, 64},
                          {"llama-3.1-8b", 32768, 32, 8, 128}};
  std::printf("%-14s %6s %4s %5s %12s %12s %12s %7s %7s\n", "shape", "seq",
              "cp", "rank", "fwd ms", "bwd ms", "whole/cp ms", "fwd", "bwd");
  for (const Shape &s : shapes) {
    AttentionShape whole;
    whole.batch = 1;
    whole.seq = s.seq;
    whole.qHeads = s.qHeads;
    whole.kvHeads = s.kvHeads;
    whole.headDim = s.headDim;
    whole.causal = true;
    whole.scale = 1.0 / std::sqrt(double(s.headDim));
    const int64_t qn = s.seq * s.qHeads * s.headDim;
    const int64_t kvn = s.seq * s.kvHeads * s.headDim;
    bf16 *q = deviceRandom<bf16>(qn, 1), *k = deviceRandom<bf16>(kvn, 2),
         *v = deviceRandom<bf16>(kvn, 3), *dout = deviceRandom<bf16>(qn, 4);
    bf16 *out = deviceRandom<bf16>(qn, 5), *dq = deviceRandom<bf16>(qn, 6),
         *dk = deviceRandom<bf16>(kvn, 7), *dv = deviceRandom<bf16>(kvn, 8);
    float *lse = deviceRandom<float>(s.qHeads * s.seq, 9);
    size_t scratchBytes = attentionBwdScratchBytes(whole);
    for (int64_t ranks : {2, 4}) {
      AttentionShape p = whole;
      p.seq = s.seq / ranks;
      p.kvSeq = s.seq;
      p.keys = rt::SequencePositions::contextWhole(p.seq, ranks);
      p.queries = rt::SequencePositions::contextBlock(p.seq, 0, ranks);
      scratchBytes = std::max({scratchBytes, contextAttentionFwdScratchBytes(p),
                               contextAttentionBwdScratchBytes(p)});
    }
    void *scratch = nullptr;
    CHECK_CUDA(cudaMalloc(&scratch, scratchBytes));

    // The whole sequence's forward (its lse feeds the backward).
    const double wholeFwd = timeMs(reps, [&] {
      CHECK_STATUS(launchAttentionFwd(out, lse, q, k, v, whole, 0));
    });
    const double wholeBwd = timeMs(reps, [&] {
      CHECK_STATUS(launchAttentionBwd(dq, dk, dv, dout, q, k, v, out, lse,
                                      whole, scratch, scratchBytes, 0));
    });
    std::printf("%-14s %6lld %4s %5s %12.3f %12.3f %12s\n", s.name,
                (long long)s.seq, "1", "-", wholeFwd, wholeBwd, "");
    for (int64_t ranks : {2, 4})
      for (int64_t rank = 0; rank < ranks; ++rank) {
        AttentionShape p = whole;
        p.seq = s.seq / ranks;
        p.kvSeq = s.seq;
        p.queries = rt::SequencePositions::contextBlock(p.seq, rank, ranks);
        p.keys = rt::SequencePositions::contextWhole(p.seq, ranks);
        // (The rank's queries, outputs and lse: the first seq / ranks rows.)
        const double fwd = timeMs(reps, [&] {
          CHECK_STATUS(launchContextAttentionFwd(out, lse, q, k, v, p, scratch,
                                                 scratchBytes, 0));
        });
        const double bwd = timeMs(reps, [&] {
          CHECK_STATUS(launchContextAttentionBwd(dq, dk, dv, dout, q, k, v, out,
                                                 lse, p, scratch, scratchBytes,
                                                 0));
        });
        char shares[32];
        std::snprintf(shares, sizeof shares, "%.3f/%.3f", wholeFwd / ranks,
                      wholeBwd / ranks);
        std::printf("%-14s %6lld %4lld %5lld %12.3f %12.3f %12s %7.2f %7.2f\n",
                    s.name, (long long)s.seq, (long long)ranks,
                    (long long)rank, fwd, bwd, shares,
                    wholeFwd / ranks / fwd, wholeBwd / ranks / bwd);
      }
    for (void *ptr : {(void *)q, (void *)k, (void *)v, (void *)dout,
                      (void *)out, (void *)dq, (void *)dk, (void *)dv,
                      (void *)lse, scratch})
      CHECK_CUDA(cudaFree(ptr));
  }
  return 0;
}
