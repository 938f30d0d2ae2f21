//===- matmul_bench.cu - cuBLASLt configurations of the step's matmuls ----===//
//
// Part of mlt. Times every matmul shape of a TinyLlama-1.1B training step
// (bf16 activations, f32 weight gradients, micro-batch 4 x 2048 tokens: the
// plan's micro_step_first and micro_step programs) through the runtime's
// MatmulRunner ("rt") and through alternative cuBLASLt configurations of the
// same product, in one run:
//   rt      the runtime's MatmulRunner (its choice of algorithm);
//   hN      the column-major formulation the runtime uses (C^T = op(B)^T
//           op(A)^T), the heuristic's N-th proposal (it returns up to 8) when
//           offered the 32 MiB workspace: h0 is the runtime's choice before
//           bench/matmul-notes.md;
//   row0    the row-major formulation (CUBLASLT_ORDER_ROW layouts, cuBLASLt's
//           A = a, B = b, D = c: C = op(A) op(B) with M = m, N = n), the
//           heuristic's first proposal;
//   wsX     the heuristic's first proposal when offered X MiB of workspace;
//   ws0-hN  its N-th proposal when offered none;
//   h0-skS  the first proposal with CUBLASLT_ALGO_CONFIG_SPLITK_NUM = S
//           (only where cublasLtMatmulAlgoCheck accepts it);
//   h0-bf16 f32-output products (without an addend) computed with a bf16
//           output (the cost of the f32 weight gradient; checked loosely).
// Every variant accumulates in fp32 (CUBLAS_COMPUTE_32F, no fast
// accumulation). Each variant's output is compared with h0's (relative L2
// difference; different algorithms sum in different orders) and h0 with an
// fp64 dot product at 512 sampled elements. Inputs are random in [-1, 1),
// never zeros. Each variant is captured as a CUDA graph of `kPerGraph`
// launches (gaps between launches count, as in the step's graph; "nodes" is
// the graph nodes one launch adds); the graphs of a shape are replayed
// interleaved, one replay of each per round, 3 warm-up rounds then `reps`
// rounds, and the median per launch is reported; h0 is timed twice to show
// the noise. The summary weighs each shape by its launches in one step of
// one micro-batch (micro_step_first).
//
// With the filter "grouped": products of one shape sharing an operand, as
// separate launches and as one batched launch (strided, pointer array).
// With "fp8": each shape as a bf16 product and as an FP8 product, with and
// without the quantization of its operands (fp8Bench).
//
// Usage: MLTMatmulBench [reps] [filter | grouped | fp8]   (results:
// bench/matmul-notes.md)
//
//===----------------------------------------------------------------------===//

#include "BenchUtil.cuh"
#include "kernels/fp8.h"
#include "kernels/matmul.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
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
using mlt::bench::fillUniform;
using bf16 = __nv_bfloat16;

#define CHECK_CUBLAS(call)                                                     \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                        \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
                   cublasLtGetStatusString(st_));                              \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

namespace {

/// One matmul of the step: Kernels.def's ints, the output type, whether an
/// addend is added (a separate bf16 buffer for matmul_add, c itself for
/// matmul_accumulate), and its launches per program.
struct Case {
  const char *name;
  int64_t m, n, k;
  bool transposeA, transposeB;
  bool f32Out;
  enum { None, Separate, Self } addend;
  int first, later; // launches in micro_step_first, micro_step
};

// From `mlt-run models/llama/tinyllama-1.1b.mlir --dtype bf16 --batch 4
// --seq-len 2048 --print-plan` (bench/matmul-notes.md).
const Case kCases[] = {
    // Forward (x W^T) and input gradients (dy W), bf16 outputs.
    {"fwd q/o 8192x2048x2048 NT", 8192, 2048, 2048, 0, 1, 0, Case::None, 22, 22},
    {"fwd q/o +add", 8192, 2048, 2048, 0, 1, 0, Case::Separate, 22, 22},
    {"fwd k/v 8192x256x2048 NT", 8192, 256, 2048, 0, 1, 0, Case::None, 44, 44},
    {"fwd gate/up 8192x5632x2048", 8192, 5632, 2048, 0, 1, 0, Case::None, 44, 44},
    {"fwd down +add 8192x2048x5632", 8192, 2048, 5632, 0, 1, 0, Case::Separate, 22, 22},
    {"fwd lm_head 8192x32000x2048", 8192, 32000, 2048, 0, 1, 0, Case::None, 1, 1},
    {"dx 8192x2048x2048 NN", 8192, 2048, 2048, 0, 0, 0, Case::None, 22, 22},
    {"dx 8192x2048x2048 +add", 8192, 2048, 2048, 0, 0, 0, Case::Separate, 22, 22},
    {"dx k/v 8192x2048x256", 8192, 2048, 256, 0, 0, 0, Case::None, 22, 22},
    {"dx k/v 8192x2048x256 +add", 8192, 2048, 256, 0, 0, 0, Case::Separate, 22, 22},
    {"dx down 8192x5632x2048", 8192, 5632, 2048, 0, 0, 0, Case::None, 22, 22},
    {"dx gate/up 8192x2048x5632", 8192, 2048, 5632, 0, 0, 0, Case::None, 22, 22},
    {"dx gate/up +add", 8192, 2048, 5632, 0, 0, 0, Case::Separate, 22, 22},
    {"dx lm_head 8192x2048x32000", 8192, 2048, 32000, 0, 0, 0, Case::None, 1, 1},
    // Weight gradients (dy^T x, K = 8192 tokens), f32 outputs.
    {"dW q/o 2048x2048x8192", 2048, 2048, 8192, 1, 0, 1, Case::None, 44, 0},
    {"dW q/o acc", 2048, 2048, 8192, 1, 0, 1, Case::Self, 0, 44},
    {"dW k/v 256x2048x8192", 256, 2048, 8192, 1, 0, 1, Case::None, 44, 0},
    {"dW k/v acc", 256, 2048, 8192, 1, 0, 1, Case::Self, 0, 44},
    {"dW gate/up 5632x2048x8192", 5632, 2048, 8192, 1, 0, 1, Case::None, 44, 0},
    {"dW gate/up acc", 5632, 2048, 8192, 1, 0, 1, Case::Self, 0, 44},
    {"dW down 2048x5632x8192", 2048, 5632, 8192, 1, 0, 1, Case::None, 22, 0},
    {"dW down acc", 2048, 5632, 8192, 1, 0, 1, Case::Self, 0, 22},
    {"dW lm_head 32000x2048x8192", 32000, 2048, 8192, 1, 0, 1, Case::None, 1, 0},
    {"dW lm_head acc", 32000, 2048, 8192, 1, 0, 1, Case::Self, 0, 1},
    // The 125m shape (hidden 768, 16 x 1024 tokens; not in the TinyLlama
    // step's sums): q/k/v/o one at a time, and q/k/v as one product.
    {"125m fwd 16384x768x768 NT", 16384, 768, 768, 0, 1, 0, Case::None, 0, 0},
    {"125m fwd qkv 16384x2304x768 NT", 16384, 2304, 768, 0, 1, 0, Case::None, 0, 0},
    {"125m dx 16384x768x768 NN", 16384, 768, 768, 0, 0, 0, Case::None, 0, 0},
    {"125m dx qkv 16384x768x2304 NN", 16384, 768, 2304, 0, 0, 0, Case::None, 0, 0},
    {"125m dW 768x768x16384", 768, 768, 16384, 1, 0, 1, Case::None, 0, 0},
    {"125m dW qkv 2304x768x16384", 2304, 768, 16384, 1, 0, 1, Case::None, 0, 0},
};

constexpr size_t kMiB = size_t(1) << 20;

struct DevBuf {
  void *p = nullptr;
  explicit DevBuf(size_t bytes) { CHECK_CUDA(cudaMalloc(&p, bytes)); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;
};

/// A complete cuBLASLt configuration of one product: descriptors, algorithm,
/// workspace size, and which pointer plays cuBLASLt's A and B.
struct Config {
  std::string name;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool swapped = true; // cuBLASLt A <- b (the runtime's formulation)
  bool bf16Out = false;
  bool shared = false; // descriptors owned by another Config
};

void destroy(Config &c) {
  if (c.shared)
    return;
  if (c.la) cublasLtMatrixLayoutDestroy(c.la);
  if (c.lb) cublasLtMatrixLayoutDestroy(c.lb);
  if (c.lc) cublasLtMatrixLayoutDestroy(c.lc);
  if (c.desc) cublasLtMatmulDescDestroy(c.desc);
}

cublasLtMatrixLayout_t layout(cudaDataType_t t, int64_t rows, int64_t cols,
                              int64_t ld, bool rowOrder) {
  cublasLtMatrixLayout_t l;
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&l, t, rows, cols, ld));
  if (rowOrder) {
    const int32_t order = CUBLASLT_ORDER_ROW;
    CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof(order)));
  }
  return l;
}

