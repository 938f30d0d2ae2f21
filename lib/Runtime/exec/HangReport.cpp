//===- HangReport.cpp - every rank's place, in words ----------------------===//
//
// Part of mlt. See HangReport.h. Each rank's position is read against its
// own plan: the call and instruction of a place name a launch, whose kernel,
// buffer and mesh axis (with the group of ranks that share it) the plan
// holds.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/exec/HangReport.h"

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Support/RankList.h"

#include <algorithm>
#include <cstdio>
#include <map>

using namespace mlt;
using namespace mlt::rt;

std::string mlt::rt::formatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", seconds);
  return text;
}

namespace {

/// Reads places of one rank's plan: of its training step, or with
/// `evaluation` of its evaluation step.
class RankReader {
public:
  RankReader(const RankPlan &rank, const std::optional<Mesh> &mesh,
             bool evaluation)
      : rank_(rank), mesh_(mesh),
        kind_(evaluation ? StepKind::Evaluation : StepKind::Training),
        calls_(rank.calls(kind_)), offsets_(stepLaunchOffsets(rank, kind_)) {}

  /// "step", or "evaluation step" (the step's own places).
  const char *stepName() const {
    return kind_ == StepKind::Training ? "step" : "evaluation step";
  }

  /// The program of `call` (a call of the step, or a program run alone);
  /// null for kStepCall or a call outside the plan.
  const ProgramDesc *program(uint32_t call) const {
    if (call < calls_.size())
      return &rank_.programs[calls_[call].program];
    if (std::optional<size_t> alone = aloneProgram(rank_, call))
      return &rank_.programs[*alone];
    return nullptr;
  }

  /// The instruction at `place`; null when there is none (the step itself,
  /// a whole call, a place outside the plan).
  const InstructionDesc *instruction(uint64_t place) const {
    const ProgramDesc *p = program(placeCall(place));
    const uint32_t i = placeInstruction(place);
    if (!p || i >= p->instructions.size())
      return nullptr;
    return &p->instructions[i];
  }

  /// "micro_step (F0.0 B0.0)", "optimizer_step", "refresh_parameter_copies
  /// (run alone)".
  std::string callName(uint32_t call) const {
    const ProgramDesc *p = program(call);
    if (!p)
      return "call " + std::to_string(call);
    if (call >= calls_.size())
      return p->name + " (run alone)";
    const CallDesc &desc = calls_[call];
    std::string work;
    for (const WorkItem &item : desc.work)
      work += (work.empty() ? "" : " ") + item.str();
    return work.empty() ? p->name : p->name + " (" + work + ")";
  }

  /// "matmul 12 of micro_step (F0.0 B0.0)".
  std::string launchName(uint64_t place) const {
    const uint32_t call = placeCall(place);
    const uint32_t i = placeInstruction(place);
    if (call == kStepCall)
      return std::string("the ") + stepName() +
             (i == kWholeCall ? "'s captured graph"
                              : "'s start (its inputs written)");
    if (i == kWholeCall)
      return "the captured graph of " + callName(call);
    const InstructionDesc *inst = instruction(place);
    if (!inst)
      return "instruction " + std::to_string(i) + " of " + callName(call);
    return std::string(kernelName(inst->kernel)) + " " + std::to_string(i) +
           " of " + callName(call);
  }

  /// "launch 57 of 212 (call 0, instruction 57)", for places of the step.
  std::string launchIndex(uint64_t place) const {
    const uint32_t call = placeCall(place);
    const uint32_t i = placeInstruction(place);
    if (call >= calls_.size() || !instruction(place))
      return "";
    return "launch " + std::to_string(offsets_[call] + i) + " of " +
           std::to_string(offsets_.back()) + " (call " + std::to_string(call) +
           ", instruction " + std::to_string(i) + ")";
  }

  /// "dp group 0-7" for mesh axis `axis`.
  std::string group(int64_t axis) const {
    if (!mesh_ || axis < 0 || size_t(axis) >= mesh_->numAxes())
      return "axis " + std::to_string(axis);
    const std::string &name = mesh_->axes()[size_t(axis)].name;
    StatusOr<MeshGroup> members = mesh_->groupOf(int(rank_.rank), name);
    if (!members)
      return name + " group";
    return name + " group " + formatRankList(members->ranks);
  }

