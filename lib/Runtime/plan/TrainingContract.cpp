//===- TrainingContract.cpp - what the training loop needs of a plan ------===//
//
// Part of mlt. verifyTrainingContract (Plan.h): per rank, the step covers
// every micro-batch and the buffers the runtime writes and reads are there
// with their kinds, types and shapes (PlanFormat.h's contract); across ranks,
// every parameter has one shape, type and weight decay, and its elements are
// held exactly: by the blocks of the buffers naming it, or where segments of
// parameter buffers hold it (a partitioned optimizer's slices), by those
// segments, replicas counted once.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/plan/Plan.h"
#include "mlt/Runtime/plan/PlanFormat.h"

#include "VerifierSupport.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::verifier;

namespace {

/// For each parameter held by segments of parameter buffers (on any
/// rank), those segments.
using SegmentHolders = std::map<std::string, std::vector<const SegmentDesc *>>;

/// A compute copy is its parameter narrowed to bf16 or f16.
Status verifyCopyType(const BufferDesc &copy, ElementType parameterType) {
  if (parameterType == ElementType::F32 &&
      (copy.dtype == ElementType::BF16 || copy.dtype == ElementType::F16))
    return Status::ok();
  return errorf("parameter_copy buffer '", copy.name, "' is ",
                elementTypeName(copy.dtype), " of an ",
                elementTypeName(parameterType),
                " parameter; expected bf16 or f16 of an f32 parameter");
}

/// A gradient, state or compute copy naming a parameter that segments hold
/// (no parameter buffer names it on this rank, as in a mixed-precision plan
/// whose f32 master weights exist only as each rank's slices): it holds
/// the block that some segment of the parameter is a range of (a buffer
/// that is no block: a segment of the whole tensor), and a compute copy is
/// of the segments' type, f32.
Status verifyAgainstSegments(const BufferDesc &buffer,
                             const std::vector<const SegmentDesc *> &held,
                             const std::map<std::string, ElementType> &dtype) {
  const std::vector<int64_t> offset = buffer.blockOffset();
  for (const SegmentDesc *segment : held) {
    const bool same =
        hasBlock(*segment)
            ? segment->fullShape == buffer.tensorShape() &&
                  segment->sliceOffset == offset &&
                  segment->blockShape == buffer.shape
            : buffer.shape == buffer.tensorShape() &&
                  std::all_of(offset.begin(), offset.end(),
                              [](int64_t o) { return o == 0; });
    if (same) {
      if (buffer.kind == BufferKind::ParameterCopy)
        return verifyCopyType(buffer, dtype.at(buffer.parameter));
      return Status::ok();
    }
  }
  return errorf(bufferKindName(buffer.kind), " buffer '", buffer.name,
                "' holds the block ", formatBlock(buffer),
                ", but the segments holding its parameter are of ",
                formatSegmentBlock(*held.front()),
                held.size() > 1 ? " (and others)" : "");
}

Status verifyRankContract(const ModelInfo &model, const RankPlan &rank,
                          const SegmentHolders &segmentHeld,
                          const std::map<std::string, ElementType>
                              &segmentDtype,
                          const std::set<std::string> &segmentedNames) {
  // A step that runs every micro-batch (the calls' micro-batches cover
  // 0..microbatches-1, none beyond).
  if (rank.step.empty())
    return errorf("the plan has no step (a plan of format version ",
                  kPlanFormatVersion, " lists each rank's calls)");
  std::vector<bool> covered(size_t(model.microbatches), false);
  for (size_t c = 0; c < rank.step.size(); ++c) {
    const int32_t mb = rank.step[c].microbatch;
    if (mb >= model.microbatches)
      return errorf("step call ", c, " runs micro-batch ", mb,
                    ", but a step has ", model.microbatches);
    if (mb >= 0)
      covered[size_t(mb)] = true;
  }
  for (size_t mb = 0; mb < covered.size(); ++mb)
    if (!covered[mb])
      return errorf("the step runs no call of micro-batch ", mb, " (of ",
                    model.microbatches, ")");

  // `dtype`, or also `altDtype` when given.
  auto require = [&](const char *name, BufferKind kind, ElementType dtype,
                     const std::vector<int64_t> *shape,
                     std::optional<ElementType> altDtype =
                         std::nullopt) -> Status {
    std::optional<size_t> index = rank.findBuffer(name);
    if (!index)
      return errorf("the plan has no ", bufferKindName(kind), " buffer '", name,
                    "'");
    const BufferDesc &buffer = rank.buffers[*index];
    if (buffer.kind != kind)
      return errorf("buffer '", name, "' is a ", bufferKindName(buffer.kind),
                    " buffer, expected ", bufferKindName(kind));
    if (buffer.dtype != dtype && buffer.dtype != altDtype)
      return errorf("buffer '", name, "' is ", elementTypeName(buffer.dtype),
                    ", expected ", elementTypeName(dtype),
                    altDtype ? std::string(" or ") + elementTypeName(*altDtype)
                             : std::string());
    // tokens and labels may be blocks of the global micro-batch.
    if (shape ? buffer.tensorShape() != *shape : buffer.numElements() != 1)
      return errorf("buffer '", name, "' has ",
                    buffer.isBlock() ? "full shape " : "shape ",
                    formatInts(buffer.tensorShape()), ", expected ",
                    shape ? formatInts(*shape) : "a scalar");
    return Status::ok();
  };
  const std::vector<int64_t> tokenShape = {model.microBatch, model.seqLen};
  MLT_RETURN_IF_ERROR(
      require(kTokensInput, BufferKind::Input, ElementType::I32, &tokenShape));
  MLT_RETURN_IF_ERROR(
      require(kLabelsInput, BufferKind::Input, ElementType::I32, &tokenShape));
  for (const char *name : {kHyperLR, kHyperBeta1, kHyperBeta2, kHyperEps,
                           kHyperWeightDecay, kHyperMaxGradNorm, kHyperStep})
    MLT_RETURN_IF_ERROR(
        require(name, BufferKind::Input, ElementType::F32, nullptr));
  // The loss has the type of mlt.cross_entropy's result: f32, or f64 for a
  // float64 model (gradient checks).
  // A pipeline stage before the last computes no loss: it sends its output
  // on (verifyTrainingContract requires the loss of some rank).
  const bool sends = std::any_of(
      rank.programs.begin(), rank.programs.end(),
      [](const ProgramDesc &program) {
        return std::any_of(program.instructions.begin(),
                           program.instructions.end(),
                           [](const InstructionDesc &inst) {
                             return inst.kernel == Kernel::Send;
                           });
      });
  if (!sends || rank.findBuffer(kLossOutput))
    MLT_RETURN_IF_ERROR(require(kLossOutput, BufferKind::Output,
                                ElementType::F32, nullptr, ElementType::F64));
  // A copy of the tokens, labels and loss per micro-batch; one of the rest.
  for (const BufferDesc &buffer : rank.buffers) {
    const bool perMicrobatch = buffer.name == kTokensInput ||
                               buffer.name == kLabelsInput ||
                               buffer.name == kLossOutput;
    if (perMicrobatch && buffer.copies != uint32_t(model.microbatches))
      return errorf("buffer '", buffer.name, "' has ", buffer.copies,
                    " copies, but a step has ", model.microbatches,
                    " micro-batches (a copy each)");
    if (!perMicrobatch && buffer.copies != 1 && buffer.kind != BufferKind::Temporary)
      return errorf("buffer '", buffer.name, "' has ", buffer.copies,
                    " copies; of the inputs and outputs only tokens, labels "
                    "and loss have a copy per micro-batch");
  }
  MLT_RETURN_IF_ERROR(
      require(kGradNormOutput, BufferKind::Output, ElementType::F32, nullptr));

  // Per-parameter buffers: each names its parameter, except the flat
  // buffers of a partitioned optimizer: those with segments, views, the
  // bases of views, and a rank's slice that is padding alone (a buffer of
  // the same name has segments on another rank: the last ranks' slices of
  // a small bucket). Gradients, states and compute copies belong to a
  // parameter, of its shape and block.
  std::vector<bool> isBase(rank.buffers.size(), false);
  for (const BufferDesc &buffer : rank.buffers)
    if (buffer.viewOf >= 0 && size_t(buffer.viewOf) < rank.buffers.size())
      isBase[size_t(buffer.viewOf)] = true;
  auto isFlat = [&](size_t index) {
    const BufferDesc &buffer = rank.buffers[index];
    return !buffer.segments.empty() || buffer.viewOf != -1 || isBase[index] ||
           segmentedNames.count(buffer.name);
  };
  std::map<std::string, const BufferDesc *> parameters;
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &buffer = rank.buffers[i];
    if (buffer.kind != BufferKind::Parameter)
      continue;
    if (!isFloatElementType(buffer.dtype))
      return errorf("parameter buffer '", buffer.name, "' is ",
                    elementTypeName(buffer.dtype), ", expected a float type");
    if (buffer.parameter.empty()) {
      if (isFlat(i))
        continue;
      return errorf("parameter buffer '", buffer.name,
                    "' does not name its parameter");
    }
    if (!parameters.emplace(buffer.parameter, &buffer).second)
      return errorf("two parameter buffers hold '", buffer.parameter, "'");
  }
  for (size_t i = 0; i < rank.buffers.size(); ++i) {
    const BufferDesc &buffer = rank.buffers[i];
    if (buffer.kind != BufferKind::Gradient &&
        buffer.kind != BufferKind::OptimizerState &&
        buffer.kind != BufferKind::ParameterCopy)
      continue;
    if (buffer.parameter.empty()) {
      if (isFlat(i))
        continue;
      return errorf(bufferKindName(buffer.kind), " buffer '", buffer.name,
                    "' does not name its parameter");
    }
    auto it = parameters.find(buffer.parameter);
    if (it == parameters.end()) {
      auto held = segmentHeld.find(buffer.parameter);
      if (held == segmentHeld.end())
        return errorf(bufferKindName(buffer.kind), " buffer '", buffer.name,
                      "' names parameter '", buffer.parameter,
                      "', which has no parameter buffer on this rank and no "
                      "parameter segments");
      MLT_RETURN_IF_ERROR(
          verifyAgainstSegments(buffer, held->second, segmentDtype));
      continue;
    }
    const BufferDesc &parameter = *it->second;
    if (parameter.shape != buffer.shape)
      return errorf(bufferKindName(buffer.kind), " buffer '", buffer.name,
                    "' has shape ", formatInts(buffer.shape),
                    ", but its parameter has ", formatInts(parameter.shape));
    if (parameter.tensorShape() != buffer.tensorShape() ||
        parameter.blockOffset() != buffer.blockOffset())
      return errorf(bufferKindName(buffer.kind), " buffer '", buffer.name,
                    "' holds the block ", formatBlock(buffer),
                    ", but its parameter holds ", formatBlock(parameter));
    // A compute copy is the parameter narrowed to bf16 or f16.
    if (buffer.kind == BufferKind::ParameterCopy)
      MLT_RETURN_IF_ERROR(verifyCopyType(buffer, parameter.dtype));
  }
  return Status::ok();
}

