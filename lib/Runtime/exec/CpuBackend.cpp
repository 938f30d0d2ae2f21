//===- CpuBackend.cpp - every kernel of Kernels.def on the CPU ------------===//
//
// Part of mlt. The CPU backend maps each instruction onto the MLTRuntimeCPU
// kernel library in the element type of its float operands, f32 (training)
// or f64 (gradient checks), and adds the glue the library leaves to its
// caller:
// statistics that the plan does not keep (the rstd of RMSNorm and the
// log-sum-exp of cross-entropy are recomputed into scratch memory), outputs
// that the plan wants overwritten where the library accumulates (embedding and
// RMSNorm weight gradients), the clipping scale applied to gradients before
// AdamW, and the small kernels that are one loop here (transpose, cast,
// shard_slice, the gradient norm). Scratch memory belongs to the rank's
// context, never to the backend, so ranks on threads share nothing.
// Collectives and transfer groups are calls on the rank's communicator,
// which return when the group's result is in place; the kernels of sharded
// programs read the rank's coordinate on their mesh axis from the
// communicator's mesh and pass the library the offset of the rank's shard.
//
// One instruction computes in one type, its operands' as Kernels.def's
// "Element types" (KernelInfo.h's OperandPrecision) gives them. A bf16
// instruction runs as the GPU computes it: its bf16 operands are widened to
// f32, the f32 kernel runs, and each bf16 output is rounded once (to nearest
// even); its f32 operands (statistics, scalars, f32 gradients) are used as
// they are. So a mixed-precision plan trains on the CPU too, slowly, and its
// numerics can be checked without a GPU.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Runtime/cpu/Kernels.h"
#include "mlt/Runtime/exec/Backend.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <sstream>
#include <type_traits>

using namespace mlt;
using namespace mlt::rt;

namespace {

/// The value of a one-element f32 buffer.
float scalar(const BufferView &buffer) { return *buffer.as<const float>(); }

/// y = x with the dimensions permuted: y's dimension i is x's dimension
/// perm[i]. Moves elements of any size.
void transpose(uint8_t *out, const uint8_t *in, size_t elementBytes,
               const std::vector<int64_t> &shape,
               const std::vector<int64_t> &perm) {
  const size_t rank = shape.size();
  int64_t total = 1;
  for (int64_t dim : shape)
    total *= dim;
  if (total == 0)
    return;
  // Strides of x in elements, then the stride of x behind each of y's dims.
  std::vector<int64_t> inStrides(rank, 1);
  for (size_t i = rank; i-- > 1;)
    inStrides[i - 1] = inStrides[i] * shape[i];
  std::vector<int64_t> outShape(rank), strideOfOut(rank);
  for (size_t i = 0; i < rank; ++i) {
    outShape[i] = shape[perm[i]];
    strideOfOut[i] = inStrides[perm[i]];
  }
  // Walk y in row-major order with an odometer over its index.
  std::vector<int64_t> index(rank, 0);
  int64_t inOffset = 0;
  for (int64_t o = 0; o < total; ++o) {
    std::memcpy(out + o * elementBytes, in + inOffset * elementBytes,
                elementBytes);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < outShape[d]) {
        inOffset += strideOfOut[d];
        break;
      }
      inOffset -= strideOfOut[d] * (outShape[d] - 1);
      index[d] = 0;
    }
  }
}

/// y [outer, n, inner] = block `index` of the middle dimension of x [outer,
/// groupSize * n, inner]: y[o, j, i] = x[o, index * n + j, i]. Moves elements
/// of any size; y must not overlap x.
void shardSlice(uint8_t *out, const uint8_t *in, size_t elementBytes,
                int64_t outer, int64_t n, int64_t inner, int64_t groupSize,
                int64_t index) {
  const size_t blockBytes = size_t(n * inner) * elementBytes;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(out + o * blockBytes,
                in + size_t(o * groupSize + index) * blockBytes, blockBytes);
}

/// Converts n elements between float types through float (bf16 <-> f32 as
/// PyTorch rounds; f64 <-> f32 to nearest).
Status cast(const BufferView &out, const BufferView &in, int64_t n) {
  if (out.dtype == in.dtype) {
    std::memmove(out.data, in.data, out.bytes());
    return Status::ok();
  }
  // Widen the input to floats, or take it as is.
  std::vector<float> staging;
  const float *source;
  switch (in.dtype) {
  case ElementType::F32:
    source = in.as<const float>();
    break;
  case ElementType::BF16:
    staging.resize(n);
    cpu::castBF16ToFloat(staging.data(), in.as<const uint16_t>(), n);
    source = staging.data();
    break;
  case ElementType::F64:
    staging.resize(n);
    cpu::convert<double, float>(staging.data(), in.as<const double>(), n);
    source = staging.data();
    break;
  default:
    return errorf("cannot cast from ", elementTypeName(in.dtype));
  }
  switch (out.dtype) {
  case ElementType::F32:
    std::memmove(out.data, source, n * sizeof(float));
    break;
  case ElementType::BF16:
    cpu::castFloatToBF16(out.as<uint16_t>(), source, n);
    break;
  case ElementType::F64:
    cpu::convert<float, double>(out.as<double>(), source, n);
    break;
  default:
    return errorf("cannot cast to ", elementTypeName(out.dtype));
  }
  return Status::ok();
}

