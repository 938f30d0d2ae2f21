//===- optimizer.cu - optimizer CUDA kernels (launchers) ------------------===//
//
// Part of mlt. Host launchers of optimizer.cuh: sum_squares (optimizer.cuh's
// sumSquaresBlocks; one kernel for one block, else a second that combines
// the partials), sum_squares_multi (the same per tensor, batches of tensors
// in one grid), the batching of global_norm's pointers,
// and the choice of AdamW's vector path.
//
//===----------------------------------------------------------------------===//

#include "kernels/optimizer.cuh"

#include "CudaCheck.h"

#include <algorithm>

using namespace mlt;
using namespace mlt::cuda;

size_t mlt::cuda::sumSquaresScratchBytes(int64_t n) {
  const int blocks = sumSquaresBlocks(n);
  return blocks == 1 ? 0 : size_t(blocks) * sizeof(double);
}

Status mlt::cuda::launchSumSquares(float *out, const float *x, int64_t n,
                                   void *scratch, cudaStream_t stream) {
  if (n < 0)
    return errorf("sum_squares: negative element count ", n);
  const int blocks = sumSquaresBlocks(n);
  double *partials = static_cast<double *>(scratch);
  if (blocks > 1 && !partials)
    return errorf("sum_squares: no scratch memory for ", blocks,
                  " partial sums");
  if (isAligned16(x))
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(sumSquaresKernel<true>,
                                             dim3(blocks), dim3(kReduceThreads),
                                             0, stream, out, partials, x, n));
  else
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(sumSquaresKernel<false>,
                                             dim3(blocks), dim3(kReduceThreads),
                                             0, stream, out, partials, x, n));
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("sum_squares");
  if (blocks > 1) {
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(
        sumPartialsKernel, dim3(1), dim3(kReduceThreads), 0, stream, out,
        static_cast<const double *>(partials), blocks));
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("sum_squares (partials)");
  }
  return Status::ok();
}

namespace {

/// The partial sums one batch of sum_squares_multi writes: those of its
/// tensors with more than one block.
size_t multiBatchPartials(const int64_t *ns, int64_t count) {
  size_t partials = 0;
  for (int64_t k = 0; k < count; ++k) {
    const int blocks = sumSquaresBlocks(ns[k]);
    if (blocks > 1)
      partials += size_t(blocks);
  }
  return partials;
}

} // namespace

size_t mlt::cuda::sumSquaresMultiScratchBytes(const int64_t *ns,
                                              int64_t count) {
  // Batches run one after another on the stream and reuse the scratch.
  size_t most = 0;
  for (int64_t done = 0; done < count; done += kSumSquaresMultiBatch)
    most = std::max(most,
                    multiBatchPartials(ns + done,
                                       std::min<int64_t>(count - done,
                                                         kSumSquaresMultiBatch)));
  return most * sizeof(double);
}

Status mlt::cuda::launchSumSquaresMulti(float *const *out,
                                        const void *const *xs,
                                        const bool *halves, const int64_t *ns,
                                        int64_t count, void *scratch,
                                        cudaStream_t stream) {
  if (count < 0)
    return errorf("sum_squares_multi: negative count ", count);
  for (int64_t k = 0; k < count; ++k)
    if (ns[k] < 0)
      return errorf("sum_squares_multi: negative element count ", ns[k],
                    " of tensor ", k);
  double *partials = static_cast<double *>(scratch);
  for (int64_t done = 0; done < count; done += kSumSquaresMultiBatch) {
    SumSquaresMultiBatch batch{};
    batch.count = int(std::min<int64_t>(count - done, kSumSquaresMultiBatch));
    int blocks = 0, partialCount = 0;
    for (int k = 0; k < batch.count; ++k) {
      batch.x[k] = xs[done + k];
      batch.out[k] = out[done + k];
      batch.n[k] = ns[done + k];
      batch.half[k] = halves && halves[done + k];
      batch.vector[k] = batch.half[k]
                            ? reinterpret_cast<uintptr_t>(xs[done + k]) % 8 == 0
                            : isAligned16(xs[done + k]);
      batch.firstBlock[k] = blocks;
      batch.firstPartial[k] = partialCount;
      const int tensorBlocks = sumSquaresBlocks(ns[done + k]);
      blocks += tensorBlocks;
      if (tensorBlocks > 1)
        partialCount += tensorBlocks;
    }
    batch.firstBlock[batch.count] = blocks;
    if (partialCount > 0 && !partials)
      return errorf("sum_squares_multi: no scratch memory for ", partialCount,
                    " partial sums");
    MLT_CUDA_RETURN_IF_ERROR(launchDependent(sumSquaresMultiKernel,
                                             dim3(blocks), dim3(kReduceThreads),
                                             0, stream, partials, batch));
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("sum_squares_multi");
    if (partialCount > 0) {
      MLT_CUDA_RETURN_IF_ERROR(launchDependent(
          sumPartialsMultiKernel, dim3(batch.count), dim3(kReduceThreads), 0,
          stream, static_cast<const double *>(partials), batch));
      MLT_CUDA_RETURN_IF_LAUNCH_FAILED("sum_squares_multi (partials)");
    }
  }
  return Status::ok();
}

