//===- Backend.h - where a rank's instructions run --------------*- C++ -*-===//
//
// Part of mlt. The executor is device-independent; a backend supplies the
// device. A `Backend` is a kind of device (CPU, later CUDA) shared by every
// rank of a process; it checks that it can run a rank's plan and creates one
// `DeviceContext` per rank. The context is the rank's whole device state: its
// memory, scratch space, the Communicator its collective kernels go through,
// and (on CUDA) device, streams and library handles. There is no global
// state, so N ranks are N contexts, each driven by its own thread (in
// process, over an InProcessWorld) or by its own process (one per GPU, over
// NCCL).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_BACKEND_H
#define MLT_RUNTIME_BACKEND_H

#include "mlt/Plan/Plan.h"
#include "mlt/Plan/SequenceOrder.h"
#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Runtime/exec/HostMemory.h"
#include "mlt/Support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlt::rt {

class RankPosition;

/// One buffer of an instruction, resolved to device memory.
struct BufferView {
  /// Device address (inside the rank's arena).
  uint8_t *data = nullptr;
  ElementType dtype = ElementType::F32;
  int64_t numElements = 0;

  template <typename T> T *as() const { return reinterpret_cast<T *>(data); }
  uint64_t bytes() const { return uint64_t(numElements) * elementSize(dtype); }
};

/// Which rank a context serves, of how many, and how it reaches the others.
struct RankInfo {
  uint32_t rank = 0;
  uint32_t worldSize = 1;
  /// The rank's side of the collectives, over the plan's mesh (its axes in
  /// the plan's order, so that a collective's `axis` attribute indexes
  /// communicator->mesh().axes()); owned by the caller, outliving the
  /// context. Null for a rank that launches no collectives and no kernel
  /// that reads its coordinate on a mesh axis.
  Communicator *communicator = nullptr;
};

/// One rank's device state. Used by one thread at a time; every call may
/// queue work, and `synchronize` waits for it (the CPU backend runs each call
/// to completion).
class DeviceContext {
public:
  virtual ~DeviceContext();

  /// Allocates `bytes` of zeroed device memory (the rank's arena). Zeroed
  /// here, once, by every backend (the CPU's calloc, CUDA's memset): the
  /// padding of flat buffers (Plan.fbs's segments) is never written by a
  /// kernel and must read zero, and runs are reproducible even if a plan
  /// reads a buffer before writing it.
  virtual StatusOr<uint8_t *> allocate(uint64_t bytes) = 0;
  /// Frees memory from `allocate`.
  virtual void deallocate(uint8_t *memory) = 0;

  /// Copies between host memory and device memory.
  virtual Status copyToDevice(uint8_t *device, const void *host,
                              uint64_t bytes) = 0;
  virtual Status copyToHost(void *host, const uint8_t *device,
                            uint64_t bytes) = 0;

  /// Host memory for reading large state out of the device (a checkpoint's,
  /// CheckpointStaging.h), not zeroed: page-locked where the device copies
  /// faster from page-locked memory (CUDA); the default is ordinary
  /// page-aligned memory. Freed by freeHostStaging.
  virtual StatusOr<void *> allocateHostStaging(uint64_t bytes);
  virtual void freeHostStaging(void *memory);

  /// Queues a copy of `bytes` of device memory to `host`, in order with the
  /// launches, that has landed when the next synchronize returns: a read
  /// that does not wait (`host` must stay valid until then). The default
  /// copies at once, which is right for devices whose launches complete
  /// when they return (the CPU).
  virtual Status copyToHostAtSync(void *host, const uint8_t *device,
                                  uint64_t bytes) {
    return copyToHost(host, device, bytes);
  }

  /// Sets every element of `buffer` to `value`, converted to its dtype.
  virtual Status fill(const BufferView &buffer, double value) = 0;

  /// Runs one instruction on resolved operands (inputs, then outputs, as the
  /// instruction lists them). The plan verifier has checked the arity, the
  /// element counts against the ints and the id/label dtypes; the backend
  /// checks what only it knows (which float types it computes in).
  /// Collectives go through the context's communicator, in program order
  /// with the other launches (on CUDA: enqueued on the communication stream,
  /// ordered by events).
  virtual Status launch(const InstructionDesc &inst,
                        const std::vector<BufferView> &inputs,
                        const std::vector<BufferView> &outputs) = 0;

  /// Runs one transfer group (Kernels.def's "Transfers"): `transfers`, the
  /// sends and receives of its calls' launches in order, their buffers
  /// resolved, all over mesh axis `axis` (its name), through the context's
  /// communicator (Communicator::exchange), in order with the launches
  /// around it: on the CPU it returns when the group has completed; on CUDA
  /// it is queued on the compute stream as one NCCL group. The executor
  /// calls this, never `launch`, for sends and receives; it counts as one
  /// launch for launch timing. The default refuses: a device without a
  /// communicator's exchange says so.
  virtual Status exchange(std::string_view axis,
                          const std::vector<PointToPoint> &transfers);