/// The descriptors of one formulation: `swapped` is the runtime's
/// column-major C^T = op(b)^T op(a)^T, otherwise row-major C = op(a) op(b).
void describe(Config &c, const Case &cs, bool swapped, bool bf16Out) {
  c.swapped = swapped;
  c.bf16Out = bf16Out;
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&c.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cudaDataType_t outT = (cs.f32Out && !bf16Out) ? CUDA_R_32F : CUDA_R_16BF;
  cublasOperation_t opA, opB;
  if (swapped) {
    opA = cs.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
    opB = cs.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
    c.la = layout(CUDA_R_16BF, cs.transposeB ? k : n, cs.transposeB ? n : k,
                  cs.transposeB ? k : n, false);
    c.lb = layout(CUDA_R_16BF, cs.transposeA ? m : k, cs.transposeA ? k : m,
                  cs.transposeA ? m : k, false);
    c.lc = layout(outT, n, m, n, false);
  } else {
    // Row-major: a is [m, k] (ld k) or, transposed, stored [k, m] (ld m).
    opA = cs.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
    opB = cs.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
    c.la = layout(CUDA_R_16BF, cs.transposeA ? k : m, cs.transposeA ? m : k,
                  cs.transposeA ? m : k, true);
    c.lb = layout(CUDA_R_16BF, cs.transposeB ? n : k, cs.transposeB ? k : n,
                  cs.transposeB ? k : n, true);
    c.lc = layout(outT, m, n, n, true);
  }
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
      c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(
      c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
}

/// The heuristic's proposals (at most `want`) that fit `workspace` bytes.
std::vector<cublasLtMatmulAlgo_t> proposals(cublasLtHandle_t handle,
                                            const Config &c, size_t workspace,
                                            int want) {
  cublasLtMatmulPreference_t pref;
  CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace;
  CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(want);
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      handle, c.desc, c.la, c.lb, c.lc, c.lc, pref, want, results.data(),
      &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st != CUBLAS_STATUS_SUCCESS)
    return out;
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS &&
        results[i].workspaceSize <= workspace)
      out.push_back(results[i].algo);
  return out;
}

/// fp64 dot products at sampled elements of c = op(a) op(b) (+ addend0).
__global__ void sampleReference(const bf16 *a, const bf16 *b,
                                const void *addend0, bool addendF32,
                                int64_t m, int64_t n, int64_t k, bool tA,
                                bool tB, const int64_t *idx, double *out,
                                int samples) {
  const int s = blockIdx.x;
  if (s >= samples)
    return;
  const int64_t i = idx[s] / n, j = idx[s] % n;
  double acc = 0;
  for (int64_t p = threadIdx.x; p < k; p += blockDim.x) {
    const double x = __bfloat162float(tA ? a[p * m + i] : a[i * k + p]);
    const double y = __bfloat162float(tB ? b[j * k + p] : b[p * n + j]);
    acc += x * y;
  }
  __shared__ double partial[256];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double add = 0;
    if (addend0)
      add = addendF32 ? double(static_cast<const float *>(addend0)[idx[s]])
                      : double(__bfloat162float(
                            static_cast<const bf16 *>(addend0)[idx[s]]));
    out[s] = partial[0] + add;
  }
}

__global__ void roundToBf16(const float *x, bf16 *y, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}

