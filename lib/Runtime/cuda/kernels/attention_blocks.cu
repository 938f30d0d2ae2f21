//===- attention_blocks.cu - a context-parallel rank's attention ----------===//
//
// Part of mlt. See attention_blocks.h. The pairs' launches are attention.h's
// bf16 forward and backward at seq C; here are the small kernels that merge
// and sum what they give, and the loops over batch entries and pairs.
//
//===----------------------------------------------------------------------===//

#include "kernels/attention_blocks.h"

#include "CudaCheck.h"
#include "kernels/common.cuh"
#include "kernels/elementwise.h"
#include "mlt/Plan/SequenceOrder.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace mlt;
using namespace mlt::cuda;

namespace {

using bf16 = __nv_bfloat16;

/// One pair's forward, merged into the query chunk's accumulators: accO
/// [C, heads, D] f32 and accLse [heads, C] (both taken as they are when
/// `first`). o rows of the pair's output partO, lse partLse [heads, C].
__global__ void mergeOutputKernel(float *accO, const float *accLse,
                                  const bf16 *partO, const float *partLse,
                                  int64_t rows, int heads, int headDim,
                                  bool first) {
  const int64_t n = rows * heads * headDim;
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount()) {
    const int64_t rowHead = e / headDim;
    const int64_t i = rowHead / heads, h = rowHead % heads;
    const float part = toCompute(partO[e]);
    if (first) {
      accO[e] = part;
      continue;
    }
    const float l1 = accLse[h * rows + i], l2 = partLse[h * rows + i];
    const float m = fmaxf(l1, l2);
    const float w1 = expf(l1 - m), w2 = expf(l2 - m);
    accO[e] = (w1 * accO[e] + w2 * part) / (w1 + w2);
  }
}

/// The merged log-sum-exp (after mergeOutputKernel read the old one).
__global__ void mergeLseKernel(float *accLse, const float *partLse, int64_t n,
                               bool first) {
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount()) {
    const float l2 = partLse[e];
    if (first) {
      accLse[e] = l2;
      continue;
    }
    const float l1 = accLse[e], m = fmaxf(l1, l2);
    accLse[e] = m + logf(expf(l1 - m) + expf(l2 - m));
  }
}

/// The query chunk's results into the rank's tensors: out rows (bf16,
/// [C, heads, D] at `out`) and its columns of lse [heads, 2C] (`lse` at the
/// chunk's first column, row stride `lseStride`).
__global__ void finishChunkKernel(bf16 *out, float *lse, const float *accO,
                                  const float *accLse, int64_t rows, int heads,
                                  int headDim, int64_t lseStride) {
  const int64_t n = rows * heads * headDim;
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount())
    out[e] = fromCompute<bf16>(accO[e]);
  for (int64_t e = globalThreadIndex(); e < rows * heads;
       e += globalThreadCount()) {
    const int64_t h = e / rows, i = e % rows;
    lse[h * lseStride + i] = accLse[e];
  }
}

/// A query chunk that sees none of the keys (a ring step's block all after
/// it): out rows 0, its columns of lse -inf.
__global__ void emptyChunkKernel(bf16 *out, float *lse, int64_t rows,
                                 int heads, int headDim, int64_t lseStride) {
  const int64_t n = rows * heads * headDim;
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount())
    out[e] = fromCompute<bf16>(0.f);
  for (int64_t e = globalThreadIndex(); e < rows * heads;
       e += globalThreadCount()) {
    const int64_t h = e / rows, i = e % rows;
    lse[h * lseStride + i] = -INFINITY;
  }
}

/// acc += part, n elements (f32 += bf16).
__global__ void accumulateKernel(float *acc, const bf16 *part, int64_t n) {
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount())
    acc[e] += toCompute(part[e]);
}

unsigned gridFor(int64_t n) {
  const int64_t blocks = (n + 255) / 256;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t(255); }

