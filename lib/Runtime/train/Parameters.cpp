//===- Parameters.cpp - parameters by HF name -----------------------------===//
//
// Part of mlt. Initialization, loading and snapshots of a plan's parameters,
// over one executor or every rank of a group: each whole tensor is made (or
// converted) once and cut into the blocks and segments the ranks hold, or
// assembled from them. Assembling first derives from the plan the pieces
// to read (each block or segment range once, the coverage checked), then
// reads each buffer once for all its pieces.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/train/Parameters.h"
#include "mlt/Plan/Blocks.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/Random.h"
#include "mlt/Support/Threads.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

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

namespace {

int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

bool isPerParameter(BufferKind kind) {
  return kind == BufferKind::Parameter || kind == BufferKind::Gradient ||
         kind == BufferKind::OptimizerState ||
         kind == BufferKind::ParameterCopy;
}

/// Whether a segment declares its block (else it is of the whole tensor).
bool hasBlock(const SegmentDesc &segment) {
  return !segment.fullShape.empty() || !segment.sliceOffset.empty() ||
         !segment.blockShape.empty();
}

/// The block that `segment` holds a range of, in a tensor of `fullShape`
/// (which a segment without block fields does not give).
BlockLayout segmentLayout(const SegmentDesc &segment,
                          const std::vector<int64_t> &fullShape) {
  if (hasBlock(segment))
    return BlockLayout{segment.fullShape, segment.sliceOffset,
                       segment.blockShape};
  return BlockLayout{fullShape, std::vector<int64_t>(fullShape.size(), 0),
                     fullShape};
}

/// The whole shapes of the parameters, as the buffers of `ranks` give them:
/// every per-parameter buffer naming one (its tensor shape) and every
/// segment with a block (its full shape). A verified plan gives each
/// parameter one.
std::map<std::string, std::vector<int64_t>>
parameterShapes(const std::vector<const RankPlan *> &ranks) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const RankPlan *rank : ranks)
    for (const BufferDesc &buffer : rank->buffers) {
      if (isPerParameter(buffer.kind) && !buffer.parameter.empty())
        shapes.emplace(buffer.parameter, buffer.tensorShape());
      for (const SegmentDesc &segment : buffer.segments)
        if (hasBlock(segment))
          shapes.emplace(segment.parameter, segment.fullShape);
    }
  return shapes;
}

/// The parameters that `ranks` have, each once, in order of first
/// appearance: named by a parameter or compute-copy buffer, or held by a
/// segment of a parameter buffer; with whole shapes (empty where no buffer
/// of `ranks` gives one, which a verified plan's ranks together always do).
std::vector<ExpectedTensor>
parametersOf(const std::vector<const RankPlan *> &ranks) {
  const std::map<std::string, std::vector<int64_t>> shapes =
      parameterShapes(ranks);
  std::vector<ExpectedTensor> parameters;
  std::set<std::string> seen;
  auto add = [&](const std::string &name) {
    if (!seen.insert(name).second)
      return;
    auto shape = shapes.find(name);
    parameters.push_back(
        {name, shape == shapes.end() ? std::vector<int64_t>() : shape->second});
  };
  for (const RankPlan *rank : ranks)
    for (const BufferDesc &buffer : rank->buffers) {
      if ((buffer.kind == BufferKind::Parameter ||
           buffer.kind == BufferKind::ParameterCopy) &&
          !buffer.parameter.empty())
        add(buffer.parameter);
      if (buffer.kind == BufferKind::Parameter)
        for (const SegmentDesc &segment : buffer.segments)
          add(segment.parameter);
    }
  return parameters;
}

} // namespace

std::vector<ExpectedTensor> mlt::rt::planParameters(const RankPlan &rank) {
  return parametersOf({&rank});
}

std::vector<ExpectedTensor> mlt::rt::planParameters(const Plan &plan) {
  std::vector<const RankPlan *> ranks;
  for (const RankPlan &rank : plan.ranks)
    ranks.push_back(&rank);
  return parametersOf(ranks);
}

int64_t mlt::rt::countParameters(const RankPlan &rank) {
  std::set<std::string> segmented;
  int64_t count = 0;
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.kind == BufferKind::Parameter)
      for (const SegmentDesc &segment : buffer.segments) {
        segmented.insert(segment.parameter);
        count += segment.count;
      }
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.kind == BufferKind::Parameter && !buffer.parameter.empty() &&
        !segmented.count(buffer.parameter))
      count += buffer.numElements();
  return count;
}

