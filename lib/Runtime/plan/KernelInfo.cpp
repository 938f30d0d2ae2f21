//===- KernelInfo.cpp - the kernel list as C++ values ---------------------===//
//
// Part of mlt. The signature table generated from Kernels.def, which
// integer attribute of a kernel names a mesh axis, which operands are the
// optimizer's fixed f32 scalars, and which outputs may be written in place
// of an input.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/KernelInfo.h"

#include <cassert>

using namespace mlt::rt;

namespace {
const KernelSignature kSignatures[] = {
#define MLT_KERNEL(Enum, Name, Inputs, Outputs, Ints, Floats)                  \
  {Kernel::Enum, Name, Inputs, Outputs, Ints, Floats},
#include "mlt/Runtime/Kernels.def"
};
} // namespace

size_t mlt::rt::numKernels() {
  return sizeof(kSignatures) / sizeof(kSignatures[0]);
}

const KernelSignature &mlt::rt::kernelSignature(Kernel kernel) {
  size_t index = static_cast<size_t>(kernel);
  assert(index < numKernels() && "kernel out of range");
  return kSignatures[index];
}

const KernelSignature *mlt::rt::lookupKernel(std::string_view name) {
  // About thirty kernels: a linear scan is as fast as a map here, and plans
  // resolve names once when they are loaded.
  for (const KernelSignature &signature : kSignatures)
    if (signature.name == name)
      return &signature;
  return nullptr;
}

int mlt::rt::meshAxisAttribute(Kernel kernel) {
  if (isCollectiveKernel(kernel))
    return 1;
  switch (kernel) {
  case Kernel::EmbeddingFwdVP: // tokens, vocab_local, hidden, axis
  case Kernel::EmbeddingBwdVP:
  case Kernel::ShardSlice: // outer, n, inner, axis
    return 3;
  case Kernel::CrossEntropyStats:    // rows, vocab_local, axis
  case Kernel::CrossEntropyBwdStats: // rows, vocab_local, axis, row_count
    return 2;
  default:
    return -1;
  }
}

bool mlt::rt::isFixedF32Scalar(Kernel kernel, size_t numInputs,
                               size_t operand) {
  switch (kernel) {
  case Kernel::SumSquares:
    return operand == numInputs; // the sum, not the tensor
  case Kernel::SumSquaresMulti:
    return operand >= numInputs; // the sums
  case Kernel::GlobalNorm:
  case Kernel::ClipCoefficient:
    return true;
  case Kernel::AdamW:
    return operand >= 1 && operand < numInputs; // grad_scale, hyper-parameters
  case Kernel::AdamWMulti: // grads, then grad_scale and hyper-parameters
    return operand + kAdamWScalarInputs >= numInputs && operand < numInputs;
  default:
    return false;
  }
}

bool mlt::rt::mayAlias(Kernel kernel, size_t output, size_t input) {
  const KernelSignature &signature = kernelSignature(kernel);
  if ((signature.outputs >= 0 && output >= size_t(signature.outputs)) ||
      (signature.inputs >= 0 && input >= size_t(signature.inputs)))
    return false;
  switch (kernel) {
  // Maps: each element of every output is computed from the same element of
  // the inputs, all read before any is written.
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::SwiGLUFwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd:
    return true;
  case Kernel::SwiGLUBwd: // dgate, dup[, y]: any over any input
    return output < 3;
  // Rope: a pair's halves are read before either is written. RMSNorm: a
  // row is read before it is written (dx over dy in the backward). The
  // communicator sums in place.
  case Kernel::Rope:         // x -> y
  case Kernel::RMSNormFwd:   // x, w -> y
  case Kernel::RMSNormBwd:   // dy, x, w -> dx, dw
  case Kernel::AllReduceSum: // x -> y
    return output == 0 && input == 0;
  case Kernel::RMSNormBwdAdd: // dy, x, w, addend -> dx, dw
    return output == 0 && (input == 0 || input == 3);
  case Kernel::CrossEntropyBwd:      // dloss, logits, labels -> dlogits
  case Kernel::CrossEntropyBwdStats: // dloss, logits, labels, lse -> dlogits
    return output == 0 && input == 1;
  case Kernel::MatmulAdd: // a, b, addend -> c: the epilogue adds c = addend
    return output == 0 && input == 2;
  default:
    return false;
  }
}

