//===- RopeFrequencies.h - rotary frequencies and scaling -------*- C++ -*-===//
//
// Part of mlt. The inverse frequencies of rotary position embeddings, with
// Llama 3.1's rotary scaling (Hugging Face's `rope_type: "llama3"`): the one
// definition that the CPU rope (cpu/Rope.cpp), the CUDA rope (its host table
// and, for head dims past that table, its device code: kernels/rope.cuh), the
// plan verifier (the rope kernel's attributes, KernelInfo.cpp) and the
// compiler (the `mlt.rope` op and the HF importer) all read. Header-only, with
// no dependency beyond Status.h, so that each of them includes it as is and
// the formula exists once.
//
// The formula is HF transformers' `_compute_llama3_parameters`
// (modeling_rope_utils.py), computed in double (HF computes it in float32;
// the difference is below the fixtures' tolerances, as for unscaled rope):
//   inv_freq[i] = theta^(-2i / head_dim)                       (unscaled)
//   wavelen     = 2 pi / inv_freq[i]
//   wavelen < original / high_freq_factor:  inv_freq[i]        (kept)
//   wavelen > original / low_freq_factor:   inv_freq[i] / factor
//   otherwise, with smooth = (original / wavelen - low_freq_factor)
//                            / (high_freq_factor - low_freq_factor):
//     (1 - smooth) * inv_freq[i] / factor + smooth * inv_freq[i]
// where `original` is original_max_position_embeddings: frequencies that turn
// many times within the original context keep their value, those that turn
// less than once are slowed by `factor`, and a smooth ramp joins them.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_ROPEFREQUENCIES_H
#define MLT_PLAN_ROPEFREQUENCIES_H

#include "mlt/Support/Status.h"

#include <cmath>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define MLT_ROPE_HOST_DEVICE __host__ __device__
#else
#define MLT_ROPE_HOST_DEVICE
#endif

namespace mlt::rt {

/// The kinds of rotary scaling; the values are the rope kernel's `scaling`
/// attribute in plans (Kernels.def), so they never change meaning.
enum class RopeScalingKind : int64_t {
  /// Unscaled: theta^(-2i / head_dim).
  None = 0,
  /// Llama 3.1 / 3.2 (HF `rope_type: "llama3"`).
  Llama3 = 1,
};

/// A rope's scaling. With kind None every other field is 0 (what plans
/// store; checkRopeScaling insists on it, so that one rotation has one
/// spelling). Field names follow HF's config.json.
struct RopeScaling {
  RopeScalingKind kind = RopeScalingKind::None;
  /// `factor`: how much slower the low frequencies turn.
  double factor = 0.0;
  /// `low_freq_factor`, `high_freq_factor`: wavelengths above
  /// original / low_freq_factor are scaled, below original /
  /// high_freq_factor kept.
  double lowFreqFactor = 0.0;
  double highFreqFactor = 0.0;
  /// `original_max_position_embeddings`: the context length of pretraining.
  int64_t originalMaxPositionEmbeddings = 0;

  static RopeScaling llama3(double factor, double lowFreqFactor,
                            double highFreqFactor,
                            int64_t originalMaxPositionEmbeddings) {
    return {RopeScalingKind::Llama3, factor, lowFreqFactor, highFreqFactor,
            originalMaxPositionEmbeddings};
  }
  bool isScaled() const { return kind != RopeScalingKind::None; }