int64_t mlt::rt::countParameters(const Plan &plan) {
  int64_t count = 0;
  for (const ExpectedTensor &parameter : planParameters(plan))
    count += elementsOf(parameter.shape);
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

//===----------------------------------------------------------------------===//
// Holders
//===----------------------------------------------------------------------===//

/// A place holding part of a tensor: buffer `buffer` of plan rank `rank`
/// (a block of the tensor, `layout`), or its segment `segment` (elements
/// [begin, begin + count) of the block `layout`, at element `offset` of the
/// buffer).
struct Piece {
  uint32_t rank = 0;
  size_t buffer = 0;
  const BufferDesc *desc = nullptr;
  int segment = -1;
  BlockLayout layout;
  int64_t begin = 0, count = 0, offset = 0;

  bool isSegment() const { return segment >= 0; }
  /// "rank 1", or "segment 0 of '@param_slice.0' on rank 1".
  std::string where() const {
    if (!isSegment())
      return "rank " + std::to_string(rank);
    return "segment " + std::to_string(segment) + " of '" + desc->name +
           "' on rank " + std::to_string(rank);
  }
};

/// A tensor and the pieces that hold it.
struct TensorPieces {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<Piece> pieces;
};

/// The tensor a buffer holds a block of: its parameter's HF name for
/// parameters and gradients (the names checkpoints use), else its own name.
const std::string &tensorNameOf(const BufferDesc &buffer) {
  return buffer.kind == BufferKind::Parameter ||
                 buffer.kind == BufferKind::Gradient
             ? buffer.parameter
             : buffer.name;
}

/// The tensors of `kind` that `ranks` hold (in rank order; tensors in
/// order of first appearance), by the holder rule of Plan.fbs: where a
/// parameter has segments in buffers of `kind` (parameters, gradients,
/// optimizer states) on any of `ranks`, those segments hold it, and the
/// buffers of `kind` naming it do not; else the buffers naming it do.
/// Parameters and gradients are named by HF name; other kinds by buffer
/// name, and the segments of an optimizer state's buffer as
/// "<buffer>[<parameter>]". Flat buffers that name no parameter and have no
/// segments (the buckets that views lie in) hold no tensor.
StatusOr<std::vector<TensorPieces>>
piecesOf(const std::vector<const RankPlan *> &ranks, BufferKind kind) {
  const bool perParameter = kind == BufferKind::Parameter ||
                            kind == BufferKind::Gradient ||
                            kind == BufferKind::OptimizerState;
  std::set<std::string> segmented;
  for (const RankPlan *rank : ranks)
    for (const BufferDesc &buffer : rank->buffers)
      if (buffer.kind == kind)
        for (const SegmentDesc &segment : buffer.segments)
          segmented.insert(segment.parameter);
  const std::map<std::string, std::vector<int64_t>> shapes =
      parameterShapes(ranks);

  std::vector<TensorPieces> tensors;
  std::map<std::string, size_t> index;
  auto tensorOf = [&](const std::string &name,
                      const std::vector<int64_t> &shape) -> TensorPieces & {
    auto [it, inserted] = index.emplace(name, tensors.size());
    if (inserted)
      tensors.push_back(TensorPieces{name, shape, {}});
    return tensors[it->second];
  };
  for (const RankPlan *rank : ranks) {
    for (size_t i = 0; i < rank->buffers.size(); ++i) {
      const BufferDesc &buffer = rank->buffers[i];
      if (buffer.kind != kind)
        continue;
      if (!perParameter) {
        tensorOf(buffer.name, buffer.tensorShape())
            .pieces.push_back(Piece{rank->rank, i, &buffer, -1,
                                    BlockLayout{buffer.tensorShape(),
                                                buffer.blockOffset(),
                                                buffer.shape},
                                    0, buffer.numElements(), 0});
        continue;
      }
      for (size_t s = 0; s < buffer.segments.size(); ++s) {
        const SegmentDesc &segment = buffer.segments[s];
        std::vector<int64_t> shape;
        if (hasBlock(segment)) {
          shape = segment.fullShape;
        } else if (auto found = shapes.find(segment.parameter);
                   found != shapes.end()) {
          shape = found->second;
        } else {
          return errorf("'", segment.parameter, "': segment ", s, " of '",
                        buffer.name, "' on rank ", rank->rank,
                        " is of the whole tensor, but no buffer gives its "
                        "shape");
        }
        Piece piece{rank->rank,    i,
                    &buffer,       int(s),
                    segmentLayout(segment, shape),
                    segment.begin, segment.count,
                    segment.offset};
        if (piece.begin + piece.count > elementsOf(piece.layout.shape))
          return errorf("'", segment.parameter, "': ", piece.where(),
                        " holds elements [", piece.begin, ", ",
                        piece.begin + piece.count, ") of a block of ",
                        elementsOf(piece.layout.shape));
        const std::string name =
            kind == BufferKind::OptimizerState
                ? buffer.name + "[" + segment.parameter + "]"
                : segment.parameter;
        tensorOf(name, shape).pieces.push_back(std::move(piece));
      }
      if (!buffer.segments.empty() || buffer.parameter.empty() ||
          segmented.count(buffer.parameter))
        continue;
      tensorOf(tensorNameOf(buffer), buffer.tensorShape())
          .pieces.push_back(Piece{rank->rank, i, &buffer, -1,
                                  BlockLayout{buffer.tensorShape(),
                                              buffer.blockOffset(),
                                              buffer.shape},
                                  0, buffer.numElements(), 0});
    }
  }
  return tensors;
}

/// piecesOf with every replica left out (a block, or a range of a block,
/// taken from the lowest rank holding it), after checking that the rest
/// cover each tensor: the pieces to read to assemble whole tensors.
StatusOr<std::vector<TensorPieces>>
distinctPiecesOf(const std::vector<const RankPlan *> &ranks,
                 BufferKind kind) {
  StatusOr<std::vector<TensorPieces>> tensors = piecesOf(ranks, kind);
  if (!tensors)
    return tensors;
  for (TensorPieces &tensor : *tensors) {
    std::vector<Piece> distinct;
    std::set<std::vector<int64_t>> blocks; // offsets of the blocks taken
    // The ranges taken of each block (by its offset), by begin.
    std::map<std::vector<int64_t>, std::map<int64_t, const Piece *>> ranges;
    int64_t covered = 0;
    for (const Piece &piece : tensor.pieces) {
      if (!piece.isSegment()) {
        if (!blocks.insert(piece.layout.offset).second)
          continue; // a replica of a block taken from a lower rank
      } else {
        std::map<int64_t, const Piece *> &taken = ranges[piece.layout.offset];
        if (!taken.empty() &&
            taken.begin()->second->layout.shape != piece.layout.shape)
          return errorf("'", tensor.name, "' of shape ",
                        formatShape(tensor.shape), ": ",
                        taken.begin()->second->where(), " and ", piece.where(),
                        " are of blocks at one offset with different shapes");
        auto next = taken.lower_bound(piece.begin);
        if (next != taken.end() && next->first == piece.begin &&
            next->second->count == piece.count)
          continue; // a replica of a range taken from a lower rank
        const Piece *other = nullptr;
        if (next != taken.end() && next->first < piece.begin + piece.count)
          other = next->second;
        if (next != taken.begin() &&
            std::prev(next)->first + std::prev(next)->second->count >
                piece.begin)
          other = std::prev(next)->second;
        if (other)
          return errorf("'", tensor.name, "' of shape ",
                        formatShape(tensor.shape), ": ", other->where(),
                        " holds elements [", other->begin, ", ",
                        other->begin + other->count, ") and ", piece.where(),
                        " elements [", piece.begin, ", ",
                        piece.begin + piece.count,
                        ") of one block, which overlap");
        taken.emplace(piece.begin, &piece);
      }
      covered += piece.count;
      distinct.push_back(piece);
    }
    const int64_t total = elementsOf(tensor.shape);
    if (covered != total)
      return errorf("'", tensor.name, "' of shape ", formatShape(tensor.shape),
                    ": the ranks hold only ", covered, " of its ", total,
                    " elements");
    tensor.pieces = std::move(distinct);
  }
  return tensors;
}

/// A tensor being assembled from pieces (BlockAssembly).
class Assembly {
public:
  explicit Assembly(const std::vector<int64_t> &shape) : whole_(shape) {}

  /// `values`: the piece's elements (its block, or its range).
  void place(const Piece &piece, const float *values) {
    if (piece.isSegment())
      whole_.placeRange(piece.layout, piece.begin, piece.count, values);
    else
      whole_.placeBlock(piece.layout, values);
  }

  std::vector<float> finish() { return whole_.finish(); }

private:
  BlockAssembly whole_;
};

/// Reads each buffer once for the pieces that need it, and lets it go
/// after the last of them (a flat buffer holds pieces of many tensors).
class BufferReads {
public:
  void expect(const Piece &piece) { ++remaining_[key(piece)]; }

  /// The piece's elements, read from `executor` (its rank's).
  StatusOr<std::vector<float>> take(Executor &executor, size_t buffer,
                                    const Piece &piece) {
    auto k = key(piece);
    auto cached = cache_.find(k);
    if (cached == cache_.end()) {
      StatusOr<std::vector<float>> values = executor.readFloats(buffer);
      if (!values)
        return values.takeStatus();
      cached = cache_.emplace(k, std::move(*values)).first;
    }
    std::vector<float> result;
    if (piece.isSegment())
      result.assign(cached->second.begin() + piece.offset,
                    cached->second.begin() + piece.offset + piece.count);
    if (--remaining_[k] == 0) {
      if (!piece.isSegment())
        result = std::move(cached->second);
      cache_.erase(cached);
    } else if (!piece.isSegment()) {
      result = cached->second;
    }
    return result;
  }

private:
  static std::pair<uint32_t, size_t> key(const Piece &piece) {
    return {piece.rank, piece.buffer};
  }
  std::map<std::pair<uint32_t, size_t>, int> remaining_;
  std::map<std::pair<uint32_t, size_t>, std::vector<float>> cache_;
};

std::vector<const RankPlan *>
rankPlansOf(const std::vector<Executor *> &executors) {
  std::vector<const RankPlan *> ranks;
  for (Executor *executor : executors)
    ranks.push_back(&executor->rankPlan());
  return ranks;
}

//===----------------------------------------------------------------------===//
// Writing parameters
//===----------------------------------------------------------------------===//

/// The moment an optimizer-state buffer holds ("exp_avg" or "exp_avg_sq",
/// by its name: a parameter's own or a partitioned optimizer's slice),
/// or nullopt.
std::optional<std::string> momentOf(const BufferDesc &buffer) {
  auto startsWith = [&](const char *prefix) {
    return buffer.name.rfind(prefix, 0) == 0;
  };
  if (startsWith(kExpAvgSqPrefix) || startsWith(kExpAvgSqShardPrefix))
    return std::string("exp_avg_sq");
  if (startsWith(kExpAvgPrefix) || startsWith(kExpAvgShardPrefix))
    return std::string("exp_avg");
  return std::nullopt;
}

/// The name a buffer of `kind` holds (a block or segment of) parameter
/// `parameter` under: its HF name for parameters, "<moment>:<HF name>" for
/// optimizer states; nullopt for a buffer of no moment.
std::optional<std::string> stateName(const BufferDesc &buffer,
                                     const std::string &parameter,
                                     BufferKind kind) {
  if (kind != BufferKind::OptimizerState)
    return parameter;
  std::optional<std::string> moment = momentOf(buffer);
  if (!moment)
    return std::nullopt;
  return *moment + ":" + parameter;
}

/// Writes every tensor of `parameters` (whole values from `valuesOf`) into
/// the executors' buffers of `kind`, named as stateName names them (the
/// parameters, or the optimizer states' moments): each buffer naming it
/// gets its block (the holders, and where segments hold it the buffers
/// naming it too, with the values an all-gather of the segments would
/// leave there); each buffer with segments is written once, whole, when
/// the last of its tensors is known: each segment its range of its
/// tensor's block, zero elsewhere (the padding). Writing the parameters
/// then zeroes the optimizer states.
Status writeParameters(
    const std::vector<Executor *> &executors,
    const std::vector<ExpectedTensor> &parameters,
    const std::function<StatusOr<std::vector<float>>(const ExpectedTensor &)>
        &valuesOf,
    BufferKind kind = BufferKind::Parameter) {
  struct Staged {
    Executor *executor;
    size_t buffer;
    std::vector<float> values;
    size_t pending;
  };
  std::vector<Staged> staged;
  std::map<std::string, std::vector<std::pair<size_t, const SegmentDesc *>>>
      segmentsOf; // parameter -> (staged index, segment)
  std::map<std::string, std::vector<std::pair<Executor *, size_t>>> namedBy;
  for (Executor *executor : executors) {
    const RankPlan &rank = executor->rankPlan();
    for (size_t i = 0; i < rank.buffers.size(); ++i) {
      const BufferDesc &buffer = rank.buffers[i];
      if (buffer.kind != kind)
        continue;
      if (!buffer.parameter.empty())
        if (std::optional<std::string> name =
                stateName(buffer, buffer.parameter, kind))
          namedBy[*name].push_back({executor, i});
      if (buffer.segments.empty() || !stateName(buffer, "", kind))
        continue;
      staged.push_back(Staged{executor, i,
                              std::vector<float>(size_t(buffer.numElements())),
                              buffer.segments.size()});
      for (const SegmentDesc &segment : buffer.segments)
        segmentsOf[*stateName(buffer, segment.parameter, kind)].push_back(
            {staged.size() - 1, &segment});
    }
  }

  // The values of a chunk of parameters are made in parallel, a thread
  // each (a tensor's values depend on it alone: LLaMA-2-7B's 6.7 billion
  // initial values take minutes on one core), then written in order.
  const size_t threads =
      std::max<size_t>(1, std::min<size_t>(16, std::thread::hardware_concurrency()));
  std::vector<std::optional<StatusOr<std::vector<float>>>> made;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const ExpectedTensor &parameter = parameters[i];
    if (i % threads == 0) {
      const size_t count = std::min(threads, parameters.size() - i);
      made.assign(count, std::nullopt);
      std::vector<std::thread> pool;
      for (size_t j = 1; j < count; ++j)
        startOrRun(pool, [&, j] { made[j] = valuesOf(parameters[i + j]); });
      made[0] = valuesOf(parameters[i]);
      for (std::thread &thread : pool)
        thread.join();
    }
    StatusOr<std::vector<float>> &values = *made[i % threads];
    if (!values)
      return values.takeStatus();
    for (auto [executor, index] : namedBy[parameter.name]) {
      const BufferDesc &buffer = executor->buffer(index);
      BlockLayout layout{buffer.tensorShape(), buffer.blockOffset(),
                         buffer.shape};
      if (layout.isWhole()) {
        MLT_RETURN_IF_ERROR(executor->writeFloats(index, values->data(),
                                                  int64_t(values->size())));
        continue;
      }
      std::vector<float> block = extractBlock(*values, layout);
      MLT_RETURN_IF_ERROR(
          executor->writeFloats(index, block.data(), int64_t(block.size())));
    }
    std::map<std::vector<int64_t>, std::vector<float>> blocks; // by offset
    for (auto [which, segment] : segmentsOf[parameter.name]) {
      Staged &target = staged[which];
      const BlockLayout layout = segmentLayout(*segment, parameter.shape);
      const std::vector<float> *block = &*values;
      if (!layout.isWhole()) {
        auto [it, inserted] = blocks.try_emplace(layout.offset);
        if (inserted)
          it->second = extractBlock(*values, layout);
        block = &it->second;
      }
      if (segment->begin + segment->count > int64_t(block->size()))
        return errorf("'", parameter.name, "' of shape ",
                      formatShape(parameter.shape), ": a segment of '",
                      target.executor->buffer(target.buffer).name,
                      "' holds elements [", segment->begin, ", ",
                      segment->begin + segment->count, ") of a block of ",
                      block->size());
      std::copy(block->begin() + segment->begin,
                block->begin() + segment->begin + segment->count,
                target.values.begin() + segment->offset);
      if (--target.pending == 0) {
        MLT_RETURN_IF_ERROR(target.executor->writeFloats(
            target.buffer, target.values.data(),
            int64_t(target.values.size())));
        target.values = std::vector<float>();
      }
    }
  }
  // parametersOf lists every parameter a segment holds, so every staged
  // buffer is written by now. Every rank refreshes its compute copies, also
  // one that holds no parameter: the refresh all-gathers the ranks' slices.
  if (kind != BufferKind::Parameter)
    return Status::ok();
  for (Executor *executor : executors) {
    executor->markParametersWritten();
    MLT_RETURN_IF_ERROR(executor->zeroBuffers(BufferKind::OptimizerState));
  }
  return Status::ok();
}