/// sums[0] += sum (x - ref)^2, sums[1] += sum ref^2, over n elements of
/// type f32 (or bf16); a NaN in x makes sums[0] NaN.
__global__ void diffSums(const void *x, const void *ref, int64_t n, bool f32,
                         double *sums) {
  double d2 = 0, r2 = 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double xv = f32 ? static_cast<const float *>(x)[i]
                          : __bfloat162float(static_cast<const bf16 *>(x)[i]);
    const double rv =
        f32 ? static_cast<const float *>(ref)[i]
            : __bfloat162float(static_cast<const bf16 *>(ref)[i]);
    d2 += (xv - rv) * (xv - rv);
    r2 += rv * rv;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    d2 += __shfl_down_sync(0xffffffffu, d2, offset);
    r2 += __shfl_down_sync(0xffffffffu, r2, offset);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], d2);
    atomicAdd(&sums[1], r2);
  }
}

std::vector<double> toHost(const void *p, int64_t count, bool f32) {
  std::vector<double> out(count);
  if (f32) {
    std::vector<float> h(count);
    CHECK_CUDA(cudaMemcpy(h.data(), p, count * 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i)
      out[i] = h[i];
  } else {
    std::vector<bf16> h(count);
    CHECK_CUDA(cudaMemcpy(h.data(), p, count * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; ++i)
      out[i] = __bfloat162float(h[i]);
  }
  return out;
}

double relL2(const std::vector<double> &x, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = x[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::isfinite(num) ? std::sqrt(num / den) : INFINITY;
}

int gReps = 15;
constexpr int kPerGraph = 8;

/// One variant of a case: its check and its graph of kPerGraph launches.
struct Row {
  std::string variant, algo;
  double diff = 0;
  bool ok = true;
  size_t nodesPerLaunch = 0;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<double> ms;
  double median() const {
    std::vector<double> sorted = ms;
    std::sort(sorted.begin(), sorted.end());
    return sorted[sorted.size() / 2];
  }
};

/// Captures kPerGraph launches of `launch` into row's graph and counts the
/// nodes one launch adds (a cuBLASLt call may queue more than its kernel).
void capture(Row &row, const std::function<void(cudaStream_t)> &launch,
             cudaStream_t stream) {
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kPerGraph; ++i)
    launch(stream);
  CHECK_CUDA(cudaStreamEndCapture(stream, &row.graph));
  size_t nodes = 0;
  CHECK_CUDA(cudaGraphGetNodes(row.graph, nullptr, &nodes));
  row.nodesPerLaunch = nodes / kPerGraph;
  CHECK_CUDA(cudaGraphInstantiate(&row.exec, row.graph, 0));
}

/// Times every row's graph, interleaved (one replay of each row per round,
/// so that clock and temperature drift reach every variant alike), after 3
/// warm-up rounds; row.ms gets the milliseconds per launch of each round.
void timeInterleaved(std::vector<Row> &rows, cudaStream_t stream) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int r = -3; r < gReps; ++r)
    for (Row &row : rows) {
      CHECK_CUDA(cudaEventRecord(start, stream));
      CHECK_CUDA(cudaGraphLaunch(row.exec, stream));
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float t;
      CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
      if (r >= 0)
        row.ms.push_back(t / kPerGraph);
    }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  for (Row &row : rows) {
    CHECK_CUDA(cudaGraphExecDestroy(row.exec));
    CHECK_CUDA(cudaGraphDestroy(row.graph));
  }
}

/// Products of one shape that share one operand, G at a time (the q, k, v
/// products of a layer share its normalized input; their weight gradients
/// share it too): G separate launches ("sep"), one strided batch of G with
/// the other operands adjacent ("str"), and one pointer-array batch
/// (CUBLASLT_BATCH_MODE_POINTER_ARRAY, "ptr": operands anywhere). Each
/// formulation's heuristic proposals (no workspace) are timed, interleaved;
/// every output is checked against the first separate one.
struct GroupCase {
  const char *name;
  int groups;
  int64_t m, n, k;
  bool transposeA, transposeB, f32Out;
  bool sharedA; // a shared (forward: the input), else b shared (dW: x)
};
const GroupCase kGroupCases[] = {
    {"125m fwd q,k,v 16384x768x768 NT", 3, 16384, 768, 768, 0, 1, 0, true},
    {"125m dW q,k,v 768x768x16384 TN", 3, 768, 768, 16384, 1, 0, 1, false},
    {"125m fwd gate,up 16384x2048x768 NT", 2, 16384, 2048, 768, 0, 1, 0, true},
    {"125m dW gate,up 2048x768x16384 TN", 2, 2048, 768, 16384, 1, 0, 1, false},
    {"TinyLlama fwd k,v 8192x256x2048 NT", 2, 8192, 256, 2048, 0, 1, 0, true},
    {"TinyLlama dW k,v 256x2048x8192 TN", 2, 256, 2048, 8192, 1, 0, 1, false},
};