/// One place a parameter is described: a buffer naming it, or segment
/// `segment` of a buffer (-1: none), on `rank`.
struct Source {
  uint32_t rank = 0;
  const BufferDesc *buffer = nullptr;
  int segment = -1;

  /// "on rank 1", or "in segment 0 of '@param_slice.0' on rank 1".
  std::string where() const {
    if (segment < 0)
      return "on rank " + std::to_string(rank);
    return "in segment " + std::to_string(segment) + " of '" + buffer->name +
           "' on rank " + std::to_string(rank);
  }
  const SegmentDesc &segmentDesc() const {
    return buffer->segments[size_t(segment)];
  }
};

/// Everything the plan says of one parameter.
struct ParameterFacts {
  /// The first source of its full shape, and that shape.
  std::optional<Source> shapeFrom;
  std::vector<int64_t> fullShape;
  /// The first parameter buffer (naming it, or with a segment of it): the
  /// dtype and decay every other must have.
  std::optional<Source> typeFrom;
  /// Parameter buffers naming it, and segments of it in parameter buffers:
  /// the segments hold it when there are any, else the buffers.
  std::vector<Source> named;
  std::vector<Source> segments;
};

/// A box [offset, offset + shape) of a tensor.
struct Box {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;

  int64_t elements() const {
    int64_t count = 1;
    for (int64_t dim : shape)
      count *= dim;
    return count;
  }
  bool overlaps(const Box &other) const {
    if (elements() == 0 || other.elements() == 0)
      return false;
    for (size_t d = 0; d < shape.size(); ++d)
      if (offset[d] >= other.offset[d] + other.shape[d] ||
          other.offset[d] >= offset[d] + shape[d])
        return false;
    return true;
  }
  /// "[0:6, 0:8] of [12, 8]".
  std::string str(const std::vector<int64_t> &fullShape) const {
    std::ostringstream os;
    os << '[';
    for (size_t d = 0; d < shape.size(); ++d)
      os << (d ? ", " : "") << offset[d] << ':' << offset[d] + shape[d];
    os << "] of " << formatInts(fullShape);
    return os.str();
  }
};

