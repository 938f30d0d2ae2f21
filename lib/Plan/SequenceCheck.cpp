//===- SequenceCheck.cpp - the positions rope and attention read ---------===//
//
// Part of mlt. Two checks of the training contract (TrainingContract.cpp)
// on context parallelism, whose mistakes train a model with scrambled
// positions that no loss would show at once: the order the tokens are fed
// in against the positions each rope and attention launch counts, and, for
// the ring exchange, that the key/value block each ring step attends over is
// the one its ring_step names (the collective permutes that brought it
// there, counted).
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/Plan.h"

#include "VerifierSupport.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

/// The order the tokens are fed in (the model info's sequence_chunks)
/// against the positions the rope and attention launches read: a sequence
/// split over a context axis of G ranks is fed in the load-balanced order of
/// 2G chunks, and a load-balanced sequence has no launch that counts its
/// rows in natural order, but an attention whose queries and keys a
/// reorder_sequence, or an all_to_all into the natural order, put in natural
/// order (the all-to-all exchange's).
/// (Either mismatch trains a model whose positions are scrambled, which no
/// loss would show at once.)
Status mlt::rt::verifier::verifySequenceOrder(const Plan &plan) {
  const int64_t chunks = plan.model.sequenceChunks;
  for (const RankPlan &rank : plan.ranks) {
    // The buffers a reorder_sequence or an all_to_all writes in natural
    // order from the plan's load-balanced one.
    std::set<uint32_t> natural;
    for (const ProgramDesc &program : rank.programs)
      for (const InstructionDesc &inst : program.instructions)
        if (inst.kernel == Kernel::ReorderSequence) {
          using A = attrs::ReorderSequence;
          const KernelAttrs<A> a(inst);
          if (a[A::to_natural] == 1 && 2 * a[A::ranks] == chunks)
            natural.insert(inst.outputs[0]);
        } else if (inst.kernel == Kernel::AllToAll) {
          const CollectiveAttrs a = collectiveAttrs(inst);
          if (a.order == int64_t(BlockOrder::ToNatural) && a.axis >= 0 &&
              size_t(a.axis) < plan.mesh.size() &&
              2 * int64_t(plan.mesh[size_t(a.axis)].size) == chunks)
            natural.insert(inst.outputs[0]);
        }
    auto reordered = [&](const InstructionDesc &inst) {
      if (inst.kernel == Kernel::Rope)
        return false;
      // attention_fwd's q and k, the backward's (after dout).
      const size_t q = inst.kernel == Kernel::AttentionFwd ? 0 : 1;
      return natural.count(inst.inputs[q]) && natural.count(inst.inputs[q + 1]);
    };
    for (const ProgramDesc &program : rank.programs)
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        if (inst.kernel != Kernel::Rope && inst.kernel != Kernel::AttentionFwd &&
            inst.kernel != Kernel::AttentionBwd &&
            inst.kernel != Kernel::AttentionBwdRope)
          continue;
        const int64_t axis = contextAxis(inst);
        auto fail = [&](auto &&...parts) {
          return errorf("rank ", rank.rank, ": program '", program.name,
                        "' instruction ", i, " (", kernelName(inst.kernel),
                        ") ", parts...);
        };
        // (The plan verifier checked the axis against the mesh.)
        const int64_t want =
            axis >= 0 && size_t(axis) < plan.mesh.size()
                ? 2 * int64_t(plan.mesh[size_t(axis)].size)
                : 0;
        if (want != chunks && !(axis < 0 && reordered(inst)))
          return axis >= 0
                     ? fail("reads positions of a sequence split over mesh "
                            "axis '", plan.mesh[size_t(axis)].name,
                            "' in the load-balanced order of ", want,
                            " chunks, but the plan feeds the tokens ",
                            chunks ? "in " + std::to_string(chunks) +
                                         " chunks"
                                   : std::string("in natural order"))
                     : fail("counts positions in natural order, but the "
                            "plan feeds the tokens in the load-balanced "
                            "order of ", chunks, " chunks",
                            inst.kernel == Kernel::Rope
                                ? ""
                                : " (and no reorder_sequence or all_to_all "
                                  "put its queries and keys in natural "
                                  "order)");
      }
  }
  return Status::ok();
}