  /// The world rank `shift` places along `axis` from this one.
  std::string peer(int64_t axis, int64_t shift) const {
    if (!mesh_ || axis < 0 || size_t(axis) >= mesh_->numAxes())
      return "?";
    StatusOr<MeshGroup> members =
        mesh_->groupOf(int(rank_.rank), mesh_->axes()[size_t(axis)].name);
    if (!members)
      return "?";
    const int64_t index = members->index + shift;
    if (index < 0 || index >= members->size())
      return "?";
    return std::to_string(members->ranks[size_t(index)]);
  }

  /// Whether `place` is a collective or a send or receive.
  bool communicates(uint64_t place) const {
    const InstructionDesc *inst = instruction(place);
    return inst &&
           (isCollectiveKernel(inst->kernel) || isTransferKernel(inst->kernel));
  }

  /// What a rank waiting at `place` waits in: "all_reduce_sum 'grad.x' of
  /// dp group 0-7"; for a transfer group (its calls from the place's on),
  /// "transfers (send 'x' to rank 2, recv 'y' from rank 2) of pp group 0,2".
  std::string waitName(uint64_t place) const {
    const InstructionDesc *inst = instruction(place);
    if (!inst)
      return launchName(place);
    auto bufferName = [&](const std::vector<uint32_t> &list) -> std::string {
      if (list.empty() || list[0] >= rank_.buffers.size())
        return "";
      return " '" + rank_.buffers[list[0]].name + "'";
    };
    if (isCollectiveKernel(inst->kernel))
      return std::string(kernelName(inst->kernel)) + bufferName(inst->inputs) +
             " of " + group(collectiveAttrs(*inst).axis);
    if (!isTransferKernel(inst->kernel))
      return launchName(place);
    // The group: this call's transfers and those of the transfer calls
    // after it (a step's transfer group), or the program run alone.
    std::string transfers;
    int64_t axis = transferAttrs(*inst).axis;
    const uint32_t first = placeCall(place);
    for (uint32_t call = first;; ++call) {
      const ProgramDesc *p = program(call);
      if (!p || (call != first && (call >= calls_.size() ||
                                   !isTransferProgram(*p))))
        break;
      for (const InstructionDesc &t : p->instructions) {
        if (!isTransferKernel(t.kernel))
          continue;
        const TransferAttrs attrs = transferAttrs(t);
        const bool send = t.kernel == Kernel::Send;
        transfers += std::string(transfers.empty() ? "" : ", ") +
                     std::string(kernelName(t.kernel)) +
                     bufferName(send ? t.inputs : t.outputs) +
                     (send ? " to rank " : " from rank ") +
                     peer(attrs.axis, attrs.shift);
      }
      if (call >= calls_.size())
        break;
    }
    return "transfers (" + transfers + ") of " + group(axis);
  }

private:
  const RankPlan &rank_;
  const std::optional<Mesh> &mesh_;
  const StepKind kind_;
  const std::vector<CallDesc> &calls_;
  std::vector<uint64_t> offsets_;
};

/// One rank's place: whether it waits, what in (or where it is instead, a
/// phrase after "is"), and its line.
struct Placed {
  bool waits = false;
  /// Waiting: "all_reduce_sum 'x' of dp group 0-7"; elsewhere: "in matmul
  /// 12 of micro_step (F0.0 B0.0) (held there by MLT_FAULT_STALL)".
  std::string where;
  std::string line;
};

Placed place(const RankReader &reader, const PositionSnapshot &s) {
  Placed placed;
  // (an evaluation batch's place: "the evaluation after step 4")
  const std::string step =
      !s.evaluation ? "step " + std::to_string(s.step)
      : s.step == 0 ? std::string("the evaluation before training")
                    : "the evaluation after step " + std::to_string(s.step);
  const RankActivity activity = s.activity();
  // The device's own place first: a collective it entered and never left.
  std::vector<uint64_t> entered;
  std::optional<uint64_t> lastLeft;
  for (uint32_t stream = 0; stream < s.deviceStreams && stream < kPlanMaxStreams;
       ++stream) {
    const uint64_t word = s.device[stream];
    if (word == 0)
      continue;
    const uint64_t at = (word >> 1) - 1;
    if (word & 1)
      lastLeft = std::max(lastLeft.value_or(0), at);
    else
      entered.push_back(at);
  }
  if (!entered.empty()) {
    std::sort(entered.begin(), entered.end());
    std::string index;
    for (uint64_t at : entered) {
      placed.where += (placed.where.empty() ? "" : " and ") +
                      reader.waitName(at);
      if (index.empty())
        index = reader.launchIndex(at);
    }
    placed.waits = true;
    placed.line = step + (index.empty() ? "" : ", " + index) +
                  ": its GPU waits in " + placed.where;
    return placed;
  }
  const uint64_t at = s.place();
  const std::string index = reader.launchIndex(at);
  const std::string where = step + (index.empty() ? "" : ", " + index) + ": ";
  switch (activity) {
  case RankActivity::Outside:
    placed.where = s.step == 0 ? "before its first step"
                               : "between steps (after step " +
                                     std::to_string(s.step) + ")";
    placed.line = placed.where;
    return placed;
  case RankActivity::Waiting:
    if (s.deviceStreams == 0 && reader.communicates(at)) {
      placed.waits = true;
      placed.where = reader.waitName(at);
      placed.line = where + "waits in " + placed.where;
      return placed;
    }
    if (s.deviceStreams > 0) {
      // Its host waits for its GPU, which is in no collective: in compute.
      const std::string since =
          lastLeft ? "after " + reader.launchName(*lastLeft)
                   : "since " + step + " began";
      placed.where = "in compute on its GPU (" + since + ")";
      placed.line = step + ": its host waits for its GPU, which computes " +
                    since + " and is in no collective";
      return placed;
    }
    placed.where = "in " + reader.launchName(at);
    break;
  case RankActivity::Stalled:
    placed.where =
        "in " + reader.launchName(at) + " (held there by MLT_FAULT_STALL)";
    break;
  case RankActivity::Setup:
    placed.where = "in " + reader.launchName(at) +
                   " (its host setting up: a first run or a capture)";
    break;
  case RankActivity::Running:
    placed.where = "in " + reader.launchName(at) +
                   (s.deviceStreams > 0 ? " (its host queuing it)" : "");
    break;
  }
  placed.line = where + placed.where;
  return placed;
}

} // namespace

