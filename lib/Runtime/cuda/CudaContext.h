//===- CudaContext.h - one rank's CUDA device context -----------*- C++ -*-===//
//
// Part of mlt. The CUDA backend's device context, one per rank (made by
// createContext, CudaBackend.cpp): the rank's device state, which every
// DeviceContext entry point works on, and the launch of a plan instruction
// as a kernel launch. Its definitions follow that seam: CudaContext.cpp
// (streams, events, graph capture and replay, memory, copies, timing,
// errors) and CudaDispatch.cpp (the switch from a kernel to its family's
// launcher).
//
// A context is one rank's device state:
//
// - the device (device 0 for a single rank; device r for rank r of a plan
//   whose ranks run as threads of this process), made current on the calling
//   thread at every entry point, since a rank may be driven by a different
//   thread on every call (RankGroup starts threads per call);
// - one compute stream (non-blocking), where every fill and copy, and every
//   launch of the plan's stream 0, is queued in program order;
// - the plan's other streams (Plan.fbs), created on first use: a program
//   forks them from the compute stream at its start (beginProgram) and joins
//   them back at its end (endProgram), and its tokens are events, recorded
//   after the signalling launch and waited for before each waiting one. Only
//   collectives run there (kernels share the context's scratch memory and
//   cuBLASLt workspace, which are ordered by the compute stream alone), on
//   streams of the highest priority, so that their few thread blocks are
//   scheduled as soon as SMs free up rather than after the compute stream's
//   queued kernels;
// - with a CUDA communicator (one process per GPU, NcclCommunicator.h), the
//   collectives' stream and events (Collectives.h): stream-0 collectives run
//   on a communication stream ordered against the compute stream by events,
//   the others on their plan stream, transfer groups on the compute stream,
//   and waits poll so that a NCCL failure returns instead of hanging;
// - the arena (allocate: cudaMalloc, zeroed; with a CUDA communicator,
//   NCCL's registered memory instead, NcclCommunicator.h "Registered
//   memory", unless MLT_NCCL_REGISTER=0);
// - scratch memory for kernels that need some (reduction partials, the
//   embedding backward's sort), grown on first use, which synchronizes: in
//   the first step only, since a plan's sizes repeat;
// - the device error record (DeviceError.h), through which kernels that
//   check their data report, read back at synchronize;
// - once the hang watchdog watches the rank (watchPosition), the device's
//   place (Position.h): a word per plan stream in host-mapped memory, which
//   the device writes around every collective and transfer group
//   (Collectives.h's PositionMark, kernels/position.h).
//
// Launches never synchronize: `synchronize` is the only wait (plus copies to
// the host), and it turns asynchronous kernel faults and the error record
// into a Status.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUNTIME_CUDA_CUDACONTEXT_H
#define MLT_LIB_RUNTIME_CUDA_CUDACONTEXT_H

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Plan/PlanFormat.h"
#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Runtime/exec/Backend.h"

#include "Collectives.h"
#include "CudaCheck.h"
#include "DeviceError.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"

#include <cuda_runtime.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace mlt::cuda {

/// Whether the CUDA backend has a kernel for `kernel` (CudaDispatch.cpp,
/// beside the switch that launches them). Collectives and transfers are not
/// listed: checkSupported lets them through, and launch (exchange, for the
/// transfers) sends them to the communicator (Collectives.h).
bool supportsKernel(rt::Kernel kernel);

/// One rank's device state (this file's opening). The members that launch
/// kernels (launchKernel, attentionThroughF32) are in CudaDispatch.cpp, the
/// rest in CudaContext.cpp.
class CudaDeviceContext final : public rt::DeviceContext {
public:
  CudaDeviceContext(int device, rt::Communicator *communicator,
                    MatmulOptions matmulOptions = {})
      : device_(device), communicator_(communicator),
        matmulOptions_(std::move(matmulOptions)) {
    const char *sync = std::getenv("MLT_CUDA_SYNC_EACH_LAUNCH");
    syncEachLaunch_ = sync && *sync && std::strcmp(sync, "0") != 0;
    const char *graphs = std::getenv("MLT_CUDA_GRAPHS");
    graphsAllowed_ =
        !syncEachLaunch_ && !(graphs && std::strcmp(graphs, "0") == 0);
    graphsWithCollectives_ = !(graphs && std::strcmp(graphs, "compute") == 0);
    const char *reg = std::getenv("MLT_NCCL_REGISTER");
    registerArena_ = !(reg && std::strcmp(reg, "0") == 0);
  }
  ~CudaDeviceContext() override;