/// The rank's geometry: chunk C (the sequence is 2G chunks), ranks G, the
/// position (in chunks) of each chunk of its queries (two, its block's, or
/// all 2G in the load-balanced order: the all-to-all exchange's) and, in
/// order of position, the key chunks (the whole sequence's 2G, or a ring
/// step's two) with the chunk of the key tensor that holds each.
struct Blocks {
  int64_t chunk = 0, ranks = 1;
  std::vector<int64_t> chunks;
  struct KeyChunk {
    int64_t position, slot;
  };
  std::vector<KeyChunk> keys;
};

Blocks blocksOf(const AttentionShape &p) {
  Blocks g;
  g.ranks = p.queries.ranks;
  g.chunk = p.queries.chunk;
  for (int64_t row = 0; row < p.seq; row += g.chunk)
    g.chunks.push_back(p.queries(row) / g.chunk);
  for (int64_t row = 0; row < p.keyRows(); row += g.chunk)
    g.keys.push_back({p.keys(row) / g.chunk, row / g.chunk});
  std::sort(g.keys.begin(), g.keys.end(),
            [](const Blocks::KeyChunk &a, const Blocks::KeyChunk &b) {
              return a.position < b.position;
            });
  return g;
}

/// One pair's shape: a query chunk and a key chunk of C rows, one batch
/// entry, natural positions; causal on the diagonal.
AttentionShape pairShape(const AttentionShape &p, int64_t chunk, bool causal) {
  AttentionShape s;
  s.batch = 1;
  s.seq = chunk;
  s.qHeads = p.qHeads;
  s.kvHeads = p.kvHeads;
  s.headDim = p.headDim;
  s.scale = p.scale;
  s.causal = causal;
  return s;
}

Status checkShape(const char *kernel, const AttentionShape &p) {
  MLT_RETURN_IF_ERROR(cpu::checkAttentionParams(kernel, p));
  if (!isContextBlockShape(p))
    return errorf(kernel, ": not a context-parallel rank's block of queries "
                          "(or the whole sequence's) against the whole "
                          "sequence's keys");
  if (p.headDim != 64 && p.headDim != 128)
    return errorf(kernel, ": head_dim ", p.headDim,
                  " is not supported by the bf16 tensor-core kernels (64 and "
                  "128 are)");
  return Status::ok();
}

/// Forward scratch: partO bf16 [C, h, D], partLse, accLse f32 [h, C], accO
/// f32 [C, h, D].
struct FwdScratch {
  size_t partO, partLse, accLse, accO, total;
  explicit FwdScratch(const AttentionShape &p) {
    const size_t c = size_t(blocksOf(p).chunk),
                 q = c * size_t(p.qHeads * p.headDim);
    partO = 0;
    partLse = partO + align256(q * sizeof(bf16));
    accLse = partLse + align256(c * size_t(p.qHeads) * sizeof(float));
    accO = accLse + align256(c * size_t(p.qHeads) * sizeof(float));
    total = accO + align256(q * sizeof(float));
  }
};

/// Backward scratch: the pair's dq, dk, dv (bf16), the chunk's lse
/// [h, C], dq's f32 sum [C, h, D], dk's and dv's [kvSeq, hkv, D], then the
/// tensor-core backward's own.
struct BwdScratch {
  size_t dqPart, dkPart, dvPart, lse, dqAcc, dkAcc, dvAcc, kernel, total;
  explicit BwdScratch(const AttentionShape &p) {
    const size_t c = size_t(blocksOf(p).chunk);
    const size_t q = c * size_t(p.qHeads * p.headDim);
    const size_t kv = c * size_t(p.kvHeads * p.headDim);
    const size_t kvAll = size_t(p.keyRows()) * size_t(p.kvHeads * p.headDim);
    dqPart = 0;
    dkPart = dqPart + align256(q * sizeof(bf16));
    dvPart = dkPart + align256(kv * sizeof(bf16));
    lse = dvPart + align256(kv * sizeof(bf16));
    dqAcc = lse + align256(c * size_t(p.qHeads) * sizeof(float));
    dkAcc = dqAcc + align256(q * sizeof(float));
    dvAcc = dkAcc + align256(kvAll * sizeof(float));
    kernel = dvAcc + align256(kvAll * sizeof(float));
    total = kernel + align256(attentionBwdScratchBytes(
                         pairShape(p, int64_t(c), /*causal=*/true)));
  }
};

} // namespace

