//===- Rope.cpp - CPU rotary position embedding kernels -------------------===//
//
// Part of mlt. Rotates each (i, i + headDim/2) pair of every head vector by
// its position's angle (the inverse frequencies, scaled or not, from
// RopeFrequencies.h). cos and sin depend on the position and i only, so
// they are computed once per sequence index and reused for every batch entry
// and head: headDim/2 trigonometric pairs per position instead of per element.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cpu/Rope.h"

#include <cmath>
#include <vector>

using namespace mlt;
using namespace mlt::cpu;

namespace {

/// Rotates by `direction * angle` (+1 forward, -1 backward).
template <typename T>
Status rotate(const char *kernel, T *out, const T *in, int64_t batch,
              int64_t seq, int64_t heads, int64_t headDim, double theta,
              const rt::RopeScaling &scaling,
              const rt::SequencePositions &positions, double direction) {
  MLT_RETURN_IF_ERROR(
      rt::checkRopeFrequencies(kernel, theta, headDim, scaling));
  const int64_t half = headDim / 2;
  const std::vector<double> invFreq =
      rt::ropeInverseFrequencies(theta, headDim, scaling);
  std::vector<T> cosv(half), sinv(half);
  for (int64_t s = 0; s < seq; ++s) {
    const double pos = double(positions(s));
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * invFreq[i];
      cosv[i] = T(std::cos(angle));
      sinv[i] = T(direction * std::sin(angle));
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t offset = ((b * seq + s) * heads + h) * headDim;
        const T *x = in + offset;
        T *y = out + offset;
        for (int64_t i = 0; i < half; ++i) {
          // Both halves are read before either is written: in-place is safe.
          const T lo = x[i], hi = x[i + half];
          y[i] = lo * cosv[i] - hi * sinv[i];
          y[i + half] = hi * cosv[i] + lo * sinv[i];
        }
      }
    }
  }
  return Status::ok();
}

} // namespace

template <typename T>
Status mlt::cpu::ropeForward(T *out, const T *in, int64_t batch, int64_t seq,
                             int64_t heads, int64_t headDim, double theta,
                             const rt::SequencePositions &positions,
                             const rt::RopeScaling &scaling) {
  return rotate("rope", out, in, batch, seq, heads, headDim, theta, scaling,
                positions, 1.0);
}

template <typename T>
Status mlt::cpu::ropeBackward(T *din, const T *dout, int64_t batch, int64_t seq,
                              int64_t heads, int64_t headDim, double theta,
                              const rt::SequencePositions &positions,
                              const rt::RopeScaling &scaling) {
  return rotate("rope backward", din, dout, batch, seq, heads, headDim, theta,
                scaling, positions, -1.0);
}

#define MLT_INSTANTIATE_ROPE(T)                                                \
  template Status mlt::cpu::ropeForward<T>(                                    \
      T *, const T *, int64_t, int64_t, int64_t, int64_t, double,              \
      const rt::SequencePositions &, const rt::RopeScaling &);                 \
  template Status mlt::cpu::ropeBackward<T>(                                   \
      T *, const T *, int64_t, int64_t, int64_t, int64_t, double,              \
      const rt::SequencePositions &, const rt::RopeScaling &);
MLT_INSTANTIATE_ROPE(float)
MLT_INSTANTIATE_ROPE(double)
