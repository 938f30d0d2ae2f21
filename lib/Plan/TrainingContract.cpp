//===- TrainingContract.cpp - what the training loop needs of a plan ------===//
//
// Part of mlt. verifyTrainingContract (Plan.h): per rank, the step covers
// every micro-batch (and so does the evaluation step, if any, which writes
// no training state) and the buffers the runtime writes and reads are there
// with their kinds, types and shapes (PlanFormat.h's contract), and the
// optimizer's launches update what they say; across ranks, every parameter
// has one shape, type and weight decay, and its elements are held exactly:
// by the blocks of the buffers naming it, or where segments of parameter
// buffers hold it (a partitioned optimizer's slices), by those segments,
// replicas counted once; the layers' parameters are read alike (a launch
// redirected to another weight of its shape is named); the positions that
// rope and attention read are those of the tokens fed (SequenceCheck.cpp);
// and the plan's HF config.json describes the model the plan trains
// (ModelConfig.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/ModelConfig.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Plan/PlanFormat.h"

#include "VerifierSupport.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
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

/// What a per-parameter buffer holds, as ranges of parameters' blocks: a
/// buffer naming its parameter one range (the whole of its block), a flat
/// buffer its segments; adjacent ranges of one block merged, and a block
/// that is the whole tensor written as none, so that two buffers holding
/// the same elements in the same places compare equal however they say so.
std::vector<SegmentDesc> heldRanges(const BufferDesc &buffer) {
  std::vector<SegmentDesc> ranges;
  if (!buffer.parameter.empty()) {
    SegmentDesc whole;
    whole.parameter = buffer.parameter;
    if (buffer.isBlock()) {
      whole.fullShape = buffer.fullShape;
      whole.sliceOffset = buffer.sliceOffset;
      whole.blockShape = buffer.shape;
    }
    whole.count = buffer.numElements();
    ranges.push_back(std::move(whole));
  } else {
    ranges = buffer.segments;
  }
  std::vector<SegmentDesc> merged;
  for (SegmentDesc &range : ranges) {
    if (hasBlock(range) && range.blockShape == range.fullShape &&
        std::all_of(range.sliceOffset.begin(), range.sliceOffset.end(),
                    [](int64_t o) { return o == 0; })) {
      range.fullShape.clear();
      range.sliceOffset.clear();
      range.blockShape.clear();
    }
    if (!merged.empty()) {
      SegmentDesc &last = merged.back();
      if (last.parameter == range.parameter &&
          last.fullShape == range.fullShape &&
          last.sliceOffset == range.sliceOffset &&
          last.blockShape == range.blockShape &&
          last.begin + last.count == range.begin &&
          last.offset + last.count == range.offset) {
        last.count += range.count;
        continue;
      }
    }
    merged.push_back(std::move(range));
  }
  return merged;
}

/// Whether two buffers hold the same elements of the same parameters in
/// the same places (heldRanges).
bool holdSame(const BufferDesc &a, const BufferDesc &b) {
  const std::vector<SegmentDesc> x = heldRanges(a), y = heldRanges(b);
  if (x.size() != y.size())
    return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i].parameter != y[i].parameter || x[i].fullShape != y[i].fullShape ||
        x[i].sliceOffset != y[i].sliceOffset ||
        x[i].blockShape != y[i].blockShape || x[i].begin != y[i].begin ||
        x[i].count != y[i].count || x[i].offset != y[i].offset)
      return false;
  return true;
}

/// Whether `copy`, a compute copy that names no parameter and has no
/// segments (a partitioned optimizer's slice of a bf16 bucket, which the
/// launch fills from `param`'s segments), lies where those segments' copies
/// do: a view of the bucket whose per-parameter views (the copies the
/// forward pass reads) put each segment's first element at the segment's
/// place in the slice.
bool copiesSegments(const RankPlan &rank, const BufferDesc &copy,
                    const BufferDesc &param) {
  if (copy.viewOf < 0)
    return param.segments.empty();
  const uint64_t element = elementSize(copy.dtype);
  for (const SegmentDesc &segment : param.segments) {
    const bool found = std::any_of(
        rank.buffers.begin(), rank.buffers.end(), [&](const BufferDesc &b) {
          return b.kind == BufferKind::ParameterCopy &&
                 b.parameter == segment.parameter && b.viewOf == copy.viewOf &&
                 b.offset + uint64_t(segment.begin) * element ==
                     copy.offset + uint64_t(segment.offset) * element;
        });
    if (!found)
      return false;
  }
  return true;
}