Status initialize(const std::vector<Executor *> &executors, uint64_t seed) {
  return writeParameters(
      executors, parametersOf(rankPlansOf(executors)),
      [&](const ExpectedTensor &parameter) -> StatusOr<std::vector<float>> {
        return initialParameterValues(parameter.name, parameter.shape, seed);
      });
}

/// `plan`: the whole plan, of which `executors` hold some ranks (one
/// process per GPU): the source must hold exactly its parameters, though
/// these ranks need only theirs (a pipeline stage's).
Status load(const std::vector<Executor *> &executors,
            const TensorSource &source, const Plan *plan = nullptr) {
  const std::vector<ExpectedTensor> expected =
      parametersOf(rankPlansOf(executors));
  MLT_RETURN_IF_ERROR(checkTensors(
      source.tensors(), plan ? planParameters(*plan) : expected));
  return writeParameters(
      executors, expected,
      [&](const ExpectedTensor &parameter) -> StatusOr<std::vector<float>> {
        return source.values(parameter.name);
      });
}

/// The optimizer states of `parameters`, named as stateName names them
/// ("exp_avg:<HF name>", "exp_avg_sq:<HF name>"), with their whole shapes.
std::vector<ExpectedTensor>
optimizerStatesOf(const std::vector<ExpectedTensor> &parameters) {
  std::vector<ExpectedTensor> states;
  for (const char *moment : {"exp_avg", "exp_avg_sq"})
    for (const ExpectedTensor &parameter : parameters)
      states.push_back(
          {std::string(moment) + ":" + parameter.name, parameter.shape});
  return states;
}