OperandPrecision mlt::rt::operandPrecision(Kernel kernel, size_t numInputs,
                                           size_t operand) {
  if (isFixedF32Scalar(kernel, numInputs, operand))
    return OperandPrecision::FixedF32;
  const bool output = operand >= numInputs;
  const size_t index = output ? operand - numInputs : operand;
  switch (kernel) {
  case Kernel::AttentionFwd: // q, k, v -> out, lse
    return output && index == 1 ? OperandPrecision::Statistic
                                : OperandPrecision::Compute;
  case Kernel::AttentionBwd: // dout, q, k, v, out, lse -> dq, dk, dv
    return !output && index == 5 ? OperandPrecision::Statistic
                                 : OperandPrecision::Compute;
  case Kernel::CrossEntropyFwd:   // logits, labels -> loss
  case Kernel::CrossEntropyStats: // logits, labels -> lse, target
    return output ? OperandPrecision::Statistic : OperandPrecision::Compute;
  case Kernel::CrossEntropyBwd: // dloss, logits, labels -> dlogits
    return !output && index == 0 ? OperandPrecision::Statistic
                                 : OperandPrecision::Compute;
  case Kernel::CrossEntropyCombine: // parts, target -> lse, loss
    return OperandPrecision::Statistic;
  case Kernel::CrossEntropyBwdStats: // dloss, logits, labels, lse -> dlogits
    return !output && (index == 0 || index == 3) ? OperandPrecision::Statistic
                                                 : OperandPrecision::Compute;
  case Kernel::Matmul: // a, b -> c
  case Kernel::MatmulAccumulate:
  case Kernel::EmbeddingBwd: // ids, dout -> dtable
  case Kernel::EmbeddingBwdVP:
  case Kernel::Accumulate: // x -> y
    return output ? OperandPrecision::Accumulator : OperandPrecision::Compute;
  case Kernel::RMSNormBwd:    // dy, x, w -> dx, dw
  case Kernel::RMSNormBwdAdd: // dy, x, w, addend -> dx, dw
    return output && index == 1 ? OperandPrecision::Accumulator
                                : OperandPrecision::Compute;
  case Kernel::AdamW: // grad -> param, m, v[, copy]
    return output && index == 3 ? OperandPrecision::ComputeCopy
                                : OperandPrecision::Compute;
  case Kernel::AdamWMulti: // grads -> params, ms, vs[, copies]
    return output && numInputs >= kAdamWScalarInputs &&
                   index >= 3 * (numInputs - kAdamWScalarInputs)
               ? OperandPrecision::ComputeCopy
               : OperandPrecision::Compute;
  default:
    return OperandPrecision::Compute;
  }
}

ElementType mlt::rt::precisionType(OperandPrecision precision,
                                   ElementType compute) {
  switch (precision) {
  case OperandPrecision::Compute:
    return compute;
  case OperandPrecision::FixedF32:
    return ElementType::F32;
  case OperandPrecision::Statistic:
    return compute == ElementType::F64 ? ElementType::F64 : ElementType::F32;
  case OperandPrecision::Accumulator:
    return compute == ElementType::BF16 || compute == ElementType::F16
               ? ElementType::F32
               : compute;
  case OperandPrecision::ComputeCopy:
    return ElementType::BF16;
  }
  return compute;
}

std::optional<size_t>
mlt::rt::computeOperandIndex(Kernel kernel, size_t numInputs,
                             const std::vector<ElementType> &operandTypes) {
  for (size_t o = 0; o < operandTypes.size(); ++o)
    if (isFloatElementType(operandTypes[o]) &&
        operandPrecision(kernel, numInputs, o) == OperandPrecision::Compute)
      return o;
  for (size_t o = 0; o < operandTypes.size(); ++o)
    if (isFloatElementType(operandTypes[o]) &&
        operandPrecision(kernel, numInputs, o) != OperandPrecision::FixedF32 &&
        operandPrecision(kernel, numInputs, o) != OperandPrecision::ComputeCopy)
      return o;
  return std::nullopt;
}
