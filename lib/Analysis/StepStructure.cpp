//===- StepStructure.cpp - a step's segments and shared launches ----------===//
//
// Part of mlt. See StepStructure.h.
//
//===----------------------------------------------------------------------===//

#include "StepStructure.h"
#include "mlt/Plan/KernelInfo.h"

#include <algorithm>
#include <map>
#include <tuple>

using namespace mlt;
using namespace mlt::cost::detail;
using namespace mlt::rt;

StatusOr<std::optional<Mesh>> mlt::cost::detail::meshOf(const Plan &plan) {
  if (plan.mesh.empty())
    return std::optional<Mesh>();
  StatusOr<Mesh> mesh = planMesh(plan);
  if (!mesh)
    return mesh.takeStatus();
  return std::optional<Mesh>(std::move(*mesh));
}

std::vector<Segment> mlt::cost::detail::segmentsOf(const RankPlan &rank) {
  std::vector<Segment> segments;
  const std::vector<TransferGroup> groups = transferGroups(rank);
  size_t next = 0;
  for (size_t c = 0; c < rank.step.size();) {
    if (next < groups.size() && groups[next].begin == c) {
      segments.push_back({c, groups[next].end, true});
      c = groups[next++].end;
    } else {
      segments.push_back({c, c + 1, false});
      ++c;
    }
  }
  return segments;
}

std::pair<double, double> mlt::cost::detail::launchSpan(double ready,
                                                       double seconds,
                                                       double gap) {
  if (gap >= 0.0)
    return {ready + gap, seconds};
  return {ready, std::max(seconds + gap, 0.5 * seconds)};
}

StatusOr<std::pair<InstanceKey, uint32_t>>
InstanceNamer::next(const InstructionDesc &inst) {
  if (isCollectiveKernel(inst.kernel)) {
    const int64_t axis = collectiveAttrs(inst).axis;
    auto known = groups_.find(axis);
    if (known == groups_.end()) {
      StatusOr<MeshGroup> group =
          mesh_.groupOf(int(rank_), mesh_.axes()[size_t(axis)].name);
      if (!group)
        return group.takeStatus();
      known = groups_
                  .emplace(axis, std::pair{uint64_t(group->ranks[0]),
                                           uint32_t(group->size())})
                  .first;
    }
    const auto [first, size] = known->second;
    return std::pair{InstanceKey{0, uint64_t(axis), first,
                                 collectives_[axis]++},
                     size};
  }
  const TransferAttrs transfer = transferAttrs(inst);
  StatusOr<std::vector<int>> at = mesh_.coordinates(int(rank_));
  if (!at)
    return at.takeStatus();
  (*at)[size_t(transfer.axis)] += int(transfer.shift);
  StatusOr<int> peer = mesh_.rankAt(*at);
  if (!peer)
    return peer.takeStatus();
  const bool send = inst.kernel == Kernel::Send;
  const uint32_t src = send ? rank_ : uint32_t(*peer);
  const uint32_t dst = send ? uint32_t(*peer) : rank_;
  uint64_t &ordinal = (send ? sends_ : receives_)[{src, dst}];
  return std::pair{InstanceKey{1, src, dst, ordinal++}, uint32_t(2)};
}

namespace {

/// How many of the ranks taking part in instance `key` a plan of only some
/// ranks (`held`) holds.
StatusOr<uint32_t> membersHeld(const Mesh &mesh, const InstanceKey &key,
                               const std::vector<bool> &held) {
  auto isHeld = [&](uint64_t rank) {
    return rank < held.size() && held[size_t(rank)];
  };
  const auto [kind, a, b, ordinal] = key;
  if (kind == 1)
    return uint32_t(isHeld(a) + isHeld(b));
  StatusOr<MeshGroup> group =
      mesh.groupOf(int(b), mesh.axes()[size_t(a)].name);
  if (!group)
    return group.takeStatus();
  uint32_t members = 0;
  for (int rank : group->ranks)
    members += isHeld(uint64_t(rank));
  return members;
}

} // namespace

StatusOr<Instances>
mlt::cost::detail::matchInstances(const Plan &plan,
                                  const std::optional<Mesh> &mesh) {
  Instances instances;
  std::map<InstanceKey, int64_t> ids;
  // The ranks the plan holds of each collective's group (axis, first
  // rank): a group is as large as its axis, thousands of ranks on large
  // meshes, and met by every collective over it.
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> heldOfGroup;
  instances.of.resize(plan.ranks.size());
  // The ranks the plan holds (all, or its representatives).
  std::vector<bool> held(plan.worldSize, false);
  for (const RankPlan &rank : plan.ranks)
    if (rank.rank < held.size())
      held[rank.rank] = true;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan &rank = plan.ranks[r];
    std::optional<InstanceNamer> namer;
    if (mesh)
      namer.emplace(*mesh, rank.rank);
    auto &of = instances.of[r];
    of.resize(rank.step.size());
    for (size_t c = 0; c < rank.step.size(); ++c) {
      const ProgramDesc &program = rank.programs[rank.step[c].program];
      of[c].assign(program.instructions.size(), -1);
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        if (!isCollectiveKernel(inst.kernel) && !isTransferKernel(inst.kernel))
          continue;
        if (!namer)
          return errorf("rank ", rank.rank,
                        " launches a collective or a transfer, but the plan "
                        "has no mesh");
        StatusOr<std::pair<InstanceKey, uint32_t>> named = namer->next(inst);
        if (!named)
          return named.takeStatus();
        uint32_t members = named->second;
        if (plan.ranks.size() < plan.worldSize) {
          // (a collective's by its group, counted once)
          const bool collective = std::get<0>(named->first) == 0;
          const std::pair<uint64_t, uint64_t> group{
              std::get<1>(named->first), std::get<2>(named->first)};
          auto count =
              collective ? heldOfGroup.find(group) : heldOfGroup.end();
          if (count != heldOfGroup.end()) {
            members = count->second;
          } else {
            StatusOr<uint32_t> present = membersHeld(*mesh, named->first, held);
            if (!present)
              return present.takeStatus();
            members = *present;
            if (collective)
              heldOfGroup.emplace(group, members);
          }
        }
        // One launch alone in its instance (a representative's collective
        // over an axis the plan holds no other rank of) meets no other:
        // no need to look it up.
        if (members == 1) {
          of[c][i] = int64_t(instances.members.size());
          instances.members.push_back(1);
          continue;
        }
        auto [it, inserted] =
            ids.try_emplace(named->first, int64_t(instances.members.size()));
        if (inserted)
          instances.members.push_back(members);
        of[c][i] = it->second;
      }
    }
  }
  return instances;
}
