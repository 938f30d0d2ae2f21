//===- Elementwise.h - CPU elementwise model ops ----------------*- C++ -*-===//
//
// Part of mlt. Forward and backward of the elementwise ops of the model on the
// CPU: `mlt.swiglu` (the LLaMA MLP's gate), `mlt.silu`, `mlt.add` (residual
// connections) and `mlt.mul`. Each is one flat loop over `n` elements, written
// so that the compiler can vectorize it.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_CPU_ELEMENTWISE_H
#define MLT_RUNTIME_CPU_ELEMENTWISE_H

#include <cstdint>

namespace mlt::cpu {

//===----------------------------------------------------------------------===//
// elementwise family
//
// Invariants:
// - All operands have `n` elements in the same (any) layout; no broadcasting.
// - Computed in T, elementwise; `silu(x) = x / (1 + exp(-x))`, as PyTorch
//   computes it.
// - Every output is overwritten, and may alias any input: element i of every
//   input is read before element i of any output is written.
// - Saved for the backward: the forward's inputs (gate and up for swiglu, x
//   for silu, a and b for mul). The backward of add is the identity: the
//   caller passes dout on, or adds it to an existing gradient with
//   `accumulate` (VectorOps.h).
//===----------------------------------------------------------------------===//

/// out = silu(gate) * up.
template <typename T>
void swigluForward(T *out, const T *gate, const T *up, int64_t n);

/// dgate = dout * up * silu'(gate); dup = dout * silu(gate); with `out`,
/// also swigluForward's out, bit for bit (the forward recomputed in the same
/// pass). Each element's inputs are read before its outputs are written, so
/// any output may be any input.
template <typename T>
void swigluBackward(T *dgate, T *dup, const T *dout, const T *gate, const T *up,
                    int64_t n, T *out = nullptr);

/// out = x * sigmoid(x).
template <typename T> void siluForward(T *out, const T *x, int64_t n);

/// dx = dout * sigmoid(x) * (1 + x * (1 - sigmoid(x))).
template <typename T>
void siluBackward(T *dx, const T *dout, const T *x, int64_t n);

/// out = a + b.
template <typename T> void add(T *out, const T *a, const T *b, int64_t n);

/// out = a * b.
template <typename T>
void mulForward(T *out, const T *a, const T *b, int64_t n);

/// da = dout * b; db = dout * a.
template <typename T>
void mulBackward(T *da, T *db, const T *dout, const T *a, const T *b,
                 int64_t n);

} // namespace mlt::cpu

#endif // MLT_RUNTIME_CPU_ELEMENTWISE_H