/// "parameter 'w'", or "segments of 'w' and 2 more", for messages.
std::string holding(const BufferDesc &buffer) {
  if (!buffer.parameter.empty())
    return "parameter '" + buffer.parameter + "'";
  if (buffer.segments.empty())
    return "no parameter";
  std::string text = "segments of '" + buffer.segments.front().parameter + "'";
  if (buffer.segments.size() > 1)
    text += " and " + std::to_string(buffer.segments.size() - 1) + " more";
  return text;
}

/// The optimizer's launches (adamw, adamw_multi) update what they say they
/// do: tensor t's gradient input is a gradient buffer, its outputs a
/// parameter buffer, two distinct optimizer-state buffers (m, v) and, if
/// any, a compute copy, all holding one parameter's data (holdSame; a flat
/// compute copy at its segments' places, copiesSegments) with the
/// parameter buffer's weight decay; the six hyper-parameter inputs are the
/// plan's hyper.* inputs in their order; and no parameter buffer is updated
/// twice in a program. A launch whose output was redirected (to another
/// parameter's moments, to a gradient) passes every structural check and
/// trains on with wrong numbers: this names it.
Status verifyOptimizerLaunches(const RankPlan &rank) {
  static constexpr const char *kHyperInputs[] = {
      kHyperLR, kHyperBeta1, kHyperBeta2, kHyperEps, kHyperWeightDecay,
      kHyperStep};
  for (const ProgramDesc &program : rank.programs) {
    std::set<uint32_t> updated;
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const InstructionDesc &inst = program.instructions[i];
      if (inst.kernel != Kernel::AdamW && inst.kernel != Kernel::AdamWMulti)
        continue;
      auto fail = [&](auto &&...parts) {
        return errorf("program '", program.name, "' instruction ", i, " (",
                      kernelName(inst.kernel), ") ", parts...);
      };
      const size_t tensors = inst.inputs.size() - kAdamWScalarInputs;
      const size_t outputsPerTensor = inst.outputs.size() / tensors;
      for (size_t h = 0; h < std::size(kHyperInputs); ++h) {
        const BufferDesc &input =
            rank.buffers[inst.inputs[tensors + 1 + h]];
        if (input.name != kHyperInputs[h] || input.kind != BufferKind::Input)
          return fail("reads '", input.name, "' as its ", kHyperInputs[h],
                      " (input ", tensors + 1 + h, ")");
      }
      auto decayOf = [&](size_t t) {
        return inst.ints[t * 2 + 1] != 0; // (n, decay) per tensor
      };
      for (size_t t = 0; t < tensors; ++t) {
        const BufferDesc &grad = rank.buffers[inst.inputs[t]];
        const uint32_t paramIndex = inst.outputs[t];
        const BufferDesc &param = rank.buffers[paramIndex];
        const BufferDesc &m = rank.buffers[inst.outputs[tensors + t]];
        const BufferDesc &v = rank.buffers[inst.outputs[2 * tensors + t]];
        struct Role {
          const BufferDesc &buffer;
          const char *role;
          BufferKind kind;
        };
        std::vector<Role> roles = {
            {grad, "gradient", BufferKind::Gradient},
            {param, "parameter", BufferKind::Parameter},
            {m, "first moment", BufferKind::OptimizerState},
            {v, "second moment", BufferKind::OptimizerState}};
        if (outputsPerTensor == 4)
          roles.push_back({rank.buffers[inst.outputs[3 * tensors + t]],
                           "compute copy", BufferKind::ParameterCopy});
        for (const Role &role : roles) {
          if (role.buffer.kind != role.kind)
            return fail("tensor ", t, ": its ", role.role, " '",
                        role.buffer.name, "' is a ",
                        bufferKindName(role.buffer.kind), " buffer, not a ",
                        bufferKindName(role.kind), " buffer");
          const bool flatCopy = role.kind == BufferKind::ParameterCopy &&
                                role.buffer.parameter.empty() &&
                                role.buffer.segments.empty();
          if (flatCopy ? !copiesSegments(rank, role.buffer, param)
                       : !holdSame(role.buffer, param))
            return fail("tensor ", t, ": its ", role.role, " '",
                        role.buffer.name, "' holds ", holding(role.buffer),
                        ", but its parameter '", param.name, "' holds ",
                        holding(param));
        }
        if (&m == &v)
          return fail("tensor ", t, ": '", m.name,
                      "' is both its moments");
        if (decayOf(t) != param.decay)
          return fail("tensor ", t, ": applies weight decay ",
                      decayOf(t) ? "on" : "off", ", but its parameter '",
                      param.name, "' has it ", param.decay ? "on" : "off");
        if (!updated.insert(paramIndex).second)
          return fail("updates parameter buffer '", param.name,
                      "', which an earlier launch of the program updates");
      }
    }
  }
  return Status::ok();
}