class CpuDeviceContext final : public DeviceContext {
public:
  explicit CpuDeviceContext(Communicator *communicator)
      : communicator_(communicator) {}

  StatusOr<uint8_t *> allocate(uint64_t bytes) override {
    // calloc: the arena starts zeroed, so runs are reproducible even if a
    // plan reads a buffer before writing it.
    void *memory = std::calloc(1, bytes);
    if (!memory)
      return errorf("out of host memory");
    return static_cast<uint8_t *>(memory);
  }
  void deallocate(uint8_t *memory) override { std::free(memory); }
  std::string deviceName() const override { return "cpu"; }

  Status copyToDevice(uint8_t *device, const void *host,
                      uint64_t bytes) override {
    std::memcpy(device, host, bytes);
    return Status::ok();
  }
  Status copyToHost(void *host, const uint8_t *device,
                    uint64_t bytes) override {
    std::memcpy(host, device, bytes);
    return Status::ok();
  }

  Status fill(const BufferView &buffer, double value) override;
  Status launch(const InstructionDesc &inst,
                const std::vector<BufferView> &inputs,
                const std::vector<BufferView> &outputs) override;
  Status exchange(std::string_view axis,
                  const std::vector<PointToPoint> &transfers) override;
  Status synchronize() override { return Status::ok(); }

  // A launch runs to completion: its wall time is its time.
  Status beginLaunchTiming() override {
    timing_ = true;
    launchTimes_.clear();
    timingOrigin_ = std::chrono::steady_clock::now();
    return Status::ok();
  }
  StatusOr<std::vector<LaunchTiming>> endLaunchTiming() override {
    timing_ = false;
    return std::move(launchTimes_);
  }

private:
  /// Runs one instruction (launch, untimed).
  Status run(const InstructionDesc &inst, const std::vector<BufferView> &in,
             const std::vector<BufferView> &out);
  /// max |x| over a buffer as stored, in f32 (cpu::absMax's value): a fused
  /// amax output's (KernelInfo.h's fusedAmaxOutputs).
  static float storedAbsMax(const BufferView &x);

  /// Runs `work` (a launch or an exchange), timed while timing is on: it
  /// runs to completion, so its wall time is its time.
  template <typename Work> Status timed(Work &&work);

  /// Runs a collective through the communicator.
  Status collective(const InstructionDesc &inst, const BufferView &in,
                    const BufferView &out);

  /// Runs a bf16 instruction as the f32 kernel on widened copies of its bf16
  /// operands, then rounds each bf16 output once.
  Status launchWidened(const InstructionDesc &inst,
                       const std::vector<BufferView> &inputs,
                       const std::vector<BufferView> &outputs);

  /// Runs a kernel that computes in T (float or double).
  template <typename T>
  Status launchAs(const InstructionDesc &inst,
                  const std::vector<BufferView> &inputs,
                  const std::vector<BufferView> &outputs);

  /// A scratch area of at least `n` elements of T; the two areas of one type
  /// never alias.
  template <typename T> T *scratch(int which, int64_t n) {
    std::vector<T> &area = scratchAreas<T>()[which];
    if (area.size() < size_t(n))
      area.resize(n);
    return area.data();
  }
  template <typename T> std::vector<T> *scratchAreas() {
    if constexpr (std::is_same_v<T, float>)
      return scratchF32_;
    else
      return scratchF64_;
  }

  std::vector<float> scratchF32_[2];
  std::vector<double> scratchF64_[2];
  Communicator *communicator_;
  bool timing_ = false;
  std::vector<LaunchTiming> launchTimes_;
  std::chrono::steady_clock::time_point timingOrigin_;
};

Status CpuDeviceContext::collective(const InstructionDesc &inst,
                                    const BufferView &in,
                                    const BufferView &out) {
  if (!communicator_)
    return errorf("this rank has no communicator");
  const CollectiveAttrs collective = collectiveAttrs(inst);
  const size_t count = size_t(collective.count);
  MLT_RETURN_IF_ERROR(checkMeshAxis(communicator_->mesh(), collective.axis));
  const std::string &axis =
      communicator_->mesh().axes()[size_t(collective.axis)].name;
  switch (inst.kernel) {
  case Kernel::AllReduceSum:
    return communicator_->allReduceSum(in.data, out.data, count, in.dtype,
                                       axis);
  case Kernel::ReduceScatterSum:
    return communicator_->reduceScatterSum(in.data, out.data, count, in.dtype,
                                           axis);
  case Kernel::AllGather:
    return communicator_->allGather(in.data, out.data, count, in.dtype, axis);
  case Kernel::AllToAll:
    return communicator_->allToAll(in.data, out.data, count, in.dtype, axis,
                                   BlockOrder(collective.order));
  case Kernel::CollectivePermute:
    return communicator_->permute(in.data, out.data, count, in.dtype, axis,
                                  int(collective.shift));
  default:
    return errorf("kernel '", kernelName(inst.kernel), "' is not a collective");
  }
}

