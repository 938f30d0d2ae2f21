//===- CudaDispatch.cpp - from a kernel to its CUDA launcher --------------===//
//
// Part of mlt. The CUDA device context's launch switch (CudaContext.h): from
// an instruction's kernel to its family's launcher (kernels/<family>.h),
// with the operands, integer attributes and scratch memory that Kernels.def
// and the launcher ask for; `supportsKernel` lists the kernels that have
// one. The context's `launch` (CudaContext.cpp) has already chosen the
// stream, waited for the instruction's tokens and started its timing.
//
//===----------------------------------------------------------------------===//

#include "CudaContext.h"
#include "KernelScratch.h"

#include "kernels/attention_blocks.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/fp8.h"
#include "kernels/optimizer.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

bool mlt::cuda::supportsKernel(Kernel kernel) {
  switch (kernel) {
  // elementwise.h
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::Accumulate:
  case Kernel::SwiGLUFwd:
  case Kernel::SwiGLUBwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd:
  case Kernel::Cast:
  case Kernel::Fill:
  case Kernel::Transpose:
  case Kernel::ShardSlice:
  case Kernel::ReorderSequence:
  // optimizer.h
  case Kernel::SumSquares:
  case Kernel::SumSquaresMulti:
  case Kernel::GlobalNorm:
  case Kernel::ClipCoefficient:
  case Kernel::AdamW:
  case Kernel::AdamWMulti:
  // embedding.h
  case Kernel::EmbeddingFwd:
  case Kernel::EmbeddingBwd:
  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP:
  // rmsnorm.h, rope.h, attention.h
  case Kernel::RMSNormFwd:
  case Kernel::RMSNormBwd:
  case Kernel::RMSNormBwdAdd:
  case Kernel::Rope:
  case Kernel::AttentionFwd:
  case Kernel::AttentionBwd:
  case Kernel::AttentionBwdRope:
  case Kernel::AttentionMerge:
  // cross_entropy.h
  case Kernel::CrossEntropyFwd:
  case Kernel::CrossEntropyBwd:
  case Kernel::CrossEntropyFwdBwd:
  case Kernel::CrossEntropyStats:
  case Kernel::CrossEntropyCombine:
  case Kernel::CrossEntropyBwdStats:
  // matmul.h
  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd:
  case Kernel::MatmulGroup:
  // fp8.h, matmul.h
  case Kernel::Amax:
  case Kernel::QuantizeFp8:
  case Kernel::MatmulFp8:
    return true;
  default:
    return false;
  }
}

Status CudaDeviceContext::attentionThroughF32(
    const InstructionDesc &inst, const std::vector<BufferView> &in,
    const std::vector<BufferView> &out, const AttentionShape &shape,
    const AttentionRope *rope) {
  const bool forward = inst.kernel == Kernel::AttentionFwd;
  // The bf16 operands (lse is f32 already), inputs then outputs, each with
  // an f32 copy in scratch after the f32 kernels' own scratch.
  std::vector<const BufferView *> wide;
  for (const BufferView &view : in)
    if (view.dtype == ElementType::BF16)
      wide.push_back(&view);
  const size_t firstOutput = wide.size();
  for (const BufferView &view : out)
    if (view.dtype == ElementType::BF16)
      wide.push_back(&view);
  std::vector<int64_t> elements;
  for (const BufferView *view : wide)
    elements.push_back(view->numElements);
  const WideScratch layout = wideScratch(forward, shape, elements);
  StatusOr<void *> area = scratch(layout.total);
  if (!area)
    return area.takeStatus();
  uint8_t *base = static_cast<uint8_t *>(*area);
  auto wideOf = [&](size_t i) {
    return reinterpret_cast<float *>(base + layout.offsets[i]);
  };
  for (size_t i = 0; i < firstOutput; ++i)
    MLT_RETURN_IF_ERROR(launchCast(wideOf(i), ElementType::F32, wide[i]->data,
                                   ElementType::BF16, wide[i]->numElements,
                                   stream_));
  // Operands in Kernels.def's order, f32 (lse is the f32 buffer itself).
  size_t next = 0;
  auto operand = [&](const BufferView &view) {
    return view.dtype == ElementType::BF16 ? wideOf(next++) : view.as<float>();
  };
  std::vector<float *> ins, outs;
  for (const BufferView &view : in)
    ins.push_back(operand(view));
  for (const BufferView &view : out)
    outs.push_back(operand(view));
  if (forward)
    MLT_RETURN_IF_ERROR(launchAttentionFwd(outs[0], outs[1], ins[0], ins[1],
                                           ins[2], shape, stream_));
  else
    MLT_RETURN_IF_ERROR(launchAttentionBwd(
        outs[0], outs[1], outs[2], ins[0], ins[1], ins[2], ins[3], ins[4],
        ins[5], shape, base, layout.kernelBytes, stream_, rope));
  for (size_t i = firstOutput; i < wide.size(); ++i)
    MLT_RETURN_IF_ERROR(launchCast(wide[i]->data, ElementType::BF16, wideOf(i),
                                   ElementType::F32, wide[i]->numElements,
                                   stream_));
  return Status::ok();
}