/// The evaluation step (where the rank has one): a call of every
/// micro-batch, forward items alone, and programs that leave the training
/// state as they find it: they write no gradient or optimizer state, and a
/// parameter or compute copy only by an all_gather (a partitioned
/// optimizer's gathers of its parameter buckets, which write the values
/// the buckets hold after the optimizer step).
Status verifyEvaluationStep(const ModelInfo &model, const RankPlan &rank) {
  const std::vector<CallDesc> &step = rank.evalStep;
  if (step.empty())
    return Status::ok();
  std::vector<bool> covered(size_t(model.microbatches), false);
  std::set<uint32_t> programs;
  for (size_t c = 0; c < step.size(); ++c) {
    const CallDesc &call = step[c];
    if (call.microbatch >= model.microbatches)
      return errorf("evaluation step call ", c, " runs micro-batch ",
                    call.microbatch, ", but a step has ", model.microbatches);
    if (call.microbatch >= 0)
      covered[size_t(call.microbatch)] = true;
    for (const WorkItem &item : call.work)
      if (item.kind != WorkKind::Forward)
        return errorf("evaluation step call ", c, " does ", item.str(),
                      ": an evaluation runs forward passes alone");
    if (!programs.insert(call.program).second)
      continue;
    const ProgramDesc &program = rank.programs[call.program];
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const InstructionDesc &inst = program.instructions[i];
      for (uint32_t output : inst.outputs) {
        const BufferDesc &buffer = rank.buffers[output];
        const bool state = buffer.kind == BufferKind::Gradient ||
                           buffer.kind == BufferKind::OptimizerState;
        const bool weights = buffer.kind == BufferKind::Parameter ||
                             buffer.kind == BufferKind::ParameterCopy;
        if (state || (weights && inst.kernel != Kernel::AllGather))
          return errorf("evaluation step call ", c, ": program '",
                        program.name, "' instruction ", i, " (",
                        kernelName(inst.kernel), ") writes ",
                        bufferKindName(buffer.kind), " buffer '", buffer.name,
                        "'; an evaluation must leave the training state as "
                        "it finds it");
      }
    }
  }
  for (size_t mb = 0; mb < covered.size(); ++mb)
    if (!covered[mb])
      return errorf("the evaluation step runs no call of micro-batch ", mb,
                    " (of ", model.microbatches, ")");
  return Status::ok();
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
  // (before anything is sized by the model info's count: a step needs a
  // call per micro-batch, so a count past the calls, which a damaged or
  // hostile plan may claim, is refused instead of allocated)
  if (uint64_t(model.microbatches) > rank.step.size())
    return errorf("the plan's model info has ", model.microbatches,
                  " micro-batches per step, but the step has ",
                  rank.step.size(),
                  " calls (each micro-batch needs one at least)");
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
Status verifyParameterCoverage(
    const Plan &plan, std::map<std::string, std::vector<int64_t>> &shapes) {
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
    if (facts.shapeFrom)
      shapes[name] = facts.fullShape;
  }
  return Status::ok();
}

/// Floats of a launch that the config fixes, compared as a model's text may
/// round them (an .mlir file printed with six digits): what differs by more
/// is another model.
bool closeTo(double value, double expected) {
  return std::fabs(value - expected) <= 1e-5 * std::fabs(expected);
}

