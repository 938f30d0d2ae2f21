//===- NcclCommunicator.h - collectives between GPUs over NCCL --*- C++ -*-===//
//
// Part of mlt. The Communicator of a rank that is a process of its own on
// one GPU (started by mpirun, one process per GPU): NCCL communicators over
// the plan's mesh, created once per process and handed to the rank's
// Executor, whose CUDA device context sends its collectives and its
// transfer groups (sends and receives) through it.
//
// Communicators. One world communicator (ncclCommInitRank over every rank,
// from one ncclUniqueId that rank 0 creates and the launcher distributes)
// and, per mesh axis, one communicator of the rank's group on that axis,
// split from the world one (ncclCommSplit with color = the lowest world rank
// of the group, key = the rank's coordinate on the axis), so that a rank's
// NCCL rank in an axis communicator is its index in the group (Mesh::groupOf)
// and NCCL's in-place forms are exactly Communicator.h's. The world
// communicator serves `barrier` and the RankTransport (point-to-point
// copies for gathering checkpoints on rank 0).
//
// Streams: why a subclass. Communicator::collective(axis, call) has no
// stream, and a GPU collective must be ordered against the kernels around
// it without the host waiting. So the CUDA backend does not call it: it
// finds this class with dynamic_cast on its rank's communicator and calls
// `enqueue(axis, call, stream)`. The device context owns the streams: a
// compute stream and a communication stream, and before each collective it
// records an event on the compute stream for the communication stream to
// wait on, after it one on the communication stream for the compute stream
// to wait on (lib/Runtime/cuda/Collectives.h); a transfer group it queues
// on the compute stream itself (`enqueueExchange`). This class owns only
// the NCCL communicators and queues on whatever stream it is given. The base
// class's blocking calls (allReduceSum, ..., barrier) run on a stream of the
// communicator's own and return when the collective has finished; they
// order nothing against other streams, so their buffers must be ready
// (tests and host tools synchronize first).
//
// Errors. Every NCCL and CUDA call is checked and reported as one line
// naming the call, with NCCL's own message (ncclGetLastError) when it has
// one. NCCL reports some errors asynchronously (a peer gone, a network
// failure); `checkAsyncErrors` reads them, and `waitForStream` waits for a
// stream by polling, checking them in between, so that a broken
// communicator ends the wait with a Status instead of hanging it. Any NCCL
// failure aborts every communicator of the rank (ncclCommAbort), so that
// the rank's in-flight collectives stop; after an abort every call fails.
// NCCL does not tell the peers: a rank that stops must also end its peers'
// processes (the launcher does: mpirun kills the job when one process calls
// MPI_Abort; see MpiBootstrap.h).
//
// Point to point. `enqueueExchange` queues one group of sends and receives
// as ncclGroupStart, one ncclSend or ncclRecv per transfer (bytes, as
// ncclUint8) on the axis communicator, the peer by its NCCL rank there (its
// index in the group), and ncclGroupEnd: NCCL posts them together, which is
// Communicator.h's "Blocking" (a send to and a receive from each neighbour
// in one group cannot deadlock), and matches the sends and receives of a
// pair of ranks in order. NCCL cannot tell a count or type mismatch (a
// larger receive waits, a smaller one is an error or truncates): the plan
// verifier proves matching. Stream capture records the group as graph
// nodes, as it does the collectives.
//
// Determinism. NCCL chooses its own reduction order, so sums match the
// in-process communicator's (group-order) sums only up to rounding; every
// rank of a group still gets the same bits (each chunk is reduced once and
// copied). bf16 sums are NCCL's (ncclBfloat16).
//
// Registered memory. A rank's arena, which holds every buffer its plan
// communicates, is allocated by NCCL (ncclMemAlloc: CUDA's virtual memory
// API, which other processes can map) and registered with each of the
// rank's communicators (ncclCommRegister). Collectives whose buffers lie in
// registered memory on every rank of the group then read and write the
// peers' buffers directly over NVLink instead of staging every chunk
// through NCCL's own buffers (NCCL's "IPC registration", intra-node): fewer
// bytes through device memory and fewer of NCCL's thread blocks beside the
// compute kernels that the collectives overlap. MLT_NCCL_REGISTER=0 turns
// it off (plain cudaMalloc, as before); the results are the same bits
// either way (checked on two GPUs, gpu-multi.sh).
//
// NVLink multicast (NVLS) must stay off on the shared machines this runs on:
// creating a communicator sets NCCL_NVLS_ENABLE=0 in the process
// environment first, unless it is already set.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_NCCLCOMMUNICATOR_H
#define MLT_RUNTIME_NCCLCOMMUNICATOR_H