Status mlt::cuda::launchGlobalNorm(float *out, const float *const *parts,
                                   int64_t count, void *scratch,
                                   cudaStream_t stream) {
  if (count < 0)
    return errorf("global_norm: negative count ", count);
  if (count > kGlobalNormBatch && !scratch)
    return errorf("global_norm: no scratch memory for ", count, " parts");
  double *running = static_cast<double *>(scratch);
  int64_t done = 0;
  do {
    GlobalNormBatch batch{};
    batch.count = int(std::min<int64_t>(count - done, kGlobalNormBatch));
    for (int k = 0; k < batch.count; ++k)
      batch.parts[k] = parts[done + k];
    batch.continues = done > 0;
    batch.last = done + batch.count == count;
    globalNormKernel<<<1, kGlobalNormBatch, 0, stream>>>(out, running, batch);
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("global_norm");
    done += batch.count;
  } while (done < count);
  return Status::ok();
}

Status mlt::cuda::launchClipCoefficient(float *out, const float *norm,
                                        const float *maxNorm,
                                        cudaStream_t stream) {
  clipCoefficientKernel<<<1, 1, 0, stream>>>(out, norm, maxNorm);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("clip_coefficient");
  return Status::ok();
}

Status mlt::cuda::launchAdamW(float *param, float *m, float *v,
                              const float *grad, int64_t n,
                              const AdamWScalars &scalars,
                              bool applyWeightDecay, __nv_bfloat16 *copy,
                              DeviceErrorSink errors, cudaStream_t stream) {
  if (n < 0)
    return errorf("adamw: negative element count ", n);
  if (n == 0)
    return Status::ok();
  // The vector path writes the copy four bf16 at a time (8 bytes).
  const bool aligned = isAligned16(param) && isAligned16(m) && isAligned16(v) &&
                       isAligned16(grad) &&
                       reinterpret_cast<uintptr_t>(copy) % 8 == 0;
  if (aligned) {
    const int64_t packs = n / 4;
    adamwKernel<true>
        <<<flatBlocks(packs > 0 ? packs : n), kFlatThreads, 0, stream>>>(
            param, m, v, grad, n, scalars, applyWeightDecay, copy, errors);
  } else {
    adamwKernel<false><<<flatBlocks(n), kFlatThreads, 0, stream>>>(
        param, m, v, grad, n, scalars, applyWeightDecay, copy, errors);
  }
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("adamw");
  return Status::ok();
}

Status mlt::cuda::launchAdamWMulti(const AdamWTensor *tensors, size_t count,
                                   const AdamWScalars &scalars,
                                   DeviceErrorSink errors,
                                   cudaStream_t stream) {
  for (size_t t = 0; t < count;) {
    AdamWBatch batch{};
    for (; t < count && batch.count < kAdamWMultiTensors; ++t) {
      const AdamWTensor &x = tensors[t];
      if (x.n < 0)
        return errorf("adamw_multi: tensor ", t,
                      " has a negative element count ", x.n);
      if (x.n == 0)
        continue;
      AdamWBatchTensor &b = batch.tensors[batch.count++];
      if (!x.grad == !x.gradHalf)
        return errorf("adamw_multi: tensor ", t,
                      " needs exactly one gradient, f32 or bf16");
      b = AdamWBatchTensor{x.param, x.m,          x.v,     x.grad, x.gradHalf,
                           x.copy,  x.n, batch.chunks, x.decay, false};
      b.vector = isAligned16(x.param) && isAligned16(x.m) &&
                 isAligned16(x.v) &&
                 (x.grad ? isAligned16(x.grad)
                         : reinterpret_cast<uintptr_t>(x.gradHalf) % 8 == 0) &&
                 reinterpret_cast<uintptr_t>(x.copy) % 8 == 0;
      batch.chunks += (x.n + kAdamWChunk - 1) / kAdamWChunk;
    }
    if (batch.count == 0)
      continue;
    const int64_t blocks = std::min(batch.chunks, kAdamWMultiMaxBlocks);
    adamwMultiKernel<<<unsigned(blocks), kFlatThreads, 0, stream>>>(
        batch, scalars, errors);
    MLT_CUDA_RETURN_IF_LAUNCH_FAILED("adamw_multi");
  }
  return Status::ok();
}
