//===- KernelInfo.h - the kernel table as C++ values ------------*- C++ -*-===//
//
// Part of mlt. Turns the X-macro table of Kernels.def into C++: an enum of
// the kernels; their signatures (name, arity, and the names of their integer
// and float attributes), a compile-time table that the compiler shares;
// one struct of attribute positions per kernel (`attrs::Rope::inverse`),
// through which everything that reads or writes attributes names them; and
// the per-kernel facts that the compiler and the runtime must agree on: the
// operand element counts and FLOPs that attributes imply, operand precisions
// and in-place outputs (KernelInfo.cpp). Adding a kernel to Kernels.def adds
// it here; KernelInfo.cpp then fails to compile until the kernel has its
// rule, and a backend's switch warns (-Wswitch) until it handles it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_KERNELINFO_H
#define MLT_PLAN_KERNELINFO_H

#include "mlt/Plan/Collective.h"
#include "mlt/Plan/ElementType.h"
#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Support/Status.h"

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace mlt::rt {

struct InstructionDesc;

/// One enumerator per kernel of Kernels.def, in its order.
enum class Kernel {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats) Enum,
#include "mlt/Plan/Kernels.def"
};

//===----------------------------------------------------------------------===//
// Signatures
//===----------------------------------------------------------------------===//

/// How an instruction's integer attributes follow the names Kernels.def
/// gives them.
enum class IntLayout : uint8_t {
  /// Exactly the named attributes: `(a, b)`.
  Fixed,
  /// The named attributes, then others that the kernel's rule reads:
  /// `MLT_VARIADIC(a)` (transpose).
  Variadic,
  /// The named attributes once per tensor, tensor after tensor:
  /// `MLT_PER_TENSOR(a, b)` (adamw_multi, sum_squares_multi).
  PerTensor,
};

/// The names of a kernel's integer or float attributes, in their order.
class AttributeNames {
public:
  /// The most attributes a kernel names (matmul's seven, and room).
  static constexpr size_t kMaxNames = 16;

  constexpr size_t size() const { return size_; }
  constexpr bool empty() const { return size_ == 0; }
  constexpr std::string_view operator[](size_t i) const { return names_[i]; }
  constexpr const std::string_view *begin() const { return names_.data(); }
  constexpr const std::string_view *end() const {
    return names_.data() + size_;
  }
  /// The position of `name`, or -1 when there is none of that name.
  constexpr int find(std::string_view name) const {
    for (size_t i = 0; i < size_; ++i)
      if (names_[i] == name)
        return int(i);
    return -1;
  }
  /// "a, b, c".
  std::string str() const {
    std::string text;
    for (size_t i = 0; i < size_; ++i)
      text.append(i ? ", " : "").append(names_[i]);
    return text;
  }
  friend constexpr bool operator==(const AttributeNames &a,
                                   const AttributeNames &b) {
    if (a.size_ != b.size_)
      return false;
    for (size_t i = 0; i < a.size_; ++i)
      if (a.names_[i] != b.names_[i])
        return false;
    return true;
  }

  /// The names of a Kernels.def list as the preprocessor spells it:
  /// "(a, b)", or with a layout marker, "MLT_PER_TENSOR(a, b)".
  static constexpr AttributeNames parse(std::string_view list);

private:
  std::array<std::string_view, kMaxNames> names_{};
  size_t size_ = 0;
};

/// A kernel's name, arity and attribute names; -1 means "any number" (see
/// Kernels.def).
struct KernelSignature {
  Kernel kernel;
  std::string_view name;
  int inputs;
  int outputs;
  /// The number of integer attributes: intNames' for IntLayout::Fixed, else
  /// -1 (the kernel's rule checks the count).
  int ints;
  int floats;
  IntLayout intLayout;
  AttributeNames intNames;
  AttributeNames floatNames;
};