/// The plan's config.json (when it has one) agrees with the plan: it is a
/// JSON object (parsePlanConfig's rules), its vocab_size and
/// max_position_embeddings are the model info's, and where it gives a
/// whole LLaMA, the plan's parameters (`shapes`: each one's full shape) are
/// exactly that LLaMA's, and its launches compute that LLaMA: causal
/// attention of its head_dim and 1/sqrt(head_dim) scale, rotary embeddings
/// of its rope_theta and rotary scaling, RMS norms of its rms_norm_eps. Checkpoints and
/// --save-hf write the config beside the weights, and nothing else tells
/// a reader what the weights are.
Status verifyModelConfig(
    const Plan &plan,
    const std::map<std::string, std::vector<int64_t>> &shapes) {
  const ModelInfo &model = plan.model;
  if (model.hfConfig.empty())
    return Status::ok();
  StatusOr<PlanConfig> parsed = parsePlanConfig(model.hfConfig);
  if (!parsed)
    return parsed.takeStatus().withContext("the plan's hf_config");
  const PlanConfig &config = *parsed;
  for (auto [name, given, info] :
       {std::tuple{"vocab_size", config.vocabSize, model.vocabSize},
        std::tuple{"max_position_embeddings", config.maxPositionEmbeddings,
                   model.maxPositionEmbeddings}})
    if (given && *given != info)
      return errorf("the plan's hf_config has ", name, " ", *given,
                    ", but its model info has ", info);
  if (!config.llama)
    return Status::ok();
  const LlamaShape &llama = *config.llama;

  std::map<std::string, std::vector<int64_t>> expected;
  for (auto &[name, shape] : llamaParameters(llama))
    expected.emplace(name, shape);
  for (const auto &[name, shape] : expected) {
    auto held = shapes.find(name);
    if (held == shapes.end())
      return errorf("the plan's hf_config describes parameter '", name,
                    "' of shape ", formatInts(shape),
                    ", which the plan does not hold");
    if (held->second != shape)
      return errorf("parameter '", name, "' has shape ",
                    formatInts(held->second), ", but the plan's hf_config "
                    "says ", formatInts(shape));
  }
  for (const auto &[name, shape] : shapes)
    if (!expected.count(name))
      return errorf("the plan holds parameter '", name, "' of shape ",
                    formatInts(shape), ", which its hf_config (a LLaMA of ",
                    llama.numLayers, " layers",
                    llama.tieWordEmbeddings ? ", tied embeddings" : "",
                    ") does not describe");

  const double scale = 1.0 / std::sqrt(double(llama.headDim));
  // attention's attributes (of attention_fwd, attention_bwd or
  // attention_bwd_rope) against the model's.
  auto checkAttention = [&](const auto &a, const auto &fail) -> Status {
    using A = typename std::decay_t<decltype(a)>::Attributes;
    if (a[A::causal] != 1)
      return fail("is not causal, but the plan's hf_config is a "
                  "LLaMA, a causal language model");
    if (a[A::head_dim] != llama.headDim)
      return fail("has head_dim ", a[A::head_dim],
                  ", but the plan's hf_config has ", llama.headDim);
    if (!closeTo(a[A::scale], scale))
      return fail("has scale ", a[A::scale],
                  ", but the plan's hf_config's head_dim ", llama.headDim,
                  " gives 1/sqrt(", llama.headDim, ") = ", scale);
    return Status::ok();
  };
  // rope's attributes (of rope or attention_bwd_rope) against the model's.
  auto checkRope = [&](const auto &a, const auto &fail) -> Status {
    using A = typename std::decay_t<decltype(a)>::Attributes;
    if (!closeTo(a[A::theta], llama.ropeTheta))
      return fail("has theta ", a[A::theta],
                  ", but the plan's hf_config has rope_theta ",
                  llama.ropeTheta);
    const RopeScaling scaling = ropeScaling(a);
    const RopeScaling &want = llama.ropeScaling;
    if (scaling.kind != want.kind ||
        scaling.originalMaxPositionEmbeddings !=
            want.originalMaxPositionEmbeddings ||
        (want.isScaled() &&
         (!closeTo(scaling.factor, want.factor) ||
          !closeTo(scaling.lowFreqFactor, want.lowFreqFactor) ||
          !closeTo(scaling.highFreqFactor, want.highFreqFactor))))
      return fail("scales its frequencies otherwise than the plan's "
                  "hf_config (",
                  want.isScaled() ? "llama3 rope scaling" : "none", ") says");
    return Status::ok();
  };
  for (const RankPlan &rank : plan.ranks)
    for (const ProgramDesc &program : rank.programs)
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        auto fail = [&](auto &&...parts) {
          return errorf("rank ", rank.rank, ": program '", program.name,
                        "' instruction ", i, " (", kernelName(inst.kernel),
                        ") ", parts...);
        };
        switch (inst.kernel) {
        case Kernel::AttentionFwd:
        case Kernel::AttentionBwd: {
          using A = attrs::AttentionFwd; // attention_bwd's are alike
          MLT_RETURN_IF_ERROR(checkAttention(KernelAttrs<A>(inst), fail));
          break;
        }
        case Kernel::AttentionBwdRope: {
          const KernelAttrs<attrs::AttentionBwdRope> a(inst);
          MLT_RETURN_IF_ERROR(checkAttention(a, fail));
          MLT_RETURN_IF_ERROR(checkRope(a, fail));
          break;
        }
        case Kernel::Rope: {
          const KernelAttrs<attrs::Rope> a(inst);
          if (a[attrs::Rope::head_dim] != llama.headDim)
            return fail("has head_dim ", a[attrs::Rope::head_dim],
                        ", but the plan's hf_config has ", llama.headDim);
          MLT_RETURN_IF_ERROR(checkRope(a, fail));
          break;
        }
        case Kernel::RMSNormFwd:
        case Kernel::RMSNormBwd:
        case Kernel::RMSNormBwdAdd: {
          using A = attrs::RMSNormFwd; // the backward's are alike
          const KernelAttrs<A> a(inst);
          if (!closeTo(a[A::eps], llama.rmsNormEps))
            return fail("has eps ", a[A::eps],
                        ", but the plan's hf_config has rms_norm_eps ",
                        llama.rmsNormEps);
          break;
        }
        default:
          break;
        }
      }
  return Status::ok();
}