  friend bool operator==(const RopeScaling &a, const RopeScaling &b) {
    return a.kind == b.kind && a.factor == b.factor &&
           a.lowFreqFactor == b.lowFreqFactor &&
           a.highFreqFactor == b.highFreqFactor &&
           a.originalMaxPositionEmbeddings == b.originalMaxPositionEmbeddings;
  }
  friend bool operator!=(const RopeScaling &a, const RopeScaling &b) {
    return !(a == b);
  }
};

/// Checks `scaling`, naming the offending field as HF's config.json does:
/// a known kind; for llama3 a finite factor >= 1, a positive
/// low_freq_factor below high_freq_factor (both finite) and a positive
/// original_max_position_embeddings; for none, every field 0.
inline Status checkRopeScaling(const RopeScaling &scaling) {
  switch (scaling.kind) {
  case RopeScalingKind::None:
    if (scaling.factor != 0.0 || scaling.lowFreqFactor != 0.0 ||
        scaling.highFreqFactor != 0.0 ||
        scaling.originalMaxPositionEmbeddings != 0)
      return errorf("rope scaling of kind none has factor ", scaling.factor,
                    ", low_freq_factor ", scaling.lowFreqFactor,
                    ", high_freq_factor ", scaling.highFreqFactor,
                    ", original_max_position_embeddings ",
                    scaling.originalMaxPositionEmbeddings, "; all must be 0");
    return Status::ok();
  case RopeScalingKind::Llama3:
    // HF documents factor >= 1: below it the "scaled" frequencies would
    // turn faster than the ones kept.
    if (!(scaling.factor >= 1.0) || !std::isfinite(scaling.factor))
      return errorf("llama3 rope scaling: factor must be at least 1, got ",
                    scaling.factor);
    if (!(scaling.lowFreqFactor > 0.0) || !std::isfinite(scaling.lowFreqFactor))
      return errorf("llama3 rope scaling: low_freq_factor must be positive, "
                    "got ",
                    scaling.lowFreqFactor);
    if (!(scaling.highFreqFactor > scaling.lowFreqFactor) ||
        !std::isfinite(scaling.highFreqFactor))
      return errorf("llama3 rope scaling: high_freq_factor (",
                    scaling.highFreqFactor,
                    ") must be greater than low_freq_factor (",
                    scaling.lowFreqFactor, ")");
    if (scaling.originalMaxPositionEmbeddings <= 0)
      return errorf("llama3 rope scaling: original_max_position_embeddings "
                    "must be positive, got ",
                    scaling.originalMaxPositionEmbeddings);
    return Status::ok();
  }
  return errorf("unknown rope scaling kind ", int64_t(scaling.kind),
                " (0: none, 1: llama3)");
}

/// The inverse frequency of pair `i` (0 <= i < headDim / 2) of a rotation of
/// base `theta` over head vectors of `headDim`, scaled by `scaling` (checked
/// by checkRopeScaling). The angle of position `pos` is `pos * this`. Host
/// and device code, so that the CUDA kernel needs no formula of its own.
MLT_ROPE_HOST_DEVICE inline double
ropeInverseFrequency(double theta, int64_t headDim, const RopeScaling &scaling,
                     int64_t i) {
  const double exponent = -double(2 * i) / double(headDim);
#ifdef __CUDA_ARCH__
  const double invFreq = ::pow(theta, exponent);
#else
  const double invFreq = std::pow(theta, exponent);
#endif
  if (scaling.kind != RopeScalingKind::Llama3)
    return invFreq;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double original = double(scaling.originalMaxPositionEmbeddings);
  const double wavelen = kTwoPi / invFreq;
  if (wavelen < original / scaling.highFreqFactor)
    return invFreq;
  if (wavelen > original / scaling.lowFreqFactor)
    return invFreq / scaling.factor;
  // In HF's order of operations.
  const double smooth = (original / wavelen - scaling.lowFreqFactor) /
                        (scaling.highFreqFactor - scaling.lowFreqFactor);
  return (1.0 - smooth) * invFreq / scaling.factor + smooth * invFreq;
}

/// Checks a rotation's parameters as the rope kernels take them: an even
/// positive `headDim`, a positive `theta`, and `scaling`. `kernel` prefixes
/// the message ("rope", "rope backward").
inline Status checkRopeFrequencies(const char *kernel, double theta,
                                   int64_t headDim,
                                   const RopeScaling &scaling) {
  if (headDim <= 0 || headDim % 2 != 0)
    return errorf(kernel, ": head_dim ", headDim, " must be positive and even");
  if (!(theta > 0.0))
    return errorf(kernel, ": theta ", theta, " must be positive");
  return checkRopeScaling(scaling).withContext(kernel);
}

/// Every pair's inverse frequency, i < headDim / 2 (ropeInverseFrequency).
inline std::vector<double> ropeInverseFrequencies(double theta, int64_t headDim,
                                                  const RopeScaling &scaling) {
  std::vector<double> invFreq(size_t(headDim / 2));
  for (int64_t i = 0; i < headDim / 2; ++i)
    invFreq[size_t(i)] = ropeInverseFrequency(theta, headDim, scaling, i);
  return invFreq;
}

} // namespace mlt::rt

#endif // MLT_PLAN_ROPEFREQUENCIES_H