namespace detail {

/// Called only while a malformed line of Kernels.def is turned into a
/// signature at compile time: not constexpr, so the build stops there.
inline void badKernelsDefLine(const char *why) { (void)why; }

constexpr std::string_view trimSpaces(std::string_view text) {
  while (!text.empty() && text.front() == ' ')
    text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ')
    text.remove_suffix(1);
  return text;
}

/// The layout a Kernels.def list's marker names ("" for none).
constexpr IntLayout layoutOf(std::string_view list) {
  const std::string_view marker = trimSpaces(list.substr(0, list.find('(')));
  if (marker == "MLT_VARIADIC")
    return IntLayout::Variadic;
  if (marker == "MLT_PER_TENSOR")
    return IntLayout::PerTensor;
  if (!marker.empty())
    badKernelsDefLine("unknown attribute list marker");
  return IntLayout::Fixed;
}

constexpr KernelSignature makeSignature(Kernel kernel, std::string_view name,
                                        int inputs, int outputs,
                                        std::string_view ints,
                                        std::string_view floats) {
  KernelSignature signature{kernel,
                            name,
                            inputs,
                            outputs,
                            -1,
                            0,
                            layoutOf(ints),
                            AttributeNames::parse(ints),
                            AttributeNames::parse(floats)};
  if (signature.intLayout == IntLayout::Fixed)
    signature.ints = int(signature.intNames.size());
  if (layoutOf(floats) != IntLayout::Fixed)
    badKernelsDefLine("float attributes are always a fixed list");
  signature.floats = int(signature.floatNames.size());
  return signature;
}

} // namespace detail

constexpr AttributeNames AttributeNames::parse(std::string_view list) {
  AttributeNames result;
  const size_t open = list.find('(');
  if (open == std::string_view::npos || list.back() != ')') {
    detail::badKernelsDefLine("an attribute list is parenthesized");
    return result;
  }
  std::string_view rest = list.substr(open + 1, list.size() - open - 2);
  if (detail::trimSpaces(rest).empty())
    return result;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view name = detail::trimSpaces(rest.substr(0, comma));
    if (name.empty() || result.size_ == kMaxNames || result.find(name) >= 0) {
      detail::badKernelsDefLine("attribute names are distinct, at most 16");
      return result;
    }
    result.names_[result.size_++] = name;
    if (comma == std::string_view::npos)
      return result;
    rest.remove_prefix(comma + 1);
  }
}

/// Every kernel's signature, in the order of the Kernel enum.
inline constexpr KernelSignature kKernelSignatures[] = {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats)                  \
  detail::makeSignature(Kernel::Enum, Name, Inputs, Outputs, #Ints, #Floats),
#include "mlt/Plan/Kernels.def"
};

/// The number of kernels in Kernels.def.
constexpr size_t numKernels() { return std::size(kKernelSignatures); }

/// The signature of `kernel`.
constexpr const KernelSignature &kernelSignature(Kernel kernel) {
  const size_t index = size_t(kernel);
  assert(index < numKernels() && "kernel out of range");
  // Clamped: a switch over every kernel leaves its default only to values
  // outside the enum, where GCC would otherwise warn of this read.
  return kKernelSignatures[index < numKernels() ? index : 0];
}

/// The kernel named `name`, or nullptr when Kernels.def has no such kernel.
/// About forty kernels: a linear scan is as fast as a map here, and plans
/// resolve names once when they are loaded.
constexpr const KernelSignature *lookupKernel(std::string_view name) {
  for (const KernelSignature &signature : kKernelSignatures)
    if (signature.name == name)
      return &signature;
  return nullptr;
}

/// The Kernels.def name of `kernel` ("matmul", ...).
constexpr std::string_view kernelName(Kernel kernel) {
  return kernelSignature(kernel).name;
}

/// Whether kernels `a` and `b` name their attributes alike (the kernels of
/// one family: matmul, matmul_accumulate and matmul_add), so that one
/// reader serves both.
constexpr bool sameAttributes(Kernel a, Kernel b) {
  const KernelSignature &x = kernelSignature(a), &y = kernelSignature(b);
  return x.intLayout == y.intLayout && x.intNames == y.intNames &&
         x.floatNames == y.floatNames;
}

//===----------------------------------------------------------------------===//
// Attributes by name
//===----------------------------------------------------------------------===//

/// One struct per kernel, named as its Kernel enumerator, whose enumerators
/// are the positions of its attributes: `attrs::Matmul::k` is 3 (an index
/// into an instruction's ints), `attrs::RMSNormFwd::eps` is 0 (into its
/// floats). A name that Kernels.def does not give the kernel does not
/// compile. For MLT_PER_TENSOR kernels the positions are within one
/// tensor's group.
namespace attrs {
#define MLT_ATTRIBUTE_NAMES(...) __VA_ARGS__
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats)                  \
  struct Enum {                                                                \
    static constexpr Kernel kernel = Kernel::Enum;                             \
    enum Int : size_t { MLT_ATTRIBUTE_NAMES Ints };                            \
    enum Float : size_t { MLT_ATTRIBUTE_NAMES Floats };                        \
  };