/// "model.layers.{}.mlp.up_proj.weight": a parameter's role, its name
/// with its layer's number taken out; "" for one outside the layers.
std::string layerRole(const std::string &name, int64_t &layer) {
  static const std::string kLayers = "layers.";
  const size_t at = name.find(kLayers);
  if (at == std::string::npos)
    return "";
  size_t end = at + kLayers.size();
  while (end < name.size() && end - at < kLayers.size() + 9 &&
         name[end] >= '0' && name[end] <= '9')
    ++end;
  if (end == at + kLayers.size() || end == name.size() || name[end] != '.')
    return "";
  layer = std::stoll(name.substr(at + kLayers.size(), end - at - kLayers.size()));
  return name.substr(0, at + kLayers.size()) + "{}" + name.substr(end);
}

/// How `inst` reads its input `i`, up to fusion and precision, added to
/// `reads`: a product, plain, accumulating, with an addend or grouped, is
/// "matmul" with its transposes (the forward's x w^T from the backward's
/// dy w, which read one weight), its operand as a product's a or b; a
/// weight quantized for FP8 products is read by the products its layouts
/// feed (layout 0, w: the forward's; 1, w^T: the backward's; 2: both; its
/// amax goes with it); a norm's backward with or without an addend is
/// "rms_norm_bwd". Where a pipeline stage ends, where a layer's residual
/// meets the next, or where a recipe keeps a layer out of FP8, the compiler
/// launches differently; what is read, and what for, does not change.
void addReads(const InstructionDesc &inst, size_t i,
              std::set<std::pair<std::string, size_t>> &reads) {
  auto product = [&] {
    std::string name = "matmul";
    if (inst.ints.size() > 5)
      name += std::string(inst.ints[4] ? " a^T" : "") +
              (inst.ints[5] ? " b^T" : "");
    return name;
  };
  switch (inst.kernel) {
  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd:
    reads.insert({product(), i});
    return;
  case Kernel::MatmulGroup:
    reads.insert({product(), i < inst.inputs.size() / 2 ? 0 : 1});
    return;
  case Kernel::Amax:
    return;
  case Kernel::QuantizeFp8: {
    const int64_t layout = inst.ints.size() > 2 ? inst.ints[2] : -1;
    if (layout == 0 || layout == 2)
      reads.insert({"matmul b^T", 1});
    if (layout == 1 || layout == 2)
      reads.insert({"matmul", 1});
    if (layout < 0 || layout > 2)
      reads.insert({"quantize_fp8", i});
    return;
  }
  case Kernel::RMSNormBwdAdd:
    reads.insert({"rms_norm_bwd", i});
    return;
  default:
    reads.insert({std::string(kernelName(inst.kernel)), i});
  }
}

