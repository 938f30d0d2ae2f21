//===- Parameters.cpp - parameters by HF name -----------------------------===//
//
// Part of mlt. Initialization, loading and snapshots of a plan's parameters,
// over one executor or every rank of a group: each whole tensor is made (or
// converted) once and cut into the blocks the ranks hold, or assembled from
// them.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Runtime/plan/Blocks.h"
#include "mlt/Runtime/Random.h"

#include <cmath>
#include <map>
#include <set>

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
      parameters.push_back({buffer.parameter, buffer.tensorShape()});
  return parameters;
}

std::vector<ExpectedTensor> mlt::rt::planParameters(const Plan &plan) {
  std::vector<ExpectedTensor> parameters;
  std::set<std::string> seen;
  for (const RankPlan &rank : plan.ranks)
    for (ExpectedTensor &parameter : planParameters(rank))
      if (seen.insert(parameter.name).second)
        parameters.push_back(std::move(parameter));
  return parameters;
}

int64_t mlt::rt::countParameters(const RankPlan &rank) {
  int64_t count = 0;
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.kind == BufferKind::Parameter)
      count += buffer.numElements();
  return count;
}

int64_t mlt::rt::countParameters(const Plan &plan) {
  int64_t count = 0;
  for (const ExpectedTensor &parameter : planParameters(plan)) {
    int64_t elements = 1;
    for (int64_t dim : parameter.shape)
      elements *= dim;
    count += elements;
  }
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

namespace {

/// One buffer of one rank.
struct Holder {
  Executor *executor;
  size_t buffer;

  const BufferDesc &desc() const { return executor->buffer(buffer); }
  BlockLayout layout() const {
    const BufferDesc &d = desc();
    return BlockLayout{d.tensorShape(), d.blockOffset(), d.shape};
  }
};

/// A tensor and every buffer (on any rank) holding a block of it.
struct Holders {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<Holder> holders;
};

/// The tensor a buffer holds a block of: its parameter's HF name for
/// parameters and gradients (the names checkpoints use), else its own name.
const std::string &tensorNameOf(const BufferDesc &buffer) {
  return buffer.kind == BufferKind::Parameter ||
                 buffer.kind == BufferKind::Gradient
             ? buffer.parameter
             : buffer.name;
}

/// The buffers of `kind` of `executors` (in rank order), grouped by tensor:
/// by HF name for parameters and gradients, by buffer name for other kinds;
/// tensors in order of first appearance.
std::vector<Holders> holdersOf(const std::vector<Executor *> &executors,
                               BufferKind kind) {
  std::vector<Holders> tensors;
  std::map<std::string, size_t> index;
  for (Executor *executor : executors) {
    const RankPlan &rank = executor->rankPlan();
    for (size_t i = 0; i < rank.buffers.size(); ++i) {
      const BufferDesc &buffer = rank.buffers[i];
      if (buffer.kind != kind)
        continue;
      const std::string &name = tensorNameOf(buffer);
      auto [it, inserted] = index.emplace(name, tensors.size());
      if (inserted)
        tensors.push_back(Holders{name, buffer.tensorShape(), {}});
      tensors[it->second].holders.push_back(Holder{executor, i});
    }
  }
  return tensors;
}

/// Writes each holder its block of the whole tensor `values`.
Status writeBlocks(const Holders &tensor, const std::vector<float> &values) {
  for (const Holder &holder : tensor.holders) {
    BlockLayout layout = holder.layout();
    if (layout.isWhole()) {
      MLT_RETURN_IF_ERROR(holder.executor->writeFloats(
          holder.buffer, values.data(), int64_t(values.size())));
      continue;
    }
    std::vector<float> block = extractBlock(values, layout);
    MLT_RETURN_IF_ERROR(holder.executor->writeFloats(
        holder.buffer, block.data(), int64_t(block.size())));
  }
  return Status::ok();
}

Status zeroOptimizerStates(const std::vector<Executor *> &executors) {
  for (Executor *executor : executors)
    MLT_RETURN_IF_ERROR(executor->zeroBuffers(BufferKind::OptimizerState));
  return Status::ok();
}

Status initialize(const std::vector<Executor *> &executors, uint64_t seed) {
  for (const Holders &tensor : holdersOf(executors, BufferKind::Parameter))
    MLT_RETURN_IF_ERROR(writeBlocks(
        tensor, initialParameterValues(tensor.name, tensor.shape, seed)));
  return zeroOptimizerStates(executors);
}

Status load(const std::vector<Executor *> &executors,
            const std::vector<ExpectedTensor> &expected,
            const TensorMap &tensors) {
  MLT_RETURN_IF_ERROR(checkTensors(tensors, expected));
  for (const Holders &tensor : holdersOf(executors, BufferKind::Parameter)) {
    StatusOr<std::vector<float>> values =
        toFloat32(tensor.name, tensors.at(tensor.name));
    if (!values)
      return values.takeStatus();
    MLT_RETURN_IF_ERROR(writeBlocks(tensor, *values));
  }
  return zeroOptimizerStates(executors);
}

StatusOr<TensorMap> assemble(const std::vector<Executor *> &executors,
                             BufferKind kind) {
  TensorMap tensors;
  for (const Holders &tensor : holdersOf(executors, kind)) {
    const Holder &first = tensor.holders.front();
    if (tensor.holders.size() == 1 && first.layout().isWhole()) {
      // The one-rank case, without a copy.
      StatusOr<std::vector<float>> values =
          first.executor->readFloats(first.buffer);
      if (!values)
        return values.takeStatus();
      tensors[tensor.name] =
          Tensor::fromFloats(DType::F32, tensor.shape, *values);
      continue;
    }
    int64_t total = 1;
    for (int64_t dim : tensor.shape)
      total *= dim;
    std::vector<float> whole(size_t(total), 0.0f);
    std::set<std::vector<int64_t>> taken; // block offsets already copied
    int64_t covered = 0;
    for (const Holder &holder : tensor.holders) {
      BlockLayout layout = holder.layout();
      if (!taken.insert(layout.offset).second)
        continue; // a replica of a block taken from a lower rank
      StatusOr<std::vector<float>> block =
          holder.executor->readFloats(holder.buffer);
      if (!block)
        return block.takeStatus();
      insertBlock(whole, layout, *block);
      covered += int64_t(block->size());
    }
    if (covered != total)
      return errorf("'", tensor.name, "' of shape ", formatShape(tensor.shape),
                    ": the ranks hold only ", covered, " of its ", total,
                    " elements");
    tensors[tensor.name] = Tensor::fromFloats(DType::F32, tensor.shape, whole);
  }
  return tensors;
}

std::vector<Executor *> executorsOf(RankGroup &ranks) {
  std::vector<Executor *> executors;
  for (uint32_t rank = 0; rank < ranks.size(); ++rank)
    executors.push_back(&ranks.executor(rank));
  return executors;
}

} // namespace

Status mlt::rt::initializeParameters(Executor &executor, uint64_t seed) {
  return initialize({&executor}, seed);
}

Status mlt::rt::initializeParameters(RankGroup &ranks, uint64_t seed) {
  return initialize(executorsOf(ranks), seed);
}

Status mlt::rt::loadParameters(Executor &executor, const TensorMap &tensors) {
  return load({&executor}, planParameters(executor.rankPlan()), tensors);
}

Status mlt::rt::loadParameters(RankGroup &ranks, const TensorMap &tensors) {
  std::vector<Executor *> executors = executorsOf(ranks);
  std::vector<ExpectedTensor> expected;
  std::set<std::string> seen;
  for (Executor *executor : executors)
    for (ExpectedTensor &parameter : planParameters(executor->rankPlan()))
      if (seen.insert(parameter.name).second)
        expected.push_back(std::move(parameter));
  return load(executors, expected, tensors);
}

StatusOr<TensorMap> mlt::rt::parameterTensors(Executor &executor,
                                              BufferKind kind) {
  return assemble({&executor}, kind);
}

StatusOr<TensorMap> mlt::rt::parameterTensors(RankGroup &ranks,
                                              BufferKind kind) {
  return assemble(executorsOf(ranks), kind);
}

namespace {

/// One block of a tensor on one rank of the plan.
struct PlanHolder {
  uint32_t rank;
  const BufferDesc *buffer;

  BlockLayout layout() const {
    return BlockLayout{buffer->tensorShape(), buffer->blockOffset(),
                       buffer->shape};
  }
};

/// holdersOf over every rank of the plan, from its buffer descriptions.
std::vector<std::pair<std::string, std::vector<PlanHolder>>>
planHoldersOf(const Plan &plan, BufferKind kind) {
  std::vector<std::pair<std::string, std::vector<PlanHolder>>> tensors;
  std::map<std::string, size_t> index;
  for (const RankPlan &rank : plan.ranks) {
    for (const BufferDesc &buffer : rank.buffers) {
      if (buffer.kind != kind)
        continue;
      const std::string &name = tensorNameOf(buffer);
      auto [it, inserted] = index.emplace(name, tensors.size());
      if (inserted)
        tensors.push_back({name, {}});
      tensors[it->second].second.push_back(PlanHolder{rank.rank, &buffer});
    }
  }
  return tensors;
}

} // namespace

StatusOr<TensorMap> mlt::rt::gatherParameterTensors(RankGroup &local,
                                                    const Plan &plan,
                                                    RankTransport &transport,
                                                    BufferKind kind) {
  // The executors of this process's ranks, by plan rank.
  std::map<uint32_t, Executor *> executors;
  for (uint32_t i = 0; i < local.size(); ++i)
    executors[local.executor(i).rankPlan().rank] = &local.executor(i);
  auto localBuffer = [&](const PlanHolder &holder) -> StatusOr<size_t> {
    Executor *executor = executors.at(holder.rank);
    return executor->findBuffer(holder.buffer->name);
  };
  const bool isRoot = executors.count(0) != 0;

  TensorMap tensors;
  for (const auto &[name, holders] : planHoldersOf(plan, kind)) {
    const std::vector<int64_t> shape = holders.front().buffer->tensorShape();
    int64_t total = 1;
    for (int64_t dim : shape)
      total *= dim;
    std::vector<float> whole(isRoot ? size_t(total) : 0, 0.0f);
    std::set<std::vector<int64_t>> taken; // block offsets already gathered
    int64_t covered = 0;
    for (const PlanHolder &holder : holders) {
      const BlockLayout layout = holder.layout();
      if (!taken.insert(layout.offset).second)
        continue; // a replica of a block taken from a lower rank
      const int64_t elements = holder.buffer->numElements();
      covered += elements;
      const bool holds = executors.count(holder.rank) != 0;
      if (!holds && !isRoot)
        continue; // between two other processes
      std::vector<float> block;
      if (holds) {
        StatusOr<size_t> buffer = localBuffer(holder);
        if (!buffer)
          return buffer.takeStatus();
        StatusOr<std::vector<float>> values =
            executors.at(holder.rank)->readFloats(*buffer);
        if (!values)
          return values.takeStatus();
        block = std::move(*values);
        if (!isRoot) {
          Status sent =
              transport.send(0, block.data(), block.size() * sizeof(float));
          if (!sent)
            return std::move(sent).withContext("sending '" + name +
                                               "' to rank 0");
          continue;
        }
      } else {
        block.resize(size_t(elements));
        Status received = transport.receive(int(holder.rank), block.data(),
                                            block.size() * sizeof(float));
        if (!received)
          return std::move(received).withContext("receiving '" + name +
                                                 "' from rank " +
                                                 std::to_string(holder.rank));
      }
      insertBlock(whole, layout, block);
    }
    if (!isRoot)
      continue;
    if (covered != total)
      return errorf("'", name, "' of shape ", formatShape(shape),
                    ": the ranks hold only ", covered, " of its ", total,
                    " elements");
    tensors[name] = Tensor::fromFloats(DType::F32, shape, whole);
  }
  return tensors;
}