/// A parameter held by blocks of the buffers naming it: distinct blocks
/// (by offset; replicas on several ranks count once) disjoint, together
/// covering every element.
Status verifyBlockCoverage(const std::string &name,
                           const ParameterFacts &facts) {
  std::map<std::vector<int64_t>, Source> blocks; // by offset, lowest rank
  for (const Source &source : facts.named) {
    auto [block, inserted] =
        blocks.emplace(source.buffer->blockOffset(), source);
    if (!inserted && block->second.buffer->shape != source.buffer->shape)
      return errorf("parameter '", name, "' has the blocks ",
                    formatBlock(*block->second.buffer), " ",
                    block->second.where(), " and ", formatBlock(*source.buffer),
                    " ", source.where(),
                    ", which overlap without being the same block");
  }
  std::vector<Source> seen;
  int64_t covered = 0;
  for (const auto &entry : blocks) {
    const BufferDesc &block = *entry.second.buffer;
    const Box box{block.blockOffset(), block.shape};
    for (const Source &other : seen)
      if (box.overlaps(Box{other.buffer->blockOffset(), other.buffer->shape}))
        return errorf("parameter '", name, "' has the blocks ",
                      formatBlock(*other.buffer), " ", other.where(),
                      " and ", formatBlock(block), " ",
                      entry.second.where(),
                      ", which overlap without being the same block");
    seen.push_back(entry.second);
    covered += block.numElements();
  }
  // Disjoint blocks inside the tensor cover it iff their sizes add up.
  const Box whole{{}, facts.fullShape};
  if (covered != whole.elements())
    return errorf("parameter '", name, "' of shape ",
                  formatInts(facts.fullShape),
                  " is not covered by the ranks' blocks: they hold ", covered,
                  " of its ", whole.elements(),
                  " elements (some element is held by no rank)");
  return Status::ok();
}

