//===- KernelScratch.cpp - the CUDA kernels' scratch memory ---------------===//
//
// Part of mlt. KernelScratch.h: each kernel's scratch through the function
// its family declares for it, the case by case choice the launch switch
// makes (CudaDispatch.cpp asks attentionPath and wideScratch too).
//
//===----------------------------------------------------------------------===//

#include "KernelScratch.h"

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/exec/Backend.h"

#include "kernels/attention_blocks.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/optimizer.h"
#include "kernels/rmsnorm.h"

#include <algorithm>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

AttentionPath mlt::cuda::attentionPath(Kernel kernel, ElementType dtype,
                                       const AttentionShape &shape,
                                       int64_t axis) {
  if (dtype != ElementType::BF16)
    return AttentionPath::Direct;
  const bool tensorCores = shape.headDim == 64 || shape.headDim == 128;
  if (tensorCores && kernel != Kernel::AttentionBwdRope &&
      isContextBlockShape(shape))
    return AttentionPath::ContextBlocks;
  if (!tensorCores || axis >= 0)
    return AttentionPath::ThroughF32;
  return AttentionPath::Direct;
}

WideScratch mlt::cuda::wideScratch(bool forward, const AttentionShape &shape,
                                   const std::vector<int64_t> &wideElements) {
  auto align = [](size_t bytes) { return (bytes + 255) & ~size_t(255); };
  WideScratch out;
  out.kernelBytes = forward ? 0 : align(attentionBwdScratchBytes(shape));
  out.total = out.kernelBytes;
  for (int64_t elements : wideElements) {
    out.offsets.push_back(out.total);
    out.total += align(size_t(elements) * sizeof(float));
  }
  return out;
}

size_t mlt::cuda::kernelScratchBytes(const InstructionDesc &inst,
                                     const std::vector<OperandSize> &in,
                                     const std::vector<OperandSize> &out,
                                     const std::vector<MeshAxis> &mesh) {
  switch (inst.kernel) {
  case Kernel::AttentionFwd:
  case Kernel::AttentionBwd:
  case Kernel::AttentionBwdRope: {
    const int64_t axis = contextAxis(inst);
    AxisPosition position;
    if (axis >= 0 && size_t(axis) < mesh.size())
      position.size = mesh[size_t(axis)].size;
    const AttentionShape shape = attentionPositionsAt(
        attentionParams<AttentionShape>(inst), axis, position);
    const bool forward = inst.kernel == Kernel::AttentionFwd;
    switch (attentionPath(inst.kernel, in[0].dtype, shape, axis)) {
    case AttentionPath::ContextBlocks:
      return forward ? contextAttentionFwdScratchBytes(shape)
                     : contextAttentionBwdScratchBytes(shape);
    case AttentionPath::ThroughF32: {
      std::vector<int64_t> wide;
      for (const std::vector<OperandSize> *list : {&in, &out})
        for (const OperandSize &operand : *list)
          if (operand.dtype == ElementType::BF16)
            wide.push_back(operand.elements);
      return wideScratch(forward, shape, wide).total;
    }
    case AttentionPath::Direct:
      return forward ? 0 : attentionBwdScratchBytes(shape);
    }
    return 0;
  }
  case Kernel::RMSNormBwd:
  case Kernel::RMSNormBwdAdd: {
    using A = attrs::RMSNormBwd;
    const KernelAttrs<A> a(inst);
    return rmsNormBwdScratchBytes(a[A::rows], a[A::dim]);
  }
  case Kernel::SumSquares:
    return sumSquaresScratchBytes(
        KernelAttrs<attrs::SumSquares>(inst)[attrs::SumSquares::n]);
  case Kernel::SumSquaresMulti:
    return sumSquaresMultiScratchBytes(inst.ints.data(),
                                       int64_t(inst.ints.size()));
  case Kernel::GlobalNorm:
    return kGlobalNormScratchBytes;
  case Kernel::EmbeddingBwd: {
    using A = attrs::EmbeddingFwd;
    const KernelAttrs<A> a(inst);
    return embeddingBackwardScratchBytes(a[A::tokens], a[A::vocab]);
  }
  case Kernel::EmbeddingBwdVP: {
    using A = attrs::EmbeddingFwdVP;
    const KernelAttrs<A> a(inst);
    return embeddingBackwardScratchBytes(a[A::tokens], a[A::vocab_local]);
  }
  case Kernel::CrossEntropyFwd:
    return crossEntropyFwdScratchBytes(
        KernelAttrs<attrs::CrossEntropyFwd>(inst)[attrs::CrossEntropyFwd::rows]);
  case Kernel::CrossEntropyFwdBwd:
    return crossEntropyFwdScratchBytes(KernelAttrs<attrs::CrossEntropyFwdBwd>(
        inst)[attrs::CrossEntropyFwdBwd::rows]);
  default:
    return 0;
  }
}

size_t mlt::cuda::rankScratchBytes(const RankPlan &rank,
                                   const std::vector<MeshAxis> &mesh) {
  size_t most = 0;
  std::vector<OperandSize> in, out;
  for (const ProgramDesc &program : rank.programs) {
    for (const InstructionDesc &inst : program.instructions) {
      for (auto [list, sizes] : {std::pair(&inst.inputs, &in),
                                 std::pair(&inst.outputs, &out)}) {
        sizes->clear();
        for (uint32_t index : *list) {
          const BufferDesc &buffer = rank.buffers[index];
          sizes->push_back({buffer.dtype, buffer.numElements()});
        }
      }
      most = std::max(most, kernelScratchBytes(inst, in, out, mesh));
    }
  }
  return scratchAreaBytes(most);
}
