//===- Parameters.cpp - parameters by HF name -----------------------------===//
//
// Part of mlt. Initialization, loading and snapshots of a plan's parameters.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/Random.h"
#include "mlt/Runtime/Parameters.h"

#include <cmath>

using namespace mlt;
using namespace mlt::rt;

double NormalGenerator::next() {
  if (hasSpare_) {
    hasSpare_ = false;
    return spare_;
  }
  // 53 random bits -> (0, 1], so that log(u1) is finite.
  auto uniform = [this] {
    return (double(engine_() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  const double u1 = uniform();
  const double u2 = uniform();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * 3.14159265358979323846 * u2;
  spare_ = radius * std::sin(angle);
  hasSpare_ = true;
  return radius * std::cos(angle);
}

namespace {

/// FNV-1a over the name's bytes: a stable hash, unlike std::hash.
uint64_t hashName(const std::string &name) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  return hash;
}

} // namespace

std::vector<ExpectedTensor> mlt::rt::planParameters(const RankPlan &rank) {
  std::vector<ExpectedTensor> parameters;
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.kind == BufferKind::Parameter)
      parameters.push_back({buffer.parameter, buffer.shape});
  return parameters;
}

int64_t mlt::rt::countParameters(const RankPlan &rank) {
  int64_t count = 0;
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.kind == BufferKind::Parameter)
      count += buffer.numElements();
  return count;
}

std::vector<float>
mlt::rt::initialParameterValues(const std::string &name,
                                const std::vector<int64_t> &shape,
                                uint64_t seed, double stddev) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  if (shape.size() < 2)
    return std::vector<float>(count, 1.0f);
  std::vector<float> values(count);
  NormalGenerator generator(splitmix64(seed ^ splitmix64(hashName(name))));
  for (float &value : values)
    value = float(stddev * generator.next());
  return values;
}

Status mlt::rt::initializeParameters(Executor &executor, uint64_t seed) {
  const RankPlan &rank = executor.rankPlan();
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &buffer = rank.buffers[i];
    if (buffer.kind != BufferKind::Parameter)
      continue;
    std::vector<float> values =
        initialParameterValues(buffer.parameter, buffer.shape, seed);
    MLT_RETURN_IF_ERROR(
        executor.writeFloats(i, values.data(), int64_t(values.size())));
  }
  return executor.zeroBuffers(BufferKind::OptimizerState);
}

Status mlt::rt::loadParameters(Executor &executor, const TensorMap &tensors) {
  const RankPlan &rank = executor.rankPlan();
  MLT_RETURN_IF_ERROR(checkTensors(tensors, planParameters(rank)));
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &buffer = rank.buffers[i];
    if (buffer.kind != BufferKind::Parameter)
      continue;
    StatusOr<std::vector<float>> values =
        toFloat32(buffer.parameter, tensors.at(buffer.parameter));
    if (!values)
      return values.takeStatus();
    MLT_RETURN_IF_ERROR(
        executor.writeFloats(i, values->data(), int64_t(values->size())));
  }
  return executor.zeroBuffers(BufferKind::OptimizerState);
}

StatusOr<TensorMap> mlt::rt::parameterTensors(Executor &executor,
                                              BufferKind kind) {
  const RankPlan &rank = executor.rankPlan();
  TensorMap tensors;
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &buffer = rank.buffers[i];
    if (buffer.kind != kind)
      continue;
    StatusOr<std::vector<float>> values = executor.readFloats(i);
    if (!values)
      return values.takeStatus();
    tensors[buffer.parameter] =
        Tensor::fromFloats(DType::F32, buffer.shape, *values);
  }
  return tensors;
}