/// A parameter held by segments: distinct blocks disjoint; in each block,
/// distinct ranges (replicas on several ranks count once) disjoint; all of
/// them together covering every element of the tensor.
Status verifySegmentCoverage(const std::string &name,
                             const ParameterFacts &facts) {
  if (!facts.shapeFrom)
    return errorf("parameter '", name, "' is held by segments of the whole "
                  "tensor (", facts.segments.front().where(),
                  "), but no buffer names it and no segment gives its shape");
  const std::vector<int64_t> &fullShape = facts.fullShape;
  const int64_t total = Box{{}, fullShape}.elements();
  struct Range {
    int64_t count;
    Source source;
  };
  struct Block {
    Box box;
    Source source;
    std::map<int64_t, Range> ranges; // by begin
  };
  std::map<std::vector<int64_t>, Block> blocks; // by offset
  int64_t covered = 0;
  for (const Source &source : facts.segments) {
    const SegmentDesc &segment = source.segmentDesc();
    const Box box = hasBlock(segment)
                        ? Box{segment.sliceOffset, segment.blockShape}
                        : Box{std::vector<int64_t>(fullShape.size(), 0),
                              fullShape};
    const int64_t begin = segment.begin, end = begin + segment.count;
    if (end > box.elements())
      return errorf("rank ", source.rank, ": buffer '", source.buffer->name,
                    "' segment ", source.segment, " ('", name,
                    "') holds elements [", begin, ", ", end, ") of ",
                    formatSegmentBlock(segment), ", which has ",
                    box.elements(), " elements");
    auto [found, inserted] =
        blocks.emplace(box.offset, Block{box, source, {}});
    Block &block = found->second;
    if (!inserted && block.box.shape != box.shape)
      return errorf("parameter '", name, "' has the blocks ",
                    block.box.str(fullShape), " ", block.source.where(),
                    " and ", box.str(fullShape), " ", source.where(),
                    ", which overlap without being the same block");
    if (inserted)
      for (const auto &other : blocks)
        if (&other.second != &block && other.second.box.overlaps(box))
          return errorf("parameter '", name, "' has the blocks ",
                        other.second.box.str(fullShape), " ",
                        other.second.source.where(), " and ",
                        box.str(fullShape), " ", source.where(),
                        ", which overlap without being the same block");
    // The range: a replica of one already seen, or disjoint from all.
    auto overlapError = [&](int64_t otherBegin, const Range &other) {
      return errorf("parameter '", name, "' has the ranges [", otherBegin,
                    ", ", otherBegin + other.count, ") ",
                    other.source.where(), " and [", begin, ", ", end, ") ",
                    source.where(), " of its block ", box.str(fullShape),
                    ", which overlap without being the same range");
    };
    auto next = block.ranges.lower_bound(begin);
    if (next != block.ranges.end() && next->first == begin) {
      if (next->second.count == segment.count)
        continue; // a replica
      return overlapError(next->first, next->second);
    }
    if (next != block.ranges.end() && next->first < end)
      return overlapError(next->first, next->second);
    if (next != block.ranges.begin()) {
      auto previous = std::prev(next);
      if (previous->first + previous->second.count > begin)
        return overlapError(previous->first, previous->second);
    }
    block.ranges.emplace(begin, Range{segment.count, source});
    covered += segment.count;
  }
  if (covered != total)
    return errorf("parameter '", name, "' of shape ", formatInts(fullShape),
                  " is not covered by the ranks' segments: they hold ",
                  covered, " of its ", total,
                  " elements (some element is held by no rank)");
  return Status::ok();
}

