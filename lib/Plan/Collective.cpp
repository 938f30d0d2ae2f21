//===- Collective.cpp - one rank's side of a collective -------------------===//
//
// Part of mlt. The names of the collectives and the description of a call
// for messages (Collective.h): what the plan verifier and every
// Communicator print.
//
//===----------------------------------------------------------------------===//

#include "mlt/Plan/Collective.h"

using namespace mlt::rt;

const char *mlt::rt::collectiveKindName(CollectiveKind kind) {
  switch (kind) {
  case CollectiveKind::AllReduceSum:
    return "all_reduce_sum";
  case CollectiveKind::ReduceScatterSum:
    return "reduce_scatter_sum";
  case CollectiveKind::AllGather:
    return "all_gather";
  case CollectiveKind::Broadcast:
    return "broadcast";
  case CollectiveKind::AllToAll:
    return "all_to_all";
  case CollectiveKind::Permute:
    return "permute";
  }
  return "unknown";
}

const char *mlt::rt::blockOrderName(BlockOrder order) {
  switch (order) {
  case BlockOrder::Blocks:
    return "blocks";
  case BlockOrder::ToNatural:
    return "to_natural";
  case BlockOrder::FromNatural:
    return "from_natural";
  }
  return "unknown";
}

size_t CollectiveCall::elementBytes() const { return elementSize(dtype); }

size_t CollectiveCall::inCount(int groupSize) const {
  return kind == CollectiveKind::ReduceScatterSum ||
                 kind == CollectiveKind::AllToAll
             ? count * groupSize
             : count;
}

size_t CollectiveCall::outCount(int groupSize) const {
  return kind == CollectiveKind::AllGather || kind == CollectiveKind::AllToAll
             ? count * groupSize
             : count;
}

bool CollectiveCall::matches(const CollectiveCall &other) const {
  return kind == other.kind && dtype == other.dtype && count == other.count &&
         root == other.root && shift == other.shift &&
         order == other.order;
}

std::string CollectiveCall::describe() const {
  std::string text = std::string(collectiveKindName(kind)) + " of " +
                     std::to_string(count) + " " + elementTypeName(dtype);
  if (kind == CollectiveKind::ReduceScatterSum ||
      kind == CollectiveKind::AllGather || kind == CollectiveKind::AllToAll)
    text += " per rank";
  if (kind == CollectiveKind::Broadcast)
    text += " from index " + std::to_string(root);
  if (kind == CollectiveKind::Permute)
    text += " by " + std::to_string(shift);
  if (order == BlockOrder::ToNatural)
    text += " into the natural order";
  if (order == BlockOrder::FromNatural)
    text += " from the natural order";
  return text;
}
