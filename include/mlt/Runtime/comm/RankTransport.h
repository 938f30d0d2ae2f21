//===- RankTransport.h - host bytes from one rank to another ----*- C++ -*-===//
//
// Part of mlt. When the ranks of a run are processes (one per GPU), the host
// of one rank cannot read another rank's buffers, as the in-process ranks
// do. A RankTransport moves host bytes between two ranks' processes; it
// serves what happens around training rather than in it (gathering whole
// tensors on rank 0 for checkpoints and gradient dumps), so it is simple and
// blocking rather than fast. The NCCL communicator implements it
// (NcclCommunicator.h); tests implement it between threads.
//
// Invariants: `send(to, ...)` on one rank and `receive(from, ...)` on the
// other form a pair, with the same byte count; the pairs between two ranks
// match in the order they are issued. Both calls block until their side is
// done (the sender may reuse its data, the receiver's data is filled).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_RANKTRANSPORT_H
#define MLT_RUNTIME_RANKTRANSPORT_H

#include "mlt/Support/Status.h"

#include <cstddef>

namespace mlt::rt {

class RankTransport {
public:
  virtual ~RankTransport() = default;

  /// Sends `bytes` of host memory at `data` to world rank `toRank`.
  virtual Status send(int toRank, const void *data, size_t bytes) = 0;
  /// Receives `bytes` from world rank `fromRank` into host memory at `data`.
  virtual Status receive(int fromRank, void *data, size_t bytes) = 0;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_RANKTRANSPORT_H