namespace {

/// Where a buffer's contents come from along a mesh axis: the block of the
/// rank `hops` places before this one (the sum of the shifts of the
/// collective permutes that brought it, modulo the axis's size), or, with
/// `axis` -1, this rank's own (no permute wrote it).
struct Travel {
  int64_t axis = -1;
  int64_t hops = 0;
  bool operator==(const Travel &other) const {
    return axis == other.axis && hops == other.hops;
  }
};

/// The travel of every buffer of `rank` that a collective_permute writes,
/// followed back through chains of permutes; nothing for a buffer whose
/// writers disagree (its travel is unknown).
class TravelOf {
public:
  TravelOf(const Plan &plan, const RankPlan &rank) : plan_(plan) {
    for (const ProgramDesc &program : rank.programs)
      for (const InstructionDesc &inst : program.instructions)
        for (uint32_t out : inst.outputs)
          writers_[out].push_back(&inst);
  }

  std::optional<Travel> operator()(uint32_t buffer) {
    auto found = memo_.find(buffer);
    if (found != memo_.end())
      return found->second;
    memo_[buffer] = std::nullopt; // a cycle of permutes: unknown
    std::optional<Travel> travel = compute(buffer);
    memo_[buffer] = travel;
    return travel;
  }

private:
  std::optional<Travel> compute(uint32_t buffer) {
    auto it = writers_.find(buffer);
    if (it == writers_.end())
      return Travel(); // an input or state of the rank's own
    std::optional<Travel> agreed;
    for (const InstructionDesc *inst : it->second) {
      Travel travel;
      if (inst->kernel == Kernel::CollectivePermute) {
        const CollectiveAttrs permute = collectiveAttrs(*inst);
        std::optional<Travel> from = (*this)(inst->inputs[0]);
        if (!from || (from->axis >= 0 && from->axis != permute.axis) ||
            permute.axis < 0 || size_t(permute.axis) >= plan_.mesh.size())
          return std::nullopt;
        const int64_t size = plan_.mesh[size_t(permute.axis)].size;
        travel = {permute.axis, (from->hops + permute.shift) % size};
        if (travel.hops == 0)
          travel = Travel(); // round the ring: home again
      }
      if (agreed && !(*agreed == travel))
        return std::nullopt;
      agreed = travel;
    }
    return agreed;
  }

  const Plan &plan_;
  std::map<uint32_t, std::vector<const InstructionDesc *>> writers_;
  std::map<uint32_t, std::optional<Travel>> memo_;
};

} // namespace

Status mlt::rt::verifier::verifyRingSteps(const Plan &plan) {
  for (const RankPlan &rank : plan.ranks) {
    TravelOf travelOf(plan, rank);
    for (const ProgramDesc &program : rank.programs)
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        if (inst.kernel != Kernel::AttentionFwd &&
            inst.kernel != Kernel::AttentionBwd &&
            inst.kernel != Kernel::AttentionBwdRope)
          continue;
        // ring and ring_step sit alike in the three kernels' ints.
        using A = attrs::AttentionFwd;
        const KernelAttrs<A> a(inst);
        const int64_t axis = contextAxis(inst);
        // The ring's other checks (axis, ring_step < G) are the kernel
        // rules'; q, then k and v, follow dout in the backward.
        const size_t q = inst.kernel == Kernel::AttentionFwd ? 0 : 1;
        auto fail = [&](auto &&...parts) {
          return errorf("rank ", rank.rank, ": program '", program.name,
                        "' instruction ", i, " (", kernelName(inst.kernel),
                        ") ", parts...);
        };
        const char *roles[] = {"queries", "keys", "values"};
        for (size_t role = 0; role < 3; ++role) {
          const uint32_t buffer = inst.inputs[q + role];
          const std::string name = rank.buffers[buffer].name;
          std::optional<Travel> travel = travelOf(buffer);
          if (!travel)
            return fail("reads ", roles[role], " '", name,
                        "', written by collective permutes whose blocks "
                        "disagree or by permutes over another axis");
          const int64_t want = role == 0 || a[A::ring] == 0 ? 0 : a[A::ring_step];
          if (travel->hops == want &&
              (travel->axis == axis || travel->axis < 0))
            continue;
          auto axisName = [&](int64_t index) {
            return index >= 0 && size_t(index) < plan.mesh.size()
                       ? "'" + plan.mesh[size_t(index)].name + "'"
                       : std::to_string(index);
          };
          const std::string held =
              travel->hops == 0
                  ? std::string("its own block")
                  : "the block of the rank " + std::to_string(travel->hops) +
                        " places before it on axis " +
                        axisName(travel->axis) + " (moved by collective "
                        "permutes)";
          if (role == 0 || a[A::ring] == 0)
            return fail("attends from its own block, but its ", roles[role],
                        " '", name, "' are ", held);
          return fail("is ring step ", a[A::ring_step], " over axis ",
                      axisName(axis), " (the block of the rank ",
                      a[A::ring_step], " places before it), but its ",
                      roles[role], " '", name, "' are ", held);
        }
      }
  }
  return Status::ok();
}