/// Across ranks, each parameter has one full shape (from every buffer
/// naming it and every segment with a block), one dtype and one decay
/// (from the parameter buffers naming it and those with segments of it);
/// every segment of a gradient or optimizer state is of a parameter; and
/// the holders of each parameter (its segments where it has any, else the
/// buffers naming it) cover it, as verifySegmentCoverage and
/// verifyBlockCoverage say (so that assembling it, lowest rank first, is
/// well defined).
Status verifyParameterCoverage(const Plan &plan) {
  std::map<std::string, ParameterFacts> parameters;
  std::vector<std::string> order;
  auto factsOf = [&](const std::string &name) -> ParameterFacts & {
    auto [it, inserted] = parameters.try_emplace(name);
    if (inserted)
      order.push_back(name);
    return it->second;
  };
  auto differ = [](const std::string &name, const char *what,
                   const Source &first, const std::string &there,
                   const Source &source, const std::string &here) {
    return errorf("parameter '", name, "' has ", what, " ", there, " ",
                  first.where(), " but ", here, " ", source.where());
  };
  auto shapeSource = [&](const std::string &name, ParameterFacts &facts,
                         const std::vector<int64_t> &shape,
                         const Source &source) -> Status {
    if (!facts.shapeFrom) {
      facts.shapeFrom = source;
      facts.fullShape = shape;
    } else if (facts.fullShape != shape) {
      return differ(name, "full shape", *facts.shapeFrom,
                    formatInts(facts.fullShape), source, formatInts(shape));
    }
    return Status::ok();
  };
  auto typeSource = [&](const std::string &name, ParameterFacts &facts,
                        const Source &source) -> Status {
    if (!facts.typeFrom) {
      facts.typeFrom = source;
      return Status::ok();
    }
    const BufferDesc &first = *facts.typeFrom->buffer;
    const BufferDesc &buffer = *source.buffer;
    if (first.dtype != buffer.dtype)
      return differ(name, "dtype", *facts.typeFrom,
                    elementTypeName(first.dtype), source,
                    elementTypeName(buffer.dtype));
    if (first.decay != buffer.decay)
      return differ(name, "decay", *facts.typeFrom, first.decay ? "on" : "off",
                    source, buffer.decay ? "on" : "off");
    return Status::ok();
  };

  std::vector<Source> stateSegments; // of gradients and optimizer states
  for (const RankPlan &rank : plan.ranks) {
    for (const BufferDesc &buffer : rank.buffers) {
      if (isPerParameter(buffer.kind) && !buffer.parameter.empty()) {
        const Source source{rank.rank, &buffer, -1};
        ParameterFacts &facts = factsOf(buffer.parameter);
        MLT_RETURN_IF_ERROR(shapeSource(buffer.parameter, facts,
                                        buffer.tensorShape(), source));
        if (buffer.kind == BufferKind::Parameter) {
          MLT_RETURN_IF_ERROR(typeSource(buffer.parameter, facts, source));
          facts.named.push_back(source);
        }
      }
      for (size_t i = 0; i < buffer.segments.size(); ++i) {
        const SegmentDesc &segment = buffer.segments[i];
        const Source source{rank.rank, &buffer, int(i)};
        ParameterFacts &facts = factsOf(segment.parameter);
        if (hasBlock(segment))
          MLT_RETURN_IF_ERROR(shapeSource(segment.parameter, facts,
                                          segment.fullShape, source));
        if (buffer.kind == BufferKind::Parameter) {
          MLT_RETURN_IF_ERROR(typeSource(segment.parameter, facts, source));
          facts.segments.push_back(source);
        } else {
          stateSegments.push_back(source);
        }
      }
    }
  }
  for (const Source &source : stateSegments) {
    const ParameterFacts &facts =
        parameters.at(source.segmentDesc().parameter);
    if (facts.named.empty() && facts.segments.empty())
      return errorf("rank ", source.rank, ": ",
                    bufferKindName(source.buffer->kind), " buffer '",
                    source.buffer->name, "' segment ", source.segment,
                    " names parameter '", source.segmentDesc().parameter,
                    "', which has no parameter buffer and no parameter "
                    "segments");
  }
  for (const std::string &name : order) {
    const ParameterFacts &facts = parameters.at(name);
    if (!facts.segments.empty())
      MLT_RETURN_IF_ERROR(verifySegmentCoverage(name, facts));
    else if (!facts.named.empty())
      MLT_RETURN_IF_ERROR(verifyBlockCoverage(name, facts));
  }
  return Status::ok();
}

} // namespace