HangReport mlt::rt::describeHang(
    const Plan &plan, const std::vector<std::optional<PositionSnapshot>> &positions,
    double timeoutSeconds) {
  std::optional<Mesh> mesh;
  if (!plan.mesh.empty())
    if (StatusOr<Mesh> made = planMesh(plan))
      mesh = std::move(*made);
  HangReport report;
  // Ranks by what they wait in, and ranks elsewhere by where they are, each
  // in the order of their lowest rank.
  std::vector<std::pair<std::string, std::vector<int>>> waiting, elsewhere;
  auto add = [](std::vector<std::pair<std::string, std::vector<int>>> &groups,
                const std::string &where, int rank) {
    for (auto &[key, ranks] : groups)
      if (key == where) {
        ranks.push_back(rank);
        return;
      }
    groups.push_back({where, {rank}});
  };
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const std::string name = "rank " + std::to_string(r);
    if (r >= positions.size() || !positions[r]) {
      report.ranks.push_back(name + ": no report (its process did not answer)");
      add(elsewhere, "silent (no report came from its process)", int(r));
      continue;
    }
    const Placed placed =
        place(RankReader(plan.ranks[r], mesh, positions[r]->evaluation),
              *positions[r]);
    report.ranks.push_back(name + ": " + placed.line);
    add(placed.waits ? waiting : elsewhere, placed.where, int(r));
  }
  std::string summary;
  auto clause = [&](const std::vector<int> &ranks, const char *one,
                    const char *many, const std::string &where) {
    summary += summary.empty() ? "" : "; ";
    summary += (ranks.size() == 1 ? "rank " : "ranks ") +
               formatRankList(ranks) + " " + (ranks.size() == 1 ? one : many) +
               " " + where;
  };
  for (const auto &[where, ranks] : elsewhere)
    clause(ranks, "is", "are", where);
  for (const auto &[where, ranks] : waiting)
    clause(ranks, "waits in", "wait in", where);
  report.summary =
      "no progress for " + formatSeconds(timeoutSeconds) + ": " + summary;
  return report;
}
