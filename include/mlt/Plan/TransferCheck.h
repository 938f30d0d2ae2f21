//===- TransferCheck.h - sends and receives of a plan, checked --*- C++ -*-===//
//
// Part of mlt. The plan verifier's checks of point-to-point transfers
// (Kernels.def's "Transfers"): on each rank, that every send and receive
// has its peer inside its mesh axis, that transfer programs hold nothing
// but transfers, on stream 0, over one axis, and that no transfer of a
// transfer group writes a byte another one of the group touches; across
// ranks, that the sends of every ordered pair of ranks meet the receives
// of the other, in order, of the same count and type, and that the step
// cannot deadlock.
//
// Deadlock. Each rank's step, as far as it can block, is a sequence of
// events: its transfer groups, each posted whole and completed once every
// one of its transfers' matching peer transfers has been posted (a receive
// needs its send, a send its receive: NCCL's rendezvous, which also covers
// a buffered send), and its collective launches, each completed once every
// rank of its axis group has reached the same collective (the collectives'
// order is checked to match first). Whatever else a rank runs only takes
// time. The check plays the events out: any rank whose current event can
// complete moves on, until every rank is done or none can move. Whether an
// event can complete only grows as the other ranks move on, so the ranks
// where it stops do not depend on the order it moves them in: those are
// the ranks that can deadlock, whatever the timing (and the check names
// each, with what it waits for).
//
// The algorithm (simulateStep) keeps, for every rank, how many conditions
// of its current event are unmet, and for every (rank, event) the ranks
// waiting for that rank to reach that event: each transfer is looked at
// once when its group is reached and once when its peer arrives, each
// collective counts its arrivals, so a step of E events and T transfers
// takes O(E + T) (with map lookups). simulateStepNaive, the reference it is
// tested against on random steps, sweeps over all ranks until nothing
// moves, recomputing every condition from scratch.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_PLAN_TRANSFERCHECK_H
#define MLT_PLAN_TRANSFERCHECK_H

#include "mlt/Plan/Mesh.h"
#include "mlt/Plan/Plan.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace mlt::rt {

/// One rank's transfers (part of verifyRank, after its instructions and
/// step are verified): every send's and receive's peer coordinate (this
/// rank's on the transfer's axis plus its shift) inside the axis; transfer
/// programs that launch only sends and receives, on stream 0, over one mesh
/// axis; and in every transfer group of the step (and every transfer
/// program run alone, with copy 0 of each buffer), one mesh axis and no
/// transfer writing a byte that another transfer of the group touches,
/// each call's operands at the copies its micro-batch and slot select.
/// Each failure names the rank, the program (or the calls) and the
/// instruction.
Status verifyRankTransfers(const RankPlan &rank,
                           const std::vector<MeshAxis> &mesh);

/// The transfers across ranks (part of verifyPlanStructure, after every
/// rank and the collectives have been checked), in each step (the training
/// step, then the evaluation step): for every ordered pair of ranks (src,
/// dst), src's sends to dst over its step equal dst's receives from src,
/// in order, with the same count and element type (the first unmatched
/// transfer is named); and the step cannot deadlock (see the top of this
/// file; the ranks that would wait forever are named, with what they wait
/// for).
Status verifyTransfers(const Plan &plan, const Mesh &mesh);

namespace transfer_check {

/// The deadlock check's view of a step: per rank, the events it may block
/// in, in order.
struct BlockingEvent {
  /// One send or receive of a transfer group, with its peer's world rank.
  struct Transfer {
    bool send = false;
    uint32_t peer = 0;
  };
  /// A transfer group's transfers (never empty); empty for a collective.
  std::vector<Transfer> transfers;
  /// A collective's mesh axis and the world ranks of its group, in group
  /// order; none for a transfer group. Each member's k-th collective on
  /// the axis is the same collective. (One list for all the rank's
  /// collectives on the axis: a group is as large as its axis, thousands
  /// of ranks, and a rank launches thousands of collectives.)
  size_t axis = 0;
  std::shared_ptr<const std::vector<uint32_t>> group;
  /// Where it comes from, for messages: its (first) call in the step, its
  /// instruction (a collective's), and its number among the rank's transfer
  /// groups or among its collectives on its axis.
  size_t call = 0;
  size_t instruction = 0;
  size_t ordinal = 0;

  bool isCollective() const { return group && !group->empty(); }
  /// The group's ranks (none for a transfer group).
  const std::vector<uint32_t> &members() const {
    static const std::vector<uint32_t> none;
    return group ? *group : none;
  }
};
using StepEvents = std::vector<std::vector<BlockingEvent>>;

/// The events of every rank's step of `kind` of a plan that verifyRank
/// accepted.
StepEvents stepEvents(const Plan &plan, const Mesh &mesh,
                      StepKind kind = StepKind::Training);

/// Plays `events` out (see the top of this file) and returns, for every
/// rank, the index of the event it stops at: events[r].size() when it
/// finishes its step. A transfer without a matching transfer on its peer
/// never completes.
std::vector<size_t> simulateStep(const StepEvents &events);

/// The same by sweeping over the ranks until nothing moves, every condition
/// recomputed from the events each time: the reference simulateStep is
/// tested against (quadratic or worse; small steps only).
std::vector<size_t> simulateStepNaive(const StepEvents &events);

} // namespace transfer_check

} // namespace mlt::rt

#endif // MLT_PLAN_TRANSFERCHECK_H
