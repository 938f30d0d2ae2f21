//===- Communicator.h - collectives over mesh axes --------------*- C++ -*-===//
//
// Part of mlt. A `Communicator` is one rank's handle on the collectives of a
// run laid out on a `Mesh`: all-reduce, reduce-scatter, all-gather and
// broadcast over one named mesh axis, a barrier over the whole mesh, and
// point-to-point exchanges (sends and receives between members of an axis
// group, which pipeline stages use). The in-process implementation
// (InProcessComm.h) runs N ranks as N threads; the NCCL one
// (NcclCommunicator.h, one communicator per axis group) one process per GPU.
// A rank's side of a collective is a CollectiveCall (mlt/Plan/Collective.h,
// the plan library's: the plan verifier compares them across ranks).
//
// Invariants, for every implementation:
//
// - Who calls. Each rank owns one Communicator and calls it from one thread
//   at a time. The ranks call concurrently, each from its own thread (or
//   process).
// - Groups. A collective over axis `a` runs in the rank's group for `a`
//   (Mesh::groupOf): the ranks that share every other coordinate, in order
//   of their coordinate on `a`. `index` below is a rank's place in it.
// - Matching. Every rank of a group must issue the same collectives on that
//   axis, in the same order, with the same kind, element type, count and
//   root. Calls are blocking and wait for the whole group, so calls on
//   different axes must come in an order that cannot deadlock; every rank
//   issuing the same sequence of collectives (an SPMD plan) is enough.
//   `barrier` waits for every rank of the mesh.
// - Blocking. In-process, a call returns when `out` holds the result and no
//   other rank touches this rank's buffers any more. A device backend
//   returns when the collective is enqueued in order on the rank's
//   communication stream, and says so.
// - Buffers. `in` and `out` of one rank must not overlap, except in the
//   in-place forms NCCL accepts: all-reduce with in == out; reduce-scatter
//   with out == in + index * countPerRank elements; all-gather with
//   in == out + index * countPerRank elements. Buffers of different ranks
//   never overlap. A null buffer is allowed only with a count of 0.
// - Types. Sums take f32 (summed in f32), f64 (in f64) and bf16 (summed in
//   f32, rounded once to nearest even); all-gather and broadcast move any
//   element type (i32 included) as bytes.
// - Determinism. Element j of a sum is ((x0[j] + x1[j]) + x2[j]) + ... where
//   xk is the input of the group's k-th rank: always that order, so every
//   rank of the group gets bit-identical results, whatever the thread timing,
//   and reduce-scatter's chunks equal the same chunks of all-reduce. (NCCL's
//   own algorithms do not promise an order; a NCCL backend matches this only
//   up to rounding unless it reduces in group order itself.)
// - Errors. Every call returns a Status. Arguments that are wrong on some
//   rank of the group (an unsupported type, a null buffer, a bad overlap, a
//   root out of range), or kinds, types, counts or roots that differ within
//   the group, fail the call on every rank of the group with the same
//   one-line message; the in-process communicator stays usable afterwards.
//   An unknown axis fails on the calling rank alone. A rank that stops
//   issuing collectives early, for an error or any other reason, must abort
//   the world (InProcessWorld::abort; ncclCommAbort for NCCL), so that peers
//   blocked waiting for it return that error instead of hanging; after an
//   abort every call fails.
//
// Point to point. `exchange(axis, transfers)` posts a group of sends and
// receives between this rank and members of its group on `axis`, each peer
// named by its index in that group:
//
// - Who calls. Any rank of the group, with any transfers (a plan's transfer
//   group, Kernels.def); only the peers named take part, each from its own
//   thread or process, in its own exchange calls.
// - Matching. Each send to peer p matches, in order, the next receive from
//   this rank that p posts: the k-th send from rank a to rank b over the
//   communicator's life is b's k-th receive from a. Both have the same count
//   and element type (any type: bytes are moved).
// - Blocking. The transfers of one call are posted together, in no order
//   among themselves, and the call returns when all have completed: a
//   receive once its matching send has been posted and its bytes have
//   landed, a send once its matching receive has been posted. So a group
//   with a send to each neighbour and a receive from each cannot deadlock,
//   while two ranks that each wait to receive from the other in a call
//   before the one that holds their send do (the plan verifier proves a
//   step free of such cycles, TransferCheck.h). In process the bytes leave
//   the send buffer when it is posted. A device communicator also queues an
//   exchange on a stream and returns (CudaCommunicator::enqueueExchange);
//   the calls here wait for it.
// - Buffers. A null buffer is allowed only with a count of 0; a receive's
//   buffer overlaps no other buffer of its call.
// - Errors. A peer outside the group, an unknown axis or a bad argument
//   fails the call on this rank alone, before anything is posted. A send and
//   its matching receive that differ in count or type fail on both ranks,
//   each message naming both sides; the other transfers of both calls
//   complete, and the communicator stays usable (in process; NCCL cannot
//   see such a mismatch, which the plan verifier rules out). A rank blocked
//   in an exchange returns the abort's error once the world is aborted.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_COMMUNICATOR_H
#define MLT_RUNTIME_COMMUNICATOR_H