/// The layers' parameters are read alike: for each parameter of a decoder
/// layer, what reads it (readKind, of its f32 buffer or its compute copy,
/// in any program of any rank but the optimizer's) is what reads the same
/// parameter of every other layer. A launch redirected to another layer's
/// weight, or to another weight of its shape, passes every structural check
/// and trains another model; this names it. (A model of one layer has no
/// other to be held to.)
Status verifyParameterReads(const Plan &plan) {
  using Reads = std::set<std::pair<std::string, size_t>>;
  // role -> layer -> (its parameter's name, what reads it)
  std::map<std::string, std::map<int64_t, std::pair<std::string, Reads>>>
      byRole;
  for (const RankPlan &rank : plan.ranks)
    for (const ProgramDesc &program : rank.programs)
      for (const InstructionDesc &inst : program.instructions) {
        if (inst.kernel == Kernel::AdamW || inst.kernel == Kernel::AdamWMulti)
          continue;
        for (size_t i = 0; i < inst.inputs.size(); ++i) {
          if (inst.inputs[i] >= rank.buffers.size())
            continue;
          const BufferDesc &buffer = rank.buffers[inst.inputs[i]];
          if ((buffer.kind != BufferKind::Parameter &&
               buffer.kind != BufferKind::ParameterCopy) ||
              buffer.parameter.empty())
            continue;
          int64_t layer = 0;
          const std::string role = layerRole(buffer.parameter, layer);
          if (role.empty())
            continue;
          auto &entry = byRole[role][layer];
          entry.first = buffer.parameter;
          addReads(inst, i, entry.second);
        }
      }
  auto describe = [](const Reads &reads) {
    std::string text;
    for (const auto &[kernel, operand] : reads)
      text += (text.empty() ? "" : ", ") + kernel + " operand " +
              std::to_string(operand);
    return text;
  };
  for (const auto &[role, layers] : byRole) {
    // (held to the reads most layers have: the odd one out is named)
    std::map<Reads, size_t> votes;
    for (const auto &[layer, entry] : layers)
      ++votes[entry.second];
    const Reads *usual = &votes.begin()->first;
    for (const auto &[reads, count] : votes)
      if (count > votes.at(*usual))
        usual = &reads;
    for (const auto &[layer, entry] : layers)
      if (entry.second != *usual)
        return errorf("parameter '", entry.first, "' is read by ",
                      describe(entry.second), ", but the same parameter of ",
                      "the other layers by ", describe(*usual),
                      ": a launch reads another parameter than its layer's");
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
  if (model.seqLen > model.maxPositionEmbeddings)
    return errorf("the plan's model info has seq_len ", model.seqLen,
                  ", beyond its max_position_embeddings ",
                  model.maxPositionEmbeddings);
  if (model.sequenceChunks < 0 || model.sequenceChunks % 2 != 0 ||
      (model.sequenceChunks > 0 && model.seqLen % model.sequenceChunks != 0))
    return errorf("the plan's model info has sequence_chunks ",
                  model.sequenceChunks, " (must be 0, or an even number of "
                  "chunks that divides seq_len ", model.seqLen, ")");
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
  for (const RankPlan &rank : plan.ranks)
    if (rank.evalStep.empty() != plan.ranks.front().evalStep.empty())
      return errorf("rank ", rank.rank,
                    rank.evalStep.empty() ? " has no evaluation step"
                                          : " has an evaluation step",
                    " and rank 0 ",
                    rank.evalStep.empty() ? "has one" : "has none",
                    " (a plan evaluates on every rank or on none)");
  for (const RankPlan &rank : plan.ranks) {
    Status status = verifyRankContract(model, rank, segmentHeld, segmentDtype,
                                       segmentedNames);
    if (status)
      status = verifyEvaluationStep(model, rank);
    if (!status)
      return plan.ranks.size() == 1 ? status
                                    : std::move(status).withContext(
                                          "rank " + std::to_string(rank.rank));
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  MLT_RETURN_IF_ERROR(verifyParameterCoverage(plan, shapes));
  // (once every parameter is known to be held whole: what the optimizer's
  // launches update is then compared with that)
  for (const RankPlan &rank : plan.ranks) {
    Status status = verifyOptimizerLaunches(rank);
    if (!status)
      return plan.ranks.size() == 1 ? status
                                    : std::move(status).withContext(
                                          "rank " + std::to_string(rank.rank));
  }
  MLT_RETURN_IF_ERROR(verifySequenceOrder(plan));
  MLT_RETURN_IF_ERROR(verifyRingSteps(plan));
  MLT_RETURN_IF_ERROR(verifyParameterReads(plan));
  return verifyModelConfig(plan, shapes);
}


uint32_t mlt::rt::reportingRank(const Plan &plan) {
  for (const RankPlan &rank : plan.ranks)
    if (rank.findBuffer(kLossOutput))
      return rank.rank;
  return 0;
}