Status CpuDeviceContext::fill(const BufferView &buffer, double value) {
  const int64_t n = buffer.numElements;
  switch (buffer.dtype) {
  case ElementType::F32:
    cpu::fill(buffer.as<float>(), n, float(value));
    return Status::ok();
  case ElementType::F64:
    cpu::fill(buffer.as<double>(), n, value);
    return Status::ok();
  case ElementType::BF16: {
    uint16_t bits = floatToBF16(float(value));
    uint16_t *data = buffer.as<uint16_t>();
    for (int64_t i = 0; i < n; ++i)
      data[i] = bits;
    return Status::ok();
  }
  case ElementType::I32: {
    int32_t *data = buffer.as<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      data[i] = int32_t(value);
    return Status::ok();
  }
  case ElementType::I64: {
    int64_t *data = buffer.as<int64_t>();
    for (int64_t i = 0; i < n; ++i)
      data[i] = int64_t(value);
    return Status::ok();
  }
  case ElementType::F16:
  case ElementType::F8E4M3:
  case ElementType::F8E5M2:
    break;
  }
  return errorf("the CPU backend cannot fill ", elementTypeName(buffer.dtype),
                " buffers");
}

template <typename Work> Status CpuDeviceContext::timed(Work &&work) {
  if (!timing_)
    return work();
  using Milliseconds = std::chrono::duration<double, std::milli>;
  const auto start = std::chrono::steady_clock::now();
  if (launchTimes_.empty())
    timingOrigin_ = start;
  Status status = work();
  launchTimes_.push_back(
      {Milliseconds(start - timingOrigin_).count(),
       Milliseconds(std::chrono::steady_clock::now() - start).count()});
  return status;
}

Status CpuDeviceContext::launch(const InstructionDesc &inst,
                                const std::vector<BufferView> &in,
                                const std::vector<BufferView> &out) {
  return timed([&] {
    const size_t amaxes = fusedAmaxOutputs(inst.kernel, out.size());
    if (!amaxes)
      return run(inst, in, out);
    // The kernel's own outputs, then each fused amax from its output as
    // stored (rounded to bf16 where it is bf16): the amax kernel's value.
    const std::vector<BufferView> own(out.begin(), out.end() - amaxes);
    MLT_RETURN_IF_ERROR(run(inst, in, own));
    for (size_t j = 0; j < amaxes; ++j)
      *out[own.size() + j].as<float>() = storedAbsMax(own[j]);
    return Status::ok();
  });
}

float CpuDeviceContext::storedAbsMax(const BufferView &x) {
  switch (x.dtype) {
  case ElementType::F32:
    return cpu::absMax(x.as<const float>(), x.numElements);
  case ElementType::BF16:
    return cpu::absMaxBF16(x.as<const uint16_t>(), x.numElements);
  default: { // f64: the largest magnitude rounded once, NaN when any is NaN
    const double *v = x.as<const double>();
    double best = 0.0;
    for (int64_t i = 0; i < x.numElements; ++i) {
      if (std::isnan(v[i]))
        return std::numeric_limits<float>::quiet_NaN();
      best = std::max(best, std::fabs(v[i]));
    }
    return float(best);
  }
  }
}

Status CpuDeviceContext::exchange(std::string_view axis,
                                  const std::vector<PointToPoint> &transfers) {
  if (!communicator_)
    return errorf("this rank has no communicator");
  return timed([&] { return communicator_->exchange(axis, transfers); });
}

Status CpuDeviceContext::run(const InstructionDesc &inst,
                             const std::vector<BufferView> &in,
                             const std::vector<BufferView> &out) {
  switch (inst.kernel) {
  case Kernel::Transpose: {
    const TransposeAttrs dims = transposeAttrs(inst.ints);
    std::vector<int64_t> shape(dims.shape, dims.shape + dims.rank);
    std::vector<int64_t> perm(dims.perm, dims.perm + dims.rank);
    if (out[0].data == in[0].data)
      return errorf("transpose cannot run in place");
    transpose(out[0].data, in[0].data, elementSize(in[0].dtype), shape, perm);
    return Status::ok();
  }
  case Kernel::Cast:
    return cast(out[0], in[0], KernelAttrs<attrs::Cast>(inst)[attrs::Cast::n]);
  case Kernel::Fill:
    return fill(out[0], KernelAttrs<attrs::Fill>(inst)[attrs::Fill::value]);
  case Kernel::ReorderSequence: { // x -> y, whole chunks
    using A = attrs::ReorderSequence;
    const KernelAttrs<A> a(inst);
    if (out[0].bytes() > 0 && out[0].data < in[0].data + in[0].bytes() &&
        in[0].data < out[0].data + out[0].bytes())
      return errorf("reorder_sequence cannot run in place (its input and "
                    "output overlap)");
    const int64_t chunks = 2 * a[A::ranks];
    const size_t chunkBytes =
        size_t(a[A::chunk] * a[A::inner]) * elementSize(in[0].dtype);
    for (int64_t o = 0; o < a[A::outer]; ++o)
      for (int64_t piece = 0; piece < chunks; ++piece) {
        const ChunkMove move =
            reorderedChunk(piece, a[A::ranks], a[A::to_natural] == 1);
        std::memcpy(out[0].data + (o * chunks + move.to) * chunkBytes,
                    in[0].data + (o * chunks + move.from) * chunkBytes,
                    chunkBytes);
      }
    return Status::ok();
  }
  case Kernel::ShardSlice: { // x -> y
    using A = attrs::ShardSlice;
    const KernelAttrs<A> a(inst);
    StatusOr<AxisPosition> position = axisPosition(communicator_, a[A::axis]);
    if (!position)
      return position.takeStatus();
    if (out[0].bytes() > 0 && out[0].data < in[0].data + in[0].bytes() &&
        in[0].data < out[0].data + out[0].bytes())
      return errorf("shard_slice cannot run in place (its input and output "
                    "overlap)");
    shardSlice(out[0].data, in[0].data, elementSize(in[0].dtype), a[A::outer],
               a[A::n], a[A::inner], position->size, position->coordinate);
    return Status::ok();
  }
  case Kernel::AllReduceSum:
  case Kernel::ReduceScatterSum:
  case Kernel::AllGather:
  case Kernel::AllToAll:
  case Kernel::CollectivePermute:
    return collective(inst, in[0], out[0]);
  case Kernel::Send:
  case Kernel::Recv:
    return errorf(kernelName(inst.kernel),
                  " runs in a transfer group (DeviceContext::exchange), not "
                  "as a launch");
  default:
    break;
  }
  // The type the instruction computes in (checkSupported made the other
  // operands agree with it).
  std::vector<ElementType> types;
  for (const std::vector<BufferView> *views : {&in, &out})
    for (const BufferView &view : *views)
      types.push_back(view.dtype);
  std::optional<size_t> computed =
      computeOperandIndex(inst.kernel, in.size(), types);
  const ElementType type = computed ? types[*computed] : ElementType::F32;
  switch (type) {
  case ElementType::F32:
    // The optimizer's gradients may be bf16 (reduced in bf16): widened.
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].dtype == ElementType::BF16 &&
          operandPrecision(inst.kernel, in.size(), out.size(), i) ==
              OperandPrecision::Gradient)
        return launchWidened(inst, in, out);
    return launchAs<float>(inst, in, out);
  case ElementType::F64:
    return launchAs<double>(inst, in, out);
  case ElementType::BF16:
    return launchWidened(inst, in, out);
  default:
    return errorf("the CPU backend cannot compute in ", elementTypeName(type));
  }
}