  /// A program's bounds: the executor calls beginProgram before a program's
  /// first launch and endProgram after its last (also when a launch failed).
  /// Launches on the plan's streams other than 0 start after everything
  /// queued before beginProgram, and everything queued after endProgram
  /// starts after them (on CUDA: the streams are forked from the compute
  /// stream and joined back); in between, tokens order them (Plan.fbs). The
  /// default does nothing, which is right for devices that run every launch
  /// to completion in program order (the CPU).
  virtual Status beginProgram(const ProgramDesc &) { return Status::ok(); }
  virtual Status endProgram(const ProgramDesc &) { return Status::ok(); }

  /// Waits until every queued call has finished.
  virtual Status synchronize() = 0;

  /// Whether launches are queued and run later (a GPU), rather than run to
  /// completion before launch returns (the CPU): the host's place is then
  /// not the device's (Position.h).
  virtual bool queuesLaunches() const { return false; }

  /// Has the device keep its own place in `position` from now on
  /// (Position.h's device words: per plan stream, the collective or transfer
  /// group it last entered or left, written by the device itself, in
  /// captured graphs too); `position` must outlive the context. The default
  /// does nothing: a device whose launches complete when they return is
  /// where its host is.
  virtual Status watchPosition(RankPosition &position);

  /// The device's architecture as plans name it ("sm_90"); empty when any
  /// plan suits it (the CPU). A plan compiled for another target is refused.
  virtual std::string architecture() const { return ""; }

  /// What the device is, as a calibration names it (mlt/Analysis/
  /// Calibration.h): the GPU's name ("NVIDIA H100 80GB HBM3"), or "cpu".
  virtual std::string deviceName() const = 0;

  /// The device's memory in use, by every process on it (CUDA: its total
  /// less its free memory, which counts the libraries' workspaces and the
  /// driver's own beside the arena); nullopt where the device has no memory
  /// of its own (the CPU).
  virtual std::optional<uint64_t> memoryInUse() { return std::nullopt; }

  /// Allocates the scratch memory of the plan's launches
  /// (Backend::scratchBytes), once: a launch that asks for more is then an
  /// error naming the two sizes, not an allocation mid-step.
  virtual Status reserveScratch(uint64_t bytes) {
    (void)bytes;
    return Status::ok();
  }

  /// Launch timing, for profiles and traces (mlt-run --profile-step,
  /// --trace). Between begin and end, the context measures when each launch
  /// (and each exchange) starts and how long it takes on the device (on CUDA:
  /// events around it on its stream, so the order and overlap of the work are
  /// unchanged; on the CPU, where a launch runs to completion, its wall time).
  /// `end` waits for the launches and returns them in launch order, each start
  /// in milliseconds from the first timed launch's start. The default refuses:
  /// a backend that cannot time launches says so.
  struct LaunchTiming {
    double start = 0.0;
    double milliseconds = 0.0;
  };
  virtual Status beginLaunchTiming();
  virtual StatusOr<std::vector<LaunchTiming>> endLaunchTiming();

  /// Capture (on CUDA: graphs). A device that can capture records the
  /// launches between beginCapture and endCapture instead of running them,
  /// and `replay` runs the recorded work again as one unit (its launch cost
  /// paid once): the executor captures a program's second run (the first
  /// has set up libraries and scratch memory) and replays it afterwards.
  /// The launches' buffers must be the same each time, as a plan's are.
  /// If a launch cannot be captured, endCapture fails and the caller runs
  /// the launches directly; abortCapture drops a capture begun.
  virtual bool canCapture() const { return false; }
  virtual Status beginCapture();
  virtual StatusOr<size_t> endCapture();
  virtual void abortCapture() {}
  virtual Status replay(size_t capture);
};

/// A kind of device.
class Backend {
public:
  virtual ~Backend();

  /// "cpu", "cuda".
  virtual std::string_view name() const = 0;

  /// Fails, naming the first instruction or buffer, when this backend cannot
  /// run `rank` (e.g. an element type it does not compute in). Called once
  /// before anything is allocated, so that launch never fails for that reason
  /// mid-step.
  virtual Status checkSupported(const RankPlan &rank) const = 0;

  /// The device memory the kernels of `rank` (a rank of a plan over `mesh`)
  /// take beside its arena: the scratch area every launch of a context
  /// shares, as large as the most any one instruction asks (CUDA: row
  /// partials, attention's statistics and partial gradients; the CPU
  /// backend's scratch is host memory, 0 here). The executor allocates it
  /// with the arena, before the step, and the memory report and the planner
  /// count it. Called after checkSupported.
  virtual uint64_t scratchBytes(const RankPlan &rank,
                                const std::vector<MeshAxis> &mesh) const {
    (void)rank;
    (void)mesh;
    return 0;
  }

  /// Creates the device state of one rank.
  virtual StatusOr<std::unique_ptr<DeviceContext>>
  createContext(const RankInfo &rank) = 0;
};