Status loadStates(const std::vector<Executor *> &executors,
                  const TensorSource &source, const Plan *plan = nullptr) {
  const std::vector<ExpectedTensor> expected =
      optimizerStatesOf(parametersOf(rankPlansOf(executors)));
  // With a plan, the whole plan's states (these ranks need only theirs).
  MLT_RETURN_IF_ERROR(checkTensors(
      source.tensors(),
      plan ? optimizerStatesOf(planParameters(*plan)) : expected));
  return writeParameters(
      executors, expected,
      [&](const ExpectedTensor &state) -> StatusOr<std::vector<float>> {
        return source.values(state.name);
      },
      BufferKind::OptimizerState);
}

StatusOr<TensorMap> assemble(const std::vector<Executor *> &executors,
                             BufferKind kind) {
  StatusOr<std::vector<TensorPieces>> tensors =
      distinctPiecesOf(rankPlansOf(executors), kind);
  if (!tensors)
    return tensors.takeStatus();
  std::map<uint32_t, Executor *> byRank;
  for (Executor *executor : executors)
    byRank[executor->rankPlan().rank] = executor;
  BufferReads reads;
  for (const TensorPieces &tensor : *tensors)
    for (const Piece &piece : tensor.pieces)
      reads.expect(piece);

  TensorMap result;
  for (const TensorPieces &tensor : *tensors) {
    const Piece &first = tensor.pieces.front();
    if (tensor.pieces.size() == 1 && !first.isSegment() &&
        first.layout.isWhole()) {
      // The one-rank case, without a copy.
      StatusOr<std::vector<float>> values =
          reads.take(*byRank.at(first.rank), first.buffer, first);
      if (!values)
        return values.takeStatus();
      result[tensor.name] =
          Tensor::fromFloats(DType::F32, tensor.shape, *values);
      continue;
    }
    Assembly whole(tensor.shape);
    for (const Piece &piece : tensor.pieces) {
      StatusOr<std::vector<float>> values =
          reads.take(*byRank.at(piece.rank), piece.buffer, piece);
      if (!values)
        return values.takeStatus();
      whole.place(piece, values->data());
    }
    result[tensor.name] =
        Tensor::fromFloats(DType::F32, tensor.shape, whole.finish());
  }
  return result;
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

std::vector<ExpectedTensor> mlt::rt::TensorMapSource::tensors() const {
  std::vector<ExpectedTensor> present;
  for (const auto &[name, tensor] : tensors_)
    present.push_back({name, tensor.shape});
  return present;
}

StatusOr<std::vector<float>>
mlt::rt::TensorMapSource::values(const std::string &name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end())
    return errorf("no tensor '", name, "'");
  return toFloat32(name, found->second);
}