Status CpuDeviceContext::launchWidened(const InstructionDesc &inst,
                                       const std::vector<BufferView> &in,
                                       const std::vector<BufferView> &out) {
  // Outputs are widened with their contents too: accumulate and the
  // optimizer's kernels update them in place.
  std::vector<std::vector<float>> staging;
  auto widen = [&](const BufferView &view) {
    if (view.dtype != ElementType::BF16)
      return view;
    std::vector<float> &wide = staging.emplace_back(view.numElements);
    cpu::castBF16ToFloat(wide.data(), view.as<const uint16_t>(),
                         view.numElements);
    return BufferView{reinterpret_cast<uint8_t *>(wide.data()),
                      ElementType::F32, view.numElements};
  };
  std::vector<BufferView> wideIn, wideOut;
  for (const BufferView &view : in)
    wideIn.push_back(widen(view));
  for (const BufferView &view : out)
    wideOut.push_back(widen(view));
  MLT_RETURN_IF_ERROR(launchAs<float>(inst, wideIn, wideOut));
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].dtype == ElementType::BF16)
      cpu::castFloatToBF16(out[i].as<uint16_t>(), wideOut[i].as<const float>(),
                           out[i].numElements);
  return Status::ok();
}

namespace {

/// c = op(a) op(b) + beta c for matmul's ints (matmul_group's name them
/// alike): a shared b under an untransposed a is one product of batch * m
/// rows (one large BLAS call instead of `batch` small ones), else `batch`
/// strided products.
template <typename A, typename T>
Status matmulProduct(const KernelAttrs<A> &a, const T *x, const T *w, T beta,
                     T *c) {
  static_assert(sameAttributes(Kernel::Matmul, Kernel::MatmulAdd));
  const int64_t batch = a[A::batch], m = a[A::m], n = a[A::n], k = a[A::k];
  const bool transA = a[A::transpose_a], transB = a[A::transpose_b],
             bBatched = a[A::b_batched];
  const int64_t lda = std::max<int64_t>(1, transA ? m : k);
  const int64_t ldb = std::max<int64_t>(1, transB ? k : n);
  const int64_t ldc = std::max<int64_t>(1, n);
  if (!bBatched && !transA && batch * m <= INT32_MAX)
    return cpu::gemm(false, transB, batch * m, n, k, T(1), x, lda, w, ldb, beta,
                     c, ldc);
  return cpu::gemmStridedBatched(transA, transB, m, n, k, T(1), x, lda, m * k,
                                 w, ldb, bBatched ? k * n : 0, beta, c, ldc,
                                 m * n, batch);
}

} // namespace