bool mlt::cuda::isContextBlockShape(const AttentionShape &p) {
  const int64_t ranks = p.queries.ranks;
  if (!p.causal || ranks < 2 || p.seq < 2)
    return false;
  if (p.ringStep >= 0) { // a ring step: the rank's block, another's keys
    if (p.seq % 2 != 0 || p.keyRows() != p.seq || p.queries.first % p.seq ||
        p.keys.first % p.seq)
      return false;
    const int64_t coordinate = p.queries.first / p.seq;
    const int64_t holder = p.keys.first / p.seq;
    return coordinate < ranks && holder < ranks &&
           p.queries == rt::SequencePositions::contextBlock(p.seq, coordinate,
                                                            ranks) &&
           p.keys ==
               rt::SequencePositions::contextBlock(p.seq, holder, ranks);
  }
  if (p.keyRows() == p.seq) // the whole sequence's queries
    return p.seq % (2 * ranks) == 0 &&
           p.queries == rt::SequencePositions::contextWhole(p.seq / ranks,
                                                            ranks) &&
           p.keys == p.queries;
  if (p.seq % 2 != 0 || p.keyRows() != p.seq * ranks)
    return false;
  const int64_t coordinate = p.queries.first / p.seq;
  const rt::SequencePositions block =
      rt::SequencePositions::contextBlock(p.seq, coordinate, ranks);
  const rt::SequencePositions whole =
      rt::SequencePositions::contextWhole(p.seq, ranks);
  return p.queries.first % p.seq == 0 && coordinate < ranks &&
         p.queries == block && p.keys == whole;
}

size_t mlt::cuda::contextAttentionFwdScratchBytes(const AttentionShape &p) {
  return isContextBlockShape(p) ? FwdScratch(p).total : 0;
}

size_t mlt::cuda::contextAttentionBwdScratchBytes(const AttentionShape &p) {
  return isContextBlockShape(p) ? BwdScratch(p).total : 0;
}

Status mlt::cuda::launchContextAttentionFwd(
    bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
    const AttentionShape &p, void *scratch, size_t scratchBytes,
    cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkShape("attention (context-parallel, bf16)", p));
  const FwdScratch layout(p);
  if (!scratch || scratchBytes < layout.total)
    return errorf("attention (context-parallel, bf16): ", scratchBytes,
                  " bytes of scratch given, ", layout.total, " needed");
  auto *base = static_cast<uint8_t *>(scratch);
  auto *partO = reinterpret_cast<bf16 *>(base + layout.partO);
  auto *partLse = reinterpret_cast<float *>(base + layout.partLse);
  auto *accLse = reinterpret_cast<float *>(base + layout.accLse);
  auto *accO = reinterpret_cast<float *>(base + layout.accO);

  const Blocks g = blocksOf(p);
  const int64_t C = g.chunk, H = p.qHeads, HKV = p.kvHeads, D = p.headDim;
  const int64_t qRow = H * D, kvRow = HKV * D;
  for (int64_t b = 0; b < p.batch; ++b)
    for (size_t x = 0; x < g.chunks.size(); ++x) {
      const int64_t chunk = g.chunks[x];
      const bf16 *qX = q + (b * p.seq + x * C) * qRow;
      bool first = true;
      for (const Blocks::KeyChunk &key : g.keys) {
        if (key.position > chunk)
          break;
        const int64_t keyRow = b * p.keyRows() + key.slot * C;
        MLT_RETURN_IF_ERROR(launchAttentionFwd(
            partO, partLse, qX, k + keyRow * kvRow, v + keyRow * kvRow,
            pairShape(p, C, key.position == chunk), stream));
        mergeOutputKernel<<<gridFor(C * qRow), 256, 0, stream>>>(
            accO, accLse, partO, partLse, C, int(H), int(D), first);
        MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention (context-parallel) merge");
        mergeLseKernel<<<gridFor(C * H), 256, 0, stream>>>(accLse, partLse,
                                                          C * H, first);
        MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention (context-parallel) merge");
        first = false;
      }
      if (first) { // no key chunk at or before this one
        emptyChunkKernel<<<gridFor(C * qRow), 256, 0, stream>>>(
            out + (b * p.seq + x * C) * qRow, lse + b * H * p.seq + x * C, C,
            int(H), int(D), p.seq);
        MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention (context-parallel) empty");
        continue;
      }
      finishChunkKernel<<<gridFor(C * qRow), 256, 0, stream>>>(
          out + (b * p.seq + x * C) * qRow, lse + b * H * p.seq + x * C, accO,
          accLse, C, int(H), int(D), p.seq);
      MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention (context-parallel) finish");
    }
  return Status::ok();
}