Status mlt::rt::loadParameters(Executor &executor, const TensorMap &tensors) {
  return load({&executor}, TensorMapSource(tensors));
}

Status mlt::rt::loadParameters(RankGroup &ranks, const TensorMap &tensors) {
  return load(executorsOf(ranks), TensorMapSource(tensors));
}

Status mlt::rt::loadParameters(RankGroup &local, const Plan &plan,
                               const TensorMap &tensors) {
  return load(executorsOf(local), TensorMapSource(tensors), &plan);
}

Status mlt::rt::loadParameters(RankGroup &ranks, const TensorSource &source) {
  return load(executorsOf(ranks), source);
}

Status mlt::rt::loadParameters(RankGroup &local, const Plan &plan,
                               const TensorSource &source) {
  return load(executorsOf(local), source, &plan);
}

namespace {

/// The buffers of `ranks` by name.
std::map<std::string, const BufferDesc *>
buffersByName(const std::vector<const RankPlan *> &ranks) {
  std::map<std::string, const BufferDesc *> buffers;
  for (const RankPlan *rank : ranks)
    for (const BufferDesc &buffer : rank->buffers)
      buffers.emplace(buffer.name, &buffer);
  return buffers;
}

/// The moment and HF name ("exp_avg:<name>") of an optimizer state that
/// piecesOf names by buffer ("<slice>[<parameter>]" for a slice's
/// segments): "exp_avg:<name>" buffers keep theirs, the segments of a slice
/// "exp_avg_shard.3[<name>]" take their moment's.
StatusOr<std::string>
momentTensorName(const std::string &name,
                 const std::map<std::string, const BufferDesc *> &buffers) {
  if (size_t open = name.find('[');
      open != std::string::npos && name.back() == ']') {
    const std::string buffer = name.substr(0, open);
    const std::string parameter = name.substr(open + 1, name.size() - open - 2);
    std::optional<std::string> state =
        buffers.count(buffer) ? stateName(*buffers.at(buffer), parameter,
                                          BufferKind::OptimizerState)
                              : std::nullopt;
    if (!state)
      return errorf("optimizer state '", name, "': not a moment of AdamW");
    return *state;
  }
  if (!buffers.count(name) || !momentOf(*buffers.at(name)))
    return errorf("optimizer state '", name, "': not a moment of AdamW");
  return name;
}

/// Assembled optimizer states (by buffer name) by moment and HF name.
/// `ranks`: the plans whose buffers name them.
StatusOr<TensorMap>
statesByParameter(TensorMap assembled,
                  const std::vector<const RankPlan *> &ranks) {
  const std::map<std::string, const BufferDesc *> buffers =
      buffersByName(ranks);
  TensorMap states;
  for (auto &[name, tensor] : assembled) {
    StatusOr<std::string> key = momentTensorName(name, buffers);
    if (!key)
      return key.takeStatus();
    if (!states.emplace(*key, std::move(tensor)).second)
      return errorf("optimizer state '", *key, "' is held twice");
  }
  return states;
}

std::vector<const RankPlan *> rankPlansOf(const Plan &plan) {
  std::vector<const RankPlan *> ranks;
  for (const RankPlan &rank : plan.ranks)
    ranks.push_back(&rank);
  return ranks;
}

} // namespace

