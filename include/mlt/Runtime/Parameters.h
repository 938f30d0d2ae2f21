//===- Parameters.h - parameters by HF name ---------------------*- C++ -*-===//
//
// Part of mlt. Moves a plan's parameters between the executor's arena and the
// outside world by their Hugging Face names: fresh initialization as HF's
// LlamaForCausalLM does it (with a portable generator, so a seed gives the
// same weights everywhere), loading from a safetensors checkpoint, and taking
// a snapshot for saving one.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_PARAMETERS_H
#define MLT_RUNTIME_PARAMETERS_H

#include "mlt/Runtime/Executor.h"
#include "mlt/Runtime/IO/SafeTensors.h"
#include "mlt/Runtime/Plan.h"
#include "mlt/Runtime/Status.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlt::rt {

/// Standard normal draws from std::mt19937_64 through the Box-Muller
/// transform, written out so that the values do not depend on the standard
/// library (std::normal_distribution's algorithm is unspecified). Each pair of
/// uniforms u1, u2 in (0, 1] (53 bits each) gives two draws,
/// sqrt(-2 ln u1) * cos(2 pi u2) and then sqrt(-2 ln u1) * sin(2 pi u2).
class NormalGenerator {
public:
  explicit NormalGenerator(uint64_t seed) : engine_(seed) {}
  double next();

private:
  std::mt19937_64 engine_;
  bool hasSpare_ = false;
  double spare_ = 0.0;
};

/// The parameters of `rank` (HF names and shapes), in buffer order.
std::vector<ExpectedTensor> planParameters(const RankPlan &rank);

/// Total elements of the parameters of `rank`.
int64_t countParameters(const RankPlan &rank);

/// The initial values of parameter `name` as HF's LlamaForCausalLM sets them
/// (`_init_weights` with initializer_range `stddev`): normal(0, stddev) for a
/// tensor of two or more dimensions (linear and embedding weights), 1 for
/// one-dimensional ones (RMSNorm weights). Each parameter draws from its own
/// generator, seeded from `seed` and its name, so its values do not depend on
/// which other parameters the plan holds or in which order.
std::vector<float> initialParameterValues(const std::string &name,
                                          const std::vector<int64_t> &shape,
                                          uint64_t seed, double stddev = 0.02);

/// Writes initialParameterValues into every Parameter buffer and zeroes the
/// optimizer states.
Status initializeParameters(Executor &executor, uint64_t seed);

/// Writes `tensors` (any float dtype, converted to the buffers' type) into the
/// Parameter buffers by HF name, after checkTensors: exactly the plan's
/// parameters, with its shapes. Zeroes the optimizer states.
Status loadParameters(Executor &executor, const TensorMap &tensors);

/// The buffers of `kind` (parameters, or their gradients) as F32 tensors by
/// HF name: for writeCheckpointDir, and for dumping gradients.
StatusOr<TensorMap> parameterTensors(Executor &executor,
                                     BufferKind kind = BufferKind::Parameter);

} // namespace mlt::rt

#endif // MLT_RUNTIME_PARAMETERS_H