template <typename T>
Status CpuDeviceContext::launchAs(const InstructionDesc &inst,
                                  const std::vector<BufferView> &in,
                                  const std::vector<BufferView> &out) {
  auto f = [](const BufferView &b) { return b.as<T>(); };
  auto ids = [](const BufferView &b) { return b.as<const int32_t>(); };

  switch (inst.kernel) {
  case Kernel::EmbeddingFwd:
  case Kernel::EmbeddingBwd: {
    using A = attrs::EmbeddingFwd;
    const KernelAttrs<A> a(inst);
    const int64_t tokens = a[A::tokens], vocab = a[A::vocab],
                  hidden = a[A::hidden];
    if (inst.kernel == Kernel::EmbeddingFwd)
      return cpu::embeddingForward(f(out[0]), ids(in[0]), f(in[1]), tokens,
                                   vocab, hidden);
    // The plan wants dtable overwritten; the library scatter-adds.
    cpu::zero(f(out[0]), vocab * hidden);
    return cpu::embeddingBackward(f(out[0]), ids(in[0]), f(in[1]), tokens,
                                  vocab, hidden);
  }

  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd: {
    // matmul_add: c starts as the addend, and the product is added to it.
    if (inst.kernel == Kernel::MatmulAdd && in[2].data != out[0].data)
      std::memmove(out[0].data, in[2].data, out[0].bytes());
    const T beta = inst.kernel == Kernel::Matmul ? T(0) : T(1);
    return matmulProduct(KernelAttrs<attrs::Matmul>(inst), f(in[0]), f(in[1]),
                         beta, f(out[0]));
  }

  // FP8 products (cpu/Fp8.h): in f32 (a bf16 plan's operands widened).
  case Kernel::Amax:
  case Kernel::QuantizeFp8:
  case Kernel::MatmulFp8: {
    if constexpr (!std::is_same_v<T, float>) {
      return errorf(kernelName(inst.kernel),
                    " computes in f32 or bf16, not f64");
    } else {
      if (inst.kernel == Kernel::Amax) { // x -> amax
        *out[0].as<float>() = cpu::absMax(
            f(in[0]), KernelAttrs<attrs::Amax>(inst)[attrs::Amax::n]);
        return Status::ok();
      }
      if (inst.kernel == Kernel::QuantizeFp8) { // -> scale_inv, q[, q_t]
        using A = attrs::QuantizeFp8;
        const KernelAttrs<A> a(inst);
        const ElementType format = out[1].dtype;
        const float scale = cpu::fp8Scale(*in[1].as<const float>(), format);
        *out[0].as<float>() = 1.0f / scale;
        const int64_t layout = a[A::layout];
        MLT_RETURN_IF_ERROR(cpu::quantizeFp8(out[1].as<uint8_t>(), f(in[0]),
                                             a[A::rows], a[A::cols],
                                             layout == 1, format, scale));
        if (layout != 2)
          return Status::ok();
        return cpu::quantizeFp8(out[2].as<uint8_t>(), f(in[0]), a[A::rows],
                                a[A::cols], true, format, scale);
      }
      // a, a_scale_inv, b, b_scale_inv[, addend] -> c: the products of the
      // dequantized values (exact in f32), summed in f32.
      using A = attrs::MatmulFp8;
      const KernelAttrs<A> a(inst);
      const int64_t m = a[A::m], n = a[A::n], k = a[A::k];
      float *wa = scratch<float>(0, m * k), *wb = scratch<float>(1, n * k);
      cpu::dequantizeFp8(wa, in[0].as<const uint8_t>(), m * k, in[0].dtype,
                         *in[1].as<const float>());
      cpu::dequantizeFp8(wb, in[2].as<const uint8_t>(), n * k, in[2].dtype,
                         *in[3].as<const float>());
      if (in.size() == 5 && in[4].data != out[0].data)
        std::memmove(out[0].data, in[4].data, out[0].bytes());
      const float beta = a[A::accumulate] || in.size() == 5 ? 1.0f : 0.0f;
      return cpu::gemm(false, true, m, n, k, 1.0f, wa, std::max<int64_t>(1, k),
                       wb, std::max<int64_t>(1, k), beta, f(out[0]),
                       std::max<int64_t>(1, n));
    }
  }

  case Kernel::MatmulGroup: {
    // Each product as matmul (matmul_accumulate) computes it: the same
    // calls, so the same bits.
    const KernelAttrs<attrs::MatmulGroup> a(inst);
    const T beta = a[attrs::MatmulGroup::accumulate] ? T(1) : T(0);
    const size_t groups = out.size();
    for (size_t g = 0; g < groups; ++g)
      MLT_RETURN_IF_ERROR(
          matmulProduct(a, f(in[g]), f(in[groups + g]), beta, f(out[g])));
    return Status::ok();
  }

  case Kernel::RMSNormFwd: {
    using A = attrs::RMSNormFwd;
    const KernelAttrs<A> a(inst);
    cpu::rmsnormForward(f(out[0]), scratch<T>(0, a[A::rows]), f(in[0]),
                        f(in[1]), a[A::rows], a[A::dim], a[A::eps]);
    return Status::ok();
  }

  case Kernel::RMSNormBwd:
  case Kernel::RMSNormBwdAdd: {
    // dy, x, w[, addend] -> dx, dw. Recompute rstd exactly as the forward
    // did (its output goes to scratch), and overwrite dw where the library
    // adds; rms_norm_bwd_add then adds the addend to dx.
    using A = attrs::RMSNormBwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], dim = a[A::dim];
    T *rstd = scratch<T>(0, rows);
    cpu::rmsnormForward(scratch<T>(1, rows * dim), rstd, f(in[1]), f(in[2]),
                        rows, dim, a[A::eps]);
    cpu::zero(f(out[1]), dim);
    if (inst.kernel == Kernel::RMSNormBwd) {
      cpu::rmsnormBackward(f(out[0]), f(out[1]), f(in[0]), f(in[1]), f(in[2]),
                           rstd, rows, dim);
      return Status::ok();
    }
    // Into scratch first (the forward's output there is no longer needed):
    // the addend may share dx's memory.
    T *dx = scratch<T>(1, rows * dim);
    cpu::rmsnormBackward(dx, f(out[1]), f(in[0]), f(in[1]), f(in[2]), rstd,
                         rows, dim);
    cpu::add(f(out[0]), dx, f(in[3]), rows * dim);
    return Status::ok();
  }

  case Kernel::Rope: {
    using A = attrs::Rope;
    const KernelAttrs<A> a(inst);
    StatusOr<SequencePositions> positions =
        sequencePositions(communicator_, a[A::axis], a[A::seq],
                          a[A::position_offset]);
    if (!positions)
      return positions.takeStatus();
    if (a[A::inverse])
      return cpu::ropeBackward(f(out[0]), f(in[0]), a[A::batch], a[A::seq],
                               a[A::heads], a[A::head_dim], a[A::theta],
                               *positions, ropeScaling(a));
    return cpu::ropeForward(f(out[0]), f(in[0]), a[A::batch], a[A::seq],
                            a[A::heads], a[A::head_dim], a[A::theta],
                            *positions, ropeScaling(a));
  }

  case Kernel::AttentionFwd:
  case Kernel::AttentionBwd: {
    StatusOr<cpu::AttentionParams> params = attentionPositions(
        communicator_, attentionParams<cpu::AttentionParams>(inst),
        contextAxis(inst));
    if (!params)
      return params.takeStatus();
    if (inst.kernel == Kernel::AttentionFwd)
      return cpu::attentionForward(f(out[0]), f(out[1]), f(in[0]), f(in[1]),
                                   f(in[2]), *params);
    return cpu::attentionBackward(f(out[0]), f(out[1]), f(out[2]), f(in[0]),
                                  f(in[1]), f(in[2]), f(in[3]), f(in[4]),
                                  f(in[5]), *params);
  }
  case Kernel::AttentionMerge: { // out_a, lse_a, out_b, lse_b -> out, lse
    using A = attrs::AttentionMerge;
    const KernelAttrs<A> a(inst);
    cpu::attentionMerge(f(out[0]), f(out[1]), f(in[0]), f(in[1]), f(in[2]),
                        f(in[3]), a[A::batch], a[A::seq], a[A::heads],
                        a[A::head_dim]);
    return Status::ok();
  }
  case Kernel::AttentionBwdRope: {
    // attention_bwd, then rope's inverse on dq and dk in place: the calls
    // of the two launches it stands for (in f32 the same bits; a bf16 plan
    // rounds dq and dk once, after the rotation, as the CUDA kernels do).
    using A = attrs::AttentionBwdRope;
    const KernelAttrs<A> a(inst);
    StatusOr<cpu::AttentionParams> params = attentionPositions(
        communicator_, attentionParams<cpu::AttentionParams>(inst), a[A::axis]);
    if (!params)
      return params.takeStatus();
    MLT_RETURN_IF_ERROR(cpu::attentionBackward(
        f(out[0]), f(out[1]), f(out[2]), f(in[0]), f(in[1]), f(in[2]), f(in[3]),
        f(in[4]), f(in[5]), *params));
    // dq at the queries' positions, dk at the keys'.
    for (size_t o = 0; o < 2; ++o) {
      SequencePositions positions = o == 0 ? params->queries : params->keys;
      positions.offset += a[A::position_offset];
      MLT_RETURN_IF_ERROR(cpu::ropeBackward(
          f(out[o]), f(out[o]), params->batch,
          o == 0 ? params->seq : params->keyRows(),
          o == 0 ? params->qHeads : params->kvHeads, params->headDim,
          a[A::theta], positions, ropeScaling(a)));
    }
    return Status::ok();
  }

  case Kernel::SwiGLUFwd:
    cpu::swigluForward(
        f(out[0]), f(in[0]), f(in[1]),
        KernelAttrs<attrs::SwiGLUFwd>(inst)[attrs::SwiGLUFwd::n]);
    return Status::ok();
  case Kernel::SwiGLUBwd:
    cpu::swigluBackward(
        f(out[0]), f(out[1]), f(in[0]), f(in[1]), f(in[2]),
        KernelAttrs<attrs::SwiGLUBwd>(inst)[attrs::SwiGLUBwd::n],
        out.size() == 3 ? f(out[2]) : nullptr);
    return Status::ok();
  case Kernel::SiLUFwd:
    cpu::siluForward(f(out[0]), f(in[0]),
                     KernelAttrs<attrs::SiLUFwd>(inst)[attrs::SiLUFwd::n]);
    return Status::ok();
  case Kernel::SiLUBwd:
    cpu::siluBackward(f(out[0]), f(in[0]), f(in[1]),
                      KernelAttrs<attrs::SiLUBwd>(inst)[attrs::SiLUBwd::n]);
    return Status::ok();
  case Kernel::Add:
    cpu::add(f(out[0]), f(in[0]), f(in[1]),
             KernelAttrs<attrs::Add>(inst)[attrs::Add::n]);
    return Status::ok();
  case Kernel::Mul:
    cpu::mulForward(f(out[0]), f(in[0]), f(in[1]),
                    KernelAttrs<attrs::Mul>(inst)[attrs::Mul::n]);
    return Status::ok();
  case Kernel::Accumulate:
    cpu::accumulate(f(out[0]), f(in[0]),
                    KernelAttrs<attrs::Accumulate>(inst)[attrs::Accumulate::n]);
    return Status::ok();

  case Kernel::CrossEntropyFwd: {
    using A = attrs::CrossEntropyFwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab];
    return cpu::crossEntropyForward(f(out[0]), scratch<T>(0, rows), f(in[0]),
                                    ids(in[1]), rows, vocab, rows);
  }

  case Kernel::CrossEntropyBwd: {
    // dloss, logits, labels -> dlogits; the forward's lse is recomputed.
    using A = attrs::CrossEntropyBwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab];
    T *lse = scratch<T>(0, rows);
    T unusedLoss;
    MLT_RETURN_IF_ERROR(cpu::crossEntropyForward(
        &unusedLoss, lse, f(in[1]), ids(in[2]), rows, vocab, rows));
    return cpu::crossEntropyBackward(f(out[0]), f(in[1]), lse, ids(in[2]),
                                     *f(in[0]), rows, vocab, rows);
  }

  case Kernel::CrossEntropyFwdBwd: {
    // dloss, logits, labels -> loss, dlogits: the forward, then the backward
    // from its lse (dlogits, which may alias the logits, written last).
    using A = attrs::CrossEntropyFwdBwd;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocab = a[A::vocab],
                  rowCount = a[A::row_count];
    T *lse = scratch<T>(0, rows);
    MLT_RETURN_IF_ERROR(cpu::crossEntropyForward(
        f(out[0]), lse, f(in[1]), ids(in[2]), rows, vocab, rowCount));
    return cpu::crossEntropyBackward(f(out[1]), f(in[1]), lse, ids(in[2]),
                                     *f(in[0]), rows, vocab, rowCount);
  }

  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP: {
    // ids, table -> out or ids, dout -> dtable. The rank holds table rows
    // from coordinate * vocab_local.
    using A = attrs::EmbeddingFwdVP;
    const KernelAttrs<A> a(inst);
    const int64_t tokens = a[A::tokens], vocabLocal = a[A::vocab_local],
                  hidden = a[A::hidden];
    StatusOr<VocabShard> shard =
        vocabShard(communicator_, vocabLocal, a[A::axis]);
    if (!shard)
      return shard.takeStatus();
    if (inst.kernel == Kernel::EmbeddingFwdVP)
      return cpu::embeddingForwardShard(f(out[0]), ids(in[0]), f(in[1]), tokens,
                                        vocabLocal, hidden, shard->offset,
                                        shard->total);
    // The plan wants dtable overwritten; the library scatter-adds.
    cpu::zero(f(out[0]), vocabLocal * hidden);
    return cpu::embeddingBackwardShard(f(out[0]), ids(in[0]), f(in[1]), tokens,
                                       vocabLocal, hidden, shard->offset,
                                       shard->total);
  }

  case Kernel::CrossEntropyStats: {
    // logits, labels -> lse, target.
    using A = attrs::CrossEntropyStats;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocabLocal = a[A::vocab_local];
    StatusOr<VocabShard> shard =
        vocabShard(communicator_, vocabLocal, a[A::axis]);
    if (!shard)
      return shard.takeStatus();
    return cpu::crossEntropyStats(f(out[0]), f(out[1]), f(in[0]), ids(in[1]),
                                  rows, vocabLocal, shard->offset,
                                  shard->total);
  }

  case Kernel::CrossEntropyCombine: {
    // parts, target -> lse, loss.
    using A = attrs::CrossEntropyCombine;
    const KernelAttrs<A> a(inst);
    return cpu::crossEntropyCombine(f(out[0]), f(out[1]), f(in[0]), f(in[1]),
                                    a[A::rows], a[A::num_parts],
                                    a[A::row_count]);
  }

  case Kernel::CrossEntropyBwdStats: {
    // dloss, logits, labels, lse -> dlogits.
    using A = attrs::CrossEntropyBwdStats;
    const KernelAttrs<A> a(inst);
    const int64_t rows = a[A::rows], vocabLocal = a[A::vocab_local];
    StatusOr<VocabShard> shard =
        vocabShard(communicator_, vocabLocal, a[A::axis]);
    if (!shard)
      return shard.takeStatus();
    return cpu::crossEntropyStatsBackward(
        f(out[0]), f(in[1]), f(in[3]), ids(in[2]), *f(in[0]), rows, vocabLocal,
        shard->offset, shard->total, a[A::row_count]);
  }

  case Kernel::SumSquares:
    *out[0].as<float>() = float(cpu::sumOfSquares(
        f(in[0]), KernelAttrs<attrs::SumSquares>(inst)[attrs::SumSquares::n]));
    return Status::ok();

  case Kernel::SumSquaresMulti: {
    // x0..x(N-1) -> s0..s(N-1); the ints are n0..n(N-1), one per tensor.
    std::vector<const T *> xs;
    std::vector<float *> sums;
    for (const BufferView &x : in)
      xs.push_back(f(x));
    for (const BufferView &sum : out)
      sums.push_back(sum.as<float>());
    cpu::sumsOfSquares(sums.data(), xs.data(), inst.ints.data(), xs.size());
    return Status::ok();
  }

  case Kernel::GlobalNorm: {
    double sum = 0.0;
    for (const BufferView &part : in)
      sum += double(scalar(part));
    *out[0].as<float>() = float(std::sqrt(sum));
    return Status::ok();
  }

  case Kernel::ClipCoefficient: {
    // torch.nn.utils.clip_grad_norm_: max_norm / (total_norm + 1e-6), in f32,
    // clamped to 1. A max of 0 means no clipping.
    const float norm = scalar(in[0]), maxNorm = scalar(in[1]);
    float coefficient = 1.0f;
    if (maxNorm != 0.0f)
      coefficient = std::min(1.0f, maxNorm / (norm + 1e-6f));
    *out[0].as<float>() = coefficient;
    return Status::ok();
  }

  case Kernel::AdamW: {
    // grad, grad_scale, lr, beta1, beta2, eps, weight_decay, step
    //   -> param, m, v (in place). The scalars are f32 whatever T is.
    using A = attrs::AdamW;
    const KernelAttrs<A> a(inst);
    const int64_t n = a[A::n];
    const float gradScale = scalar(in[1]);
    const T *grad = f(in[0]);
    if (gradScale != 1.0f) {
      // Clipping multiplies the gradient in T (f32: as grad.mul_(clip_coef)
      // does); the gradient buffer itself is left as it was.
      T *scaled = scratch<T>(0, n);
      for (int64_t i = 0; i < n; ++i)
        scaled[i] = grad[i] * T(gradScale);
      grad = scaled;
    }
    cpu::AdamWParams params;
    params.lr = scalar(in[2]);
    params.beta1 = scalar(in[3]);
    params.beta2 = scalar(in[4]);
    params.eps = scalar(in[5]);
    params.weightDecay = scalar(in[6]);
    const float step = scalar(in[7]);
    if (!(step >= 1.0f) || step > 9.0e15f)
      return errorf("step ", step, " is not a positive step number");
    MLT_RETURN_IF_ERROR(cpu::adamwStep(f(out[0]), f(out[1]), f(out[2]), grad, n,
                                       params, std::llround(step),
                                       a[A::decay] != 0));
    if (out.size() == 4) // the compute copy of the updated parameter
      return cast(out[3], out[0], n);
    return Status::ok();
  }

  case Kernel::AdamWMulti: {
    // Each tensor as an adamw instruction of its own: the same bits.
    using A = attrs::AdamWMulti;
    using One = attrs::AdamW;
    const KernelAttrs<A> a(inst);
    const size_t k = in.size() - kAdamWScalarInputs;
    const bool copies = out.size() == 4 * k;
    InstructionDesc one;
    one.kernel = Kernel::AdamW;
    for (size_t t = 0; t < k; ++t) {
      one.ints =
          kernelInts<One>({{One::n, a(t, A::n)}, {One::decay, a(t, A::decay)}});
      std::vector<BufferView> ins = {in[t]};
      ins.insert(ins.end(), in.begin() + k, in.end());
      std::vector<BufferView> outs = {out[t], out[k + t], out[2 * k + t]};
      if (copies)
        outs.push_back(out[3 * k + t]);
      MLT_RETURN_IF_ERROR(launchAs<T>(one, ins, outs));
    }
    return Status::ok();
  }

  case Kernel::Transpose:
  case Kernel::Cast:
  case Kernel::Fill:
  case Kernel::ShardSlice:
  case Kernel::ReorderSequence:
  case Kernel::AllReduceSum:
  case Kernel::ReduceScatterSum:
  case Kernel::AllGather:
  case Kernel::AllToAll:
  case Kernel::CollectivePermute:
  case Kernel::Send:
  case Kernel::Recv:
    break; // type-free, handled by launch or exchange
  }
  return errorf("kernel '", kernelName(inst.kernel),
                "' has no CPU implementation");
}