StatusOr<TensorMap> mlt::rt::optimizerStateTensors(RankGroup &ranks) {
  const std::vector<Executor *> executors = executorsOf(ranks);
  StatusOr<TensorMap> assembled =
      assemble(executors, BufferKind::OptimizerState);
  if (!assembled)
    return assembled;
  return statesByParameter(std::move(*assembled), rankPlansOf(executors));
}

StatusOr<TensorMap>
mlt::rt::gatherOptimizerStateTensors(RankGroup &local, const Plan &plan,
                                     RankTransport &transport) {
  StatusOr<TensorMap> assembled = gatherParameterTensors(
      local, plan, transport, BufferKind::OptimizerState);
  if (!assembled)
    return assembled;
  return statesByParameter(std::move(*assembled), rankPlansOf(plan));
}

Status mlt::rt::loadOptimizerState(RankGroup &ranks,
                                   const TensorMap &tensors) {
  return loadStates(executorsOf(ranks), TensorMapSource(tensors));
}

Status mlt::rt::loadOptimizerState(RankGroup &local, const Plan &plan,
                                   const TensorMap &tensors) {
  return loadStates(executorsOf(local), TensorMapSource(tensors), &plan);
}

Status mlt::rt::loadOptimizerState(RankGroup &ranks,
                                   const TensorSource &source) {
  return loadStates(executorsOf(ranks), source);
}