/// The operand-type check every backend's checkSupported shares: walks the
/// float operands of `inst` (inputs, then outputs), requires the optimizer's
/// fixed scalars (isFixedF32Scalar) to be f32, and hands every other float
/// operand, the ones the instruction computes in, to `check`, which returns
/// ok or the reason the backend cannot compute in that buffer's type. The
/// first failure comes back as is (the caller names the instruction).
Status checkComputeOperands(
    const RankPlan &rank, const InstructionDesc &inst,
    const std::function<Status(const BufferDesc &buffer)> &check);

/// What every backend's context reads of its rank's place in the mesh, through
/// the communicator of its RankInfo: the kernels that depend on the rank
/// (shard_slice, the vocabulary-parallel embedding and cross-entropy) and the
/// collectives name a mesh axis by its index (their `axis` attribute).

/// Checks that `axis` is an axis of `mesh`; the error names it and the mesh.
Status checkMeshAxis(const Mesh &mesh, int64_t axis);

/// A rank's place on one mesh axis: its coordinate and the axis's size.
struct AxisPosition {
  int64_t coordinate = 0;
  int64_t size = 1;
};

/// The place on mesh axis `axis` of the rank that `communicator` serves;
/// coordinate 0 of 1 for axis -1, which needs no communicator (it may be
/// null then).
StatusOr<AxisPosition> axisPosition(const Communicator *communicator,
                                    int64_t axis);

/// The rows of a vocabulary split over mesh axis `axis`, `vocabLocal` to a
/// rank, that the rank `communicator` serves holds: [offset, offset +
/// vocabLocal) of [0, total).
struct VocabShard {
  int64_t offset = 0;
  int64_t total = 0;
};
StatusOr<VocabShard> vocabShard(const Communicator *communicator,
                                int64_t vocabLocal, int64_t axis);

/// The positions of a rope's `rows` rows (SequenceOrder.h): from
/// `offset` in natural order without an axis (-1); the load-balanced block
/// of the rank `communicator` serves on context axis `axis` otherwise.
StatusOr<SequencePositions> sequencePositions(const Communicator *communicator,
                                              int64_t axis, int64_t rows,
                                              int64_t offset);

/// `params` (an attention's shape) with the positions of its queries and
/// keys: natural without an axis (-1); on context axis `axis`, the keys the
/// whole sequence in its load-balanced order, and the queries the block of
/// the rank at `position` (attentionPositions: of the rank `communicator`
/// serves) where the keys have G times their rows, or the whole sequence
/// too where they have as many (the all-to-all exchange's heads); a ring
/// step's (params.ringStep >= 0) queries the rank's block and keys the block
/// of the rank ringStep places before it.
template <typename Params>
Params attentionPositionsAt(Params params, int64_t axis,
                            AxisPosition position) {
  if (axis < 0)
    return params;
  if (params.ringStep >= 0) {
    const int64_t G = position.size;
    params.queries = SequencePositions::contextBlock(
        params.seq, position.coordinate, G);
    params.keys = SequencePositions::contextBlock(
        params.keyRows(), ((position.coordinate - params.ringStep) % G + G) % G,
        G);
    return params;
  }
  if (params.keyRows() == params.seq) {
    params.queries = params.keys = SequencePositions::contextWhole(
        params.seq / position.size, position.size);
    return params;
  }
  params.queries = SequencePositions::contextBlock(
      params.seq, position.coordinate, position.size);
  params.keys = SequencePositions::contextWhole(params.seq, position.size);
  return params;
}
template <typename Params>
StatusOr<Params> attentionPositions(const Communicator *communicator,
                                    Params params, int64_t axis) {
  StatusOr<AxisPosition> position = axisPosition(communicator, axis);
  if (!position)
    return position.takeStatus();
  return attentionPositionsAt(params, axis, *position);
}

/// The CPU backend: every kernel of Kernels.def on the MLTRuntimeCPU library,
/// in f32 or f64 (each instruction in the type of its float operands; bf16
/// only as storage, through `cast`), in program order; collectives and
/// transfer groups through the rank's communicator, which blocks until the
/// group is done. Matrix
/// products use OpenBLAS, its pool shared among the ranks (shareCpuCores).
std::unique_ptr<Backend> createCpuBackend();

/// Shares the cores among the `ranks` CPU ranks that this process runs at
/// once: OpenBLAS's pool becomes the cores divided among them, unless the
/// user chose its threads (OPENBLAS_NUM_THREADS; cpu::shareGemmThreads).
/// Called before the ranks' first product; returns the threads of the pool.
int shareCpuCores(unsigned ranks);

/// What the CPU backend holds in host memory besides the arenas:
/// OpenBLAS's GEMM buffers, one per thread of its pool.
HostMemoryUse cpuBackendHostMemory();

} // namespace mlt::rt

#endif // MLT_RUNTIME_BACKEND_H