void groupedBench(cublasLtHandle_t handle, cudaStream_t stream) {
  for (const GroupCase &g : kGroupCases) {
    const int G = g.groups;
    const int64_t m = g.m, n = g.n, k = g.k;
    const int64_t aElems = m * k, bElems = k * n, cElems = m * n;
    const size_t outSize = g.f32Out ? 4 : 2;
    DevBuf a(aElems * 2 * G), b(bElems * 2 * G), c(cElems * outSize * G),
        ref(cElems * outSize * G), sums(16);
    fillUniform<<<4096, 256>>>(static_cast<bf16 *>(a.p), aElems * G, 7u, -1.f,
                               1.f);
    fillUniform<<<4096, 256>>>(static_cast<bf16 *>(b.p), bElems * G, 9u, -1.f,
                               1.f);
    CHECK_CUDA(cudaDeviceSynchronize());
    auto aAt = [&](int i) {
      return static_cast<bf16 *>(a.p) + (g.sharedA ? 0 : i * aElems);
    };
    auto bAt = [&](int i) {
      return static_cast<bf16 *>(b.p) + (g.sharedA ? i * bElems : 0);
    };
    auto cAt = [&](void *base, int i) {
      return static_cast<char *>(base) + size_t(i) * cElems * outSize;
    };
    // Device pointer arrays: cuBLASLt's A (our b), B (our a), C = D (c).
    std::vector<const void *> hostPtrs;
    for (int i = 0; i < G; ++i)
      hostPtrs.push_back(bAt(i));
    for (int i = 0; i < G; ++i)
      hostPtrs.push_back(aAt(i));
    for (int i = 0; i < G; ++i)
      hostPtrs.push_back(cAt(c.p, i));
    DevBuf ptrs(hostPtrs.size() * sizeof(void *));
    CHECK_CUDA(cudaMemcpy(ptrs.p, hostPtrs.data(),
                          hostPtrs.size() * sizeof(void *),
                          cudaMemcpyHostToDevice));
    // The arrays' device addresses, passed where the matrices' would be.
    void **ptrA = static_cast<void **>(ptrs.p);
    void **ptrB = ptrA + G;
    void **ptrC = ptrA + 2 * G;

    enum Mode { Sep, Str, Ptr };
    auto makeConfig = [&](Mode mode) {
      Config cfg;
      const Case one{g.name,       m,        n,          k, g.transposeA,
                     g.transposeB, g.f32Out, Case::None, 0, 0};
      describe(cfg, one, true, false);
      if (mode == Sep)
        return cfg;
      const int32_t count = G;
      auto batch = [&](cublasLtMatrixLayout_t l, int64_t stride) {
        CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
        if (mode == Ptr) {
          const uint32_t pointerArray = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
          CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
              l, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &pointerArray,
              sizeof(pointerArray)));
        } else {
          CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
              l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
              sizeof(stride)));
        }
      };
      batch(cfg.la, g.sharedA ? bElems : 0);
      batch(cfg.lb, g.sharedA ? 0 : aElems);
      batch(cfg.lc, cElems);
      return cfg;
    };
    const float one = 1.f, zero = 0.f;
    auto launch = [&](const Config &cfg, Mode mode,
                      const cublasLtMatmulAlgo_t &algo, void *out,
                      cudaStream_t st) {
      if (mode == Sep) {
        for (int i = 0; i < G; ++i)
          CHECK_CUBLAS(cublasLtMatmul(
              handle, cfg.desc, &one, bAt(i), cfg.la, aAt(i), cfg.lb, &zero,
              cAt(out, i), cfg.lc, cAt(out, i), cfg.lc, &algo, nullptr, 0, st));
      } else if (mode == Str) {
        CHECK_CUBLAS(cublasLtMatmul(handle, cfg.desc, &one, bAt(0), cfg.la,
                                    aAt(0), cfg.lb, &zero, out, cfg.lc, out,
                                    cfg.lc, &algo, nullptr, 0, st));
      } else {
        CHECK_CUBLAS(cublasLtMatmul(handle, cfg.desc, &one, ptrA, cfg.la, ptrB,
                                    cfg.lb, &zero, static_cast<void *>(ptrC),
                                    cfg.lc, static_cast<void *>(ptrC), cfg.lc,
                                    &algo, nullptr, 0, st));
      }
    };
    std::printf("%s, %d products [m %ld n %ld k %ld]\n", g.name, G, long(m),
                long(n), long(k));
    std::vector<Config> configs;
    std::vector<Row> rows;
    std::vector<std::pair<Mode, cublasLtMatmulAlgo_t>> what;
    bool refDone = false;
    for (Mode mode : {Sep, Str, Ptr}) {
      configs.push_back(makeConfig(mode));
      const Config &cfg = configs.back();
      const auto algos = proposals(handle, cfg, 0, 8);
      const char *tag = mode == Sep ? "sep" : mode == Str ? "str" : "ptr";
      if (algos.empty())
        std::printf("    %s: no proposal\n", tag);
      for (size_t i = 0; i < algos.size(); ++i) {
        // Checked first: the output against the first separate run.
        CHECK_CUDA(cudaMemsetAsync(c.p, 0xFF, cElems * outSize * G, stream));
        launch(cfg, mode, algos[i], c.p, stream);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        if (!refDone) {
          CHECK_CUDA(cudaMemcpy(ref.p, c.p, cElems * outSize * G,
                                cudaMemcpyDeviceToDevice));
          refDone = true;
        }
        CHECK_CUDA(cudaMemset(sums.p, 0, 16));
        diffSums<<<1024, 256>>>(c.p, ref.p, cElems * G, g.f32Out,
                                static_cast<double *>(sums.p));
        double hs[2];
        CHECK_CUDA(cudaMemcpy(hs, sums.p, 16, cudaMemcpyDeviceToHost));
        Row row;
        row.variant = std::string(tag) + "-h" + std::to_string(i);
        row.algo = mlt::cuda::describeAlgorithm(algos[i]);
        row.diff = std::sqrt(hs[0] / hs[1]);
        row.ok = std::isfinite(row.diff) && row.diff < (g.f32Out ? 1e-4 : 2e-2);
        capture(
            row,
            [&, mode, i](cudaStream_t st) {
              launch(configs.back(), mode, algos[i], c.p, st);
            },
            stream);
        rows.push_back(std::move(row));
        what.emplace_back(mode, algos[i]);
      }
    }
    timeInterleaved(rows, stream);
    const double flops = 2.0 * G * m * n * k;
    double best[3] = {1e30, 1e30, 1e30}, first[3] = {0, 0, 0};
    for (size_t r = 0; r < rows.size(); ++r) {
      const double ms = rows[r].median();
      const int mode = int(what[r].first);
      if (first[mode] == 0)
        first[mode] = ms;
      best[mode] = std::min(best[mode], ms);
      std::printf(
          "    %-8s %8.4f ms  %6.1f TFLOP/s  nodes %zu  diff %.2e %s  %s\n",
          rows[r].variant.c_str(), ms, flops / (ms * 1e-3) / 1e12,
          rows[r].nodesPerLaunch, rows[r].diff, rows[r].ok ? "ok" : "MISMATCH",
          rows[r].algo.c_str());
    }
    std::printf("  %s: separate first %.4f best %.4f | strided first %.4f "
                "best %.4f | pointer array first %.4f best %.4f ms\n",
                g.name, first[0], best[0], first[1], best[1], first[2],
                best[2]);
    for (Config &cfg : configs)
      destroy(cfg);
  }
}

