//===- Rope.h - CPU rotary position embedding kernels -----------*- C++ -*-===//
//
// Part of mlt. Forward and backward of `mlt.rope` on the CPU, in Hugging Face
// LLaMA's "rotate half" convention. The backward of a rotation is the rotation
// by the opposite angle, so both directions share one implementation.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_ROPE_H
#define MLT_RUNTIME_CPU_ROPE_H

#include "mlt/Plan/RopeFrequencies.h"
#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Support/Status.h"

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// rope family
//
// Invariants:
// - Tensors are [batch, seq, heads, headDim]; headDim is even (an odd one is
//   an error, reported before anything is written).
// - Element i < headDim/2 pairs with element i + headDim/2 and the pair
//   rotates by `angle = pos * inv_freq[i]`, inv_freq[i] = theta^(-2i/headDim)
//   scaled by `scaling` (rt::ropeInverseFrequency, RopeFrequencies.h: the
//   formula the CUDA kernel shares):
//     out[i]      = x[i] * cos(angle) - x[i + half] * sin(angle)
//     out[i+half] = x[i + half] * cos(angle) + x[i] * sin(angle)
//   where `pos = positions(s)` for sequence row s (SequenceOrder.h: s plus
//   an offset, or the position of a context-parallel rank's row in the
//   load-balanced order), so that a rank holding a block of the sequence
//   rotates by global positions.
// - The angle, cos and sin are computed in double and rounded to T; the
//   rotation itself is in T. (HF computes cos/sin in float32 even for a
//   float64 model; the difference is below the fixtures' tolerances.)
// - Nothing is saved: the backward needs only positions. Outputs are
//   overwritten and may alias the input (in-place rotation).
//===----------------------------------------------------------------------===//

/// Rotates every head vector of `in` by its position; `out` may equal `in`.
/// A bad `scaling` (rt::checkRopeScaling) is an error, as an odd headDim.
template <typename T>
Status ropeForward(T *out, const T *in, int64_t batch, int64_t seq,
                   int64_t heads, int64_t headDim, double theta,
                   const rt::SequencePositions &positions,
                   const rt::RopeScaling &scaling = {});

/// din = rotation of `dout` by the negative angles; `din` may equal `dout`.
template <typename T>
Status ropeBackward(T *din, const T *dout, int64_t batch, int64_t seq,
                    int64_t heads, int64_t headDim, double theta,
                    const rt::SequencePositions &positions,
                    const rt::RopeScaling &scaling = {});

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_ROPE_H
