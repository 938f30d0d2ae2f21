//===- PlanPrinter.cpp - a plan as readable text --------------------------===//
//
// Part of mlt. The text `mlt-run --print-plan` shows: enough to follow the
// program by eye (each launch with its buffers by name) and to check the
// memory plan (each buffer's range of the arena).
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Plan/Plan.h"

#include <iomanip>
#include <ostream>
#include <sstream>

using namespace mlt;
using namespace mlt::rt;

namespace {

template <typename T> std::string formatList(const std::vector<T> &values) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) {
    if (i)
      os << ", ";
    os << values[i];
  }
  os << ']';
  return os.str();
}

std::string formatMiB(uint64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2) << double(bytes) / (1024.0 * 1024.0)
     << " MiB";
  return os.str();
}

std::string bufferRefs(const RankPlan &rank,
                       const std::vector<uint32_t> &indices) {
  std::string result;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i)
      result += ", ";
    uint32_t index = indices[i];
    result += index < rank.buffers.size() ? rank.buffers[index].name
                                          : "#" + std::to_string(index);
  }
  return result;
}

/// "model.norm.weight[0:64)@0, lm_head.weight{[0:6, 0:8] of [12, 8]}[0:48)@64":
/// each segment's parameter, its block when it has one, the range of the
/// block's elements it holds, and where that range starts in the buffer.
std::string formatSegments(const std::vector<SegmentDesc> &segments) {
  std::ostringstream os;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentDesc &segment = segments[i];
    os << (i ? ", " : "") << segment.parameter;
    if (!segment.fullShape.empty() || !segment.sliceOffset.empty() ||
        !segment.blockShape.empty()) {
      os << "{[";
      for (size_t d = 0; d < segment.sliceOffset.size(); ++d) {
        os << (d ? ", " : "") << segment.sliceOffset[d] << ':';
        if (d < segment.blockShape.size())
          os << segment.sliceOffset[d] + segment.blockShape[d];
      }
      os << "] of " << formatList(segment.fullShape) << '}';
    }
    os << '[' << segment.begin << ':' << segment.begin + segment.count << ")@"
       << segment.offset;
  }
  return os.str();
}

} // namespace

void mlt::rt::printPlan(const Plan &plan, std::ostream &os) {
  const ModelInfo &model = plan.model;
  os << "plan: format version " << plan.formatVersion << ", producer \""
     << plan.producer << "\", world size " << plan.worldSize;
  if (!plan.mesh.empty()) {
    os << ", mesh ";
    for (size_t i = 0; i < plan.mesh.size(); ++i)
      os << (i ? "," : "") << plan.mesh[i].name << '=' << plan.mesh[i].size;
  }
  os << "\n";
  os << "model: vocab " << model.vocabSize << ", max positions "
     << model.maxPositionEmbeddings << ", micro-batch " << model.microBatch
     << " x seq " << model.seqLen << ", " << model.microbatches
     << " micro-batch(es) per step, hf_config " << model.hfConfig.size()
     << " bytes";
  if (model.sequenceChunks)
    os << ", sequences in " << model.sequenceChunks
       << " load-balanced chunks";
  os << "\n";
  if (!plan.target.empty())
    os << "target: " << plan.target << "\n";

  for (const RankPlan &rank : plan.ranks) {
    size_t nameWidth = 4;
    for (const BufferDesc &buffer : rank.buffers)
      nameWidth = std::max(nameWidth, buffer.name.size());
    os << "\nrank " << rank.rank << ": arena " << rank.arenaBytes << " bytes ("
       << formatMiB(rank.arenaBytes) << "), " << rank.buffers.size()
       << " buffers, " << rank.programs.size() << " programs, a step of "
       << rank.step.size() << " calls";
    if (!rank.evalStep.empty())
      os << ", an evaluation step of " << rank.evalStep.size() << " calls";
    os << "\n";
    os << "buffers:\n";
    for (size_t i = 0; i < rank.buffers.size(); ++i) {
      const BufferDesc &buffer = rank.buffers[i];
      os << "  #" << std::left << std::setw(5) << i << std::setw(nameWidth + 2)
         << buffer.name << std::setw(16) << bufferKindName(buffer.kind)
         << std::setw(5) << elementTypeName(buffer.dtype) << std::setw(18)
         << formatList(buffer.shape) << std::right << "offset " << std::setw(12)
         << buffer.offset << "  bytes " << std::setw(12) << buffer.bytes;
      if (!buffer.parameter.empty())
        os << "  parameter " << buffer.parameter;
      if (buffer.kind == BufferKind::Parameter && buffer.decay)
        os << " (decay)";
      if (buffer.kind == BufferKind::Constant)
        os << "  value " << buffer.constantValue;
      if (buffer.copies > 1)
        os << "  x" << buffer.copies << " (a copy per "
           << (buffer.copyIndex == CopyIndex::Slot ? "slot" : "micro-batch")
           << ", stride "
           << buffer.copyStride() << ")";
      if (buffer.isBlock() &&
          buffer.sliceOffset.size() == buffer.shape.size()) {
        os << "  block [";
        for (size_t d = 0; d < buffer.shape.size(); ++d)
          os << (d ? ", " : "") << buffer.sliceOffset[d] << ':'
             << buffer.sliceOffset[d] + buffer.shape[d];
        os << "] of " << formatList(buffer.fullShape);
      }
      if (buffer.viewOf >= 0)
        os << "  view of "
           << (size_t(buffer.viewOf) < rank.buffers.size()
                   ? rank.buffers[buffer.viewOf].name
                   : "#" + std::to_string(buffer.viewOf));
      if (!buffer.segments.empty())
        os << "  segments: " << formatSegments(buffer.segments);
      os << "\n";
    }
    for (const ProgramDesc &program : rank.programs) {
      os << "program " << program.name << " (" << program.instructions.size()
         << " instructions):\n";
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        os << "  " << std::setw(4) << i << ": " << kernelName(inst.kernel)
           << " (" << bufferRefs(rank, inst.inputs) << ") -> ("
           << bufferRefs(rank, inst.outputs) << ")";
        if (!inst.ints.empty())
          os << " ints " << formatList(inst.ints);
        if (!inst.floats.empty())
          os << " floats " << formatList(inst.floats);
        const int axis = meshAxisAttribute(inst.kernel);
        if (axis >= 0 && size_t(axis) < inst.ints.size() &&
            inst.ints[axis] >= 0 && size_t(inst.ints[axis]) < plan.mesh.size())
          os << " axis " << plan.mesh[inst.ints[axis]].name;
        if (inst.stream != 0)
          os << " stream " << unsigned(inst.stream);
        if (!inst.waits.empty())
          os << " waits " << formatList(inst.waits);
        if (inst.token >= 0)
          os << " token " << inst.token;
        os << "\n";
      }
    }
    for (StepKind kind : {StepKind::Training, StepKind::Evaluation}) {
      const std::vector<CallDesc> &step = rank.calls(kind);
      if (kind == StepKind::Evaluation && step.empty())
        continue;
      os << stepKindName(kind) << " (" << step.size() << " calls):\n";
      for (size_t c = 0; c < step.size(); ++c) {
        const CallDesc &call = step[c];
        os << "  " << std::setw(4) << c << ": "
           << (call.program < rank.programs.size()
                   ? rank.programs[call.program].name
                   : "#" + std::to_string(call.program));
        if (call.microbatch >= 0)
          os << " microbatch " << call.microbatch;
        if (call.slot >= 0)
          os << " slot " << call.slot;
        if (!call.work.empty()) {
          os << " work";
          for (const WorkItem &item : call.work)
            os << ' ' << item.str();
        }
        os << "\n";
      }
    }
  }
}