/// FP8 products beside bf16 ones at the TinyLlama step's shapes (filter
/// "fp8"): per case, the runtime's bf16 product ("bf16"), the same m, n, k
/// as an FP8 product through MatmulRunner::runFp8 with both operands
/// K-contiguous ("fp8": forward products e4m3 x e4m3 with fast
/// accumulation; input and weight gradients e5m2 gradients times e4m3, f32
/// accumulation, as Transformer Engine), and that product with the current
/// scaling of both operands before it ("fp8+q": amax and quantization of
/// each, transposed where the case's layout is not K-contiguous: the cost
/// with no quantization shared between products). The output is compared
/// with the bf16 product's (relative L2: FP8's 2-3 mantissa bits, expected a
/// few percent). The summary weighs each shape by its launches in one
/// micro-batch's step.
void fp8Bench(cuda::MatmulRunner &runner, cudaStream_t stream) {
  const int64_t kMaxElems = int64_t(32000) * 8192;
  DevBuf a(kMaxElems * 2), b(kMaxElems * 2), c(kMaxElems * 4),
      ref(kMaxElems * 4), addend(kMaxElems * 4), qa(kMaxElems), qb(kMaxElems),
      scalars(64), sums(16);
  fillUniform<<<4096, 256>>>(static_cast<bf16 *>(a.p), kMaxElems, 11u, -1.f,
                             1.f);
  fillUniform<<<4096, 256>>>(static_cast<bf16 *>(b.p), kMaxElems, 23u, -0.05f,
                             0.05f);
  CHECK_CUDA(cudaDeviceSynchronize());
  // (The inverse scales 16-byte aligned: cuBLASLt's scale pointers.)
  float *amaxA = static_cast<float *>(scalars.p), *sInvA = amaxA + 4,
        *amaxB = amaxA + 8, *sInvB = amaxA + 12;
  double step[3] = {0, 0, 0};
  for (const Case &cs : kCases) {
    if (cs.first == 0)
      continue;
    const bool backward = cs.name[0] == 'd';
    const rt::ElementType aType =
        backward ? rt::ElementType::F8E5M2 : rt::ElementType::F8E4M3;
    const rt::ElementType bType = rt::ElementType::F8E4M3;
    const rt::ElementType out =
        cs.f32Out ? rt::ElementType::F32 : rt::ElementType::BF16;
    const size_t outBytes = size_t(cs.m * cs.n) * (cs.f32Out ? 4 : 2);
    // The addend in the output's type.
    if (cs.f32Out)
      fillUniform<<<4096, 256>>>(static_cast<float *>(addend.p), cs.m * cs.n,
                                 5u, -1.f, 1.f);
    else
      fillUniform<<<4096, 256>>>(static_cast<bf16 *>(addend.p), cs.m * cs.n, 5u,
                                 -1.f, 1.f);
    CHECK_CUDA(cudaDeviceSynchronize());
    const void *add = cs.addend == Case::None   ? nullptr
                      : cs.addend == Case::Self ? c.p
                                                : addend.p;
    cuda::MatmulShape bf16Shape;
    bf16Shape.m = cs.m;
    bf16Shape.n = cs.n;
    bf16Shape.k = cs.k;
    bf16Shape.transposeA = cs.transposeA;
    bf16Shape.transposeB = cs.transposeB;
    cuda::MatmulShape fp8Shape = bf16Shape;
    fp8Shape.transposeA = false;
    fp8Shape.transposeB = true;
    // The operands as the bf16 product reads them: a stored [m, k] or [k, m],
    // b [n, k] or [k, n]; quantized K-contiguous.
    auto quantize = [&](cudaStream_t st) {
      CHECK_STATUS(
          cuda::launchAbsMax(amaxA, static_cast<bf16 *>(a.p), cs.m * cs.k, st));
      uint8_t *qaAt = static_cast<uint8_t *>(qa.p);
      CHECK_STATUS(cuda::launchQuantizeFp8(
          cs.transposeA ? nullptr : qaAt, cs.transposeA ? qaAt : nullptr, sInvA,
          static_cast<bf16 *>(a.p), cs.transposeA ? cs.k : cs.m,
          cs.transposeA ? cs.m : cs.k, aType, amaxA, st));
      CHECK_STATUS(
          cuda::launchAbsMax(amaxB, static_cast<bf16 *>(b.p), cs.n * cs.k, st));
      uint8_t *qbAt = static_cast<uint8_t *>(qb.p);
      CHECK_STATUS(cuda::launchQuantizeFp8(
          cs.transposeB ? qbAt : nullptr, cs.transposeB ? nullptr : qbAt, sInvB,
          static_cast<bf16 *>(b.p), cs.transposeB ? cs.n : cs.k,
          cs.transposeB ? cs.k : cs.n, bType, amaxB, st));
    };
    auto runBf16 = [&](cudaStream_t st) {
      CHECK_STATUS(runner.run(bf16Shape, a.p, b.p, c.p, rt::ElementType::BF16,
                              out, add, st));
    };
    auto runFp8 = [&](cudaStream_t st) {
      CHECK_STATUS(runner.runFp8(fp8Shape, qa.p, aType, sInvA, qb.p, bType,
                                 sInvB, c.p, out, add, !backward, st));
    };
    // Checked once: the FP8 product against the bf16 one (outputs from the
    // same initial c: an accumulating case starts from zeros).
    CHECK_CUDA(cudaMemsetAsync(c.p, 0, outBytes, stream));
    runBf16(stream);
    CHECK_CUDA(cudaMemcpyAsync(ref.p, c.p, outBytes, cudaMemcpyDeviceToDevice,
                               stream));
    CHECK_CUDA(cudaMemsetAsync(c.p, 0, outBytes, stream));
    quantize(stream);
    runFp8(stream);
    CHECK_CUDA(cudaMemsetAsync(sums.p, 0, 16, stream));
    diffSums<<<1024, 256, 0, stream>>>(c.p, ref.p, cs.m * cs.n, cs.f32Out,
                                       static_cast<double *>(sums.p));
    double h[2];
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemcpy(h, sums.p, 16, cudaMemcpyDeviceToHost));
    const double diff = std::sqrt(h[0] / h[1]);

    std::vector<Row> rows(3);
    rows[0].variant = "bf16";
    rows[1].variant = "fp8";
    rows[2].variant = "fp8+q";
    capture(rows[0], runBf16, stream);
    capture(rows[1], runFp8, stream);
    capture(
        rows[2],
        [&](cudaStream_t st) {
          quantize(st);
          runFp8(st);
        },
        stream);
    timeInterleaved(rows, stream);
    const double flops = 2.0 * cs.m * cs.n * cs.k;
    std::printf("%-32s", cs.name);
    for (int r = 0; r < 3; ++r) {
      const double ms = rows[r].median();
      step[r] += ms * cs.first;
      std::printf("  %s %.4f ms %6.1f TFLOP/s", rows[r].variant.c_str(), ms,
                  flops / (ms * 1e-3) / 1e12);
    }
    std::printf("  fp8 vs bf16 %.2e %s\n", diff,
                diff < 0.1 ? "ok" : "MISMATCH");
  }
  // The quantization kernels alone, at the step's activation and weight
  // sizes: microseconds per launch and the memory rate they reach (amax
  // reads 2 bytes an element; quantization reads 2 and writes 1, both
  // layouts at once 2 more).
  struct Tensor {
    const char *name;
    int64_t rows, cols;
  };
  const Tensor kTensors[] = {{"activation 8192x2048", 8192, 2048},
                             {"activation 8192x5632", 8192, 5632},
                             {"weight 2048x2048", 2048, 2048},
                             {"weight 5632x2048", 5632, 2048}};
  for (const Tensor &t : kTensors) {
    const int64_t n = t.rows * t.cols;
    std::vector<Row> rows(4);
    rows[0].variant = "amax";
    rows[1].variant = "quantize";
    rows[2].variant = "quantize^T";
    rows[3].variant = "both";
    capture(
        rows[0],
        [&](cudaStream_t st) {
          CHECK_STATUS(
              cuda::launchAbsMax(amaxA, static_cast<bf16 *>(a.p), n, st));
        },
        stream);
    for (int r = 1; r < 4; ++r)
      capture(
          rows[r],
          [&, r](cudaStream_t st) {
            uint8_t *q = static_cast<uint8_t *>(qa.p);
            uint8_t *qT = static_cast<uint8_t *>(qb.p);
            CHECK_STATUS(cuda::launchQuantizeFp8(
                r == 2 ? nullptr : q, r == 1 ? nullptr : qT, sInvA,
                static_cast<bf16 *>(a.p), t.rows, t.cols,
                rt::ElementType::F8E4M3, amaxA, st));
          },
          stream);
    timeInterleaved(rows, stream);
    std::printf("%-24s", t.name);
    for (int r = 0; r < 4; ++r) {
      const double ms = rows[r].median();
      const double bytes = double(n) * (r == 0 ? 2 : r == 3 ? 4 : 3);
      std::printf("  %s %.1f us %.0f GB/s", rows[r].variant.c_str(), ms * 1e3,
                  bytes / (ms * 1e-3) / 1e9);
    }
    std::printf("\n");
  }
  std::printf("fp8 step (one micro-batch, micro_step_first launches): bf16 "
              "%.2f ms, fp8 %.2f ms (%.2fx), fp8 with unshared current "
              "scaling %.2f ms (%.2fx)\n",
              step[0], step[1], step[0] / step[1], step[2], step[0] / step[2]);
}
} // namespace