Status mlt::cuda::launchContextAttentionBwd(
    bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q,
    const bf16 *k, const bf16 *v, const bf16 *out, const float *lse,
    const AttentionShape &p, void *scratch, size_t scratchBytes,
    cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(
      checkShape("attention backward (context-parallel, bf16)", p));
  const BwdScratch layout(p);
  if (!scratch || scratchBytes < layout.total)
    return errorf("attention backward (context-parallel, bf16): ",
                  scratchBytes, " bytes of scratch given, ", layout.total,
                  " needed");
  auto *base = static_cast<uint8_t *>(scratch);
  auto *dqPart = reinterpret_cast<bf16 *>(base + layout.dqPart);
  auto *dkPart = reinterpret_cast<bf16 *>(base + layout.dkPart);
  auto *dvPart = reinterpret_cast<bf16 *>(base + layout.dvPart);
  auto *lseX = reinterpret_cast<float *>(base + layout.lse);
  auto *dqAcc = reinterpret_cast<float *>(base + layout.dqAcc);
  auto *dkAcc = reinterpret_cast<float *>(base + layout.dkAcc);
  auto *dvAcc = reinterpret_cast<float *>(base + layout.dvAcc);
  void *kernelScratch = base + layout.kernel;
  const size_t kernelBytes = layout.total - layout.kernel;

  const Blocks g = blocksOf(p);
  const int64_t C = g.chunk, H = p.qHeads, HKV = p.kvHeads, D = p.headDim;
  const int64_t qRow = H * D, kvRow = HKV * D, kvAll = p.keyRows() * kvRow;
  for (int64_t b = 0; b < p.batch; ++b) {
    MLT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dkAcc, 0, size_t(kvAll) * sizeof(float), stream));
    MLT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(dvAcc, 0, size_t(kvAll) * sizeof(float), stream));
    for (size_t x = 0; x < g.chunks.size(); ++x) {
      const int64_t chunk = g.chunks[x];
      const int64_t rows = (b * p.seq + x * C) * qRow;
      // The chunk's columns of lse [heads, 2C], contiguous.
      MLT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          lseX, size_t(C) * sizeof(float), lse + b * H * p.seq + x * C,
          size_t(p.seq) * sizeof(float), size_t(C) * sizeof(float), size_t(H),
          cudaMemcpyDeviceToDevice, stream));
      MLT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
          dqAcc, 0, size_t(C * qRow) * sizeof(float), stream));
      for (const Blocks::KeyChunk &key : g.keys) {
        if (key.position > chunk)
          break;
        const int64_t keyRow = b * p.keyRows() + key.slot * C;
        MLT_RETURN_IF_ERROR(launchAttentionBwd(
            dqPart, dkPart, dvPart, dout + rows, q + rows, k + keyRow * kvRow,
            v + keyRow * kvRow, out + rows, lseX,
            pairShape(p, C, key.position == chunk), kernelScratch, kernelBytes,
            stream));
        accumulateKernel<<<gridFor(C * qRow), 256, 0, stream>>>(dqAcc, dqPart,
                                                               C * qRow);
        accumulateKernel<<<gridFor(C * kvRow), 256, 0, stream>>>(
            dkAcc + (keyRow - b * p.keyRows()) * kvRow, dkPart, C * kvRow);
        accumulateKernel<<<gridFor(C * kvRow), 256, 0, stream>>>(
            dvAcc + (keyRow - b * p.keyRows()) * kvRow, dvPart, C * kvRow);
        MLT_CUDA_RETURN_IF_LAUNCH_FAILED(
            "attention backward (context-parallel) sums");
      }
      MLT_RETURN_IF_ERROR(launchCast(dq + rows, rt::ElementType::BF16, dqAcc,
                                     rt::ElementType::F32, C * qRow, stream));
    }
    MLT_RETURN_IF_ERROR(launchCast(dk + b * kvAll, rt::ElementType::BF16, dkAcc,
                                   rt::ElementType::F32, kvAll, stream));
    MLT_RETURN_IF_ERROR(launchCast(dv + b * kvAll, rt::ElementType::BF16, dvAcc,
                                   rt::ElementType::F32, kvAll, stream));
  }
  return Status::ok();
}