namespace {

/// A rank's transfer groups, each in braces: `F2.0>1` sends what F2.0
/// computed to rank 1 (the work item of the compute call before it with
/// the same micro-batch), `B0.0<1` receives from rank 1 what B0.0 needs
/// (the next such call's item). Empty when the rank has no transfers.
std::string transfersString(const Plan &plan, const Mesh *mesh,
                            const RankPlan &rank, StepKind kind) {
  const std::vector<CallDesc> &step = rank.calls(kind);
  auto itemNear = [&](size_t call, int64_t microbatch, bool before) {
    for (size_t c = call; before ? c-- > 0 : ++c < step.size();)
      if (step[c].microbatch == microbatch && !step[c].work.empty())
        return before ? step[c].work.back().str()
                      : step[c].work.front().str();
    return std::string("?");
  };
  std::string text;
  for (const TransferGroup &group : transferGroups(rank, kind)) {
    text += text.empty() ? "{" : " {";
    bool first = true;
    for (size_t c = group.begin; c < group.end; ++c) {
      const CallDesc &call = step[c];
      for (const InstructionDesc &inst :
           rank.programs[call.program].instructions) {
        const bool send = inst.kernel == Kernel::Send;
        TransferAttrs attrs = transferAttrs(inst);
        std::string peer = "?";
        if (mesh && attrs.axis >= 0 && size_t(attrs.axis) < plan.mesh.size()) {
          StatusOr<std::vector<int>> coords = mesh->coordinates(int(rank.rank));
          if (coords) {
            (*coords)[size_t(attrs.axis)] += int(attrs.shift);
            if (StatusOr<int> at = mesh->rankAt(*coords))
              peer = std::to_string(*at);
          }
        }
        text += (first ? "" : " ") +
                itemNear(c, call.microbatch, /*before=*/send) +
                (send ? ">" : "<") + peer;
        first = false;
      }
    }
    text += "}";
  }
  return text;
}

} // namespace

void mlt::rt::printSchedule(const Plan &plan, std::ostream &os) {
  std::optional<Mesh> mesh;
  if (!plan.mesh.empty())
    if (StatusOr<Mesh> created = Mesh::create(plan.mesh))
      mesh = std::move(*created);
  for (const RankPlan &rank : plan.ranks) {
    os << "rank " << rank.rank << ": " << rank.scheduleString() << "\n";
    std::string transfers = transfersString(plan, mesh ? &*mesh : nullptr,
                                            rank, StepKind::Training);
    if (!transfers.empty())
      os << "rank " << rank.rank << " transfers: " << transfers << "\n";
  }
  // The evaluation step (a plan compiled with one): its forward passes.
  for (const RankPlan &rank : plan.ranks) {
    if (rank.evalStep.empty())
      continue;
    os << "rank " << rank.rank
       << " evaluation: " << rank.scheduleString(StepKind::Evaluation) << "\n";
    std::string transfers = transfersString(plan, mesh ? &*mesh : nullptr,
                                            rank, StepKind::Evaluation);
    if (!transfers.empty())
      os << "rank " << rank.rank << " evaluation transfers: " << transfers
         << "\n";
  }
}