Status mlt::rt::verifyTrainingContract(const Plan &plan) {
  const ModelInfo &model = plan.model;
  auto positive = [](const char *name, int64_t value) -> Status {
    if (value > 0)
      return Status::ok();
    return errorf("the plan's model info has ", name, " ", value,
                  " (must be positive)");
  };
  MLT_RETURN_IF_ERROR(positive("vocab_size", model.vocabSize));
  MLT_RETURN_IF_ERROR(
      positive("max_position_embeddings", model.maxPositionEmbeddings));
  MLT_RETURN_IF_ERROR(positive("micro_batch", model.microBatch));
  MLT_RETURN_IF_ERROR(positive("seq_len", model.seqLen));
  MLT_RETURN_IF_ERROR(positive("microbatches", model.microbatches));
  if (!checkedMul(model.microBatch, model.microbatches))
    return errorf("the plan's model info has a global batch that overflows");
  if (std::none_of(plan.ranks.begin(), plan.ranks.end(),
                   [](const RankPlan &rank) {
                     return rank.findBuffer(kLossOutput).has_value();
                   }))
    return errorf("no rank of the plan computes the loss (an output buffer '",
                  kLossOutput, "')");
  // Parameters held by segments, which may have no parameter buffer
  // naming them on a rank that has their gradients or compute copies.
  // And the names of the buffers with segments on some rank.
  SegmentHolders segmentHeld;
  std::map<std::string, ElementType> segmentDtype;
  std::set<std::string> segmentedNames;
  for (const RankPlan &rank : plan.ranks)
    for (const BufferDesc &buffer : rank.buffers) {
      if (!buffer.segments.empty())
        segmentedNames.insert(buffer.name);
      if (buffer.kind == BufferKind::Parameter)
        for (const SegmentDesc &segment : buffer.segments) {
          segmentHeld[segment.parameter].push_back(&segment);
          segmentDtype.emplace(segment.parameter, buffer.dtype);
        }
    }
  for (const RankPlan &rank : plan.ranks) {
    Status status = verifyRankContract(model, rank, segmentHeld, segmentDtype,
                                       segmentedNames);
    if (!status)
      return plan.ranks.size() == 1 ? status
                                    : std::move(status).withContext(
                                          "rank " + std::to_string(rank.rank));
  }
  return verifyParameterCoverage(plan);
}


uint32_t mlt::rt::reportingRank(const Plan &plan) {
  for (const RankPlan &rank : plan.ranks)
    if (rank.findBuffer(kLossOutput))
      return rank.rank;
  return 0;
}