  /// Creates the stream and the error record on the device.
  Status init();

  StatusOr<uint8_t *> allocate(uint64_t bytes) override;
  void deallocate(uint8_t *memory) override;
  Status copyToDevice(uint8_t *device, const void *host,
                      uint64_t bytes) override;
  Status copyToHost(void *host, const uint8_t *device, uint64_t bytes) override;
  StatusOr<void *> allocateHostStaging(uint64_t bytes) override;
  void freeHostStaging(void *memory) override;
  Status copyToHostAtSync(void *host, const uint8_t *device,
                          uint64_t bytes) override;
  Status fill(const rt::BufferView &buffer, double value) override;
  Status launch(const rt::InstructionDesc &inst,
                const std::vector<rt::BufferView> &inputs,
                const std::vector<rt::BufferView> &outputs) override;
  Status exchange(std::string_view axis,
                  const std::vector<rt::PointToPoint> &transfers) override;
  Status beginProgram(const rt::ProgramDesc &program) override;
  Status endProgram(const rt::ProgramDesc &program) override;
  Status synchronize() override;
  bool queuesLaunches() const override { return true; }
  Status watchPosition(rt::RankPosition &position) override;
  std::string architecture() const override { return architecture_; }
  std::string deviceName() const override { return deviceName_; }
  std::optional<uint64_t> memoryInUse() override;
  Status reserveScratch(uint64_t bytes) override;
  Status beginLaunchTiming() override;
  StatusOr<std::vector<LaunchTiming>> endLaunchTiming() override;
  /// Programs with collectives too, unless MLT_CUDA_GRAPHS=compute: NCCL is
  /// captured (the event fork and join of Collectives.h and of the plan's
  /// streams is the pattern capture needs), checked against the runs without
  /// graphs on one rank (the CUDA tests) and on two GPUs (gpu-multi.sh).
  bool canCapture() const override {
    return graphsAllowed_ && (!collectives_ || graphsWithCollectives_);
  }
  Status beginCapture() override;
  StatusOr<size_t> endCapture() override;
  void abortCapture() override;
  Status replay(size_t capture) override;

private:
  /// Waits for the compute stream (Collectives.h: polling once collectives
  /// run); `error` gets the stream's CUDA status.
  Status waitCompute(cudaError_t &error) {
    if (collectives_)
      return collectives_->wait(stream_, error);
    error = cudaStreamSynchronize(stream_);
    return Status::ok();
  }

  /// Makes the context's device current on the calling thread.
  Status activate() {
    MLT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    return Status::ok();
  }

  /// Starts the timing of a launch or exchange on stream `s` (while timing
  /// is on), and ends it.
  Status beginTimed(cudaStream_t s);
  Status endTimed(cudaStream_t s);

  /// Runs `inst` on stream `s` (the compute stream, or for a collective
  /// the plan stream it names).
  Status launchKernel(const rt::InstructionDesc &inst,
                      const std::vector<rt::BufferView> &in,
                      const std::vector<rt::BufferView> &out, cudaStream_t s);

  /// The event of token `token`, created on first use.
  StatusOr<cudaEvent_t> tokenEvent(uint32_t token);

  /// At least `bytes` of device scratch memory, valid until the next call;
  /// used by one launch at a time on the compute stream. Once reserved
  /// (reserveScratch: the plan's size, KernelScratch.h), a request past it
  /// fails; unreserved (the kernels' tests), it grows, waiting for the
  /// stream (earlier launches may still read the old area).
  StatusOr<void *> scratch(size_t bytes);

  /// bf16 attention at a head_dim the tensor-core kernels are not built for
  /// (they take 64 and 128): the operands widened to f32 in scratch, the f32
  /// kernels, the outputs rounded back to bf16. Slower and more memory, but
  /// the same semantics (probabilities in f32 rather than bf16: closer to
  /// the CPU backend's); the small models of tests use it. With `rope`,
  /// attention_bwd_rope: dq and dk rotated back in f32 before rounding.
  Status attentionThroughF32(const rt::InstructionDesc &inst,
                             const std::vector<rt::BufferView> &in,
                             const std::vector<rt::BufferView> &out,
                             const AttentionShape &shape,
                             const AttentionRope *rope = nullptr);

  /// The error sink of a launch of `inst` that checks its data.
  DeviceErrorSink errorSink(const rt::InstructionDesc &inst);