Status mlt::rt::loadOptimizerState(RankGroup &local, const Plan &plan,
                                   const TensorSource &source) {
  return loadStates(executorsOf(local), source, &plan);
}

StatusOr<TensorMap> mlt::rt::parameterTensors(Executor &executor,
                                              BufferKind kind) {
  return assemble({&executor}, kind);
}

StatusOr<TensorMap> mlt::rt::parameterTensors(RankGroup &ranks,
                                              BufferKind kind) {
  return assemble(executorsOf(ranks), kind);
}

StatusOr<TensorMap> mlt::rt::gatherParameterTensors(RankGroup &local,
                                                    const Plan &plan,
                                                    RankTransport &transport,
                                                    BufferKind kind) {
  // Every process derives the same pieces from the whole plan (and fails
  // alike, before any transfer, where they do not cover a tensor).
  std::vector<const RankPlan *> ranks;
  for (const RankPlan &rank : plan.ranks)
    ranks.push_back(&rank);
  StatusOr<std::vector<TensorPieces>> tensors = distinctPiecesOf(ranks, kind);
  if (!tensors)
    return tensors.takeStatus();

  // The executors of this process's ranks, by plan rank.
  std::map<uint32_t, Executor *> executors;
  for (uint32_t i = 0; i < local.size(); ++i)
    executors[local.executor(i).rankPlan().rank] = &local.executor(i);
  const bool isRoot = executors.count(0) != 0;
  BufferReads reads;
  for (const TensorPieces &tensor : *tensors)
    for (const Piece &piece : tensor.pieces)
      if (executors.count(piece.rank))
        reads.expect(piece);

  TensorMap result;
  for (const TensorPieces &tensor : *tensors) {
    std::optional<Assembly> whole;
    if (isRoot)
      whole.emplace(tensor.shape);
    for (const Piece &piece : tensor.pieces) {
      const bool holds = executors.count(piece.rank) != 0;
      if (!holds && !isRoot)
        continue; // between two other processes
      std::vector<float> values;
      if (holds) {
        Executor &executor = *executors.at(piece.rank);
        // The executor's rank is the plan's, but find the buffer by name
        // all the same: `plan` is the caller's.
        StatusOr<size_t> buffer = executor.findBuffer(piece.desc->name);
        if (!buffer)
          return buffer.takeStatus();
        StatusOr<std::vector<float>> read =
            reads.take(executor, *buffer, piece);
        if (!read)
          return read.takeStatus();
        values = std::move(*read);
        if (!isRoot) {
          Status sent =
              transport.send(0, values.data(), values.size() * sizeof(float));
          if (!sent)
            return std::move(sent).withContext("sending '" + tensor.name +
                                               "' to rank 0");
          continue;
        }
      } else {
        values.resize(size_t(piece.count));
        Status received = transport.receive(int(piece.rank), values.data(),
                                            values.size() * sizeof(float));
        if (!received)
          return std::move(received).withContext(
              "receiving '" + tensor.name + "' from rank " +
              std::to_string(piece.rank));
      }
      whole->place(piece, values.data());
    }
    if (isRoot)
      result[tensor.name] =
          Tensor::fromFloats(DType::F32, tensor.shape, whole->finish());
  }
  return result;
}

