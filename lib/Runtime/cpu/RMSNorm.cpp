//===- RMSNorm.cpp - CPU RMS normalization kernels ------------------------===//
//
// Part of mlt. LlamaRMSNorm forward and its backward. With n = x * r and
// r = (mean(x^2) + eps)^(-1/2), dr/dx_j = -r^3 x_j / cols, which gives
//   dx_j = r * (w_j g_j - n_j * mean_k(w_k g_k n_k))   (g = dout)
//   dw_j = sum over rows of g_j n_j.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/RMSNorm.h"

#include <cmath>
#include <vector>

using namespace mlt;
using namespace mlt::cpu;

template <typename T>
void mlt::cpu::rmsnormForward(T *out, T *rstd, const T *x, const T *weight,
                              int64_t rows, int64_t cols, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    T *outr = out + r * cols;
    double sumSq = 0.0;
    for (int64_t j = 0; j < cols; ++j)
      sumSq += double(xr[j]) * double(xr[j]);
    const T rs = T(1.0 / std::sqrt(sumSq / double(cols) + eps));
    rstd[r] = rs;
    // HF rounds x * rstd to the input type before scaling by the weight.
    for (int64_t j = 0; j < cols; ++j)
      outr[j] = weight[j] * (xr[j] * rs);
  }
}

template <typename T>
void mlt::cpu::rmsnormBackward(T *dx, T *dweight, const T *dout, const T *x,
                               const T *weight, const T *rstd, int64_t rows,
                               int64_t cols) {
  // dweight sums over every row; summing in double and adding once keeps the
  // result independent of how many rows there are.
  std::vector<double> dweightAcc(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * cols;
    const T *gr = dout + r * cols;
    T *dxr = dx + r * cols;
    const double rs = double(rstd[r]);
    double dot = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double n = double(xr[j]) * rs;
      const double g = double(gr[j]);
      dot += double(weight[j]) * g * n;
      dweightAcc[j] += g * n;
    }
    const double meanDot = dot / double(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double n = double(xr[j]) * rs;
      dxr[j] = T(rs * (double(weight[j]) * double(gr[j]) - n * meanDot));
    }
  }
  for (int64_t j = 0; j < cols; ++j)
    dweight[j] += T(dweightAcc[j]);
}

#define MLT_INSTANTIATE_RMSNORM(T)                                             \
  template void mlt::cpu::rmsnormForward<T>(T *, T *, const T *, const T *,    \
                                            int64_t, int64_t, double);         \
  template void mlt::cpu::rmsnormBackward<T>(                                  \
      T *, T *, const T *, const T *, const T *, const T *, int64_t, int64_t);
MLT_INSTANTIATE_RMSNORM(float)
MLT_INSTANTIATE_RMSNORM(double)
