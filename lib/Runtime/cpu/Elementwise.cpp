//===- Elementwise.cpp - CPU elementwise model ops ------------------------===//
//
// Part of mlt. SwiGLU, SiLU, add and mul, forward and backward. Every loop
// reads element i of its inputs into locals before writing element i of its
// outputs, which is what makes the documented aliasing safe.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Elementwise.h"

#include <cmath>

using namespace mlt;
using namespace mlt::cpu;

namespace {

template <typename T> inline T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

} // namespace

template <typename T>
void mlt::cpu::swigluForward(T *out, const T *gate, const T *up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i], u = up[i];
    out[i] = g / (T(1) + std::exp(-g)) * u;
  }
}

template <typename T>
void mlt::cpu::swigluBackward(T *dgate, T *dup, const T *dout, const T *gate,
                              const T *up, int64_t n, T *out) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i], u = up[i], dy = dout[i];
    const T s = sigmoid(g);
    const T silu = g * s;
    dgate[i] = dy * u * (s * (T(1) + g * (T(1) - s)));
    dup[i] = dy * silu;
    if (out) // swigluForward's expression
      out[i] = g / (T(1) + std::exp(-g)) * u;
  }
}

template <typename T>
void mlt::cpu::siluForward(T *out, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    out[i] = xi / (T(1) + std::exp(-xi));
  }
}

template <typename T>
void mlt::cpu::siluBackward(T *dx, const T *dout, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    const T s = sigmoid(xi);
    dx[i] = dout[i] * (s * (T(1) + xi * (T(1) - s)));
  }
}

template <typename T>
void mlt::cpu::add(T *out, const T *a, const T *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

template <typename T>
void mlt::cpu::mulForward(T *out, const T *a, const T *b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] * b[i];
}

template <typename T>
void mlt::cpu::mulBackward(T *da, T *db, const T *dout, const T *a, const T *b,
                           int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T dy = dout[i], ai = a[i], bi = b[i];
    da[i] = dy * bi;
    db[i] = dy * ai;
  }
}

#define MLT_INSTANTIATE_ELEMENTWISE(T)                                         \
  template void mlt::cpu::swigluForward<T>(T *, const T *, const T *,          \
                                           int64_t);                           \
  template void mlt::cpu::swigluBackward<T>(T *, T *, const T *, const T *,    \
                                            const T *, int64_t, T *);          \
  template void mlt::cpu::siluForward<T>(T *, const T *, int64_t);             \
  template void mlt::cpu::siluBackward<T>(T *, const T *, const T *, int64_t); \
  template void mlt::cpu::add<T>(T *, const T *, const T *, int64_t);          \
  template void mlt::cpu::mulForward<T>(T *, const T *, const T *, int64_t);   \
  template void mlt::cpu::mulBackward<T>(T *, T *, const T *, const T *,       \
                                         const T *, int64_t);
MLT_INSTANTIATE_ELEMENTWISE(float)
MLT_INSTANTIATE_ELEMENTWISE(double)