#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Runtime/comm/RankTransport.h"

#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace mlt::rt {

/// A Communicator whose collectives run on a CUDA device and can be queued
/// on a stream; see "Streams" above.
class CudaCommunicator : public Communicator, public RankTransport {
public:
  /// The CUDA device the communicators were created on; the rank's device
  /// context runs there.
  int device() const { return device_; }

  /// Queues `call` over `axis` on `stream` (the device's memory; the caller
  /// orders the stream against the producers and consumers of the buffers)
  /// and returns without waiting. Checks the call as checkCollectiveCall
  /// does for this rank (mismatches between ranks are the plan verifier's
  /// to catch: NCCL cannot see them). A count of 0 queues nothing.
  virtual Status enqueue(std::string_view axis, const CollectiveCall &call,
                         cudaStream_t stream) = 0;

  /// Queues `transfers`, a point-to-point group over `axis` (device memory),
  /// on `stream` as one NCCL group (see "Point to point" above) and returns
  /// without waiting. Checks them as checkExchange does; transfers of count
  /// 0 queue nothing.
  virtual Status enqueueExchange(std::string_view axis,
                                 const std::vector<PointToPoint> &transfers,
                                 cudaStream_t stream) = 0;

  /// Ok while every communicator is healthy; otherwise aborts them all and
  /// fails with NCCL's asynchronous error ("NCCL: remote process exited or
  /// there was a network error ..."). Also fails after `abort`.
  virtual Status checkAsyncErrors() = 0;

  /// Waits until `stream` has finished its work, like cudaStreamSynchronize,
  /// but polling: between polls it checks the communicators' asynchronous
  /// errors and fails with them (aborted) rather than wait for a collective
  /// that cannot finish. `cudaResult` receives the stream's CUDA status
  /// (cudaSuccess, or the fault that ended it); the Status reports NCCL.
  virtual Status waitForStream(cudaStream_t stream,
                               cudaError_t &cudaResult) = 0;

  /// Aborts every communicator of this rank (ncclCommAbort): collectives in
  /// flight stop, and every later call fails with "collectives aborted:
  /// <message>". Idempotent (the first message stays). May be called from
  /// another thread than the rank's (the hang watchdog's): it waits for a
  /// NCCL call of the rank's thread to return, and a wait polling the
  /// stream (waitForStream) then fails with the abort.
  virtual void abort(const std::string &message) = 0;
  virtual bool isAborted() const = 0;

  /// `bytes` of device memory registered with every communicator of this
  /// rank (see "Registered memory" above), or an error naming the call that
  /// failed. NCCL wants every rank of a group to pass registered buffers or
  /// none: every rank allocates its arena alike.
  virtual StatusOr<void *> allocateRegistered(size_t bytes) = 0;
  /// Deregisters (unless aborted) and frees memory of allocateRegistered;
  /// the caller has waited for every collective that uses it.
  virtual void freeRegistered(void *memory) = 0;

protected:
  CudaCommunicator(Mesh mesh, int rank, int device)
      : Communicator(std::move(mesh), rank), device_(device) {}

private:
  int device_;
};

/// NCCL's rendezvous token (ncclUniqueId): rank 0 creates it, and every rank
/// must receive the same bytes before creating its communicator.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

/// A fresh unique id (ncclGetUniqueId); on rank 0 only.
StatusOr<NcclUniqueId> createNcclUniqueId();

/// "2.28.3": the version of the NCCL library loaded at run time.
std::string ncclLibraryVersion();

/// Creates rank `rank`'s communicators over `mesh` on CUDA device `device`
/// (made current on the calling thread), as described above. Collective
/// over the world: every rank must call it with the same `id` and mesh, and
/// it returns when all have joined (or fails on this rank, having released
/// what it created; peers blocked in it must then be ended by the launcher).
StatusOr<std::unique_ptr<CudaCommunicator>>
createNcclCommunicator(const Mesh &mesh, int rank, int device,
                       const NcclUniqueId &id);

} // namespace mlt::rt

#endif // MLT_RUNTIME_NCCLCOMMUNICATOR_H
