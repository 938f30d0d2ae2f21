//===- KernelInfo.cpp - the kernel list as C++ values ---------------------===//
//
// Part of mlt. The signature table generated from Kernels.def, which
// integer attribute of a kernel names a mesh axis, and which operands are
// the optimizer's fixed f32 scalars.
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
  case Kernel::GlobalNorm:
  case Kernel::ClipCoefficient:
    return true;
  case Kernel::AdamW:
    return operand >= 1 && operand < numInputs; // grad_scale, hyper-parameters
  default:
    return false;
  }
}