int main(int argc, char **argv) {
  if (argc > 1)
    gReps = std::max(3, std::atoi(argv[1]));
  const char *filter = argc > 2 ? argv[2] : nullptr;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, cuBLASLt %zu, reps %d, %d launches/graph\n",
              prop.name, prop.multiProcessorCount, cublasLtGetVersion(), gReps,
              kPerGraph);
  cublasLtHandle_t handle;
  CHECK_CUBLAS(cublasLtCreate(&handle));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const size_t kMaxWorkspace = 128 * kMiB;
  DevBuf workspace(kMaxWorkspace);
  auto created = cuda::MatmulRunner::create();
  if (!created) {
    std::fprintf(stderr, "%s\n", created.status().message().c_str());
    return 1;
  }
  std::unique_ptr<cuda::MatmulRunner> runner = std::move(*created);
  if (filter && std::strcmp(filter, "grouped") == 0) {
    groupedBench(handle, stream);
    return 0;
  }
  if (filter && std::strcmp(filter, "fp8") == 0) {
    fp8Bench(*runner, stream);
    return 0;
  }

  // Largest operands: 32000 x 8192 bf16 each; outputs up to 32000 x 8192.
  const int64_t kMaxElems = int64_t(32000) * 8192;
  DevBuf a(kMaxElems * 2), b(kMaxElems * 2), addend(kMaxElems * 4),
      c(kMaxElems * 4), ref(kMaxElems * 4), initial(kMaxElems * 4),
      rounded(kMaxElems * 2);
  fillUniform<<<4096, 256>>>(static_cast<bf16 *>(a.p), kMaxElems, 11u, -1.f, 1.f);
  fillUniform<<<4096, 256>>>(static_cast<bf16 *>(b.p), kMaxElems, 23u, -1.f, 1.f);
  CHECK_CUDA(cudaGetLastError());
  constexpr int kSamples = 512;
  DevBuf sampleIdx(kSamples * 8), sampleOut(kSamples * 8), sums(16);
  CHECK_CUDA(cudaDeviceSynchronize());

  // Clocks up: a second of large products before the first timing.
  {
    Config warm;
    const Case big{"warm", 8192, 8192, 8192, 0, 1, 0, Case::None, 0, 0};
    describe(warm, big, true, false);
    auto algos = proposals(handle, warm, 32 * kMiB, 1);
    const float one = 1, zero = 0;
    for (int i = 0; i < 700; ++i)
      CHECK_CUBLAS(cublasLtMatmul(handle, warm.desc, &one, b.p, warm.la, a.p,
                                  warm.lb, &zero, c.p, warm.lc, c.p, warm.lc,
                                  &algos[0], workspace.p, 32 * kMiB, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    destroy(warm);
  }

  double stepRt = 0, stepBest = 0;
  bool allOk = true;
  std::vector<std::string> summary;
  for (const Case &cs : kCases) {
    if (filter && !std::strstr(cs.name, filter))
      continue;
    const int64_t outElems = cs.m * cs.n;
    const bool f32 = cs.f32Out;
    const size_t outBytes = size_t(outElems) * (f32 ? 4 : 2);
    // Fresh random addend and initial output for this case.
    const uint32_t seed = uint32_t(cs.m * 31 + cs.n * 7 + cs.k);
    if (f32)
      fillUniform<<<4096, 256>>>(static_cast<float *>(initial.p), outElems,
                                 seed, -4.f, 4.f);
    else
      fillUniform<<<4096, 256>>>(static_cast<bf16 *>(initial.p), outElems, seed,
                                 -4.f, 4.f);
    if (f32)
      fillUniform<<<4096, 256>>>(static_cast<float *>(addend.p), outElems,
                                 seed + 1, -4.f, 4.f);
    else
      fillUniform<<<4096, 256>>>(static_cast<bf16 *>(addend.p), outElems,
                                 seed + 1, -4.f, 4.f);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize()); // the fills ran on stream 0
    // The addend pointer of a run writing `out`: c itself (accumulate) or
    // the separate buffer.
    auto addendFor = [&](void *out) -> const void * {
      return cs.addend == Case::Self       ? out
             : cs.addend == Case::Separate ? addend.p
                                           : nullptr;
    };
    // Resets c before a checked run (accumulate reads it).
    auto reset = [&]() {
      CHECK_CUDA(cudaMemcpyAsync(c.p, initial.p, outBytes,
                                 cudaMemcpyDeviceToDevice, stream));
    };

    // Sampled fp64 reference (the addend is the initial c for accumulate).
    std::vector<int64_t> idx(kSamples);
    for (int s = 0; s < kSamples; ++s)
      idx[s] = (int64_t(s) * 2654435761ll + seed) % outElems;
    CHECK_CUDA(cudaMemcpy(sampleIdx.p, idx.data(), kSamples * 8,
                          cudaMemcpyHostToDevice));
    sampleReference<<<kSamples, 256, 0, stream>>>(
        static_cast<bf16 *>(a.p), static_cast<bf16 *>(b.p),
        cs.addend == Case::Self ? initial.p : addendFor(c.p), f32, cs.m, cs.n,
        cs.k, cs.transposeA, cs.transposeB,
        static_cast<int64_t *>(sampleIdx.p), static_cast<double *>(sampleOut.p),
        kSamples);
    CHECK_CUDA(cudaGetLastError());
    std::vector<double> sampled(kSamples);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    CHECK_CUDA(cudaMemcpy(sampled.data(), sampleOut.p, kSamples * 8,
                          cudaMemcpyDeviceToHost));

    std::vector<Row> rows;
    bool haveH0 = false;
    // A variant: `run(out, stream)` queues one product into out.
    auto measure = [&](const std::string &variant, const std::string &algo,
                       const std::function<bool(void *, cudaStream_t)> &run,
                       bool interchangeable) {
      // Checked run into c (poisoned first: NaN bytes).
      reset();
      if (cs.addend != Case::Self)
        CHECK_CUDA(cudaMemsetAsync(c.p, 0xFF, outBytes, stream));
      if (!run(c.p, stream)) {
        std::printf("    %-10s not runnable (%s)\n", variant.c_str(),
                    algo.c_str());
        return;
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      CHECK_CUDA(cudaGetLastError());
      // A bf16-output variant of an f32 product is compared in f32 terms.
      const bool outF32 = f32 && variant.find("bf16") == std::string::npos;
      Row row{variant, algo};
      if (!haveH0) {
        // h0 against the fp64 samples, then kept in `ref`.
        const size_t elementBytes = outF32 ? 4 : 2;
        std::vector<double> at(kSamples);
        for (int s = 0; s < kSamples; ++s)
          at[s] = toHost(static_cast<char *>(c.p) + idx[s] * elementBytes, 1,
                         outF32)[0];
        row.diff = relL2(at, sampled);
        row.ok = row.diff < (f32 ? 1e-5 : 1e-2);
        CHECK_CUDA(cudaMemcpy(ref.p, c.p, outBytes, cudaMemcpyDeviceToDevice));
        haveH0 = true;
      } else {
        // A bf16 output of an f32 product: h0 rounded to bf16 first.
        const void *against = ref.p;
        if (!outF32 && f32) {
          roundToBf16<<<4096, 256, 0, stream>>>(
              static_cast<const float *>(ref.p), static_cast<bf16 *>(rounded.p),
              outElems);
          CHECK_CUDA(cudaGetLastError());
          against = rounded.p;
        }
        CHECK_CUDA(cudaMemsetAsync(sums.p, 0, 16, stream));
        diffSums<<<1024, 256, 0, stream>>>(c.p, against, outElems, outF32,
                                           static_cast<double *>(sums.p));
        CHECK_CUDA(cudaGetLastError());
        double h[2];
        CHECK_CUDA(cudaStreamSynchronize(stream));
        CHECK_CUDA(cudaMemcpy(h, sums.p, 16, cudaMemcpyDeviceToHost));
        row.diff = std::isfinite(h[0]) ? std::sqrt(h[0] / h[1]) : INFINITY;
        const double tol = (!interchangeable || !outF32) ? 1e-2 : 1e-5;
        row.ok = row.diff < tol;
      }
      // Timed later, interleaved (accumulate keeps adding into c: the same
      // work each time).
      capture(row, [&](cudaStream_t s) { (void)run(c.p, s); }, stream);
      rows.push_back(std::move(row));
    };

    auto lt = [&](Config &cfg, const cublasLtMatmulAlgo_t &algo) {
      return [&, algo](void *out, cudaStream_t s) {
        const float one = 1.0f;
        const void *add = addendFor(out);
        const float beta = add ? 1.0f : 0.0f;
        const void *A = cfg.swapped ? b.p : a.p;
        const void *B = cfg.swapped ? a.p : b.p;
        return cublasLtMatmul(handle, cfg.desc, &one, A, cfg.la, B, cfg.lb,
                              &beta, add ? add : out, cfg.lc, out, cfg.lc,
                              &algo, workspace.p, cfg.workspace,
                              s) == CUBLAS_STATUS_SUCCESS;
      };
    };

    // rt: the runtime's MatmulRunner.
    cuda::MatmulShape shape;
    shape.m = cs.m;
    shape.n = cs.n;
    shape.k = cs.k;
    shape.transposeA = cs.transposeA;
    shape.transposeB = cs.transposeB;
    const rt::ElementType outType =
        f32 ? rt::ElementType::F32 : rt::ElementType::BF16;

    // Column-major (runtime) formulation, proposals 0..15.
    Config col;
    col.workspace = 32 * kMiB;
    describe(col, cs, true, false);
    auto colAlgos = proposals(handle, col, col.workspace, 16);
    if (colAlgos.empty()) {
      std::printf("%s: no proposals\n", cs.name);
      allOk = false;
      continue;
    }
    measure("h0", mlt::cuda::describeAlgorithm(colAlgos[0]),
            lt(col, colAlgos[0]), true);
    measure("rt", "MatmulRunner",
            [&](void *out, cudaStream_t s) {
              return runner
                  ->run(shape, a.p, b.p, out, rt::ElementType::BF16, outType,
                        addendFor(out), s)
                  .isOk();
            },
            true);
    measure("h0-again", mlt::cuda::describeAlgorithm(colAlgos[0]),
            lt(col, colAlgos[0]), true);
    for (size_t i = 1; i < colAlgos.size(); ++i)
      measure("h" + std::to_string(i),
              mlt::cuda::describeAlgorithm(colAlgos[i]), lt(col, colAlgos[i]),
              true);

    // Row-major formulation.
    Config row;
    row.workspace = 32 * kMiB;
    describe(row, cs, false, false);
    auto rowAlgos = proposals(handle, row, row.workspace, 16);
    if (rowAlgos.empty())
      std::printf("    row-major: no proposals\n");
    // (Its proposals are the column-major ones in the same order, timed
    // alike in the first run: bench/matmul-notes.md; the first is kept.)
    if (!rowAlgos.empty())
      measure("row0", mlt::cuda::describeAlgorithm(rowAlgos[0]),
              lt(row, rowAlgos[0]), true);

    // Workspace sizes: the first proposal under each limit.
    std::vector<Config> wsConfigs(3);
    const size_t wsMiB[] = {0, 4, 128};
    for (int w = 0; w < 3; ++w) {
      Config &cfg = wsConfigs[w];
      cfg = col;
      cfg.shared = true;
      cfg.workspace = wsMiB[w] * kMiB;
      auto algos = proposals(handle, cfg, cfg.workspace, 1);
      if (!algos.empty())
        measure("ws" + std::to_string(wsMiB[w]),
                mlt::cuda::describeAlgorithm(algos[0]), lt(cfg, algos[0]),
                true);
    }

    // The proposals for no workspace at all; the first also launched with
    // the 32 MiB workspace offered (ws0@32), and h0 with none (h0@0): is the
    // difference the algorithm or the workspace at launch?
    Config none = col;
    none.shared = true;
    none.workspace = 0;
    auto noneAlgos = proposals(handle, none, 0, 8);
    if (!noneAlgos.empty())
      measure("ws0@32", mlt::cuda::describeAlgorithm(noneAlgos[0]),
              lt(col, noneAlgos[0]), true);
    measure("h0@0", mlt::cuda::describeAlgorithm(colAlgos[0]),
            lt(none, colAlgos[0]), true);
    for (size_t i = 1; i < noneAlgos.size(); ++i)
      measure("ws0-h" + std::to_string(i),
              mlt::cuda::describeAlgorithm(noneAlgos[i]),
              lt(none, noneAlgos[i]), true);

    // Split-K on the first proposal, where the output is under two waves
    // of 128 x 128 tiles.
    if ((cs.m / 128) * (cs.n / 128) < 2 * prop.multiProcessorCount) {
      for (int32_t splits : {2, 4, 8}) {
        cublasLtMatmulAlgo_t algo = colAlgos[0];
        CHECK_CUBLAS(cublasLtMatmulAlgoConfigSetAttribute(
            &algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)));
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoCheck(handle, col.desc, col.la, col.lb, col.lc,
                                    col.lc, &algo, &check) !=
                CUBLAS_STATUS_SUCCESS ||
            check.workspaceSize > col.workspace) {
          std::printf("    h0-sk%d rejected by cublasLtMatmulAlgoCheck\n",
                      splits);
          continue;
        }
        measure("h0-sk" + std::to_string(splits),
                mlt::cuda::describeAlgorithm(algo), lt(col, algo), true);
      }
    }

    // The bf16-output cost of an f32 product (not interchangeable).
    Config half;
    half.workspace = 32 * kMiB;
    if (f32 && cs.addend == Case::None) {
      describe(half, cs, true, true);
      auto algos = proposals(handle, half, half.workspace, 1);
      if (!algos.empty())
        measure("h0-bf16", mlt::cuda::describeAlgorithm(algos[0]),
                lt(half, algos[0]), false);
    }

    timeInterleaved(rows, stream);

    // Report.
    const double gflop = 2.0 * cs.m * cs.n * cs.k * 1e-9;
    std::printf("%s [m %lld n %lld k %lld tA %d tB %d %s%s] x%d first, x%d "
                "later\n",
                cs.name, (long long)cs.m, (long long)cs.n, (long long)cs.k,
                cs.transposeA, cs.transposeB, f32 ? "f32 out" : "bf16 out",
                cs.addend == Case::Self       ? ", += c"
                : cs.addend == Case::Separate ? ", + addend"
                                              : "",
                cs.first, cs.later);
    double rtMs = 0, bestMs = 1e30;
    std::string bestName;
    for (const Row &r : rows) {
      const double ms = r.median();
      std::printf("    %-10s %8.4f ms %6.1f TFLOP/s  nodes %zu  diff %.2e %s  "
                  "%s\n",
                  r.variant.c_str(), ms, gflop / ms, r.nodesPerLaunch, r.diff,
                  r.ok ? "ok" : "MISMATCH", r.algo.c_str());
      allOk = allOk && r.ok;
      if (r.variant == "rt")
        rtMs = ms;
      if (r.variant.find("bf16") == std::string::npos && ms < bestMs) {
        bestMs = ms;
        bestName = r.variant;
      }
    }
    stepRt += cs.first * rtMs;
    stepBest += cs.first * bestMs;
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%-30s x%-3d rt %7.4f ms (%5.1f)  best %-9s %7.4f ms (%5.1f)"
                  "  step %+6.3f ms",
                  cs.name, cs.first, rtMs, gflop / rtMs, bestName.c_str(),
                  bestMs, gflop / bestMs, cs.first * (bestMs - rtMs));
    summary.push_back(line);
    destroy(col);
    destroy(row);
    if (half.desc)
      destroy(half);
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  std::printf("\nsummary (TFLOP/s in parentheses; step = micro_step_first "
              "launches x (best - rt)):\n");
  for (const std::string &s : summary)
    std::printf("  %s\n", s.c_str());
  std::printf("micro_step_first matmuls: rt %.2f ms, best per shape %.2f ms\n",
              stepRt, stepBest);
  std::printf("%s\n", allOk ? "all variants agree" : "MISMATCHES (see above)");
  cublasLtDestroy(handle);
  return allOk ? 0 : 1;
}
