//===- VectorOps.cpp - CPU buffer utilities -------------------------------===//
//
// Part of mlt. Flat loops over buffers: fill, axpy, scale, the sum of squares
// for the global gradient norm, and the float/double/bfloat16 conversions.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/VectorOps.h"

using namespace mlt;
using namespace mlt::cpu;

template <typename T> void mlt::cpu::fill(T *x, int64_t n, T value) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = value;
}

template <typename T> void mlt::cpu::zero(T *x, int64_t n) {
  // All-zero bytes are +0.0 for IEEE floats.
  if (n > 0)
    std::memset(x, 0, sizeof(T) * n);
}

template <typename T>
void mlt::cpu::axpy(T *y, const T *x, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += alpha * x[i];
}

template <typename T> void mlt::cpu::accumulate(T *y, const T *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] += x[i];
}

template <typename T> void mlt::cpu::scale(T *x, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i)
    x[i] *= alpha;
}

template <typename T> double mlt::cpu::sumOfSquares(const T *x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += double(x[i]) * double(x[i]);
  return sum;
}

template <typename T>
void mlt::cpu::sumsOfSquares(float *const *out, const T *const *xs,
                             const int64_t *ns, size_t count) {
  for (size_t k = 0; k < count; ++k)
    *out[k] = float(sumOfSquares(xs[k], ns[k]));
}

template <typename Src, typename Dst>
void mlt::cpu::convert(Dst *out, const Src *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<Dst>(in[i]);
}

void mlt::cpu::castFloatToBF16(uint16_t *out, const float *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBF16(in[i]);
}

void mlt::cpu::castBF16ToFloat(float *out, const uint16_t *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(in[i]);
}

#define MLT_INSTANTIATE_VECTOROPS(T)                                           \
  template void mlt::cpu::fill<T>(T *, int64_t, T);                            \
  template void mlt::cpu::zero<T>(T *, int64_t);                               \
  template void mlt::cpu::axpy<T>(T *, const T *, int64_t, T);                 \
  template void mlt::cpu::accumulate<T>(T *, const T *, int64_t);              \
  template void mlt::cpu::scale<T>(T *, int64_t, T);                           \
  template double mlt::cpu::sumOfSquares<T>(const T *, int64_t);             \
  template void mlt::cpu::sumsOfSquares<T>(float *const *, const T *const *,  \
                                           const int64_t *, size_t);
MLT_INSTANTIATE_VECTOROPS(float)
MLT_INSTANTIATE_VECTOROPS(double)
template void mlt::cpu::convert<float, double>(double *, const float *,
                                               int64_t);
template void mlt::cpu::convert<double, float>(float *, const double *,
                                               int64_t);