#include "mlt/Plan/Collective.h"
#include "mlt/Plan/ElementType.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Support/Status.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlt::rt {

/// Checks one rank's call against the rules above (type, null buffers,
/// overlap, root, sizes that fit in memory) for a rank at `index` of a group
/// of `groupSize`; the error names the problem, not the rank or the axis.
Status checkCollectiveCall(const CollectiveCall &call, int groupSize,
                           int index);

/// Whether a point-to-point transfer sends or receives.
enum class TransferKind : uint8_t { Send, Receive };

/// One send or receive of an exchange (see "Point to point" above).
struct PointToPoint {
  TransferKind kind = TransferKind::Send;
  /// The peer: its index in this rank's group on the exchange's axis
  /// (Mesh::groupOf).
  int peer = 0;
  ElementType dtype = ElementType::F32;
  size_t count = 0;
  /// `count` elements of `dtype`: read by a send, written by a receive.
  void *buffer = nullptr;

  /// count times the element size.
  size_t bytes() const { return count * elementSize(dtype); }
  /// "send of 4096 f32 to index 1", "receive of 8 i32 from index 0".
  std::string describe() const;
};

/// Checks the transfers of one exchange on an axis of `groupSize` ranks:
/// every peer inside the group, known element types, sizes that fit in
/// memory, a buffer unless the count is 0, and no receive's buffer
/// overlapping another transfer's. The error names the problem (and the
/// transfer, by its position), not the rank or the axis.
Status checkExchange(const std::vector<PointToPoint> &transfers, int groupSize);

/// One rank's collectives; see the invariants at the top of this file.
class Communicator {
public:
  virtual ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// This rank, in [0, mesh().worldSize()).
  int rank() const { return rank_; }
  const Mesh &mesh() const { return mesh_; }

  /// out[j] = sum over the group of in[j], j < count. In place (in == out)
  /// is allowed.
  Status allReduceSum(const void *in, void *out, size_t count,
                      ElementType dtype, std::string_view axis) {
    return collective(axis,
                      {CollectiveKind::AllReduceSum, dtype, count, 0, in, out});
  }

  /// `in` holds groupSize * countPerRank elements; out (countPerRank
  /// elements) gets chunk `index` of their sum over the group: out[j] =
  /// sum of in[index * countPerRank + j].
  Status reduceScatterSum(const void *in, void *out, size_t countPerRank,
                          ElementType dtype, std::string_view axis) {
    return collective(axis, {CollectiveKind::ReduceScatterSum, dtype,
                             countPerRank, 0, in, out});
  }

  /// `out` (groupSize * countPerRank elements) gets every rank's `in`
  /// (countPerRank elements), concatenated in group order.
  Status allGather(const void *in, void *out, size_t countPerRank,
                   ElementType dtype, std::string_view axis) {
    return collective(
        axis, {CollectiveKind::AllGather, dtype, countPerRank, 0, in, out});
  }

  /// `in` and `out` hold groupSize * countPerRank elements each, disjoint:
  /// block k of `in` goes to the rank of index k, and block k of `out` comes
  /// from it (that rank's block `index` of its `in`). With `order` ToNatural
  /// or FromNatural, the output's or the input's blocks lie as its
  /// BlockOrder says (countPerRank even).
  Status allToAll(const void *in, void *out, size_t countPerRank,
                  ElementType dtype, std::string_view axis,
                  BlockOrder order = BlockOrder::Blocks) {
    return collective(axis, {CollectiveKind::AllToAll, dtype, countPerRank, 0,
                             in, out, 0, order});
  }

  /// `out` (count elements, disjoint from `in`) gets the `in` of the rank
  /// `shift` places before this one in the group, cyclically; this rank's
  /// `in` goes to the rank `shift` places after it (0 < shift < group size).
  Status permute(const void *in, void *out, size_t count, ElementType dtype,
                 std::string_view axis, int shift) {
    return collective(axis, {CollectiveKind::Permute, dtype, count, 0, in, out,
                             shift});
  }

  /// Every rank's `buffer` (count elements) gets the buffer of the rank at
  /// index `rootIndexInGroup` of the group.
  Status broadcast(void *buffer, size_t count, ElementType dtype,
                   std::string_view axis, int rootIndexInGroup) {
    return collective(axis, {CollectiveKind::Broadcast, dtype, count,
                             rootIndexInGroup, buffer, buffer});
  }

  /// Returns once every rank of the mesh has called barrier.
  virtual Status barrier() = 0;

  /// Posts `transfers`, sends and receives between this rank and members of
  /// its group on `axis`, together, and returns once all have completed
  /// (see "Point to point" above). An empty exchange returns at once.
  virtual Status exchange(std::string_view axis,
                          const std::vector<PointToPoint> &transfers) = 0;

protected:
  Communicator(Mesh mesh, int rank) : mesh_(std::move(mesh)), rank_(rank) {}

  /// Runs `call` in this rank's group for `axis`.
  virtual Status collective(std::string_view axis,
                            const CollectiveCall &call) = 0;

private:
  Mesh mesh_;
  int rank_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_COMMUNICATOR_H
