//===- rope.h - rotary position embedding CUDA kernels (host) ---*- C++ -*-===//
//
// Part of mlt. Host launcher of the rope family (rope.cuh): Kernels.def's
// `rope` (ints batch, seq, heads, head_dim, inverse, position_offset,
// scaling, original_max_position_embeddings; floats theta, factor,
// low_freq_factor, high_freq_factor), Hugging Face LLaMA's "rotate half"
// convention, with the semantics of the CPU kernel
// (lib/Runtime/cpu/Rope.cpp): element i < head_dim/2 pairs with i +
// head_dim/2 and rotates by pos * inv_freq[i], pos = s + position_offset,
// inv_freq[i] = theta^(-2i/head_dim) scaled by `scaling`
// (rt::ropeInverseFrequency, the CPU kernel's formula); `inverse` rotates by
// minus the angle (the backward). Queues its work on `stream`; argument
// errors (odd or non-positive head_dim, theta <= 0, a bad scaling, negative
// sizes, head_dim over 12288, heads * head_dim over INT32_MAX) are returned
// before anything is queued.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_H
#define MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_H

#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Support/Status.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlt::cuda {

/// y = x [batch, seq, heads, headDim] with every head vector rotated by its
/// position's angles (by minus them when `inverse`); row s is at position
/// order(s) (an offset converts: rows from that position on). `y` may equal `x`
/// (in-place rotation); otherwise they must not overlap.
Status launchRope(float *y, const float *x, int64_t batch, int64_t seq,
                  int64_t heads, int64_t headDim, bool inverse,
                  const rt::SequencePositions &order, double theta,
                  const rt::RopeScaling &scaling, cudaStream_t stream);
Status launchRope(__nv_bfloat16 *y, const __nv_bfloat16 *x, int64_t batch,
                  int64_t seq, int64_t heads, int64_t headDim, bool inverse,
                  const rt::SequencePositions &order, double theta,
                  const rt::RopeScaling &scaling, cudaStream_t stream);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_KERNELS_ROPE_H
