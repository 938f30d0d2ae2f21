//===- KernelInfo.h - the kernel list as C++ values -------------*- C++ -*-===//
//
// Part of mlt. Turns the X-macro list of Kernels.def into an enum and a table
// of signatures (name, number of inputs, outputs, integer and float
// attributes), which the plan verifier checks every instruction against and
// the backends switch over, and the per-kernel facts that the compiler and
// the runtime must agree on (operand precisions, in-place outputs). Adding a
// kernel to Kernels.def adds it here; a backend's switch then fails to compile
// with -Wswitch until it handles it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_KERNELINFO_H
#define MLT_RUNTIME_KERNELINFO_H

#include "mlt/Runtime/ElementType.h"

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace mlt::rt {

/// One enumerator per kernel of Kernels.def, in its order.
enum class Kernel {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats) Enum,
#include "mlt/Runtime/Kernels.def"
};

/// A kernel's name and arity; -1 means "any number" (see Kernels.def).
struct KernelSignature {
  Kernel kernel;
  std::string_view name;
  int inputs;
  int outputs;
  int ints;
  int floats;
};

/// The number of kernels in Kernels.def.
size_t numKernels();

/// The signature of `kernel`.
const KernelSignature &kernelSignature(Kernel kernel);

/// The kernel named `name`, or nullptr when Kernels.def has no such kernel.
const KernelSignature *lookupKernel(std::string_view name);

/// The Kernels.def name of `kernel` ("matmul", ...).
inline std::string_view kernelName(Kernel kernel) {
  return kernelSignature(kernel).name;
}

/// Whether `kernel` is a collective (all_reduce_sum, reduce_scatter_sum,
/// all_gather): it runs through the rank's communicator, and its ints are
/// (count, axis).
inline bool isCollectiveKernel(Kernel kernel) {
  return kernel == Kernel::AllReduceSum || kernel == Kernel::ReduceScatterSum ||
         kernel == Kernel::AllGather;
}

/// The position of `kernel`'s `axis` integer attribute (an index into the
/// plan's mesh, see Kernels.def), or -1 when the kernel runs on no mesh
/// axis: the collectives, and the kernels of sharded programs, which read the
/// rank's coordinate on that axis, have one.
int meshAxisAttribute(Kernel kernel);

/// Whether `kernel`'s `axis` may be -1 (no axis: coordinate 0 of 1, the
/// whole dimension on every rank). Only for kernels with an axis attribute.
inline bool allowsNoMeshAxis(Kernel kernel) {
  return kernel == Kernel::CrossEntropyStats ||
         kernel == Kernel::CrossEntropyBwdStats;
}

/// Whether operand `operand` (inputs first, then outputs) of `kernel`, an
/// instruction with `numInputs` inputs, is one of the optimizer's f32
/// scalars: the plan format fixes them to f32 whatever float type the model
/// computes in (sum_squares' sum, sum_squares_multi's sums; global_norm's
/// and clip_coefficient's operands; adamw's grad_scale and hyper-parameters).
/// Every backend checks them apart from the computed operands, which share
/// one type.
bool isFixedF32Scalar(Kernel kernel, size_t numInputs, size_t operand);

/// adamw_multi's trailing scalar inputs (grad_scale, lr, beta1, beta2, eps,
/// weight_decay, step): an instruction of K tensors has K + this many inputs.
inline constexpr size_t kAdamWScalarInputs = 7;

/// Whether output `output` of `kernel` may occupy the memory of its input
/// `input` (positions among the outputs and among the inputs), the kernel
/// then overwriting that input element for element as it computes: the two
/// buffers are the same range (offset and size) of one element type.
/// Kernels.def's "In place" lists the pairs and why both backends keep
/// them; the memory planner (mlt-plan-memory) places an output on such an
/// input when the input dies at the instruction, and the plan verifier
/// refuses every other overlap between an instruction's outputs and its
/// other operands.
bool mayAlias(Kernel kernel, size_t output, size_t input);

/// The element type a float operand of an instruction may have, relative to
/// the type C the instruction computes in (its first Compute operand's, or
/// f32 when it has none), as Kernels.def's "Element types" says:
enum class OperandPrecision : uint8_t {
  /// C itself.
  Compute,
  /// f32 always (isFixedF32Scalar).
  FixedF32,
  /// Softmax and loss statistics: f64 when C is f64, else f32 (attention's
  /// lse, cross-entropy's loss, dloss, lse, target and parts).
  Statistic,
  /// A parameter's gradient: C, or f32 when C is bf16 or f16 (matmul's c,
  /// embedding_bwd(_vp)'s dtable, rms_norm_bwd's dw, accumulate's y).
  Accumulator,
  /// A parameter's compute copy, bf16 or f16 (adamw's fourth output).
  ComputeCopy,
};
OperandPrecision operandPrecision(Kernel kernel, size_t numInputs,
                                  size_t operand);

/// The operand whose type an instruction computes in, given every operand's
/// element type (inputs, then outputs): its first float Compute operand, or
/// without one (cross_entropy_combine) its first float operand that is not a
/// fixed f32 scalar; none when it has neither (the type is then f32).
std::optional<size_t>
computeOperandIndex(Kernel kernel, size_t numInputs,
                    const std::vector<ElementType> &operandTypes);

/// The element type `precision` asks for in an instruction computing in
/// `compute`; for Accumulator, the type other than `compute` it also allows
/// (`compute` itself when there is none).
ElementType precisionType(OperandPrecision precision, ElementType compute);

/// Whether `kernel` computes in no particular float type: cast converts
/// between types, fill writes any float type, transpose and shard_slice move
/// bytes of any type, and the
/// collectives move or sum (in the communicator) the types the plan verifier
/// allows them. A backend checks these kernels' types on their own terms.
inline bool isTypeFreeKernel(Kernel kernel) {
  return kernel == Kernel::Cast || kernel == Kernel::Fill ||
         kernel == Kernel::Transpose ||
         kernel == Kernel::ShardSlice || isCollectiveKernel(kernel);
}

} // namespace mlt::rt

#endif // MLT_RUNTIME_KERNELINFO_H