#include "mlt/Plan/Kernels.def"
#undef MLT_ATTRIBUTE_NAMES
} // namespace attrs

/// The attributes of one instruction of kernel K (an `attrs::` struct) or
/// of a kernel named alike (sameAttributes), read by name:
///
///   using A = attrs::Rope;
///   const KernelAttrs<A> a(inst);
///   ... a[A::head_dim] ... a[A::theta] ...
///
/// The instruction's arity is the plan verifier's to check; the view only
/// keeps references to the instruction's lists.
template <typename K> class KernelAttrs {
public:
  /// The attribute names (attrs::Rope, ...).
  using Attributes = K;

  /// `inst`: an InstructionDesc (or anything with its kernel, ints and
  /// floats).
  template <typename Instruction>
  explicit KernelAttrs(const Instruction &inst)
      : ints_(inst.ints), floats_(inst.floats) {
    assert(sameAttributes(inst.kernel, K::kernel) &&
           "the instruction's kernel names its attributes otherwise");
  }

  int64_t operator[](typename K::Int name) const { return ints_[name]; }
  double operator[](typename K::Float name) const { return floats_[name]; }

  /// Attribute `name` of tensor `tensor` of an MLT_PER_TENSOR kernel.
  int64_t operator()(size_t tensor, typename K::Int name) const {
    return ints_[tensor * kGroup + name];
  }
  /// The number of tensors of an MLT_PER_TENSOR kernel's instruction.
  size_t tensors() const { return ints_.size() / kGroup; }

  /// Every integer attribute, for the lists that follow an MLT_VARIADIC
  /// kernel's named ones, or an MLT_PER_TENSOR kernel's whole list.
  const std::vector<int64_t> &ints() const { return ints_; }

private:
  static constexpr size_t kGroup = kernelSignature(K::kernel).intNames.size();
  const std::vector<int64_t> &ints_;
  const std::vector<double> &floats_;
};

namespace detail {
/// Stops the process: `kernelInts` or `kernelFloats` was called without
/// every attribute of the kernel exactly once (a bug in its caller, which
/// release builds, whose asserts are off, must not turn into a plan).
[[noreturn]] void badAttributeList(Kernel kernel, std::string_view name,
                                   const char *what);

template <typename T, typename Name>
std::vector<T> namedList(Kernel kernel, const AttributeNames &names,
                         std::initializer_list<std::pair<Name, T>> values) {
  std::vector<T> list(names.size());
  std::vector<bool> given(names.size(), false);
  for (const auto &[name, value] : values) {
    if (given[name])
      badAttributeList(kernel, names[name], "given twice");
    given[name] = true;
    list[name] = value;
  }
  for (size_t i = 0; i < names.size(); ++i)
    if (!given[i])
      badAttributeList(kernel, names[i], "missing");
  return list;
}
} // namespace detail

/// The integer attributes of an instruction of kernel K (or one named
/// alike), in Kernels.def's order, from every name's value in any order:
///
///   kernelInts<attrs::RMSNormFwd>({{attrs::RMSNormFwd::rows, rows},
///                                  {attrs::RMSNormFwd::dim, dim}})
template <typename K>
std::vector<int64_t>
kernelInts(std::initializer_list<std::pair<typename K::Int, int64_t>> values) {
  constexpr const KernelSignature &signature = kernelSignature(K::kernel);
  static_assert(signature.intLayout == IntLayout::Fixed,
                "a variadic kernel's list has a builder of its own");
  return detail::namedList(K::kernel, signature.intNames, values);
}

/// The float attributes of an instruction of kernel K, as kernelInts.
template <typename K>
std::vector<double> kernelFloats(
    std::initializer_list<std::pair<typename K::Float, double>> values) {
  return detail::namedList(K::kernel, kernelSignature(K::kernel).floatNames,
                           values);
}