  /// Where the device writes the place of a collective or transfer group
  /// of plan stream `stream` about to be queued (the place its executor
  /// recorded for it); no word when the rank is not watched.
  PositionMark positionMark(unsigned stream) const;

  /// The record's report as one line.
  Status deviceError(const DeviceErrorRecord &record) const;

  int device_;
  /// "sm_90": the device's compute capability, as plans name targets.
  std::string architecture_;
  std::string deviceName_;
  rt::Communicator *communicator_;
  bool syncEachLaunch_ = false;
  cudaStream_t stream_ = nullptr;
  /// The plan's streams other than 0 (index 0 unused), created on first use;
  /// which of them the running program uses, the event that forks them from
  /// the compute stream, those that join them back, and the tokens' events.
  std::array<cudaStream_t, rt::kPlanMaxStreams> planStreams_{};
  std::array<bool, rt::kPlanMaxStreams> streamOpen_{};
  cudaEvent_t forkEvent_ = nullptr;
  std::array<cudaEvent_t, rt::kPlanMaxStreams> joinEvents_{};
  std::vector<cudaEvent_t> tokenEvents_;
  /// cuBLASLt handle, workspace and per-shape matmul plans.
  std::unique_ptr<MatmulRunner> matmul_;
  /// How matmul_ chooses algorithms (a tuned table, tuning).
  MatmulOptions matmulOptions_;
  void *scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  /// Whether reserveScratch sized the scratch from the plan.
  bool scratchReserved_ = false;
  /// The communication stream and events; null without a CUDA communicator.
  std::unique_ptr<CudaCollectives> collectives_;
  /// Whether allocate takes the communicator's registered memory (when the
  /// rank has a CUDA communicator).
  bool registerArena_ = true;
  bool registersMemory() const { return collectives_ && registerArena_; }
  DeviceErrorRecord *errorRecord_ = nullptr;     // device memory
  DeviceErrorRecord *hostErrorRecord_ = nullptr; // pinned host memory
  /// watchPosition's: the rank's position, and its device words (one per
  /// plan stream) in host-mapped memory, by their host and device
  /// addresses.
  rt::RankPosition *position_ = nullptr;
  volatile uint64_t *positionWords_ = nullptr;
  volatile uint64_t *positionWordsOnDevice_ = nullptr;
  /// The kernels of the launches given an error sink since the record was
  /// last read; launch i has tag i + 1.
  std::vector<rt::Kernel> reportingLaunches_;
  /// Launches queued since the last synchronization, and the last one's
  /// kernel, for messages about faults.
  uint64_t launchesSinceSync_ = 0;
  rt::Kernel lastKernel_ = rt::Kernel::Add;
  /// Launch timing: a start and an end event per launch since
  /// beginLaunchTiming (a pool that only grows).
  bool timing_ = false;
  size_t timedLaunches_ = 0;
  std::vector<cudaEvent_t> timingEvents_;

  /// CUDA graphs (capture and replay). A captured launch that reports
  /// errors gets the tag (graph + 1) << kGraphTagShift | (its index among
  /// the graph's reporting launches + 1); launches outside graphs get their
  /// index in reportingLaunches_ + 1, below 1 << kGraphTagShift.
  static constexpr unsigned kGraphTagShift = 20;
  struct Graph {
    cudaGraphExec_t exec = nullptr;
    std::vector<rt::Kernel> reporting;
    uint64_t launches = 0;
    rt::Kernel last = rt::Kernel::Add;
  };
  bool graphsAllowed_ = true;
  bool graphsWithCollectives_ = false;
  bool capturing_ = false;
  std::vector<rt::Kernel> captureReporting_;
  uint64_t launchesBeforeCapture_ = 0;
  std::vector<Graph> graphs_;
  /// Whether a replayed graph may have written the error record.
  bool recordPending_ = false;
  /// Scratch areas outgrown while graphs exist (which may use them): freed
  /// with the context.
  std::vector<void *> retiredScratch_;

  /// Reads that land at the next synchronize (copyToHostAtSync): copied on
  /// the stream into pinned staging, then to their destinations.
  struct StagedRead {
    void *host;
    size_t offset, bytes;
  };
  static constexpr size_t kStagingBytes = 64 * 1024;
  uint8_t *staging_ = nullptr; // pinned host memory, kStagingBytes
  size_t stagingUsed_ = 0;
  std::vector<StagedRead> stagedReads_;
};

} // namespace mlt::cuda

#endif // MLT_LIB_RUNTIME_CUDA_CUDACONTEXT_H
