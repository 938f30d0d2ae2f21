//===- TransferCheck.cpp - sends and receives of a plan, checked ----------===//
//
// Part of mlt. The plan verifier's checks of point-to-point transfers
// (TransferCheck.h): each rank's transfer programs and transfer groups,
// then, across ranks, the matching of sends and receives per ordered pair
// of ranks and the deadlock check, with its naive reference.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/TransferCheck.h"

#include "VerifierSupport.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::rt::verifier;
using namespace mlt::rt::transfer_check;

namespace {

/// The world rank of a transfer's peer: `rank` moved by the transfer's
/// shift along its axis (verifyRankTransfers keeps it inside the axis).
uint32_t peerRank(const std::vector<MeshAxis> &mesh, uint32_t rank,
                  const InstructionDesc &inst) {
  const TransferAttrs transfer = transferAttrs(inst);
  return uint32_t(int64_t(rank) +
                  transfer.shift * meshStride(mesh, size_t(transfer.axis)));
}

/// The buffer a send reads or a receive writes.
uint32_t transferBuffer(const InstructionDesc &inst) {
  return inst.kernel == Kernel::Send ? inst.inputs[0] : inst.outputs[0];
}

//===----------------------------------------------------------------------===//
// One rank
//===----------------------------------------------------------------------===//

/// Transfer programs: sends and receives alone, on stream 0, over one mesh
/// axis, each peer inside its axis.
Status verifyTransferPrograms(const RankPlan &rank,
                              const std::vector<MeshAxis> &mesh) {
  for (const ProgramDesc &program : rank.programs) {
    if (!isTransferProgram(program))
      continue;
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const InstructionDesc &inst = program.instructions[i];
      auto fail = [&](auto &&...parts) {
        return errorf("program '", program.name, "' instruction ", i, " (",
                      kernelName(inst.kernel), ") ", parts...);
      };
      if (!isTransferKernel(inst.kernel))
        return fail("is no send or receive, but the program launches them: a "
                    "transfer program launches sends and receives alone");
      if (inst.stream != 0)
        return fail("runs on stream ", unsigned(inst.stream),
                    "; a transfer program runs on stream 0 alone");
      // (Instruction 0 is a transfer, or the check above stopped there.)
      const TransferAttrs transfer = transferAttrs(inst);
      const size_t axis = size_t(transfer.axis);
      const size_t firstAxis =
          size_t(transferAttrs(program.instructions[0]).axis);
      if (axis != firstAxis)
        return fail("is on axis '", mesh[axis].name,
                    "' and instruction 0 on axis '", mesh[firstAxis].name,
                    "'; a transfer program's transfers go over one mesh axis");
      const int64_t coordinate = meshCoordinate(mesh, rank.rank, axis);
      const int64_t peer = coordinate + transfer.shift;
      if (peer < 0 || peer >= mesh[axis].size)
        return fail("has rank ", rank.rank, "'s peer at coordinate ", peer,
                    " on axis '", mesh[axis].name, "' (its own ", coordinate,
                    " plus shift ", transfer.shift, "), outside [0, ",
                    mesh[axis].size, ")");
    }
  }
  return Status::ok();
}

/// One call of a transfer group: its program and the micro-batch and slot
/// that select its copies; `call` is its index in the step, none for a
/// program run alone.
struct GroupCall {
  size_t program;
  int32_t microbatch;
  int32_t slot;
  std::optional<size_t> call;
};

