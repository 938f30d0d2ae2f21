//===- KernelScratch.h - the CUDA kernels' scratch memory -------*- C++ -*-===//
//
// Part of mlt. What each instruction's kernels take of their context's
// scratch memory (CudaContext.h: one device area that every launch reuses),
// as the launch switch (CudaDispatch.cpp) asks for it, through the same
// functions: so that the backend sizes the area from the plan
// (Backend::scratchBytes), the executor allocates it with the arena before
// the step, and the memory report and the planner count it. A
// context-parallel rank's blockwise attention backward alone takes a GiB at
// Llama-3.1-8B's 32k tokens a rank.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CUDA_KERNELSCRATCH_H
#define MLT_RUNTIME_CUDA_KERNELSCRATCH_H

#include "mlt/Plan/Plan.h"

#include "kernels/attention.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlt::cuda {

/// An operand's element type and count (a BufferView's, or the
/// BufferDesc's it views).
struct OperandSize {
  rt::ElementType dtype;
  int64_t elements;
};

/// The kernels an attention instruction runs.
enum class AttentionPath {
  /// A context-parallel rank's block of queries, bf16 on the tensor cores
  /// (attention_blocks.h).
  ContextBlocks,
  /// bf16 widened to f32 for the f32 kernels: head dims the tensor-core
  /// kernels are not built for, and other context-parallel positions
  /// (CudaDeviceContext::attentionThroughF32).
  ThroughF32,
  /// The kernels of the operands' type (attention.h).
  Direct,
};

/// The path of attention instruction `kernel` whose operands are `dtype`,
/// of `shape` (with its positions), on context axis `axis` (-1: none).
AttentionPath attentionPath(rt::Kernel kernel, rt::ElementType dtype,
                            const AttentionShape &shape, int64_t axis);

/// attentionThroughF32's scratch: the f32 backward's own first (none
/// forward), then an f32 copy of each bf16 operand of `wide` (inputs, then
/// outputs), each 256-byte aligned.
struct WideScratch {
  size_t kernelBytes = 0;
  std::vector<size_t> offsets;
  size_t total = 0;
};
WideScratch wideScratch(bool forward, const AttentionShape &shape,
                        const std::vector<int64_t> &wideElements);

/// The scratch bytes the launch of `inst` asks for, with operands `in` and
/// `out`, on `mesh` (a context-parallel attention's as at coordinate 0 of
/// its axis: every rank's block of the sequence asks the same).
size_t kernelScratchBytes(const rt::InstructionDesc &inst,
                          const std::vector<OperandSize> &in,
                          const std::vector<OperandSize> &out,
                          const std::vector<rt::MeshAxis> &mesh);

/// The size of a scratch area that serves requests of `bytes`: rounded up
/// to a MiB, so that slightly larger requests do not reallocate.
inline size_t scratchAreaBytes(size_t bytes) {
  return (bytes + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
}

/// The scratch area of `rank`: the most any instruction asks for, rounded
/// (scratchAreaBytes).
size_t rankScratchBytes(const rt::RankPlan &rank,
                        const std::vector<rt::MeshAxis> &mesh);

} // namespace mlt::cuda

#endif // MLT_RUNTIME_CUDA_KERNELSCRATCH_H
