//===- elementwise.cu - elementwise CUDA kernels (launchers) --------------===//
//
// Part of mlt. Host launchers of elementwise.cuh: argument checks, the choice
// between the 16-byte vector path and the scalar one, the launch geometry,
// and for transpose the merging of dimensions that stay adjacent.
//
//===----------------------------------------------------------------------===//

#include "kernels/elementwise.cuh"

#include "CudaCheck.h"
#include "mlt/Support/Bf16.h"

#include <vector>

using namespace mlt;
using namespace mlt::cuda;

namespace {

/// Queues `op` over n elements: the vector path when every pointer is
/// 16-byte aligned, else the scalar one. With kAmax, also the amax of each
/// output whose `amax` entry is not null (zeroed by the caller). Queued by
/// launchDependent (the kernel waits for its predecessors before it touches
/// memory); a launch error is the stream's last error, which the caller
/// checks.
template <bool kAmax = false, typename T, int NIn, int NOut, typename Op>
void queueMap(const MapArgs<T, NIn, NOut> &args, int64_t n, Op op,
              cudaStream_t stream, const MapAmax<NOut> &amax = {}) {
  bool aligned = true;
  for (int k = 0; k < NIn; ++k)
    aligned &= isAligned16(args.in[k]);
  for (int k = 0; k < NOut; ++k)
    aligned &= isAligned16(args.out[k]);
  // Each block of an amax variant ends with one atomicMax per output on one
  // address, and those serialize (at LLaMA-2-7B's SwiGLU, 22,000 blocks
  // capped at 1,024 took 2.5 us off the forward's launch and 5 us off the
  // backward's, measured): at most as many blocks as the amax kernel's, the
  // rest looped over.
  auto blocks = [](int64_t work) {
    const unsigned flat = flatBlocks(work);
    return kAmax && flat > kAmaxMaxBlocks ? kAmaxMaxBlocks : flat;
  };
  if (aligned) {
    const int64_t packs = n / Pack<T>::kWidth;
    launchDependent(mapKernel<T, NIn, NOut, Op, true, kAmax>,
                    dim3(blocks(packs > 0 ? packs : n)), dim3(kFlatThreads), 0,
                    stream, args, n, op, amax);
  } else {
    launchDependent(mapKernel<T, NIn, NOut, Op, false, kAmax>,
                    dim3(blocks(n)), dim3(kFlatThreads), 0, stream, args, n,
                    op, amax);
  }
}

Status checkCount(const char *kernel, int64_t n) {
  if (n < 0)
    return errorf(kernel, ": negative element count ", n);
  return Status::ok();
}

template <typename T>
Status add(T *out, const T *a, const T *b, int64_t n, cudaStream_t s) {
  MLT_RETURN_IF_ERROR(checkCount("add", n));
  if (n == 0)
    return Status::ok();
  queueMap(MapArgs<T, 2, 1>{{a, b}, {out}}, n, AddOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("add");
  return Status::ok();
}

template <typename T>
Status mul(T *out, const T *a, const T *b, int64_t n, cudaStream_t s) {
  MLT_RETURN_IF_ERROR(checkCount("mul", n));
  if (n == 0)
    return Status::ok();
  queueMap(MapArgs<T, 2, 1>{{a, b}, {out}}, n, MulOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("mul");
  return Status::ok();
}

template <typename T>
Status accumulate(T *y, const T *x, int64_t n, cudaStream_t s) {
  MLT_RETURN_IF_ERROR(checkCount("accumulate", n));
  if (n == 0)
    return Status::ok();
  queueMap(MapArgs<T, 2, 1>{{x, y}, {y}}, n, AccumulateOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("accumulate");
  return Status::ok();
}

template <typename T>
Status swigluForward(T *out, const T *gate, const T *up, int64_t n,
                     cudaStream_t s, float *amax) {
  MLT_RETURN_IF_ERROR(checkCount("swiglu_fwd", n));
  MLT_CUDA_RETURN_IF_ERROR(zeroAmax(amax, s));
  if (n == 0)
    return Status::ok();
  const MapArgs<T, 2, 1> args{{gate, up}, {out}};
  if (amax)
    queueMap<true>(args, n, SwiGLUForwardOp{}, s, {{amaxBits(amax)}});
  else
    queueMap(args, n, SwiGLUForwardOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("swiglu_fwd");
  return Status::ok();
}

template <typename T>
Status swigluBackward(T *dgate, T *dup, const T *dout, const T *gate,
                      const T *up, int64_t n, cudaStream_t s, T *out,
                      float *amaxDgate, float *amaxDup, float *amaxOut) {
  MLT_RETURN_IF_ERROR(checkCount("swiglu_bwd", n));
  if (!amaxDgate != !amaxDup)
    return errorf("swiglu_bwd: the amax of ", amaxDgate ? "dgate" : "dup",
                  " is given without the amax of ", amaxDgate ? "dup" : "dgate",
                  " (both or neither)");
  if (amaxOut && !out)
    return errorf("swiglu_bwd: the amax of out is given without out");
  MLT_CUDA_RETURN_IF_ERROR(zeroAmaxes({amaxDgate, amaxDup, amaxOut}, s));
  if (n == 0)
    return Status::ok();
  const bool anyAmax = amaxDgate || amaxOut; // amaxDup comes with amaxDgate
  if (out) {
    const MapArgs<T, 3, 3> args{{dout, gate, up}, {dgate, dup, out}};
    if (anyAmax)
      queueMap<true>(
          args, n, SwiGLUBackwardForwardOp{}, s,
          {{amaxBits(amaxDgate), amaxBits(amaxDup), amaxBits(amaxOut)}});
    else
      queueMap(args, n, SwiGLUBackwardForwardOp{}, s);
  } else {
    const MapArgs<T, 3, 2> args{{dout, gate, up}, {dgate, dup}};
    if (anyAmax)
      queueMap<true>(args, n, SwiGLUBackwardOp{}, s,
                     {{amaxBits(amaxDgate), amaxBits(amaxDup)}});
    else
      queueMap(args, n, SwiGLUBackwardOp{}, s);
  }
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("swiglu_bwd");
  return Status::ok();
}

template <typename T>
Status siluForward(T *out, const T *x, int64_t n, cudaStream_t s) {
  MLT_RETURN_IF_ERROR(checkCount("silu_fwd", n));
  if (n == 0)
    return Status::ok();
  queueMap(MapArgs<T, 1, 1>{{x}, {out}}, n, SiLUForwardOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("silu_fwd");
  return Status::ok();
}

template <typename T>
Status siluBackward(T *dx, const T *dout, const T *x, int64_t n,
                    cudaStream_t s) {
  MLT_RETURN_IF_ERROR(checkCount("silu_bwd", n));
  if (n == 0)
    return Status::ok();
  queueMap(MapArgs<T, 2, 1>{{dout, x}, {dx}}, n, SiLUBackwardOp{}, s);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("silu_bwd");
  return Status::ok();
}

/// Queues the cast of n elements from In to Out: by packs when both
/// pointers are aligned to theirs.
template <typename In, typename Out>
void queueCast(void *out, const void *in, int64_t n, cudaStream_t stream) {
  const bool packed =
      reinterpret_cast<uintptr_t>(in) % alignof(CastPack<In>) == 0 &&
      reinterpret_cast<uintptr_t>(out) % alignof(CastPack<Out>) == 0;
  if (packed)
    castPackKernel<In, Out>
        <<<flatBlocks((n + kCastPack - 1) / kCastPack), kFlatThreads, 0,
           stream>>>(static_cast<Out *>(out), static_cast<const In *>(in), n);
  else
    castKernel<In, Out><<<flatBlocks(n), kFlatThreads, 0, stream>>>(
        static_cast<Out *>(out), static_cast<const In *>(in), n);
}

template <typename In>
bool queueCastFrom(void *out, rt::ElementType outType, const void *in,
                   int64_t n, cudaStream_t stream) {
  switch (outType) {
  case rt::ElementType::F32:
    queueCast<In, float>(out, in, n, stream);
    return true;
  case rt::ElementType::F64:
    queueCast<In, double>(out, in, n, stream);
    return true;
  case rt::ElementType::BF16:
    queueCast<In, BF16Bits>(out, in, n, stream);
    return true;
  default:
    return false;
  }
}

bool isCastType(rt::ElementType type) {
  return type == rt::ElementType::F32 || type == rt::ElementType::F64 ||
         type == rt::ElementType::BF16;
}

/// y's dimensions in order, unit ones dropped, each merged into the previous
/// one when it follows it in x too: their sizes, and the stride in x of a
/// step along each. `perm` must be a permutation.
void mergeTranspose(const int64_t *shape, const int64_t *perm, int64_t rank,
                    std::vector<int64_t> &mergedShape,
                    std::vector<int64_t> &mergedStride) {
  std::vector<int64_t> inStrides(rank, 1);
  for (int64_t d = rank - 1; d > 0; --d)
    inStrides[d - 1] = inStrides[d] * shape[d];
  int64_t lastInputDim = -2;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t d = perm[i];
    if (shape[d] == 1)
      continue;
    if (d == lastInputDim + 1 && !mergedShape.empty()) {
      mergedShape.back() *= shape[d];
      mergedStride.back() = inStrides[d];
    } else {
      mergedShape.push_back(shape[d]);
      mergedStride.push_back(inStrides[d]);
    }
    lastInputDim = d;
  }
}

/// Whether perm is a permutation of [0, rank).
bool isPermutation(const int64_t *perm, int64_t rank) {
  std::vector<bool> seen(rank, false);
  for (int64_t d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank || seen[perm[d]])
      return false;
    seen[perm[d]] = true;
  }
  return true;
}

template <typename U>
void queueTranspose(void *out, const void *in, int64_t total,
                    const TransposeGeometry &g, cudaStream_t stream) {
  transposeKernel<U><<<flatBlocks(total), kFlatThreads, 0, stream>>>(
      static_cast<U *>(out), static_cast<const U *>(in), total, g);
}

template <typename U>
void queueShardSlice(void *out, const void *in, int64_t outer,
                     int64_t blockBytes, int64_t groupSize, int64_t index,
                     cudaStream_t stream) {
  const int64_t unitsPerBlock = blockBytes / int64_t(sizeof(U));
  shardSliceKernel<U>
      <<<flatBlocks(outer * unitsPerBlock), kFlatThreads, 0, stream>>>(
          static_cast<U *>(out), static_cast<const U *>(in), outer,
          unitsPerBlock, groupSize, index);
}

template <typename U>
void queueFill(void *data, int64_t n, U value, cudaStream_t stream) {
  fillKernel<U><<<flatBlocks(n), kFlatThreads, 0, stream>>>(
      static_cast<U *>(data), n, value);
}

} // namespace

#define MLT_DEFINE_ELEMENTWISE(T)                                              \
  Status mlt::cuda::launchAdd(T *out, const T *a, const T *b, int64_t n,       \
                              cudaStream_t stream) {                           \
    return add(out, a, b, n, stream);                                          \
  }                                                                            \
  Status mlt::cuda::launchMul(T *out, const T *a, const T *b, int64_t n,       \
                              cudaStream_t stream) {                           \
    return mul(out, a, b, n, stream);                                          \
  }                                                                            \
  Status mlt::cuda::launchAccumulate(T *y, const T *x, int64_t n,              \
                                     cudaStream_t stream) {                    \
    return accumulate(y, x, n, stream);                                        \
  }                                                                            \
  Status mlt::cuda::launchSwiGLUForward(T *out, const T *gate, const T *up,    \
                                        int64_t n, cudaStream_t stream,        \
                                        float *amax) {                         \
    return swigluForward(out, gate, up, n, stream, amax);                      \
  }                                                                            \
  Status mlt::cuda::launchSwiGLUBackward(                                      \
      T *dgate, T *dup, const T *dout, const T *gate, const T *up, int64_t n,  \
      cudaStream_t stream, T *out, float *amaxDgate, float *amaxDup,           \
      float *amaxOut) {                                                        \
    return swigluBackward(dgate, dup, dout, gate, up, n, stream, out,          \
                          amaxDgate, amaxDup, amaxOut);                        \
  }                                                                            \
  Status mlt::cuda::launchSiLUForward(T *out, const T *x, int64_t n,           \
                                      cudaStream_t stream) {                   \
    return siluForward(out, x, n, stream);                                     \
  }                                                                            \
  Status mlt::cuda::launchSiLUBackward(T *dx, const T *dout, const T *x,       \
                                       int64_t n, cudaStream_t stream) {       \
    return siluBackward(dx, dout, x, n, stream);                               \
  }
MLT_DEFINE_ELEMENTWISE(float)
MLT_DEFINE_ELEMENTWISE(__nv_bfloat16)

Status mlt::cuda::launchAccumulate(float *y, const __nv_bfloat16 *x, int64_t n,
                                   cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkCount("accumulate", n));
  if (n == 0)
    return Status::ok();
  accumulateWidenKernel<<<flatBlocks(n), kFlatThreads, 0, stream>>>(y, x, n);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("accumulate");
  return Status::ok();
}

Status mlt::cuda::launchCast(void *out, rt::ElementType outType, const void *in,
                             rt::ElementType inType, int64_t n,
                             cudaStream_t stream) {
  if (!isCastType(inType))
    return errorf("cast: cannot cast from ", rt::elementTypeName(inType));
  if (!isCastType(outType))
    return errorf("cast: cannot cast to ", rt::elementTypeName(outType));
  MLT_RETURN_IF_ERROR(checkCount("cast", n));
  if (n == 0)
    return Status::ok();
  if (inType == outType) {
    if (out != in)
      MLT_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(out, in, n * rt::elementSize(inType),
                          cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }
  switch (inType) {
  case rt::ElementType::F32:
    queueCastFrom<float>(out, outType, in, n, stream);
    break;
  case rt::ElementType::F64:
    queueCastFrom<double>(out, outType, in, n, stream);
    break;
  default:
    queueCastFrom<BF16Bits>(out, outType, in, n, stream);
    break;
  }
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("cast");
  return Status::ok();
}

int64_t mlt::cuda::mergedTransposeRank(const int64_t *shape,
                                       const int64_t *perm, int64_t rank) {
  if (rank < 0 || !isPermutation(perm, rank))
    return rank;
  std::vector<int64_t> mergedShape, mergedStride;
  mergeTranspose(shape, perm, rank, mergedShape, mergedStride);
  return int64_t(mergedShape.size());
}

Status mlt::cuda::launchTranspose(void *out, const void *in,
                                  size_t elementBytes, const int64_t *shape,
                                  const int64_t *perm, int64_t rank,
                                  cudaStream_t stream) {
  if (rank < 0)
    return errorf("transpose: negative rank ", rank);
  if (!isPermutation(perm, rank))
    return errorf("transpose: the permutation is not one of ", rank,
                  " dimensions");
  int64_t total = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (shape[d] < 0)
      return errorf("transpose: negative dimension ", shape[d]);
    total *= shape[d];
  }
  if (total == 0)
    return Status::ok();
  if (out == in)
    return errorf("transpose cannot run in place");

  std::vector<int64_t> mergedShape, mergedStride;
  mergeTranspose(shape, perm, rank, mergedShape, mergedStride);
  if (mergedShape.size() > size_t(kMaxTransposeRank))
    return errorf("transpose: ", mergedShape.size(),
                  " dimensions once merged; the CUDA kernel takes at "
                  "most ",
                  kMaxTransposeRank);
  // Where the innermost dimension stays innermost (a transpose of outer
  // dimensions, as around sequence parallelism's collectives of a
  // [batch, seq, hidden] tensor), each output row is a contiguous run of the
  // input: moved in the widest unit that divides the run and both pointers'
  // alignment (16 bytes a thread instead of 2 for bf16). Every other
  // dimension's input stride is a multiple of the run (the run is the
  // input's trailing dimensions), so the geometry scales to units exactly.
  const int64_t last = int64_t(mergedShape.size()) - 1;
  if (last >= 0 && mergedStride[last] == 1) {
    const uint64_t runBytes = uint64_t(mergedShape[last]) * elementBytes;
    const uint64_t alignment = runBytes |
                               reinterpret_cast<uintptr_t>(in) |
                               reinterpret_cast<uintptr_t>(out);
    size_t unit = elementBytes;
    for (size_t wider : {size_t(16), size_t(8), size_t(4)})
      if (wider > elementBytes && alignment % wider == 0) {
        unit = wider;
        break;
      }
    if (unit > elementBytes) {
      const int64_t perUnit = int64_t(unit / elementBytes);
      mergedShape[last] /= perUnit;
      for (int64_t d = 0; d < last; ++d)
        mergedStride[d] /= perUnit;
      total /= perUnit;
      elementBytes = unit;
    }
  }
  TransposeGeometry g{};
  g.rank = int(mergedShape.size());
  for (int d = 0; d < g.rank; ++d) {
    g.outShape[d] = mergedShape[d];
    g.inStride[d] = mergedStride[d];
  }
  switch (elementBytes) {
  case 1:
    queueTranspose<uint8_t>(out, in, total, g, stream);
    break;
  case 2:
    queueTranspose<uint16_t>(out, in, total, g, stream);
    break;
  case 4:
    queueTranspose<uint32_t>(out, in, total, g, stream);
    break;
  case 8:
    queueTranspose<uint64_t>(out, in, total, g, stream);
    break;
  case 16:
    queueTranspose<uint4>(out, in, total, g, stream);
    break;
  default:
    return errorf("transpose: elements of ", elementBytes,
                  " bytes are not supported");
  }
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("transpose");
  return Status::ok();
}

Status mlt::cuda::launchShardSlice(void *out, const void *in,
                                   size_t elementBytes, int64_t outer,
                                   int64_t n, int64_t inner, int64_t groupSize,
                                   int64_t index, cudaStream_t stream) {
  if (outer < 0 || n < 0 || inner < 0)
    return errorf("shard_slice: negative size");
  if (groupSize < 1 || index < 0 || index >= groupSize)
    return errorf("shard_slice: block ", index, " of ", groupSize);
  const int64_t blockBytes = n * inner * int64_t(elementBytes);
  const int64_t outBytes = outer * blockBytes;
  if (outBytes == 0)
    return Status::ok();
  const uint8_t *x = static_cast<const uint8_t *>(in);
  uint8_t *y = static_cast<uint8_t *>(out);
  if (y < x + outBytes * groupSize && x < y + outBytes)
    return errorf("shard_slice cannot run in place (its input and output "
                  "overlap)");
  // The widest unit that divides the block and both pointers' alignment.
  const uint64_t alignment = uint64_t(blockBytes) |
                             reinterpret_cast<uintptr_t>(x) |
                             reinterpret_cast<uintptr_t>(y);
  if (alignment % 16 == 0)
    queueShardSlice<uint4>(out, in, outer, blockBytes, groupSize, index,
                           stream);
  else if (alignment % 8 == 0)
    queueShardSlice<uint2>(out, in, outer, blockBytes, groupSize, index,
                           stream);
  else if (alignment % 4 == 0)
    queueShardSlice<uint32_t>(out, in, outer, blockBytes, groupSize, index,
                              stream);
  else if (alignment % 2 == 0)
    queueShardSlice<uint16_t>(out, in, outer, blockBytes, groupSize, index,
                              stream);
  else
    queueShardSlice<uint8_t>(out, in, outer, blockBytes, groupSize, index,
                             stream);
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("shard_slice");
  return Status::ok();
}

Status mlt::cuda::launchFill(void *data, rt::ElementType type, int64_t n,
                             double value, cudaStream_t stream) {
  MLT_RETURN_IF_ERROR(checkCount("fill", n));
  if (n == 0)
    return Status::ok();
  switch (type) {
  case rt::ElementType::F32:
    queueFill<float>(data, n, float(value), stream);
    break;
  case rt::ElementType::F64:
    queueFill<double>(data, n, value, stream);
    break;
  case rt::ElementType::BF16:
    queueFill<uint16_t>(data, n, floatToBF16(float(value)), stream);
    break;
  case rt::ElementType::I32:
    queueFill<int32_t>(data, n, int32_t(value), stream);
    break;
  case rt::ElementType::I64:
    queueFill<int64_t>(data, n, int64_t(value), stream);
    break;
  default:
    return errorf("the CUDA backend cannot fill ", rt::elementTypeName(type),
                  " buffers");
  }
  MLT_CUDA_RETURN_IF_LAUNCH_FAILED("fill");
  return Status::ok();
}