/// The transfers of one group run in no order: one mesh axis, and no
/// transfer writing a byte that another touches. `what` names the group.
Status verifyGroup(const RankPlan &rank, const std::vector<MeshAxis> &mesh,
                   const std::vector<GroupCall> &calls,
                   const std::string &what) {
  struct Touch {
    uint64_t begin, end;
    size_t call; // the position in `calls`
    size_t instruction;
    uint32_t buffer, copy;
  };
  std::vector<Touch> touches;
  std::optional<std::pair<size_t, int64_t>> axis; // (call, axis) of the first
  for (size_t c = 0; c < calls.size(); ++c) {
    const GroupCall &call = calls[c];
    const ProgramDesc &program = rank.programs[call.program];
    for (size_t i = 0; i < program.instructions.size(); ++i) {
      const InstructionDesc &inst = program.instructions[i];
      const int64_t a = transferAttrs(inst).axis;
      if (!axis)
        axis = {c, a};
      if (a != axis->second)
        return errorf(
            what, " goes over axes '", mesh[size_t(axis->second)].name,
            "' (program '", rank.programs[calls[axis->first].program].name,
            "') and '", mesh[size_t(a)].name, "' (program '", program.name,
            "'); the transfers of a group go over one mesh axis");
      const uint32_t index = transferBuffer(inst);
      const BufferDesc &buffer = rank.buffers[index];
      if (buffer.bytes == 0)
        continue;
      const uint32_t copy = buffer.copyFor(call.microbatch, call.slot);
      const uint64_t begin = buffer.copyOffset(copy);
      touches.push_back({begin, begin + buffer.bytes, c, i, index, copy});
    }
  }
  std::sort(touches.begin(), touches.end(),
            [](const Touch &a, const Touch &b) { return a.begin < b.begin; });
  auto describe = [&](const Touch &touch) {
    const GroupCall &call = calls[touch.call];
    const ProgramDesc &program = rank.programs[call.program];
    const InstructionDesc &inst = program.instructions[touch.instruction];
    const BufferDesc &buffer = rank.buffers[touch.buffer];
    std::ostringstream os;
    if (call.call)
      os << "call " << *call.call << " (program '" << program.name << "') ";
    os << "instruction " << touch.instruction << " (" << kernelName(inst.kernel)
       << ") " << (inst.kernel == Kernel::Recv ? "writes" : "reads") << " '"
       << buffer.name << "'";
    if (buffer.copies > 1)
      os << " (copy " << touch.copy << ")";
    os << " at [" << touch.begin << ", " << touch.end << ")";
    return os.str();
  };
  auto writes = [&](const Touch &touch) {
    return rank.programs[calls[touch.call].program]
               .instructions[touch.instruction]
               .kernel == Kernel::Recv;
  };
  for (size_t x = 0; x < touches.size(); ++x)
    for (size_t y = x + 1;
         y < touches.size() && touches[y].begin < touches[x].end; ++y) {
      if (!writes(touches[x]) && !writes(touches[y]))
        continue;
      const Touch &writer = writes(touches[x]) ? touches[x] : touches[y];
      const Touch &other = &writer == &touches[x] ? touches[y] : touches[x];
      return errorf(what,
                    ", whose transfers are not ordered: ", describe(writer),
                    ", where ", describe(other));
    }
  return Status::ok();
}

} // namespace