/// transpose's attributes: rank, then the input's shape and the permutation
/// (y's dimension i is x's dimension perm[i]), `rank` values each.
struct TransposeAttrs {
  int64_t rank;
  const int64_t *shape;
  const int64_t *perm;
};
/// `ints` of a transpose whose count the plan verifier has checked.
inline TransposeAttrs transposeAttrs(const std::vector<int64_t> &ints) {
  const int64_t rank = ints[attrs::Transpose::rank];
  const int64_t *shape = ints.data() + attrs::Transpose::rank + 1;
  return {rank, shape, shape + rank};
}
/// The ints of a transpose of an input of `shape` by `perm` (ranges of
/// int64_t of one size).
template <typename Shape, typename Perm>
std::vector<int64_t> transposeInts(const Shape &shape, const Perm &perm) {
  std::vector<int64_t> ints(1, int64_t(std::size(shape)));
  ints.insert(ints.end(), std::begin(shape), std::end(shape));
  ints.insert(ints.end(), std::begin(perm), std::end(perm));
  return ints;
}

/// The rotary scaling of a rope (or attention_bwd_rope) instruction's
/// attributes (`a`, a KernelAttrs of either), for the kernels: the
/// attributes are the fields' names (Kernels.def). The rules check them
/// (checkRopeScaling).
template <typename K> RopeScaling ropeScaling(const KernelAttrs<K> &a) {
  RopeScaling scaling;
  scaling.kind = RopeScalingKind(a[K::scaling]);
  scaling.factor = a[K::factor];
  scaling.lowFreqFactor = a[K::low_freq_factor];
  scaling.highFreqFactor = a[K::high_freq_factor];
  scaling.originalMaxPositionEmbeddings =
      a[K::original_max_position_embeddings];
  return scaling;
}

/// The attention shape of an attention_fwd, attention_bwd or
/// attention_bwd_rope instruction's attributes, into `Params` (a struct with
/// cpu::AttentionParams's fields: batch, seq, kvSeq, qHeads, kvHeads,
/// headDim, causal, scale, ringStep), for the kernels. The positions of a
/// context-parallel attention (its `axis`, contextAxis) are the caller's
/// to set from the rank's coordinate.
template <typename Params, typename Instruction>
Params attentionParams(const Instruction &inst) {
  auto read = [](const auto &a) {
    using A = typename std::decay_t<decltype(a)>::Attributes;
    Params p;
    p.batch = a[A::batch];
    p.seq = a[A::seq];
    p.kvSeq = a[A::kv_seq];
    p.qHeads = a[A::q_heads];
    p.kvHeads = a[A::kv_heads];
    p.headDim = a[A::head_dim];
    p.causal = a[A::causal] != 0;
    p.scale = a[A::scale];
    p.ringStep = a[A::ring] != 0 ? a[A::ring_step] : -1;
    return p;
  };
  if (inst.kernel == Kernel::AttentionBwdRope)
    return read(KernelAttrs<attrs::AttentionBwdRope>(inst));
  return read(KernelAttrs<attrs::AttentionFwd>(inst));
}

/// The context axis of a rope, attention_fwd, attention_bwd or
/// attention_bwd_rope instruction (-1: none): its `axis` attribute
/// (meshAxisAttribute).
template <typename Instruction> int64_t contextAxis(const Instruction &inst) {
  return inst.ints[size_t(meshAxisAttribute(inst.kernel))];
}

/// A collective's element count (all_reduce_sum's n, reduce_scatter_sum's
/// n_out, all_gather's n_in: the count every member passes its
/// communicator), mesh axis, and collective_permute's shift (0 for the
/// others).
struct CollectiveAttrs {
  int64_t count;
  int64_t axis;
  int64_t shift = 0;
  /// all_to_all's order of blocks (a BlockOrder); 0 for the others.
  int64_t order = 0;
};
CollectiveAttrs collectiveAttrs(const InstructionDesc &inst);
/// The ints of `kernel`, a collective, with `collective`'s count and axis
/// (and shift, collective_permute's; order, all_to_all's).
std::vector<int64_t> collectiveInts(Kernel kernel, CollectiveAttrs collective);
/// The communicator's collective that `kernel`, a collective kernel, runs.
CollectiveKind collectiveKind(Kernel kernel);
/// The call that `inst`, a collective launch, makes on elements of `dtype`:
/// what its group's members must agree on (its buffers left null).
CollectiveCall collectiveCall(const InstructionDesc &inst, ElementType dtype);

