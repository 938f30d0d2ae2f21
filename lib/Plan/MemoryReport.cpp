//===- MemoryReport.cpp - a rank's memory by what it holds ----------------===//
//
// Part of mlt. Sums a rank's buffers by kind (views counted in their base),
// and prints the sums of each group of alike ranks.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/MemoryReport.h"
#include "mlt/Layout/Layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

double RankMemory::persistentBytesPerParameter() const {
  if (parameterElements == 0)
    return 0.0;
  return double(parameters + parameterCopies + gradients + optimizerState) /
         double(parameterElements);
}

bool RankMemory::operator==(const RankMemory &other) const {
  return parameters == other.parameters &&
         parameterCopies == other.parameterCopies &&
         gradients == other.gradients &&
         optimizerState == other.optimizerState && io == other.io &&
         temporaries == other.temporaries && arena == other.arena &&
         parameterElements == other.parameterElements &&
         inFlight == other.inFlight && evaluation == other.evaluation &&
         scratch == other.scratch;
}

RankMemory mlt::rt::rankMemory(const RankPlan &rank) {
  RankMemory memory;
  memory.arena = rank.arenaBytes;
  // The temporaries of the evaluation step's programs: their extent is its
  // memory, and their slots are not the training step's in flight.
  std::vector<bool> evaluation(rank.buffers.size(), false);
  std::vector<bool> evaluationProgram(rank.programs.size(), false);
  for (const CallDesc &call : rank.evalStep)
    evaluationProgram[call.program] = true;
  for (size_t p = 0; p < rank.programs.size(); ++p)
    if (evaluationProgram[p])
      for (const InstructionDesc &inst : rank.programs[p].instructions)
        for (const std::vector<uint32_t> *list : {&inst.inputs, &inst.outputs})
          for (uint32_t index : *list)
            evaluation[index] =
                rank.buffers[index].kind == BufferKind::Temporary;
  uint64_t evaluationBegin = UINT64_MAX, evaluationEnd = 0;
  std::map<std::string, uint32_t> chunkSlots;
  uint64_t persistent = 0;
  int64_t parameterElements = 0, copyElements = 0;
  for (size_t index = 0; index < rank.buffers.size(); ++index) {
    const BufferDesc &buffer = rank.buffers[index];
    if (evaluation[index]) {
      evaluationBegin = std::min(evaluationBegin, buffer.offset);
      evaluationEnd = std::max(evaluationEnd, buffer.offset + buffer.extentBytes());
      continue;
    }
    if (!buffer.parameter.empty() && buffer.kind == BufferKind::Parameter)
      parameterElements += buffer.numElements();
    if (!buffer.parameter.empty() && buffer.kind == BufferKind::ParameterCopy)
      copyElements += buffer.numElements();
    if (buffer.kind == BufferKind::Temporary &&
        buffer.copyIndex == CopyIndex::Slot) {
      // An interleaved stage's chunks (temporaries named `c<chunk>.`) each
      // have slots of their own.
      std::string chunk;
      if (buffer.name.size() > 2 && buffer.name[0] == 'c' &&
          std::isdigit(static_cast<unsigned char>(buffer.name[1])))
        chunk = buffer.name.substr(0, buffer.name.find('.'));
      uint32_t &most = chunkSlots[chunk];
      most = std::max(most, buffer.copies);
    }
    if (buffer.viewOf >= 0 || buffer.kind == BufferKind::Temporary)
      continue;
    const uint64_t bytes = buffer.extentBytes();
    persistent += bytes;
    switch (buffer.kind) {
    case BufferKind::Parameter:
      memory.parameters += bytes;
      break;
    case BufferKind::ParameterCopy:
      memory.parameterCopies += bytes;
      break;
    case BufferKind::Gradient:
      memory.gradients += bytes;
      break;
    case BufferKind::OptimizerState:
      memory.optimizerState += bytes;
      break;
    default:
      memory.io += bytes;
      break;
    }
  }
  // The forward pass reads the copies where there are any.
  memory.parameterElements = copyElements ? copyElements : parameterElements;
  memory.temporaries = memory.arena > persistent ? memory.arena - persistent : 0;
  for (const auto &[chunk, slots] : chunkSlots)
    memory.inFlight += slots;
  memory.chunks = uint32_t(chunkSlots.size());
  memory.evaluation = rank.evalStep.empty() ? std::nullopt
                      : evaluationEnd > evaluationBegin
                          ? std::optional<uint64_t>(evaluationEnd -
                                                    evaluationBegin)
                          : std::optional<uint64_t>(0);
  return memory;
}

namespace {

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%10.2f MiB", double(bytes) / 1048576.0);
  return text;
}

std::string perParameter(uint64_t bytes, int64_t elements) {
  if (elements == 0)
    return "";
  char text[32];
  std::snprintf(text, sizeof text, "%7.2f B/param", double(bytes) / elements);
  return text;
}