namespace {

/// adamw's seven f32 scalars (grad_scale, lr, beta1, beta2, eps,
/// weight_decay, step), inputs first..first + 6 of an instruction.
AdamWScalars adamwScalars(const std::vector<BufferView> &in, size_t first) {
  auto f = [&](size_t i) { return in[first + i].as<const float>(); };
  AdamWScalars scalars;
  scalars.gradScale = f(0);
  scalars.lr = f(1);
  scalars.beta1 = f(2);
  scalars.beta2 = f(3);
  scalars.eps = f(4);
  scalars.weightDecay = f(5);
  scalars.step = f(6);
  return scalars;
}

/// Calls `fn` with a value of the C++ type the kernels use for `type`
/// (float for f32, __nv_bfloat16 for bf16); checkSupported has refused every
/// other compute type.
template <typename Fn> Status withComputeType(ElementType type, Fn &&fn) {
  switch (type) {
  case ElementType::F32:
    return fn(float{});
  case ElementType::BF16:
    return fn(__nv_bfloat16{});
  default:
    return errorf("the CUDA backend does not compute in ",
                  elementTypeName(type));
  }
}

} // namespace

Status CudaDeviceContext::launchKernel(const InstructionDesc &inst,
                                       const std::vector<BufferView> &in,
                                       const std::vector<BufferView> &out,
                                       cudaStream_t s) {
  auto f = [](const BufferView &b) { return b.as<float>(); };
  // Where the kernel writes the amax of its output j (KernelInfo.h's
  // fusedAmaxOutputs), null when the instruction has none.
  const size_t amaxes = fusedAmaxOutputs(inst.kernel, out.size());
  auto amaxOutput = [&](size_t j) -> float * {
    return j < amaxes ? f(out[out.size() - amaxes + j]) : nullptr;
  };
  // The row losses a loss launch sums (cross_entropy.h), in scratch.
  auto rowLosses = [&](int64_t rows) -> StatusOr<std::pair<void *, size_t>> {
    const size_t bytes = crossEntropyFwdScratchBytes(rows);
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return area.takeStatus();
    return std::pair<void *, size_t>(*area, bytes);
  };

  switch (inst.kernel) {
  // elementwise.h: every operand in the compute type, except accumulate's y,
  // which may be an f32 gradient of a bf16 x.
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::SwiGLUFwd:
  case Kernel::SwiGLUBwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd: {
    // The maps' one attribute, their element count, is named alike.
    const int64_t n = KernelAttrs<attrs::Add>(inst)[attrs::Add::n];
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      auto t = [](const BufferView &b) { return b.as<T>(); };
      switch (inst.kernel) {
      case Kernel::Add:
        return launchAdd(t(out[0]), t(in[0]), t(in[1]), n, s);
      case Kernel::Mul:
        return launchMul(t(out[0]), t(in[0]), t(in[1]), n, s);
      case Kernel::SwiGLUFwd: // y[, amax(y)]
        return launchSwiGLUForward(t(out[0]), t(in[0]), t(in[1]), n, s,
                                   amaxOutput(0));
      case Kernel::SwiGLUBwd: { // dgate, dup[, y][, their amaxes]
        const bool y = out.size() == 3 || out.size() == 6;
        return launchSwiGLUBackward(t(out[0]), t(out[1]), t(in[0]), t(in[1]),
                                    t(in[2]), n, s, y ? t(out[2]) : nullptr,
                                    amaxOutput(0), amaxOutput(1),
                                    y ? amaxOutput(2) : nullptr);
      }
      case Kernel::SiLUFwd:
        return launchSiLUForward(t(out[0]), t(in[0]), n, s);
      default:
        return launchSiLUBackward(t(out[0]), t(in[0]), t(in[1]), n, s);
      }
    });
  }
  case Kernel::Accumulate: {
    const int64_t n =
        KernelAttrs<attrs::Accumulate>(inst)[attrs::Accumulate::n];
    if (in[0].dtype == ElementType::BF16 && out[0].dtype == ElementType::F32)
      return launchAccumulate(f(out[0]), in[0].as<const __nv_bfloat16>(), n, s);
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchAccumulate(out[0].as<T>(), in[0].as<const T>(), n, s);
    });
  }
  case Kernel::Fill: {
    using A = attrs::Fill;
    const KernelAttrs<A> a(inst);
    return launchFill(out[0].data, out[0].dtype, a[A::n], a[A::value], s);
  }
  case Kernel::Cast:
    return launchCast(out[0].data, out[0].dtype, in[0].data, in[0].dtype,
                      KernelAttrs<attrs::Cast>(inst)[attrs::Cast::n], s);
  case Kernel::Transpose: {
    const TransposeAttrs dims = transposeAttrs(inst.ints);
    return launchTranspose(out[0].data, in[0].data, elementSize(in[0].dtype),
                           dims.shape, dims.perm, dims.rank, s);
  }
  case Kernel::ReorderSequence: { // x -> y: whole chunks, as 2D copies
    using A = attrs::ReorderSequence;
    const KernelAttrs<A> a(inst);
    const int64_t chunks = 2 * a[A::ranks];
    const size_t chunkBytes =
        size_t(a[A::chunk] * a[A::inner]) * elementSize(in[0].dtype);
    const size_t pitch = size_t(chunks) * chunkBytes;
    for (int64_t piece = 0; piece < chunks; ++piece) {
      const ChunkMove move =
          reorderedChunk(piece, a[A::ranks], a[A::to_natural] == 1);
      MLT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          out[0].data + size_t(move.to) * chunkBytes, pitch,
          in[0].data + size_t(move.from) * chunkBytes, pitch, chunkBytes,
          size_t(a[A::outer]), cudaMemcpyDeviceToDevice, s));
    }
    return Status::ok();
  }
  case Kernel::ShardSlice: { // x -> y
    using A = attrs::ShardSlice;
    const KernelAttrs<A> a(inst);
    StatusOr<AxisPosition> position = axisPosition(communicator_, a[A::axis]);
    if (!position)
      return position.takeStatus();
    return launchShardSlice(out[0].data, in[0].data, elementSize(in[0].dtype),
                            a[A::outer], a[A::n], a[A::inner], position->size,
                            position->coordinate, s);
  }

  // matmul.h: a, b -> c (c += a b for matmul_accumulate, c = a b + addend
  // for matmul_add, in the epilogue). c is the operands' type or f32.
  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd: {
    using A = attrs::Matmul;
    const KernelAttrs<A> a(inst);
    const void *addend = inst.kernel == Kernel::MatmulAccumulate ? out[0].data
                         : inst.kernel == Kernel::MatmulAdd      ? in[2].data
                                                                 : nullptr;
    return matmul_->run(MatmulShape{a[A::batch], a[A::m], a[A::n], a[A::k],
                                    a[A::transpose_a] != 0,
                                    a[A::transpose_b] != 0,
                                    a[A::b_batched] != 0},
                        in[0].data, in[1].data, out[0].data, in[0].dtype,
                        out[0].dtype, addend, s);
  }

  // fp8.h: x -> amax; x, amax -> scale_inv, q[, q_t] (x f32 or bf16).
  case Kernel::Amax: {
    const int64_t n = KernelAttrs<attrs::Amax>(inst)[attrs::Amax::n];
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchAbsMax(f(out[0]), in[0].as<const T>(), n, s);
    });
  }
  case Kernel::QuantizeFp8: {
    using A = attrs::QuantizeFp8;
    const KernelAttrs<A> a(inst);
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      const int64_t layout = a[A::layout];
      uint8_t *q = layout != 1 ? out[1].as<uint8_t>() : nullptr;
      uint8_t *qT = layout == 1   ? out[1].as<uint8_t>()
                    : layout == 2 ? out[2].as<uint8_t>()
                                  : nullptr;
      return launchQuantizeFp8(q, qT, f(out[0]), in[0].as<const T>(),
                               a[A::rows], a[A::cols], out[1].dtype,
                               in[1].as<const float>(), s);
    });
  }
  // matmul.h: a, a_scale_inv, b, b_scale_inv[, addend] -> c on the FP8
  // tensor cores.
  case Kernel::MatmulFp8: {
    using A = attrs::MatmulFp8;
    const KernelAttrs<A> a(inst);
    const void *addend = a[A::accumulate] ? out[0].data
                         : in.size() == 5 ? in[4].data
                                          : nullptr;
    return matmul_->runFp8(
        MatmulShape{1, a[A::m], a[A::n], a[A::k], false, true, false},
        in[0].data, in[0].dtype, in[1].as<const float>(), in[2].data,
        in[2].dtype, in[3].as<const float>(), out[0].data, out[0].dtype, addend,
        a[A::fast_accumulation] != 0, s);
  }

  // matmul.h: a_1..a_G, b_1..b_G -> c_1..c_G in one pointer-array launch.
  case Kernel::MatmulGroup: {
    using A = attrs::MatmulGroup;
    const KernelAttrs<A> a(inst);
    const size_t groups = out.size();
    std::vector<const void *> as, bs;
    std::vector<void *> cs;
    for (size_t g = 0; g < groups; ++g) {
      as.push_back(in[g].data);
      bs.push_back(in[groups + g].data);
      cs.push_back(out[g].data);
    }
    return matmul_->runGroup(
        MatmulShape{a[A::batch], a[A::m], a[A::n], a[A::k],
                    a[A::transpose_a] != 0, a[A::transpose_b] != 0,
                    a[A::b_batched] != 0},
        as, bs, cs, in[0].dtype, out[0].dtype, a[A::accumulate] != 0, s);
  }

  // optimizer.h: f32 parameters, moments and scalars; f32 gradients, or bf16
  // ones (reduced in bf16) for the multi-tensor kernels.
  case Kernel::SumSquares: {
    const int64_t n =
        KernelAttrs<attrs::SumSquares>(inst)[attrs::SumSquares::n];
    StatusOr<void *> partials = scratch(sumSquaresScratchBytes(n));
    if (!partials)
      return partials.takeStatus();
    return launchSumSquares(f(out[0]), f(in[0]), n, *partials, s);
  }
  case Kernel::SumSquaresMulti: {
    // x_k -> s_k; the ints are every tensor's n_k.
    const std::vector<int64_t> &counts = inst.ints;
    std::vector<const void *> xs;
    std::vector<float *> sums;
    std::unique_ptr<bool[]> halves(new bool[in.size()]);
    for (size_t k = 0; k < in.size(); ++k) {
      xs.push_back(in[k].data);
      halves[k] = in[k].dtype == ElementType::BF16;
    }
    for (const BufferView &sum : out)
      sums.push_back(f(sum));
    StatusOr<void *> partials = scratch(
        sumSquaresMultiScratchBytes(counts.data(), int64_t(counts.size())));
    if (!partials)
      return partials.takeStatus();
    return launchSumSquaresMulti(sums.data(), xs.data(), halves.get(),
                                 counts.data(), int64_t(xs.size()), *partials,
                                 s);
  }
  case Kernel::GlobalNorm: {
    std::vector<const float *> parts;
    parts.reserve(in.size());
    for (const BufferView &part : in)
      parts.push_back(part.as<const float>());
    StatusOr<void *> running = scratch(kGlobalNormScratchBytes);
    if (!running)
      return running.takeStatus();
    return launchGlobalNorm(f(out[0]), parts.data(), int64_t(parts.size()),
                            *running, s);
  }
  case Kernel::ClipCoefficient:
    return launchClipCoefficient(f(out[0]), f(in[0]), f(in[1]), s);
  case Kernel::AdamW: {
    // grad, grad_scale, lr, beta1, beta2, eps, weight_decay, step -> param,
    // m, v (in place)[, the bf16 compute copy].
    using A = attrs::AdamW;
    const KernelAttrs<A> a(inst);
    const AdamWScalars scalars = adamwScalars(in, 1);
    __nv_bfloat16 *copy =
        out.size() == 4 ? out[3].as<__nv_bfloat16>() : nullptr;
    return launchAdamW(f(out[0]), f(out[1]), f(out[2]), f(in[0]), a[A::n],
                       scalars, a[A::decay] != 0, copy, errorSink(inst), s);
  }
  case Kernel::AdamWMulti: {
    // grads, then adamw's seven scalars -> params, ms, vs[, copies]; n and
    // decay per tensor.
    using A = attrs::AdamWMulti;
    const KernelAttrs<A> a(inst);
    const size_t k = in.size() - kAdamWScalarInputs;
    const bool copies = out.size() == 4 * k;
    const AdamWScalars scalars = adamwScalars(in, k);
    std::vector<AdamWTensor> tensors(k);
    for (size_t t = 0; t < k; ++t) {
      AdamWTensor &x = tensors[t];
      x.param = f(out[t]);
      x.m = f(out[k + t]);
      x.v = f(out[2 * k + t]);
      if (in[t].dtype == ElementType::BF16) // reduced in bf16
        x.gradHalf = in[t].as<const __nv_bfloat16>();
      else
        x.grad = f(in[t]);
      x.copy = copies ? out[3 * k + t].as<__nv_bfloat16>() : nullptr;
      x.n = a(t, A::n);
      x.decay = a(t, A::decay) != 0;
    }
    return launchAdamWMulti(tensors.data(), tensors.size(), scalars,
                            errorSink(inst), s);
  }

  // embedding.h
  case Kernel::EmbeddingFwd:
  case Kernel::EmbeddingBwd:
  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP: {
    // ids, table -> out or ids, dout -> dtable (f32). A sharded rank holds
    // rows from coordinate * vocab_local.
    int64_t tokens, vocabLocal, hidden, offset = 0, total;
    if (inst.kernel == Kernel::EmbeddingFwdVP ||
        inst.kernel == Kernel::EmbeddingBwdVP) {
      using A = attrs::EmbeddingFwdVP;
      const KernelAttrs<A> a(inst);
      tokens = a[A::tokens];
      vocabLocal = a[A::vocab_local];
      hidden = a[A::hidden];
      StatusOr<VocabShard> shard =
          vocabShard(communicator_, vocabLocal, a[A::axis]);
      if (!shard)
        return shard.takeStatus();
      offset = shard->offset;
      total = shard->total;
    } else {
      using A = attrs::EmbeddingFwd;
      const KernelAttrs<A> a(inst);
      tokens = a[A::tokens];
      vocabLocal = total = a[A::vocab];
      hidden = a[A::hidden];
    }
    const int32_t *ids = in[0].as<const int32_t>();
    const bool forward = inst.kernel == Kernel::EmbeddingFwd ||
                         inst.kernel == Kernel::EmbeddingFwdVP;
    const size_t bytes =
        forward ? 0 : embeddingBackwardScratchBytes(tokens, vocabLocal);
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return area.takeStatus();
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      if (forward)
        return launchEmbeddingForward(out[0].as<T>(), ids, in[1].as<const T>(),
                                      tokens, vocabLocal, hidden, offset, total,
                                      errorSink(inst), s);
      return launchEmbeddingBackward(f(out[0]), ids, in[1].as<const T>(),
                                     tokens, vocabLocal, hidden, offset, total,
                                     *area, bytes, errorSink(inst), s);
    });
  }

  // rmsnorm.h: the plan keeps no rstd (the backward recomputes it), and
  // rms_norm_bwd overwrites dw, which is f32 (a parameter's gradient) for
  // bf16 activations.
  case Kernel::RMSNormFwd: { // x, w -> y
    using A = attrs::RMSNormFwd;
    const KernelAttrs<A> a(inst);
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchRmsNormFwd(out[0].as<T>(), nullptr, in[0].as<const T>(),
                              in[1].as<const T>(), a[A::rows], a[A::dim],
                              a[A::eps], s, amaxOutput(0));
    });
  }
  case Kernel::RMSNormBwd:      // dy, x, w -> dx, dw
  case Kernel::RMSNormBwdAdd: { // dy, x, w, addend -> dx, dw
    using A = attrs::RMSNormBwd;
    const KernelAttrs<A> a(inst);
    const size_t bytes = rmsNormBwdScratchBytes(a[A::rows], a[A::dim]);
    StatusOr<void *> partials = scratch(bytes);
    if (!partials)
      return partials.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      const T *addend =
          inst.kernel == Kernel::RMSNormBwdAdd ? in[3].as<const T>() : nullptr;
      return launchRmsNormBwd(out[0].as<T>(), f(out[1]), in[0].as<const T>(),
                              in[1].as<const T>(), in[2].as<const T>(), addend,
                              a[A::rows], a[A::dim], a[A::eps], *partials,
                              bytes, s, amaxOutput(0));
    });
  }

  // rope.h: x -> y.
  case Kernel::Rope: {
    using A = attrs::Rope;
    const KernelAttrs<A> a(inst);
    StatusOr<SequencePositions> order = sequencePositions(
        communicator_, a[A::axis], a[A::seq], a[A::position_offset]);
    if (!order)
      return order.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchRope(out[0].as<T>(), in[0].as<const T>(), a[A::batch],
                        a[A::seq], a[A::heads], a[A::head_dim],
                        a[A::inverse] != 0, *order, a[A::theta],
                        ropeScaling(a), s);
    });
  }

  // attention.h: lse is f32 for both compute types; attention_bwd_rope
  // with rope's inverse on dq and dk (in the kernels where they can, else
  // rope's launches after them).
  case Kernel::AttentionFwd:       // q, k, v -> out, lse
  case Kernel::AttentionBwd:       // dout, q, k, v, out, lse -> dq, dk, dv
  case Kernel::AttentionBwdRope: { // the same
    // (A context-parallel rank's queries and keys at their positions in
    // the load-balanced order.)
    StatusOr<AttentionShape> positioned = attentionPositions(
        communicator_, attentionParams<AttentionShape>(inst),
        contextAxis(inst));
    if (!positioned)
      return positioned.takeStatus();
    const AttentionShape &shape = *positioned;
    const bool forward = inst.kernel == Kernel::AttentionFwd;
    std::optional<AttentionRope> rope;
    if (inst.kernel == Kernel::AttentionBwdRope) {
      using A = attrs::AttentionBwdRope;
      const KernelAttrs<A> a(inst);
      rope.emplace();
      rope->theta = a[A::theta];
      rope->positionOffset = a[A::position_offset];
      rope->scaling = ropeScaling(a);
    }
    const AttentionRope *rotation = rope ? &*rope : nullptr;
    const AttentionPath path =
        attentionPath(inst.kernel, in[0].dtype, shape, contextAxis(inst));
    // Its fused amax outputs (Kernels.def): the bf16 tensor-core kernels
    // take those they can as they store their outputs (the launcher marks
    // them taken); every other one, on every path, by an amax launch of its
    // output after the kernels (amaxAfter).
    AttentionAmax amax;
    for (size_t j = 0; j < amaxes; ++j)
      amax.of[j] = amaxOutput(j);
    AttentionAmax *fusedAmax = amaxes ? &amax : nullptr;
    auto amaxAfter = [&](Status status) -> Status {
      MLT_RETURN_IF_ERROR(status);
      for (size_t j = 0; j < amaxes; ++j) {
        if (amax.taken[j])
          continue;
        MLT_RETURN_IF_ERROR(withComputeType(out[j].dtype, [&](auto tag) {
          using T = decltype(tag);
          return launchAbsMax(amaxOutput(j), out[j].as<const T>(),
                              int64_t(out[j].numElements), s);
        }));
      }
      return Status::ok();
    };
    // A context-parallel rank's, in bf16: blockwise on the tensor cores
    // (attention_blocks.h).
    if (path == AttentionPath::ContextBlocks) {
      const size_t bytes = forward ? contextAttentionFwdScratchBytes(shape)
                                   : contextAttentionBwdScratchBytes(shape);
      StatusOr<void *> area = scratch(bytes);
      if (!area)
        return area.takeStatus();
      auto t = [](const BufferView &b) { return b.as<__nv_bfloat16>(); };
      if (forward)
        return amaxAfter(launchContextAttentionFwd(
            t(out[0]), f(out[1]), t(in[0]), t(in[1]), t(in[2]), shape, *area,
            bytes, s));
      return amaxAfter(launchContextAttentionBwd(
          t(out[0]), t(out[1]), t(out[2]), t(in[0]), t(in[1]), t(in[2]),
          t(in[3]), t(in[4]), f(in[5]), shape, *area, bytes, s));
    }
    // bf16 through the f32 kernels where the tensor-core ones do not go:
    // other head dims, and other positions.
    if (path == AttentionPath::ThroughF32)
      return amaxAfter(attentionThroughF32(inst, in, out, shape, rotation));
    const size_t bytes = forward ? 0 : attentionBwdScratchBytes(shape);
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return area.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      auto t = [](const BufferView &b) { return b.as<T>(); };
      if constexpr (std::is_same_v<T, float>) {
        if (forward)
          return amaxAfter(launchAttentionFwd(t(out[0]), f(out[1]), t(in[0]),
                                              t(in[1]), t(in[2]), shape, s));
        return amaxAfter(launchAttentionBwd(
            t(out[0]), t(out[1]), t(out[2]), t(in[0]), t(in[1]), t(in[2]),
            t(in[3]), t(in[4]), f(in[5]), shape, *area, bytes, s, rotation));
      } else {
        if (forward)
          return amaxAfter(launchAttentionFwd(t(out[0]), f(out[1]), t(in[0]),
                                              t(in[1]), t(in[2]), shape, s,
                                              fusedAmax));
        return amaxAfter(launchAttentionBwd(
            t(out[0]), t(out[1]), t(out[2]), t(in[0]), t(in[1]), t(in[2]),
            t(in[3]), t(in[4]), f(in[5]), shape, *area, bytes, s, rotation,
            fusedAmax));
      }
    });
  }

  // attention_blocks.h: the ring's merge of two steps (lse f32).
  case Kernel::AttentionMerge: { // out_a, lse_a, out_b, lse_b -> out, lse
    using A = attrs::AttentionMerge;
    const KernelAttrs<A> a(inst);
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchAttentionMerge(out[0].as<T>(), f(out[1]),
                                  in[0].as<const T>(), f(in[1]),
                                  in[2].as<const T>(), f(in[3]), a[A::batch],
                                  a[A::seq], a[A::heads], a[A::head_dim], s);
    });
  }

  // cross_entropy.h: logits and dlogits in the compute type, statistics,
  // loss and dloss f32; labels are checked on the device (errorSink). The
  // plan keeps no lse between cross_entropy_fwd and cross_entropy_bwd: the
  // backward recomputes it.
  case Kernel::CrossEntropyFwd: { // logits, labels -> loss
    using A = attrs::CrossEntropyFwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab];
    StatusOr<std::pair<void *, size_t>> losses = rowLosses(rows);
    if (!losses)
      return losses.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyFwd(
          f(out[0]), in[0].as<const T>(), in[1].as<const int32_t>(), rows,
          vocab, rows, losses->first, losses->second, errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyBwd: { // dloss, logits, labels -> dlogits
    using A = attrs::CrossEntropyBwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab];
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyBwd(
          out[0].as<T>(), f(in[0]), in[1].as<const T>(),
          in[2].as<const int32_t>(), rows, vocab, rows, errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyFwdBwd: { // dloss, logits, labels -> loss, dlogits
    using A = attrs::CrossEntropyFwdBwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab];
    StatusOr<std::pair<void *, size_t>> losses = rowLosses(rows);
    if (!losses)
      return losses.takeStatus();
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyFwdBwd(
          f(out[0]), out[1].as<T>(), f(in[0]), in[1].as<const T>(),
          in[2].as<const int32_t>(), rows, vocab, a[A::row_count],
          losses->first, losses->second, errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyStats: { // logits, labels -> lse, target
    // The rank holds columns from coordinate * vocab_local of G *
    // vocab_local.
    using A = attrs::CrossEntropyStats;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocabLocal = a[A::vocab_local];
    StatusOr<VocabShard> shard =
        vocabShard(communicator_, vocabLocal, a[A::axis]);
    if (!shard)
      return shard.takeStatus();
    const int64_t offset = shard->offset, total = shard->total;
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyStats(
          f(out[0]), f(out[1]), in[0].as<const T>(), in[1].as<const int32_t>(),
          rows, vocabLocal, offset, total, errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyBwdStats: { // dloss, logits, labels, lse -> dlogits
    // The rank's columns as cross_entropy_stats'.
    using A = attrs::CrossEntropyBwdStats;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocabLocal = a[A::vocab_local];
    StatusOr<VocabShard> shard =
        vocabShard(communicator_, vocabLocal, a[A::axis]);
    if (!shard)
      return shard.takeStatus();
    const int64_t offset = shard->offset, total = shard->total;
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyBwdStats(
          out[0].as<T>(), f(in[0]), in[1].as<const T>(),
          in[2].as<const int32_t>(), f(in[3]), rows, vocabLocal, offset, total,
          a[A::row_count], errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyCombine: { // parts, target -> lse, loss
    using A = attrs::CrossEntropyCombine;
    const KernelAttrs<A> a(inst);
    return launchCrossEntropyCombine(f(out[0]), f(out[1]), f(in[0]), f(in[1]),
                                     a[A::rows], a[A::num_parts],
                                     a[A::row_count], s);
  }

  // Collectives.h: NCCL on the communication stream (stream 0), or on the
  // plan stream the instruction names, which its tokens order.
  case Kernel::AllReduceSum:
  case Kernel::ReduceScatterSum:
  case Kernel::AllGather:
  case Kernel::AllToAll:
  case Kernel::CollectivePermute:
    return launchCollective(collectives_.get(), inst, in[0], out[0], stream_,
                            s == stream_ ? nullptr : s,
                            positionMark(inst.stream));

  // Transfers run as groups, through exchange (Collectives.h).
  case Kernel::Send:
  case Kernel::Recv:
    return errorf(kernelName(inst.kernel),
                  " runs in a transfer group (DeviceContext::exchange), not "
                  "as a launch");

  default:
    break;
  }
  return errorf("kernel '", kernelName(inst.kernel),
                "' has no CUDA implementation yet");
}