/// A send's or receive's element count, mesh axis and shift (the peer's
/// coordinate on the axis minus this rank's; never 0): the same names in
/// both kernels.
struct TransferAttrs {
  int64_t count;
  int64_t axis;
  int64_t shift;
};
TransferAttrs transferAttrs(const InstructionDesc &inst);
/// The ints of `kernel`, a send or a receive, with `transfer`'s attributes.
std::vector<int64_t> transferInts(Kernel kernel, TransferAttrs transfer);

//===----------------------------------------------------------------------===//
// What the attributes imply (each kernel's Rule, KernelInfo.cpp)
//===----------------------------------------------------------------------===//

/// The element counts of an instruction's operands.
struct OperandCounts {
  std::vector<int64_t> inputs;
  std::vector<int64_t> outputs;
};

/// The element counts that the attributes of `inst` give its operands, its
/// kernel's Rule; `groupSize` is the size of its mesh axis (1 without one).
/// Expects the arity checked and no attribute negative but the signed ones
/// (isSignedAttribute; the plan verifier checks both first). Fails, naming the
/// attributes, on one out of its range (a flag other than 0 or 1, a count that
/// must be positive, a transpose's permutation); a count that overflows int64_t
/// is -1.
StatusOr<OperandCounts> operandCounts(const InstructionDesc &inst,
                                      int64_t groupSize);

/// The floating-point operations of `inst` (a multiply-add is 2), for the
/// kernels that arithmetic bounds: the products' and attention's, which run
/// on tensor cores. The other kernels count none; memory traffic bounds
/// them, and their cost is their operands' bytes (operandCounts times the
/// element sizes).
double kernelFlops(const InstructionDesc &inst);

//===----------------------------------------------------------------------===//
// Kernel families, mesh axes, precisions and in-place outputs
//===----------------------------------------------------------------------===//

/// Whether `kernel` is a collective (all_reduce_sum, reduce_scatter_sum,
/// all_gather, all_to_all, collective_permute): it runs through the rank's
/// communicator, and its ints are (count, axis[, shift]).
constexpr bool isCollectiveKernel(Kernel kernel) {
  return kernel == Kernel::AllReduceSum || kernel == Kernel::ReduceScatterSum ||
         kernel == Kernel::AllGather || kernel == Kernel::AllToAll ||
         kernel == Kernel::CollectivePermute;
}

/// The position of `kernel`'s `axis` integer attribute (an index into the
/// plan's mesh, see Kernels.def), or -1 when the kernel runs on no mesh
/// axis: the collectives, the transfers, and the kernels of sharded
/// programs, which read the rank's coordinate on that axis, have one.
constexpr int meshAxisAttribute(Kernel kernel) {
  return kernelSignature(kernel).intNames.find("axis");
}

/// Whether `kernel` is a point-to-point transfer (send, recv): it runs
/// through the rank's communicator in a transfer group (Kernels.def's
/// "Transfers"), and its ints are (count, axis, shift).
constexpr bool isTransferKernel(Kernel kernel) {
  return kernel == Kernel::Send || kernel == Kernel::Recv;
}

/// Whether integer attribute `position` of `kernel` may be negative: `axis`
/// (-1: no axis, where the kernel allows it) and the transfers' `shift`.
/// Every other attribute Kernels.def names is a size, count or flag.
constexpr bool isSignedAttribute(Kernel kernel, size_t position) {
  const AttributeNames &names = kernelSignature(kernel).intNames;
  return kernelSignature(kernel).intLayout == IntLayout::Fixed &&
         position < names.size() &&
         (names[position] == "axis" ||
          (names[position] == "shift" &&
           (kernel == Kernel::Send || kernel == Kernel::Recv)));
}

/// Whether `kernel`'s `axis` may be -1 (no axis: coordinate 0 of 1, the
/// whole dimension on every rank). Only for kernels with an axis attribute.
constexpr bool allowsNoMeshAxis(Kernel kernel) {
  return kernel == Kernel::CrossEntropyStats ||
         kernel == Kernel::CrossEntropyBwdStats || kernel == Kernel::Rope ||
         kernel == Kernel::AttentionFwd || kernel == Kernel::AttentionBwd ||
         kernel == Kernel::AttentionBwdRope;
}
/// How many of the last outputs of an instruction of `kernel` with
/// `numOutputs` outputs are amax outputs (Kernels.def's amax: the f32
/// max |v| over an output as stored, NaN when any element is NaN, for FP8
/// current scaling): rms_norm_fwd's y, rms_norm_bwd(_add)'s dx, swiglu_fwd's
/// y, swiglu_bwd's dgate, dup (and y). Amax output j is output j's: it
/// follows the kernel's other outputs at numOutputs - count + j. 0 for the
/// other kernels and counts.
size_t fusedAmaxOutputs(Kernel kernel, size_t numOutputs);