/// "ZeRO-2 over dp=4: ...", or "" for a plan whose optimizer state is whole
/// on every rank.
std::string partitionLine(const Plan &plan) {
  const int stage = zeroStage(plan);
  if (stage == 0)
    return "";
  auto sizeOf = [&](ParallelAxis of) -> int64_t {
    for (const MeshAxis &axis : plan.mesh)
      if (axis.name == axisName(of))
        return axis.size;
    return 1;
  };
  std::string over;
  int64_t ranks = 1;
  for (ParallelAxis axis :
       zeroAxes(sizeOf(ParallelAxis::Data), sizeOf(ParallelAxis::Context))) {
    over += (over.empty() ? "" : " x ") + std::string(axisName(axis)) + "=" +
            std::to_string(sizeOf(axis));
    ranks *= sizeOf(axis);
  }
  if (over.empty())
    over = std::string(axisName(ParallelAxis::Data)) + "=1";
  return "  ZeRO-" + std::to_string(stage) + " over " + over +
         ": each rank keeps 1/" +
         std::to_string(ranks) +
         (stage == 2 ? " of the master weights, moments and gradients"
                     : " of the master weights and moments") +
         "\n";
}

} // namespace

int mlt::rt::zeroStage(const Plan &plan) {
  int stage = 0;
  for (const BufferDesc &buffer : plan.ranks.front().buffers)
    if (!buffer.segments.empty())
      stage = std::max(
          stage, buffer.kind == BufferKind::Gradient && buffer.viewOf < 0 ? 2
                                                                           : 1);
  return stage;
}

void mlt::rt::printMemoryReport(const Plan &plan, std::ostream &os,
                                const std::vector<uint64_t> &scratch) {
  std::vector<std::pair<RankMemory, std::vector<uint32_t>>> groups;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    RankMemory memory = rankMemory(rank);
    if (r < scratch.size())
      memory.scratch = scratch[r];
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto &g) { return g.first == memory; });
    if (it == groups.end())
      groups.push_back({memory, {rank.rank}});
    else
      it->second.push_back(rank.rank);
  }
  for (const auto &[memory, ranks] : groups) {
    os << "memory per rank (" << (ranks.size() == 1 ? "rank " : "ranks ")
       << rankList(ranks) << "), "
       << memory.parameterElements << " parameter elements:\n";
    const int64_t n = memory.parameterElements;
    auto line = [&](const char *what, uint64_t bytes, const char *note,
                    bool perParam = true) {
      std::string text = std::string("  ") + what + mib(bytes) + "  " +
                         (perParam ? perParameter(bytes, n)
                                   : std::string(14, ' ')) +
                         (note[0] ? "  " : "") + note;
      text.erase(text.find_last_not_of(' ') + 1);
      os << text << "\n";
    };
    line("parameters         ", memory.parameters, "(f32 master weights)");
    if (memory.parameterCopies)
      line("parameter copies   ", memory.parameterCopies,
           "(the compute type's, which the forward pass reads)");
    line("gradients          ", memory.gradients, "");
    line("optimizer state    ", memory.optimizerState, "(AdamW moments)");
    char total[64];
    std::snprintf(total, sizeof total, "%.2f B/param",
                  memory.persistentBytesPerParameter());
    os << "  persistent state   "
       << mib(memory.parameters + memory.parameterCopies + memory.gradients +
              memory.optimizerState)
       << "  " << std::string(14 - std::min<size_t>(14, std::string(total).size()), ' ')
       << total << "\n";
    os << partitionLine(plan);
    line("inputs and outputs ", memory.io, "", false);
    const std::string kept =
        memory.inFlight == 0
            ? std::string("(their planned peak)")
            : "(their planned peak; the activations of " +
                  std::to_string(memory.inFlight) +
                  (memory.chunks > 1 ? " (micro-batch, chunk) pairs"
                   : memory.inFlight == 1 ? " micro-batch"
                                          : " micro-batches") +
                  " kept at once)";
    line("activations, temps ", memory.temporaries, kept.c_str(), false);
    if (memory.evaluation)
      line("  evaluation       ", *memory.evaluation,
           "(the evaluation step's, in the same space: it runs between "
           "steps)",
           false);
    os << "  arena              " << mib(memory.arena)
       << "  (the rank's peak: allocated once; " << memory.arena
       << " bytes)\n";
    if (memory.scratch) {
      os << "  kernel scratch     " << mib(*memory.scratch)
         << "  (the most one launch asks for beside the arena, allocated "
            "with it)\n";
      os << "  on the device      " << mib(memory.arena + *memory.scratch)
         << "  (arena and scratch; the runtime's libraries and the driver "
            "take more)\n";
    }
  }
}

std::string mlt::rt::rankList(const std::vector<uint32_t> &ranks) {
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i)
    contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (ranks.size() > 1 && contiguous)
    return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string text;
  for (size_t i = 0; i < ranks.size(); ++i)
    text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}