namespace {

/// The weights of the two sides of a merge from their lse (a side at -inf
/// weighs 0; both at -inf: no key at all, 0 and 0).
__device__ inline void mergeWeights(float la, float lb, float &wa, float &wb,
                                    float &merged) {
  if (la == -INFINITY && lb == -INFINITY) {
    wa = wb = 0.f;
    merged = -INFINITY;
    return;
  }
  const float top = fmaxf(la, lb);
  const float ea = expf(la - top), eb = expf(lb - top);
  wa = ea / (ea + eb);
  wb = eb / (ea + eb);
  merged = top + logf(ea + eb);
}

template <typename T>
__global__ void attentionMergeOutKernel(T *out, const T *outA,
                                        const float *lseA, const T *outB,
                                        const float *lseB, int64_t seq,
                                        int64_t heads, int64_t headDim,
                                        int64_t n) {
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount()) {
    const int64_t rowHead = e / headDim;
    const int64_t h = rowHead % heads, bi = rowHead / heads;
    const int64_t b = bi / seq, i = bi % seq;
    const int64_t stat = (b * heads + h) * seq + i;
    float wa, wb, merged;
    mergeWeights(lseA[stat], lseB[stat], wa, wb, merged);
    out[e] = fromCompute<T>(wa * toCompute(outA[e]) + wb * toCompute(outB[e]));
  }
}

__global__ void attentionMergeLseKernel(float *lse, const float *lseA,
                                        const float *lseB, int64_t n) {
  for (int64_t e = globalThreadIndex(); e < n; e += globalThreadCount()) {
    float wa, wb, merged;
    mergeWeights(lseA[e], lseB[e], wa, wb, merged);
    lse[e] = merged;
  }
}

} // namespace

template <typename T>
Status mlt::cuda::launchAttentionMerge(T *out, float *lse, const T *outA,
                                       const float *lseA, const T *outB,
                                       const float *lseB, int64_t batch,
                                       int64_t seq, int64_t heads,
                                       int64_t headDim, cudaStream_t stream) {
  if (batch <= 0 || seq <= 0 || heads <= 0 || headDim <= 0)
    return errorf("attention_merge: sizes must be positive (batch ", batch,
                  ", seq ", seq, ", heads ", heads, ", head_dim ", headDim,
                  ")");
  const int64_t n = batch * seq * heads * headDim;
  // The outputs first: they read lse_a, which lse may overwrite.
  attentionMergeOutKernel<T><<<gridFor(n), 256, 0, stream>>>(
      out, outA, lseA, outB, lseB, seq, heads, headDim, n);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_merge");
  const int64_t stats = batch * heads * seq;
  attentionMergeLseKernel<<<gridFor(stats), 256, 0, stream>>>(lse, lseA, lseB,
                                                              stats);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("attention_merge");
  return Status::ok();
}

template Status mlt::cuda::launchAttentionMerge<float>(
    float *, float *, const float *, const float *, const float *,
    const float *, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template Status mlt::cuda::launchAttentionMerge<__nv_bfloat16>(
    __nv_bfloat16 *, float *, const __nv_bfloat16 *, const float *,
    const __nv_bfloat16 *, const float *, int64_t, int64_t, int64_t, int64_t,
    cudaStream_t);