Status mlt::rt::verifyRankTransfers(const RankPlan &rank,
                                    const std::vector<MeshAxis> &mesh) {
  MLT_RETURN_IF_ERROR(verifyTransferPrograms(rank, mesh));
  for (size_t p = 0; p < rank.programs.size(); ++p)
    if (isTransferProgram(rank.programs[p]))
      MLT_RETURN_IF_ERROR(verifyGroup(
          rank, mesh, {GroupCall{p, -1, -1, std::nullopt}},
          "program '" + rank.programs[p].name + "' (run alone, one group)"));
  for (StepKind kind : {StepKind::Training, StepKind::Evaluation}) {
    const std::vector<CallDesc> &step = rank.calls(kind);
    const std::vector<TransferGroup> groups = transferGroups(rank, kind);
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<GroupCall> calls;
      for (size_t c = groups[g].begin; c < groups[g].end; ++c)
        calls.push_back({step[c].program, step[c].microbatch, step[c].slot, c});
      std::ostringstream what;
      what << stepKindName(kind) << " calls " << groups[g].begin << ".."
           << groups[g].end - 1 << " (transfer group " << g << ")";
      MLT_RETURN_IF_ERROR(verifyGroup(rank, mesh, calls, what.str()));
    }
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Across ranks: matching
//===----------------------------------------------------------------------===//

namespace {

/// Every ordered pair of ranks (src, dst): src's sends to dst and dst's
/// receives from src over their steps, in order.
struct PairTransfers {
  struct Transfer {
    int64_t count;
    ElementType dtype;
  };
  std::vector<Transfer> sends, receives;
};

Status verifyMatching(const Plan &plan, StepKind kind) {
  const std::string what = std::string("the ") + stepKindName(kind) + ": ";
  std::map<std::pair<uint32_t, uint32_t>, PairTransfers> pairs;
  for (const RankPlan &rank : plan.ranks)
    for (const TransferGroup &group : transferGroups(rank, kind))
      for (size_t c = group.begin; c < group.end; ++c)
        for (const InstructionDesc &inst :
             rank.programs[rank.calls(kind)[c].program].instructions) {
          const uint32_t peer = peerRank(plan.mesh, rank.rank, inst);
          const bool send = inst.kernel == Kernel::Send;
          PairTransfers::Transfer transfer{
              transferAttrs(inst).count,
              rank.buffers[transferBuffer(inst)].dtype};
          if (send)
            pairs[{rank.rank, peer}].sends.push_back(transfer);
          else
            pairs[{peer, rank.rank}].receives.push_back(transfer);
        }
  auto size = [](const PairTransfers::Transfer &t) {
    return std::to_string(t.count) + " " + elementTypeName(t.dtype);
  };
  for (const auto &[ranks, transfers] : pairs) {
    const auto [src, dst] = ranks;
    const std::vector<PairTransfers::Transfer> &sends = transfers.sends;
    const std::vector<PairTransfers::Transfer> &receives = transfers.receives;
    for (size_t k = 0; k < std::min(sends.size(), receives.size()); ++k)
      if (sends[k].count != receives[k].count ||
          sends[k].dtype != receives[k].dtype)
        return errorf(what, "rank ", dst, "'s receive #", k, " from rank ",
                      src, " is ", size(receives[k]), ", rank ", src, " sends ",
                      size(sends[k]));
    if (sends.size() > receives.size())
      return errorf(what, "rank ", src, "'s send #", receives.size(),
                    " to rank ", dst, " (", size(sends[receives.size()]),
                    ") has no matching receive on rank ", dst, " (it receives ",
                    receives.size(), " from rank ", src, ")");
    if (receives.size() > sends.size())
      return errorf(what, "rank ", dst, "'s receive #", sends.size(),
                    " from rank ", src, " (", size(receives[sends.size()]),
                    ") has no matching send on rank ", src, " (it sends ",
                    sends.size(), " to rank ", dst, ")");
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Across ranks: deadlock
//===----------------------------------------------------------------------===//

constexpr size_t kNone = std::numeric_limits<size_t>::max();

/// For every transfer of every rank's events, the event of its matching
/// transfer on its peer (the k-th send of a pair meets the k-th receive),
/// or kNone when it has none.
std::vector<std::vector<std::vector<size_t>>>
matchingEvents(const StepEvents &events) {
  // Per (src, dst): the events of src's sends and of dst's receives.
  std::map<std::pair<uint32_t, uint32_t>,
           std::pair<std::vector<size_t>, std::vector<size_t>>>
      pairs;
  for (uint32_t r = 0; r < events.size(); ++r)
    for (size_t e = 0; e < events[r].size(); ++e)
      for (const BlockingEvent::Transfer &t : events[r][e].transfers) {
        if (t.send)
          pairs[{r, t.peer}].first.push_back(e);
        else
          pairs[{t.peer, r}].second.push_back(e);
      }
  std::map<std::pair<uint32_t, uint32_t>, std::pair<size_t, size_t>> seen;
  std::vector<std::vector<std::vector<size_t>>> partner(events.size());
  for (uint32_t r = 0; r < events.size(); ++r) {
    partner[r].resize(events[r].size());
    for (size_t e = 0; e < events[r].size(); ++e)
      for (const BlockingEvent::Transfer &t : events[r][e].transfers) {
        const std::pair<uint32_t, uint32_t> key =
            t.send ? std::make_pair(r, t.peer) : std::make_pair(t.peer, r);
        const auto &[sends, receives] = pairs[key];
        size_t &k = t.send ? seen[key].first : seen[key].second;
        const std::vector<size_t> &other = t.send ? receives : sends;
        partner[r][e].push_back(k < other.size() ? other[k] : kNone);
        ++k;
      }
  }
  return partner;
}

} // namespace

std::vector<size_t>
mlt::rt::transfer_check::simulateStep(const StepEvents &events) {
  const size_t ranks = events.size();
  const std::vector<std::vector<std::vector<size_t>>> partner =
      matchingEvents(events);
  std::vector<size_t> position(ranks, 0), unmet(ranks, 0);
  // The ranks waiting for rank r to reach event e, by (r, e).
  std::map<std::pair<uint32_t, size_t>, std::vector<uint32_t>> waiting;
  // Collectives: each rank's count per axis so far, and the arrivals at
  // each (axis, group leader, number on the axis).
  std::vector<std::map<size_t, size_t>> collectivesSoFar(ranks);
  std::map<std::tuple<size_t, uint32_t, size_t>, size_t> arrivals;
  std::vector<uint32_t> completed; // ranks whose current event completed

  // Rank r has reached its event position[r].
  auto arrive = [&](uint32_t r) {
    if (position[r] == events[r].size())
      return;
    if (auto it = waiting.find({r, position[r]}); it != waiting.end()) {
      for (uint32_t waiter : it->second)
        if (--unmet[waiter] == 0)
          completed.push_back(waiter);
      waiting.erase(it);
    }
    const BlockingEvent &event = events[r][position[r]];
    if (event.isCollective()) {
      const size_t number = collectivesSoFar[r][event.axis]++;
      size_t &arrived = arrivals[{event.axis, event.members()[0], number}];
      if (++arrived == event.members().size())
        for (uint32_t member : event.members())
          completed.push_back(member);
      return;
    }
    unmet[r] = 0;
    for (size_t t = 0; t < event.transfers.size(); ++t) {
      const uint32_t peer = event.transfers[t].peer;
      const size_t match = partner[r][position[r]][t];
      if (match != kNone && position[peer] >= match)
        continue;
      ++unmet[r];
      if (match != kNone)
        waiting[{peer, match}].push_back(r);
    }
    if (unmet[r] == 0)
      completed.push_back(r);
  };
  for (uint32_t r = 0; r < ranks; ++r)
    arrive(r);
  while (!completed.empty()) {
    const uint32_t r = completed.back();
    completed.pop_back();
    ++position[r];
    arrive(r);
  }
  return position;
}

std::vector<size_t>
mlt::rt::transfer_check::simulateStepNaive(const StepEvents &events) {
  const size_t ranks = events.size();
  std::vector<size_t> position(ranks, 0);
  // The event of the transfer matching transfer t of rank r's event e:
  // counted from the start of both steps.
  auto match = [&](uint32_t r, size_t e, size_t t) -> size_t {
    const BlockingEvent::Transfer &mine = events[r][e].transfers[t];
    size_t k = 0;
    for (size_t f = 0; f <= e; ++f)
      for (size_t u = 0; u < events[r][f].transfers.size(); ++u) {
        if (f == e && u == t)
          break;
        const BlockingEvent::Transfer &other = events[r][f].transfers[u];
        k += other.send == mine.send && other.peer == mine.peer;
      }
    if (mine.peer >= ranks)
      return kNone;
    for (size_t f = 0; f < events[mine.peer].size(); ++f)
      for (const BlockingEvent::Transfer &other :
           events[mine.peer][f].transfers)
        if (other.send != mine.send && other.peer == r && k-- == 0)
          return f;
    return kNone;
  };
  // The event of rank m's n-th collective on `axis`.
  auto collective = [&](uint32_t m, size_t axis, size_t n) -> size_t {
    for (size_t f = 0; f < events[m].size(); ++f)
      if (events[m][f].isCollective() && events[m][f].axis == axis && n-- == 0)
        return f;
    return kNone;
  };
  auto canComplete = [&](uint32_t r) {
    const size_t e = position[r];
    const BlockingEvent &event = events[r][e];
    if (event.isCollective()) {
      size_t n = 0;
      for (size_t f = 0; f < e; ++f)
        n += events[r][f].isCollective() && events[r][f].axis == event.axis;
      for (uint32_t member : event.members()) {
        const size_t f = collective(member, event.axis, n);
        if (f == kNone || position[member] < f)
          return false;
      }
      return true;
    }
    for (size_t t = 0; t < event.transfers.size(); ++t) {
      const size_t f = match(r, e, t);
      if (f == kNone || position[event.transfers[t].peer] < f)
        return false;
    }
    return true;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (uint32_t r = 0; r < ranks; ++r)
      while (position[r] < events[r].size() && canComplete(r)) {
        ++position[r];
        moved = true;
      }
  }
  return position;
}

StepEvents mlt::rt::transfer_check::stepEvents(const Plan &plan,
                                               const Mesh &mesh,
                                               StepKind kind) {
  StepEvents events(plan.ranks.size());
  for (const RankPlan &rank : plan.ranks) {
    std::vector<BlockingEvent> &out = events[rank.rank];
    std::vector<std::shared_ptr<const std::vector<uint32_t>>> groups(
        mesh.numAxes());
    std::vector<size_t> collectives(mesh.numAxes(), 0);
    const std::vector<CallDesc> &step = rank.calls(kind);
    const std::vector<TransferGroup> transferGroupsOfRank =
        transferGroups(rank, kind);
    size_t nextGroup = 0;
    for (size_t c = 0; c < step.size(); ++c) {
      if (nextGroup < transferGroupsOfRank.size() &&
          transferGroupsOfRank[nextGroup].begin == c) {
        const TransferGroup &group = transferGroupsOfRank[nextGroup];
        BlockingEvent event;
        event.call = c;
        event.ordinal = nextGroup++;
        for (; c < group.end; ++c)
          for (const InstructionDesc &inst :
               rank.programs[step[c].program].instructions)
            event.transfers.push_back({inst.kernel == Kernel::Send,
                                       peerRank(plan.mesh, rank.rank, inst)});
        --c;
        out.push_back(std::move(event));
        continue;
      }
      const ProgramDesc &program = rank.programs[step[c].program];
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        if (!isCollectiveKernel(inst.kernel))
          continue;
        const size_t axis = size_t(collectiveAttrs(inst).axis);
        if (!groups[axis]) {
          const MeshGroup group =
              *mesh.groupOf(int(rank.rank), mesh.axes()[axis].name);
          groups[axis] = std::make_shared<const std::vector<uint32_t>>(
              group.ranks.begin(), group.ranks.end());
        }
        BlockingEvent event;
        event.axis = axis;
        event.group = groups[axis];
        event.call = c;
        event.instruction = i;
        event.ordinal = collectives[axis]++;
        out.push_back(std::move(event));
      }
    }
  }
  return events;
}

namespace {

/// "rank 0 waits in transfer group 2 at step call 5 (receive from rank 1)":
/// what each rank that stopped before its step's end waits for.
std::string describeDeadlock(const Plan &plan, StepKind kind,
                             const StepEvents &events,
                             const std::vector<size_t> &position) {
  const std::string call = std::string(" at ") + stepKindName(kind) + " call ";
  constexpr size_t kRanksShown = 8, kWaitsShown = 3;
  const std::vector<std::vector<std::vector<size_t>>> partner =
      matchingEvents(events);
  std::vector<std::string> stuck;
  for (uint32_t r = 0; r < events.size(); ++r) {
    if (position[r] == events[r].size())
      continue;
    const BlockingEvent &event = events[r][position[r]];
    std::vector<std::string> waits;
    std::ostringstream os;
    os << "rank " << r << " waits in ";
    if (event.isCollective()) {
      // Who has not reached it: the members whose collective of the same
      // number on the axis lies ahead of them.
      for (uint32_t member : event.members()) {
        size_t n = event.ordinal, f = 0;
        for (; f < events[member].size(); ++f)
          if (events[member][f].isCollective() &&
              events[member][f].axis == event.axis && n-- == 0)
            break;
        if (position[member] < f)
          waits.push_back("rank " + std::to_string(member));
      }
      const RankPlan &rank = plan.ranks[r];
      const InstructionDesc &inst =
          rank.programs[rank.calls(kind)[event.call].program]
              .instructions[event.instruction];
      os << "collective #" << event.ordinal << " on axis '"
         << plan.mesh[event.axis].name << "'" << call << event.call
         << " (" << collectiveCall(rank, inst).describe() << "; for ";
    } else {
      for (size_t t = 0; t < event.transfers.size(); ++t) {
        const BlockingEvent::Transfer &transfer = event.transfers[t];
        const size_t match = partner[r][position[r]][t];
        if (match == kNone || position[transfer.peer] < match)
          waits.push_back(
              (transfer.send ? "send to rank " : "receive from rank ") +
              std::to_string(transfer.peer));
      }
      os << "transfer group " << event.ordinal << call << event.call
         << " (";
    }
    for (size_t w = 0; w < waits.size() && w < kWaitsShown; ++w)
      os << (w ? ", " : "") << waits[w];
    if (waits.size() > kWaitsShown)
      os << ", and " << waits.size() - kWaitsShown << " more";
    os << ")";
    stuck.push_back(os.str());
  }
  std::string text =
      std::string("the ") + stepKindName(kind) + " can deadlock: ";
  for (size_t i = 0; i < stuck.size() && i < kRanksShown; ++i)
    text += (i ? ", " : "") + stuck[i];
  if (stuck.size() > kRanksShown)
    text +=
        ", and " + std::to_string(stuck.size() - kRanksShown) + " more ranks";
  return text;
}

} // namespace

Status mlt::rt::verifyTransfers(const Plan &plan, const Mesh &mesh) {
  for (StepKind kind : {StepKind::Training, StepKind::Evaluation}) {
    MLT_RETURN_IF_ERROR(verifyMatching(plan, kind));
    // Collectives take part even in a plan without transfers: those of
    // different axes can wait for each other in a cycle.
    const StepEvents events = stepEvents(plan, mesh, kind);
    const std::vector<size_t> position = simulateStep(events);
    for (uint32_t r = 0; r < events.size(); ++r)
      if (position[r] != events[r].size())
        return Status::error(describeDeadlock(plan, kind, events, position));
  }
  return Status::ok();
}