/// Whether operand `operand` (inputs first, then outputs) of `kernel`, an
/// instruction with `numInputs` inputs and `numOutputs` outputs, is one of
/// the optimizer's f32 scalars: the plan format fixes them to f32 whatever
/// float type the model computes in (sum_squares' sum, sum_squares_multi's
/// sums; global_norm's and clip_coefficient's operands; adamw's grad_scale
/// and hyper-parameters; the FP8 kernels' amax and inverse scales, and the
/// fused amax outputs). Every backend checks them apart from the computed
/// operands, which share one type.
bool isFixedF32Scalar(Kernel kernel, size_t numInputs, size_t numOutputs,
                      size_t operand);

/// Whether operand `operand` (inputs first, then outputs) of `kernel` holds
/// i32 token ids or labels: the embeddings' ids and the cross-entropies'
/// labels. The other operands of a kernel that is not type-free are floats.
bool isIdOperand(Kernel kernel, size_t operand);

/// Whether operand `operand` (inputs, then outputs) of an instruction of
/// `kernel` with `numInputs` inputs holds FP8 values (f8e4m3 or f8e5m2):
/// quantize_fp8's q (and q_t), matmul_fp8's a and b.
bool isFp8Operand(Kernel kernel, size_t numInputs, size_t operand);

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
/// `numOutputs` is the instruction's output count (a fused amax output
/// aliases nothing).
bool mayAlias(Kernel kernel, size_t numOutputs, size_t output, size_t input);

/// Whether mlt-plan-memory places output `output` of `kernel` on its dying
/// input `input`: where mayAlias allows it and the results do not depend on
/// it. Not a product's addend (matmul_add, matmul_fp8): cuBLASLt rounds a
/// product written over its addend differently from the same product
/// written elsewhere (measured in bench/RESULTS.md), so two plans that
/// differ only in what dies there (one with recomputation, one without)
/// would train differently. A plan that has it anyway is
/// valid (the verifier holds plans to mayAlias).
bool placesInPlace(Kernel kernel, size_t numOutputs, size_t output,
                   size_t input);

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
  /// A gradient the multi-tensor optimizer kernels read: C, or bf16 or f16
  /// when C is f32 (a gradient reduced in the compute copy's type, widened
  /// as it is read; sum_squares_multi's and adamw_multi's gradients).
  Gradient,
};
OperandPrecision operandPrecision(Kernel kernel, size_t numInputs,
                                  size_t numOutputs, size_t operand);

/// The operand whose type an instruction computes in, given every operand's
/// element type (inputs, then outputs): its first float Compute operand, or
/// without one (cross_entropy_combine, sum_squares_multi) its first float
/// operand that is not a fixed f32 scalar, a compute copy or a bf16 or f16
/// Gradient; none when it has neither (the type is then f32).
std::optional<size_t>
computeOperandIndex(Kernel kernel, size_t numInputs,
                    const std::vector<ElementType> &operandTypes);

/// The element type `precision` asks for in an instruction computing in
/// `compute`; for Accumulator, the type other than `compute` it also allows
/// (`compute` itself when there is none).
ElementType precisionType(OperandPrecision precision, ElementType compute);

/// Whether `kernel` computes in no particular float type: cast converts
/// between types, fill writes any float type, transpose, shard_slice and
/// reorder_sequence move bytes of any type, the
/// collectives move or sum (in the communicator) the types the plan verifier
/// allows them, and the transfers move bytes of any type. A backend checks
/// these kernels' types on their own terms.
inline bool isTypeFreeKernel(Kernel kernel) {
  return kernel == Kernel::Cast || kernel == Kernel::Fill ||
         kernel == Kernel::Transpose || kernel == Kernel::ShardSlice ||
         kernel == Kernel::ReorderSequence || isCollectiveKernel(kernel) ||
         isTransferKernel(kernel);
}

} // namespace mlt::rt

#endif // MLT_PLAN_KERNELINFO_H