class CpuBackend final : public Backend {
public:
  std::string_view name() const override { return "cpu"; }

  Status checkSupported(const RankPlan &rank) const override {
    for (const BufferDesc &buffer : rank.buffers)
      if (buffer.dtype == ElementType::F16)
        return errorf("buffer '", buffer.name,
                      "' is f16, which the CPU backend does not support");
    for (const ProgramDesc &program : rank.programs) {
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        if (isTypeFreeKernel(inst.kernel))
          continue;
        auto fail = [&](auto &&...message) {
          return errorf("program '", program.name, "' instruction ", i, " (",
                        kernelName(inst.kernel), "): ", message...);
        };
        Status operands = checkComputeOperands(
            rank, inst, [&](const BufferDesc &buffer) -> Status {
              if (buffer.dtype != ElementType::F32 &&
                  buffer.dtype != ElementType::F64 &&
                  buffer.dtype != ElementType::BF16)
                return errorf("buffer '", buffer.name, "' is ",
                              elementTypeName(buffer.dtype),
                              ", but the CPU backend computes in f32, f64 "
                              "and bf16 only");
              return Status::ok();
            });
        if (!operands)
          return fail(operands.message());
      }
    }
    return Status::ok();
  }

  StatusOr<std::unique_ptr<DeviceContext>>
  createContext(const RankInfo &rank) override {
    return std::unique_ptr<DeviceContext>(
        new CpuDeviceContext(rank.communicator));
  }
};

} // namespace

HostMemoryUse mlt::rt::cpuBackendHostMemory() {
  return {"OpenBLAS's buffers (" + std::to_string(cpu::gemmThreads()) +
              " threads)",
          cpu::gemmWorkspaceBytes()};
}

int mlt::rt::shareCpuCores(unsigned ranks) {
  return cpu::shareGemmThreads(ranks);
}

std::unique_ptr<Backend> mlt::rt::createCpuBackend() {
  return std::make_unique<CpuBackend>();
}
