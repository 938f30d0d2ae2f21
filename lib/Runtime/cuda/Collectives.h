//===- Collectives.h - a CUDA context's collectives over NCCL ---*- C++ -*-===//
//
// Part of mlt. What a CUDA device context adds to run collective
// instructions (all_reduce_sum, reduce_scatter_sum, all_gather) and transfer
// groups (send, recv) when its rank's communicator is a CudaCommunicator
// (NcclCommunicator.h): the communication stream, the two events that order
// it against the compute stream, and the wait that does not hang on a
// broken communicator.
//
// Ordering, for each collective, with no host synchronization:
//
//   compute stream:  ... k1  [record ready]              [wait done] k2 ...
//                                  \                          ^
//   comm stream:                  [wait ready] nccl(...) [record done]
//
// so the collective reads its input after every earlier launch wrote it,
// and every later launch (which may read its output, or reuse its buffers:
// the memory plan reuses arena space by lifetime) runs after it. The events
// are reused: cudaStreamWaitEvent waits for the event's most recent record
// at the time of the call, so each pair of calls orders exactly one
// collective. This serializes compute and communication: it is how the
// collectives of the plan's stream 0 run. A collective on another plan
// stream goes straight to that stream (launchOn), which the plan's tokens
// order against the compute stream (CudaContext.cpp), so that it overlaps
// the compute launches that do not depend on it.
//
// Transfer groups go on the compute stream itself, as one NCCL group
// (CudaCommunicator::enqueueExchange): pipeline stages have nothing to
// overlap them with inside a transfer call (a transfer program runs nothing
// else), and on one stream they need no events, inside a graph capture or
// not.
//
// Waiting: `wait` is the context's cudaStreamSynchronize. Once a collective
// has been queued it polls (CudaCommunicator::waitForStream), so an
// asynchronous NCCL error (a peer gone) returns as a Status, with the
// communicators aborted, instead of hanging the rank.
//
// Positions: when the hang watchdog watches the rank, each collective and
// transfer group comes with a PositionMark, and the device writes its place
// into the mark's word (kernels/position.h) on the stream the NCCL call
// goes to, right before it (entered) and right after it (left), so that
// the word says which collective the device is inside, captured or not.
// The same writes keep the stream's clock: the time spent inside them.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_COLLECTIVES_H
#define MLT_LIB_RUNTIME_CUDA_COLLECTIVES_H

#include "mlt/Runtime/cuda/NcclCommunicator.h"
#include "mlt/Runtime/exec/Backend.h"
#include "mlt/Support/Status.h"

#include <cuda_runtime.h>

#include <memory>
#include <string_view>
#include <vector>

namespace mlt::cuda {

/// Where the device writes its place around one collective or transfer
/// group (Position.h's device words): the word of its plan stream, by its
/// device address, and the launch's place; no word: the rank is not
/// watched, and nothing is written.
struct PositionMark {
  volatile uint64_t *word = nullptr;
  uint64_t place = 0;
  /// The stream's clock words (Position.h's "Waiting"): the device's time
  /// on entering, and the nanoseconds inside collectives, which leaving
  /// adds to.
  volatile uint64_t *clock = nullptr;
};

class CudaCollectives {
public:
  /// Creates the communication stream and the events on the current device
  /// (the communicator's).
  static StatusOr<std::unique_ptr<CudaCollectives>>
  create(rt::CudaCommunicator &communicator);
  ~CudaCollectives();
  CudaCollectives(const CudaCollectives &) = delete;
  CudaCollectives &operator=(const CudaCollectives &) = delete;

  rt::CudaCommunicator &communicator() const { return communicator_; }

  /// Queues collective instruction `inst` (ints: count, axis) on the
  /// communication stream, ordered after everything queued on `compute` so
  /// far and before everything queued there later.
  Status launch(const rt::InstructionDesc &inst, const rt::BufferView &in,
                const rt::BufferView &out, cudaStream_t compute,
                PositionMark mark = {});

  /// Queues collective instruction `inst` on `stream`, ordered only by that
  /// stream (the caller orders it against the others).
  Status launchOn(const rt::InstructionDesc &inst, const rt::BufferView &in,
                  const rt::BufferView &out, cudaStream_t stream,
                  PositionMark mark = {});

  /// Queues a transfer group over mesh axis `axis` on `compute`, in order
  /// with its launches.
  Status exchange(std::string_view axis,
                  const std::vector<rt::PointToPoint> &transfers,
                  cudaStream_t compute, PositionMark mark = {});

  /// Waits for `compute` (which, by the ordering above, waits for every
  /// collective queued before its last launch): plain cudaStreamSynchronize
  /// until the first collective, then the communicator's polling wait.
  /// `cudaResult` gets the stream's status; the Status reports NCCL.
  Status wait(cudaStream_t compute, cudaError_t &cudaResult);

private:
  explicit CudaCollectives(rt::CudaCommunicator &communicator)
      : communicator_(communicator) {}

  rt::CudaCommunicator &communicator_;
  cudaStream_t stream_ = nullptr;
  /// Recorded on the compute stream before a collective, and on the
  /// communication stream after it.
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  bool launchedAny_ = false;
};

/// The collective cases of the CUDA context's launch switch: through
/// `collectives` when the rank has a CUDA communicator (on `side`, a plan
/// stream, when given; else ordered against `compute` by events); otherwise
/// an error saying how to run collectives on GPUs (one process per GPU,
/// mpirun).
Status launchCollective(CudaCollectives *collectives,
                        const rt::InstructionDesc &inst,
                        const rt::BufferView &in, const rt::BufferView &out,
                        cudaStream_t compute, cudaStream_t side = nullptr,
                        PositionMark mark = {});

/// A transfer group on the CUDA context: through `collectives` when the rank
/// has a CUDA communicator, on `compute`; otherwise an error saying how to
/// run transfers on GPUs.
Status launchExchange(CudaCollectives *collectives, std::string_view axis,
                      const std::vector<rt::PointToPoint> &transfers,
                      cudaStream_t compute, PositionMark mark = {});

/// The device a rank's context runs on when its communicator is a
/// CudaCommunicator (that communicator's device); -1 otherwise.
int communicatorDevice(const rt::RankInfo &rank);

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_COLLECTIVES_H
