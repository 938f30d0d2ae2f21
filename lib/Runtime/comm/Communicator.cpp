//===- Communicator.cpp - collectives over mesh axes ----------------------===//
//
// Part of mlt. What every backend shares: the description of a transfer for
// messages, and the checks of one rank's arguments (the rules at the top of
// Communicator.h). The names and descriptions of collective calls are the
// plan library's (Collective.h).
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/comm/Communicator.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

bool isSummable(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::BF16;
}

bool isReduction(CollectiveKind kind) {
  return kind == CollectiveKind::AllReduceSum ||
         kind == CollectiveKind::ReduceScatterSum;
}

/// Whether the byte ranges [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlap(const void *a, size_t aBytes, const void *b, size_t bBytes) {
  auto lo = reinterpret_cast<uintptr_t>(a);
  auto hi = reinterpret_cast<uintptr_t>(b);
  if (aBytes == 0 || bBytes == 0)
    return false;
  return lo < hi + bBytes && hi < lo + aBytes;
}

} // namespace

Communicator::~Communicator() = default;

Status mlt::rt::checkCollectiveCall(const CollectiveCall &call, int groupSize,
                                    int index) {
  if (isReduction(call.kind) && !isSummable(call.dtype))
    return errorf(collectiveKindName(call.kind), " cannot sum ",
                  elementTypeName(call.dtype), " (only f32, f64 and bf16)");
  if (call.elementBytes() == 0)
    return errorf(collectiveKindName(call.kind), ": unknown element type ",
                  static_cast<int>(call.dtype));
  if (call.kind == CollectiveKind::Broadcast &&
      (call.root < 0 || call.root >= groupSize))
    return errorf("broadcast root index ", call.root,
                  " is outside the group of ", groupSize, " ranks");
  if (call.kind == CollectiveKind::Permute &&
      (call.shift <= 0 || call.shift >= groupSize))
    return errorf("permute shift ", call.shift, " is outside [1, ", groupSize,
                  ") for a group of ", groupSize, " ranks");
  if (call.order != BlockOrder::Blocks) {
    if (call.kind != CollectiveKind::AllToAll)
      return errorf(collectiveKindName(call.kind), " has no order of blocks (",
                    blockOrderName(call.order), "); only all_to_all has");
    if (call.order != BlockOrder::ToNatural &&
        call.order != BlockOrder::FromNatural)
      return errorf("all_to_all: unknown order of blocks ",
                    static_cast<int>(call.order));
    if (call.count % 2 != 0)
      return errorf("all_to_all ", blockOrderName(call.order), ": a block of ",
                    call.count, " elements does not split into two chunks");
  }

  size_t elementBytes = call.elementBytes();
  if (call.count > std::numeric_limits<size_t>::max() / elementBytes /
                       static_cast<size_t>(groupSize))
    return errorf(collectiveKindName(call.kind), " of ", call.count,
                  " elements per rank overflows the address space");
  if (call.count == 0)
    return Status::ok();

  const char *name = collectiveKindName(call.kind);
  if (call.in == nullptr)
    return errorf(name, " input is null with a count of ", call.count);
  if (call.out == nullptr)
    return errorf(name, " output is null with a count of ", call.count);

  size_t inBytes = call.inCount(groupSize) * elementBytes;
  size_t outBytes = call.outCount(groupSize) * elementBytes;
  size_t chunkBytes = call.count * elementBytes;
  auto in = static_cast<const uint8_t *>(call.in);
  auto out = static_cast<const uint8_t *>(call.out);
  switch (call.kind) {
  case CollectiveKind::AllReduceSum:
  case CollectiveKind::Broadcast:
    if (in == out)
      return Status::ok();
    break;
  case CollectiveKind::ReduceScatterSum:
    if (out == in + index * chunkBytes)
      return Status::ok();
    break;
  case CollectiveKind::AllGather:
    if (in == out + index * chunkBytes)
      return Status::ok();
    break;
  case CollectiveKind::AllToAll:
  case CollectiveKind::Permute:
    break; // never in place
  }
  if (overlap(in, inBytes, out, outBytes))
    return errorf(name, " input and output overlap without being in place");
  return Status::ok();
}

std::string PointToPoint::describe() const {
  const bool send = kind == TransferKind::Send;
  return std::string(send ? "send" : "receive") + " of " +
         std::to_string(count) + " " + elementTypeName(dtype) +
         (send ? " to index " : " from index ") + std::to_string(peer);
}

Status mlt::rt::checkExchange(const std::vector<PointToPoint> &transfers,
                              int groupSize) {
  for (size_t i = 0; i < transfers.size(); ++i) {
    const PointToPoint &transfer = transfers[i];
    auto fail = [&](auto &&...parts) {
      return errorf("transfer #", i, " (", transfer.describe(),
                    "): ", parts...);
    };
    if (transfer.peer < 0 || transfer.peer >= groupSize)
      return fail("index ", transfer.peer, " is outside the group of ",
                  groupSize, " ranks");
    const size_t elementBytes = elementSize(transfer.dtype);
    if (elementBytes == 0)
      return fail("unknown element type ", static_cast<int>(transfer.dtype));
    if (transfer.count > std::numeric_limits<size_t>::max() / elementBytes)
      return fail("the size overflows the address space");
    if (transfer.count != 0 && transfer.buffer == nullptr)
      return fail("the buffer is null with a count of ", transfer.count);
  }
  // The transfers of one exchange run in no order: a receive's buffer may
  // share no byte with another transfer's. Sorted by address, each buffer
  // is compared with those that start before it ends.
  std::vector<size_t> order;
  for (size_t i = 0; i < transfers.size(); ++i)
    if (transfers[i].bytes() != 0)
      order.push_back(i);
  auto begin = [&](size_t i) {
    return reinterpret_cast<uintptr_t>(transfers[i].buffer);
  };
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return begin(a) < begin(b); });
  for (size_t x = 0; x < order.size(); ++x)
    for (size_t y = x + 1;
         y < order.size() &&
         begin(order[y]) < begin(order[x]) + transfers[order[x]].bytes();
         ++y) {
      size_t i = std::min(order[x], order[y]), j = std::max(order[x], order[y]);
      if (transfers[j].kind == TransferKind::Receive)
        std::swap(i, j);
      if (transfers[i].kind != TransferKind::Receive)
        continue;
      return errorf("transfer #", i, " (", transfers[i].describe(),
                    ") writes bytes that transfer #", j, " (",
                    transfers[j].describe(),
                    ") touches; the transfers of an exchange are not "
                    "ordered");
    }
  return Status::ok();
}