StatusOr<std::vector<SavedPiece>> mlt::rt::checkpointPieces(const Plan &plan) {
  const std::vector<const RankPlan *> ranks = rankPlansOf(plan);
  const std::map<std::string, const BufferDesc *> buffers =
      buffersByName(ranks);
  std::vector<SavedPiece> saved;
  std::set<std::string> names;
  for (BufferKind kind : {BufferKind::Parameter, BufferKind::OptimizerState}) {
    StatusOr<std::vector<TensorPieces>> tensors = distinctPiecesOf(ranks, kind);
    if (!tensors)
      return tensors.takeStatus();
    for (const TensorPieces &tensor : *tensors) {
      std::string name = tensor.name;
      if (kind == BufferKind::OptimizerState) {
        StatusOr<std::string> moment = momentTensorName(name, buffers);
        if (!moment)
          return moment.takeStatus();
        name = std::move(*moment);
      }
      if (!names.insert(name).second)
        return errorf("'", name, "' is held twice");
      for (const Piece &piece : tensor.pieces) {
        SavedPiece out;
        out.tensor = name;
        out.layout = piece.layout;
        out.begin = piece.begin;
        out.count = piece.count;
        out.isRange = piece.isSegment() &&
                      !(piece.begin == 0 &&
                        piece.count == elementsOf(piece.layout.shape));
        out.rank = piece.rank;
        out.buffer = piece.desc->name;
        out.bufferOffset = piece.offset;
        saved.push_back(std::move(out));
      }
    }
  }
  std::stable_sort(saved.begin(), saved.end(),
                   [](const SavedPiece &a, const SavedPiece &b) {
                     return a.rank < b.rank;
                   });
  return saved;
}

