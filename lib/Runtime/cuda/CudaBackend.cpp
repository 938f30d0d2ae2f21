//===- CudaBackend.cpp - Kernels.def on one GPU per rank ------------------===//
//
// Part of mlt. The CUDA backend: checkSupported rejects, before anything is
// allocated, every instruction it has no kernel for and every operand type
// it does not compute in; a context is one rank's device state:
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
//   cuBLASLt workspace, which are ordered by the compute stream alone);
// - with a CUDA communicator (one process per GPU, NcclCommunicator.h), the
//   collectives' stream and events (Collectives.h): stream-0 collectives run
//   on a communication stream ordered against the compute stream by events,
//   the others on their plan stream, and waits poll so that a NCCL failure
//   returns instead of hanging;
// - the arena (allocate: cudaMalloc, zeroed);
// - scratch memory for kernels that need some (reduction partials, the
//   embedding backward's sort), grown on first use, which synchronizes: in
//   the first step only, since a plan's sizes repeat;
// - the device error record (DeviceError.h), through which kernels that
//   check their data report, read back at synchronize.
//
// Launches never synchronize: `synchronize` is the only wait (plus copies to
// the host), and it turns asynchronous kernel faults and the error record
// into a Status. The launch switch dispatches to the kernel families'
// launchers (kernels/<family>.h); `supportsKernel` lists the kernels that
// have one.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/CudaBackend.h"
#include "mlt/Runtime/Communicator.h"
#include "mlt/Runtime/KernelInfo.h"
#include "mlt/Runtime/PlanFormat.h"

#include "Collectives.h"
#include "CudaCheck.h"
#include "DeviceError.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/matmul.h"
#include "kernels/optimizer.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

namespace {

/// Whether the CUDA backend has a kernel for `kernel`. Collectives are not
/// listed: checkSupported lets them through, and launch sends them to the
/// communicator (Collectives.h).
bool supportsKernel(Kernel kernel) {
  switch (kernel) {
  // elementwise.h
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::Accumulate:
  case Kernel::SwiGLUFwd:
  case Kernel::SwiGLUBwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd:
  case Kernel::Cast:
  case Kernel::Fill:
  case Kernel::Transpose:
  case Kernel::ShardSlice:
  // optimizer.h
  case Kernel::SumSquares:
  case Kernel::SumSquaresMulti:
  case Kernel::GlobalNorm:
  case Kernel::ClipCoefficient:
  case Kernel::AdamW:
  case Kernel::AdamWMulti:
  // embedding.h
  case Kernel::EmbeddingFwd:
  case Kernel::EmbeddingBwd:
  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP:
  // rmsnorm.h, rope.h, attention.h
  case Kernel::RMSNormFwd:
  case Kernel::RMSNormBwd:
  case Kernel::RMSNormBwdAdd:
  case Kernel::Rope:
  case Kernel::AttentionFwd:
  case Kernel::AttentionBwd:
  // cross_entropy.h
  case Kernel::CrossEntropyFwd:
  case Kernel::CrossEntropyBwd:
  case Kernel::CrossEntropyStats:
  case Kernel::CrossEntropyCombine:
  case Kernel::CrossEntropyBwdStats:
  // matmul.h
  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd:
    return true;
  default:
    return false;
  }
}

bool isCastType(ElementType type) {
  return type == ElementType::F32 || type == ElementType::F64 ||
         type == ElementType::BF16;
}

/// "1 CUDA device is" / "2 CUDA devices are".
std::string devicesAre(int count) {
  return std::to_string(count) +
         (count == 1 ? " CUDA device is" : " CUDA devices are");
}

/// Of the weight-gradient outputs that Kernels.def lets be the compute type
/// or f32 (OperandPrecision::Accumulator), the CUDA kernels of bf16
/// activations write embedding_bwd(_vp)'s dtable and rms_norm_bwd's dw in f32
/// only (matmul's c and accumulate's y take either).
Status checkGradientOutputs(const RankPlan &rank, const InstructionDesc &inst) {
  const bool f32Only = inst.kernel == Kernel::EmbeddingBwd ||
                       inst.kernel == Kernel::EmbeddingBwdVP ||
                       inst.kernel == Kernel::RMSNormBwd ||
                       inst.kernel == Kernel::RMSNormBwdAdd;
  if (!f32Only)
    return Status::ok();
  const BufferDesc &gradient = rank.buffers[inst.outputs.back()];
  if (gradient.dtype != ElementType::F32)
    return errorf("buffer '", gradient.name, "' is ",
                  elementTypeName(gradient.dtype),
                  "; the CUDA backend writes this weight gradient in f32");
  return Status::ok();
}

class CudaDeviceContext final : public DeviceContext {
public:
  CudaDeviceContext(int device, Communicator *communicator)
      : device_(device), communicator_(communicator) {
    const char *sync = std::getenv("MLT_CUDA_SYNC_EACH_LAUNCH");
    syncEachLaunch_ = sync && *sync && std::strcmp(sync, "0") != 0;
    const char *graphs = std::getenv("MLT_CUDA_GRAPHS");
    graphsAllowed_ =
        !syncEachLaunch_ && !(graphs && std::strcmp(graphs, "0") == 0);
    graphsWithCollectives_ = graphs && std::strcmp(graphs, "all") == 0;
  }
  ~CudaDeviceContext() override;

  /// Creates the stream and the error record on the device.
  Status init();

  StatusOr<uint8_t *> allocate(uint64_t bytes) override;
  void deallocate(uint8_t *memory) override;
  Status copyToDevice(uint8_t *device, const void *host,
                      uint64_t bytes) override;
  Status copyToHost(void *host, const uint8_t *device, uint64_t bytes) override;
  Status copyToHostAtSync(void *host, const uint8_t *device,
                          uint64_t bytes) override;
  Status fill(const BufferView &buffer, double value) override;
  Status launch(const InstructionDesc &inst,
                const std::vector<BufferView> &inputs,
                const std::vector<BufferView> &outputs) override;
  Status beginProgram(const ProgramDesc &program) override;
  Status endProgram(const ProgramDesc &program) override;
  Status synchronize() override;
  std::string architecture() const override { return architecture_; }
  Status beginLaunchTiming() override;
  StatusOr<std::vector<double>> endLaunchTiming() override;
  /// With collectives only under MLT_CUDA_GRAPHS=all: NCCL can be captured
  /// (the event fork and join of Collectives.h and of the plan's streams is
  /// the pattern capture needs), and a one-rank communicator is (the CUDA
  /// tests), but capture across several GPUs is still to be measured.
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

  /// Runs `inst` on stream `s` (the compute stream, or for a collective
  /// the plan stream it names).
  Status launchKernel(const InstructionDesc &inst,
                      const std::vector<BufferView> &in,
                      const std::vector<BufferView> &out, cudaStream_t s);

  /// The event of token `token`, created on first use.
  StatusOr<cudaEvent_t> tokenEvent(uint32_t token);

  /// The rank's place on mesh axis `axis` (as in CpuBackend.cpp):
  /// coordinate 0 of 1 for axis -1.
  struct AxisPosition {
    int64_t coordinate = 0;
    int64_t size = 1;
  };
  StatusOr<AxisPosition> axisPosition(int64_t axis) const;

  /// At least `bytes` of device scratch memory, valid until the next call;
  /// used by one launch at a time on the compute stream. Growing it waits for
  /// the stream (earlier launches may still read the old area).
  StatusOr<void *> scratch(size_t bytes);

  /// bf16 attention at a head_dim the tensor-core kernels are not built for
  /// (they take 64 and 128): the operands widened to f32 in scratch, the f32
  /// kernels, the outputs rounded back to bf16. Slower and more memory, but
  /// the same semantics (probabilities in f32 rather than bf16: closer to
  /// the CPU backend's); the small models of tests use it.
  Status attentionThroughF32(const InstructionDesc &inst,
                             const std::vector<BufferView> &in,
                             const std::vector<BufferView> &out,
                             const AttentionShape &shape);

  /// The error sink of a launch of `inst` that checks its data.
  DeviceErrorSink errorSink(const InstructionDesc &inst);

  /// The record's report as one line.
  Status deviceError(const DeviceErrorRecord &record) const;

  int device_;
  /// "sm_90": the device's compute capability, as plans name targets.
  std::string architecture_;
  Communicator *communicator_;
  bool syncEachLaunch_ = false;
  cudaStream_t stream_ = nullptr;
  /// The plan's streams other than 0 (index 0 unused), created on first use;
  /// which of them the running program uses, the event that forks them from
  /// the compute stream, those that join them back, and the tokens' events.
  std::array<cudaStream_t, kPlanMaxStreams> planStreams_{};
  std::array<bool, kPlanMaxStreams> streamOpen_{};
  cudaEvent_t forkEvent_ = nullptr;
  std::array<cudaEvent_t, kPlanMaxStreams> joinEvents_{};
  std::vector<cudaEvent_t> tokenEvents_;
  /// cuBLASLt handle, workspace and per-shape matmul plans.
  std::unique_ptr<MatmulRunner> matmul_;
  void *scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  /// The communication stream and events; null without a CUDA communicator.
  std::unique_ptr<CudaCollectives> collectives_;
  DeviceErrorRecord *errorRecord_ = nullptr;     // device memory
  DeviceErrorRecord *hostErrorRecord_ = nullptr; // pinned host memory
  /// The kernels of the launches given an error sink since the record was
  /// last read; launch i has tag i + 1.
  std::vector<Kernel> reportingLaunches_;
  /// Launches queued since the last synchronization, and the last one's
  /// kernel, for messages about faults.
  uint64_t launchesSinceSync_ = 0;
  Kernel lastKernel_ = Kernel::Add;
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
    std::vector<Kernel> reporting;
    uint64_t launches = 0;
    Kernel last = Kernel::Add;
  };
  bool graphsAllowed_ = true;
  bool graphsWithCollectives_ = false;
  bool capturing_ = false;
  std::vector<Kernel> captureReporting_;
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

CudaDeviceContext::~CudaDeviceContext() {
  if (cudaSetDevice(device_) != cudaSuccess)
    return;
  if (stream_)
    (void)cudaStreamSynchronize(stream_);
  for (cudaEvent_t event : timingEvents_)
    (void)cudaEventDestroy(event);
  for (cudaEvent_t event : tokenEvents_)
    if (event)
      (void)cudaEventDestroy(event);
  for (cudaEvent_t event : joinEvents_)
    if (event)
      (void)cudaEventDestroy(event);
  if (forkEvent_)
    (void)cudaEventDestroy(forkEvent_);
  for (cudaStream_t side : planStreams_)
    if (side) {
      (void)cudaStreamSynchronize(side);
      (void)cudaStreamDestroy(side);
    }
  for (Graph &graph : graphs_)
    (void)cudaGraphExecDestroy(graph.exec);
  for (void *area : retiredScratch_)
    (void)cudaFree(area);
  if (scratch_)
    (void)cudaFree(scratch_);
  if (errorRecord_)
    (void)cudaFree(errorRecord_);
  if (hostErrorRecord_)
    (void)cudaFreeHost(hostErrorRecord_);
  if (staging_)
    (void)cudaFreeHost(staging_);
  if (stream_)
    (void)cudaStreamDestroy(stream_);
}

Status CudaDeviceContext::init() {
  MLT_RETURN_IF_ERROR(activate());
  cudaDeviceProp properties;
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device_));
  architecture_ =
      "sm_" + std::to_string(properties.major * 10 + properties.minor);
  MLT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void **>(&errorRecord_),
                                      sizeof(DeviceErrorRecord)));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaMemset(errorRecord_, 0, sizeof(DeviceErrorRecord)));
  MLT_CUDA_RETURN_IF_ERROR(cudaMallocHost(
      reinterpret_cast<void **>(&hostErrorRecord_), sizeof(DeviceErrorRecord)));
  std::memset(hostErrorRecord_, 0, sizeof(DeviceErrorRecord));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaMallocHost(reinterpret_cast<void **>(&staging_), kStagingBytes));
  StatusOr<std::unique_ptr<MatmulRunner>> matmul = MatmulRunner::create();
  if (!matmul)
    return matmul.takeStatus();
  matmul_ = std::move(*matmul);
  if (auto *cuda = dynamic_cast<CudaCommunicator *>(communicator_)) {
    StatusOr<std::unique_ptr<CudaCollectives>> collectives =
        CudaCollectives::create(*cuda);
    if (!collectives)
      return collectives.takeStatus();
    collectives_ = std::move(*collectives);
  }
  return Status::ok();
}

/// "20.13 GiB"
static std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / (1ull << 30));
  return text;
}

StatusOr<uint8_t *> CudaDeviceContext::allocate(uint64_t bytes) {
  MLT_RETURN_IF_ERROR(activate());
  // The arena is the plan's peak memory, known before anything runs: an arena
  // that cannot fit is reported from the plan, not from a failed cudaMalloc
  // (which also holds for memory other processes took since).
  size_t freeBytes = 0, totalBytes = 0;
  MLT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&freeBytes, &totalBytes));
  if (bytes > freeBytes)
    return errorf("out of memory: the plan needs ", gib(bytes), " (", bytes,
                  " bytes, its peak) on CUDA device ", device_, ", which has ",
                  gib(freeBytes), " free of ", gib(totalBytes));
  void *memory = nullptr;
  cudaError_t error = cudaMalloc(&memory, bytes);
  if (error != cudaSuccess) {
    (void)cudaGetLastError(); // not sticky: clear it
    (void)cudaMemGetInfo(&freeBytes, &totalBytes);
    return errorf("cudaMalloc of ", bytes, " bytes on CUDA device ", device_,
                  ": ", cudaGetErrorString(error), " (", freeBytes,
                  " bytes free of ", totalBytes, ")");
  }
  // Zeroed, as the CPU backend's calloc: runs are reproducible even if a plan
  // reads a buffer before writing it.
  MLT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(memory, 0, bytes, stream_));
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return static_cast<uint8_t *>(memory);
}

void CudaDeviceContext::deallocate(uint8_t *memory) {
  if (!memory || cudaSetDevice(device_) != cudaSuccess)
    return;
  (void)cudaStreamSynchronize(stream_);
  (void)cudaFree(memory);
}

Status CudaDeviceContext::copyToDevice(uint8_t *device, const void *host,
                                       uint64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(activate());
  // From pageable memory the call returns once `host` has been staged, so
  // the caller may reuse it; the copy stays ordered with the launches.
  MLT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

Status CudaDeviceContext::copyToHost(void *host, const uint8_t *device,
                                     uint64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(activate());
  MLT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_));
  cudaError_t error = cudaSuccess;
  MLT_RETURN_IF_ERROR(waitCompute(error));
  return cudaStatus(error, "cudaStreamSynchronize");
}

Status CudaDeviceContext::copyToHostAtSync(void *host, const uint8_t *device,
                                           uint64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  // Small reads (scalars) share the staging area; a larger one, or a full
  // area, is an ordinary waiting copy.
  const size_t offset = (stagingUsed_ + 15) & ~size_t(15);
  if (bytes > kStagingBytes - std::min(offset, kStagingBytes)) {
    MLT_RETURN_IF_ERROR(synchronize());
    return copyToHost(host, device, bytes);
  }
  MLT_RETURN_IF_ERROR(activate());
  MLT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_ + offset, device, bytes,
                                           cudaMemcpyDeviceToHost, stream_));
  stagedReads_.push_back({host, offset, size_t(bytes)});
  stagingUsed_ = offset + bytes;
  return Status::ok();
}

Status CudaDeviceContext::fill(const BufferView &buffer, double value) {
  MLT_RETURN_IF_ERROR(activate());
  return launchFill(buffer.data, buffer.dtype, buffer.numElements, value,
                    stream_);
}

StatusOr<cudaEvent_t> CudaDeviceContext::tokenEvent(uint32_t token) {
  if (token >= tokenEvents_.size())
    tokenEvents_.resize(size_t(token) + 1, nullptr);
  if (!tokenEvents_[token])
    MLT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&tokenEvents_[token],
                                                      cudaEventDisableTiming));
  return tokenEvents_[token];
}

Status CudaDeviceContext::beginProgram(const ProgramDesc &program) {
  std::array<bool, kPlanMaxStreams> used{};
  for (const InstructionDesc &inst : program.instructions)
    if (inst.stream != 0 && inst.stream < kPlanMaxStreams)
      used[inst.stream] = true;
  if (std::find(used.begin(), used.end(), true) == used.end())
    return Status::ok();
  MLT_RETURN_IF_ERROR(activate());
  if (!forkEvent_)
    MLT_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&forkEvent_, cudaEventDisableTiming));
  MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(forkEvent_, stream_));
  for (unsigned index = 1; index < kPlanMaxStreams; ++index) {
    if (!used[index])
      continue;
    if (!planStreams_[index]) {
      MLT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(
          &planStreams_[index], cudaStreamNonBlocking));
      MLT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(
          &joinEvents_[index], cudaEventDisableTiming));
    }
    MLT_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(planStreams_[index], forkEvent_, 0));
    streamOpen_[index] = true;
  }
  return Status::ok();
}

Status CudaDeviceContext::endProgram(const ProgramDesc &) {
  Status status = Status::ok();
  for (unsigned index = 1; index < kPlanMaxStreams; ++index) {
    if (!streamOpen_[index])
      continue;
    streamOpen_[index] = false;
    // Every stream is joined, even after a failure (a capture must end with
    // its streams joined to be dropped cleanly).
    for (cudaError_t error :
         {cudaEventRecord(joinEvents_[index], planStreams_[index]),
          cudaStreamWaitEvent(stream_, joinEvents_[index], 0)})
      if (error != cudaSuccess && status)
        status = cudaStatus(error, "joining a plan stream");
  }
  return status;
}

Status CudaDeviceContext::launch(const InstructionDesc &inst,
                                 const std::vector<BufferView> &in,
                                 const std::vector<BufferView> &out) {
  MLT_RETURN_IF_ERROR(activate());
  cudaStream_t s = stream_;
  if (inst.stream != 0) {
    if (inst.stream >= kPlanMaxStreams || !streamOpen_[inst.stream])
      return errorf("stream ", unsigned(inst.stream),
                    " is not open: a launch on a stream other than 0 must "
                    "come between beginProgram and endProgram of a program "
                    "that names it");
    s = planStreams_[inst.stream];
  }
  for (uint32_t token : inst.waits) {
    StatusOr<cudaEvent_t> event = tokenEvent(token);
    if (!event)
      return event.takeStatus();
    MLT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(s, *event, 0));
  }
  ++launchesSinceSync_;
  lastKernel_ = inst.kernel;
  if (timing_) {
    while (timingEvents_.size() < 2 * (timedLaunches_ + 1)) {
      cudaEvent_t event;
      MLT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
      timingEvents_.push_back(event);
    }
    MLT_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(timingEvents_[2 * timedLaunches_], s));
    MLT_RETURN_IF_ERROR(launchKernel(inst, in, out, s));
    MLT_CUDA_RETURN_IF_ERROR(
        cudaEventRecord(timingEvents_[2 * timedLaunches_ + 1], s));
    ++timedLaunches_;
  } else {
    MLT_RETURN_IF_ERROR(launchKernel(inst, in, out, s));
  }
  if (inst.token >= 0) {
    StatusOr<cudaEvent_t> event = tokenEvent(uint32_t(inst.token));
    if (!event)
      return event.takeStatus();
    MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(*event, s));
  }
  if (syncEachLaunch_ && inst.stream == 0)
    return synchronize();
  return Status::ok();
}

Status CudaDeviceContext::beginLaunchTiming() {
  timing_ = true;
  timedLaunches_ = 0;
  return Status::ok();
}

StatusOr<std::vector<double>> CudaDeviceContext::endLaunchTiming() {
  timing_ = false;
  MLT_RETURN_IF_ERROR(synchronize());
  std::vector<double> milliseconds(timedLaunches_);
  for (size_t i = 0; i < timedLaunches_; ++i) {
    float elapsed = 0.0f;
    MLT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(
        &elapsed, timingEvents_[2 * i], timingEvents_[2 * i + 1]));
    milliseconds[i] = elapsed;
  }
  timedLaunches_ = 0;
  return milliseconds;
}

Status CudaDeviceContext::beginCapture() {
  MLT_RETURN_IF_ERROR(activate());
  MLT_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  captureReporting_.clear();
  launchesBeforeCapture_ = launchesSinceSync_;
  return Status::ok();
}

StatusOr<size_t> CudaDeviceContext::endCapture() {
  MLT_RETURN_IF_ERROR(activate());
  capturing_ = false;
  Graph graph;
  graph.reporting = std::move(captureReporting_);
  captureReporting_.clear();
  graph.launches = launchesSinceSync_ - launchesBeforeCapture_;
  graph.last = lastKernel_;
  launchesSinceSync_ = launchesBeforeCapture_;
  cudaGraph_t captured = nullptr;
  cudaError_t error = cudaStreamEndCapture(stream_, &captured);
  if (error == cudaSuccess)
    error = cudaGraphInstantiate(&graph.exec, captured, 0);
  if (captured)
    (void)cudaGraphDestroy(captured);
  if (error != cudaSuccess) {
    (void)cudaGetLastError(); // a failed capture is not sticky
    return errorf("capturing a CUDA graph: ", cudaGetErrorString(error));
  }
  graphs_.push_back(std::move(graph));
  return graphs_.size() - 1;
}

void CudaDeviceContext::abortCapture() {
  if (!capturing_ || cudaSetDevice(device_) != cudaSuccess)
    return;
  capturing_ = false;
  captureReporting_.clear();
  launchesSinceSync_ = launchesBeforeCapture_;
  cudaGraph_t captured = nullptr;
  (void)cudaStreamEndCapture(stream_, &captured);
  if (captured)
    (void)cudaGraphDestroy(captured);
  (void)cudaGetLastError();
}

Status CudaDeviceContext::replay(size_t capture) {
  MLT_RETURN_IF_ERROR(activate());
  if (capture >= graphs_.size())
    return errorf("no captured graph ", capture);
  const Graph &graph = graphs_[capture];
  MLT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(graph.exec, stream_));
  launchesSinceSync_ += graph.launches;
  if (graph.launches > 0)
    lastKernel_ = graph.last;
  recordPending_ |= !graph.reporting.empty();
  return Status::ok();
}

Status CudaDeviceContext::synchronize() {
  MLT_RETURN_IF_ERROR(activate());
  const bool readRecord = !reportingLaunches_.empty() || recordPending_;
  if (readRecord)
    MLT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(hostErrorRecord_, errorRecord_,
                                             sizeof(DeviceErrorRecord),
                                             cudaMemcpyDeviceToHost, stream_));
  cudaError_t error = cudaSuccess;
  MLT_RETURN_IF_ERROR(waitCompute(error));
  const uint64_t launches = launchesSinceSync_;
  launchesSinceSync_ = 0;
  if (error == cudaSuccess)
    for (const StagedRead &read : stagedReads_)
      std::memcpy(read.host, staging_ + read.offset, read.bytes);
  stagedReads_.clear();
  stagingUsed_ = 0;
  if (error != cudaSuccess) {
    std::string where;
    if (launches > 0)
      where = " (in one of the " + std::to_string(launches) +
              " launches since the last synchronization, the last one '" +
              std::string(kernelName(lastKernel_)) +
              "'; MLT_CUDA_SYNC_EACH_LAUNCH=1 names the instruction)";
    return errorf("cudaStreamSynchronize on CUDA device ", device_, ": ",
                  cudaGetErrorString(error), where);
  }
  if (!readRecord)
    return Status::ok();
  const DeviceErrorRecord record = *hostErrorRecord_;
  Status status = Status::ok();
  if (record.owner != 0) {
    status = deviceError(record);
    MLT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(errorRecord_, 0, sizeof(DeviceErrorRecord), stream_));
    MLT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  }
  reportingLaunches_.clear();
  recordPending_ = false;
  return status;
}

DeviceErrorSink CudaDeviceContext::errorSink(const InstructionDesc &inst) {
  DeviceErrorSink sink;
  sink.record = errorRecord_;
  if (capturing_) {
    captureReporting_.push_back(inst.kernel);
    sink.tag = unsigned(graphs_.size() + 1) << kGraphTagShift |
               unsigned(captureReporting_.size());
  } else {
    reportingLaunches_.push_back(inst.kernel);
    sink.tag = unsigned(reportingLaunches_.size());
  }
  return sink;
}

Status CudaDeviceContext::deviceError(const DeviceErrorRecord &record) const {
  std::string kernel = "a kernel";
  const unsigned graph = record.owner >> kGraphTagShift;
  const unsigned index = record.owner & ((1u << kGraphTagShift) - 1);
  const std::vector<Kernel> *launches = graph == 0 ? &reportingLaunches_
                                        : graph <= graphs_.size()
                                            ? &graphs_[graph - 1].reporting
                                            : nullptr;
  if (launches && index >= 1 && index <= launches->size())
    kernel = std::string(kernelName((*launches)[index - 1]));
  const unsigned long long packed = ~record.where;
  const long long position = (long long)(packed >> 32);
  const uint32_t value = uint32_t(packed & 0xFFFFFFFFu);
  switch (record.code) {
  case kDeviceErrorIdOutOfRange:
    return errorf(kernel, ": token id ", int32_t(value), " at position ",
                  position, " is outside the vocabulary [0, ", record.limit,
                  ")");
  case kDeviceErrorInvalidStep: {
    float step;
    std::memcpy(&step, &value, sizeof(step));
    return errorf(kernel, ": step ", step, " is not a positive step number");
  }
  default:
    return errorf(kernel, ": the kernel reported error code ", record.code);
  }
}

StatusOr<void *> CudaDeviceContext::scratch(size_t bytes) {
  if (bytes <= scratchBytes_)
    return scratch_;
  if (capturing_)
    return errorf("scratch memory cannot grow while a CUDA graph is captured");
  cudaError_t error = cudaSuccess;
  MLT_RETURN_IF_ERROR(waitCompute(error));
  MLT_RETURN_IF_ERROR(cudaStatus(error, "cudaStreamSynchronize"));
  if (scratch_) {
    // Captured graphs may still read the old area: keep it until the end.
    if (graphs_.empty())
      MLT_CUDA_RETURN_IF_ERROR(cudaFree(scratch_));
    else
      retiredScratch_.push_back(scratch_);
    scratch_ = nullptr;
    scratchBytes_ = 0;
  }
  // Round up, so that slightly larger requests do not reallocate.
  const size_t rounded =
      (bytes + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch_, rounded));
  scratchBytes_ = rounded;
  return scratch_;
}

Status CudaDeviceContext::attentionThroughF32(
    const InstructionDesc &inst, const std::vector<BufferView> &in,
    const std::vector<BufferView> &out, const AttentionShape &shape) {
  const bool forward = inst.kernel == Kernel::AttentionFwd;
  // The bf16 operands (lse is f32 already), inputs then outputs, each with
  // an f32 copy in scratch after the f32 kernels' own scratch.
  std::vector<const BufferView *> wide;
  for (const BufferView &view : in)
    if (view.dtype == ElementType::BF16)
      wide.push_back(&view);
  const size_t firstOutput = wide.size();
  for (const BufferView &view : out)
    if (view.dtype == ElementType::BF16)
      wide.push_back(&view);
  auto align = [](size_t bytes) { return (bytes + 255) & ~size_t(255); };
  const size_t kernelBytes =
      forward ? 0 : align(attentionBwdScratchBytes(shape));
  size_t total = kernelBytes;
  std::vector<size_t> offsets;
  for (const BufferView *view : wide) {
    offsets.push_back(total);
    total += align(size_t(view->numElements) * sizeof(float));
  }
  StatusOr<void *> area = scratch(total);
  if (!area)
    return area.takeStatus();
  uint8_t *base = static_cast<uint8_t *>(*area);
  auto wideOf = [&](size_t i) {
    return reinterpret_cast<float *>(base + offsets[i]);
  };
  for (size_t i = 0; i < firstOutput; ++i)
    MLT_RETURN_IF_ERROR(launchCast(wideOf(i), ElementType::F32, wide[i]->data,
                                   ElementType::BF16, wide[i]->numElements,
                                   stream_));
  // Operands in Kernels.def's order, f32 (lse is the f32 buffer itself).
  size_t next = 0;
  auto operand = [&](const BufferView &view) {
    return view.dtype == ElementType::BF16 ? wideOf(next++) : view.as<float>();
  };
  std::vector<float *> ins, outs;
  for (const BufferView &view : in)
    ins.push_back(operand(view));
  for (const BufferView &view : out)
    outs.push_back(operand(view));
  if (forward)
    MLT_RETURN_IF_ERROR(launchAttentionFwd(outs[0], outs[1], ins[0], ins[1],
                                           ins[2], shape, stream_));
  else
    MLT_RETURN_IF_ERROR(launchAttentionBwd(
        outs[0], outs[1], outs[2], ins[0], ins[1], ins[2], ins[3], ins[4],
        ins[5], shape, base, kernelBytes, stream_));
  for (size_t i = firstOutput; i < wide.size(); ++i)
    MLT_RETURN_IF_ERROR(launchCast(wide[i]->data, ElementType::BF16, wideOf(i),
                                   ElementType::F32, wide[i]->numElements,
                                   stream_));
  return Status::ok();
}

StatusOr<CudaDeviceContext::AxisPosition>
CudaDeviceContext::axisPosition(int64_t axis) const {
  if (axis == -1)
    return AxisPosition{};
  if (!communicator_)
    return errorf("this rank has no communicator");
  const Mesh &mesh = communicator_->mesh();
  if (axis < 0 || size_t(axis) >= mesh.numAxes())
    return errorf("axis ", axis, " is not an axis of the mesh ",
                  mesh.toString());
  StatusOr<std::vector<int>> coordinates =
      mesh.coordinates(communicator_->rank());
  if (!coordinates)
    return coordinates.takeStatus();
  return AxisPosition{(*coordinates)[axis], mesh.axes()[axis].size};
}

/// adamw's seven f32 scalars (grad_scale, lr, beta1, beta2, eps,
/// weight_decay, step), inputs first..first + 6 of an instruction.
AdamWScalars adamwScalars(const std::vector<BufferView> &in, size_t first) {
  auto f = [&](size_t i) { return in[first + i].as<const float>(); };
  AdamWScalars scalars;
  scalars.gradScale = f(0);
  scalars.lr = f(1);
  scalars.beta1 = f(2);
  scalars.beta2 = f(3);
  scalars.eps = f(4);
  scalars.weightDecay = f(5);
  scalars.step = f(6);
  return scalars;
}

/// Calls `fn` with a value of the C++ type the kernels use for `type`
/// (float for f32, __nv_bfloat16 for bf16); checkSupported has refused every
/// other compute type.
template <typename Fn> Status withComputeType(ElementType type, Fn &&fn) {
  switch (type) {
  case ElementType::F32:
    return fn(float{});
  case ElementType::BF16:
    return fn(__nv_bfloat16{});
  default:
    return errorf("the CUDA backend does not compute in ",
                  elementTypeName(type));
  }
}

Status CudaDeviceContext::launchKernel(const InstructionDesc &inst,
                                       const std::vector<BufferView> &in,
                                       const std::vector<BufferView> &out,
                                       cudaStream_t s) {
  const std::vector<int64_t> &a = inst.ints;
  auto f = [](const BufferView &b) { return b.as<float>(); };

  switch (inst.kernel) {
  // elementwise.h: every operand in the compute type, except accumulate's y,
  // which may be an f32 gradient of a bf16 x.
  case Kernel::Add:
  case Kernel::Mul:
  case Kernel::SwiGLUFwd:
  case Kernel::SwiGLUBwd:
  case Kernel::SiLUFwd:
  case Kernel::SiLUBwd:
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      auto t = [](const BufferView &b) { return b.as<T>(); };
      switch (inst.kernel) {
      case Kernel::Add:
        return launchAdd(t(out[0]), t(in[0]), t(in[1]), a[0], s);
      case Kernel::Mul:
        return launchMul(t(out[0]), t(in[0]), t(in[1]), a[0], s);
      case Kernel::SwiGLUFwd:
        return launchSwiGLUForward(t(out[0]), t(in[0]), t(in[1]), a[0], s);
      case Kernel::SwiGLUBwd:
        return launchSwiGLUBackward(t(out[0]), t(out[1]), t(in[0]), t(in[1]),
                                    t(in[2]), a[0], s,
                                    out.size() == 3 ? t(out[2]) : nullptr);
      case Kernel::SiLUFwd:
        return launchSiLUForward(t(out[0]), t(in[0]), a[0], s);
      default:
        return launchSiLUBackward(t(out[0]), t(in[0]), t(in[1]), a[0], s);
      }
    });
  case Kernel::Accumulate:
    if (in[0].dtype == ElementType::BF16 && out[0].dtype == ElementType::F32)
      return launchAccumulate(f(out[0]), in[0].as<const __nv_bfloat16>(), a[0],
                              s);
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchAccumulate(out[0].as<T>(), in[0].as<const T>(), a[0], s);
    });
  case Kernel::Fill:
    return launchFill(out[0].data, out[0].dtype, a[0], inst.floats[0], s);
  case Kernel::Cast:
    return launchCast(out[0].data, out[0].dtype, in[0].data, in[0].dtype, a[0],
                      s);
  case Kernel::Transpose: {
    const int64_t rank = a[0];
    return launchTranspose(out[0].data, in[0].data, elementSize(in[0].dtype),
                           a.data() + 1, a.data() + 1 + rank, rank, s);
  }
  case Kernel::ShardSlice: { // x -> y; outer, n, inner, axis
    StatusOr<AxisPosition> position = axisPosition(a[3]);
    if (!position)
      return position.takeStatus();
    return launchShardSlice(out[0].data, in[0].data, elementSize(in[0].dtype),
                            a[0], a[1], a[2], position->size,
                            position->coordinate, s);
  }

  // matmul.h: a, b -> c (c += a b for matmul_accumulate, c = a b + addend
  // for matmul_add, in the epilogue); ints batch, m, n, k, ta, tb,
  // b_batched. c is the operands' type or f32.
  case Kernel::Matmul:
  case Kernel::MatmulAccumulate:
  case Kernel::MatmulAdd: {
    const void *addend = inst.kernel == Kernel::MatmulAccumulate ? out[0].data
                         : inst.kernel == Kernel::MatmulAdd      ? in[2].data
                                                                 : nullptr;
    return matmul_->run(
        MatmulShape{a[0], a[1], a[2], a[3], a[4] != 0, a[5] != 0, a[6] != 0},
        in[0].data, in[1].data, out[0].data, in[0].dtype, out[0].dtype, addend,
        s);
  }

  // optimizer.h: f32 gradients, parameters, moments and scalars.
  case Kernel::SumSquares: {
    StatusOr<void *> partials = scratch(sumSquaresScratchBytes(a[0]));
    if (!partials)
      return partials.takeStatus();
    return launchSumSquares(f(out[0]), f(in[0]), a[0], *partials, s);
  }
  case Kernel::SumSquaresMulti: {
    // x_k -> s_k; ints n_k.
    std::vector<const float *> xs;
    std::vector<float *> sums;
    for (const BufferView &x : in)
      xs.push_back(x.as<const float>());
    for (const BufferView &sum : out)
      sums.push_back(f(sum));
    StatusOr<void *> partials =
        scratch(sumSquaresMultiScratchBytes(a.data(), int64_t(a.size())));
    if (!partials)
      return partials.takeStatus();
    return launchSumSquaresMulti(sums.data(), xs.data(), a.data(),
                                 int64_t(xs.size()), *partials, s);
  }
  case Kernel::GlobalNorm: {
    std::vector<const float *> parts;
    parts.reserve(in.size());
    for (const BufferView &part : in)
      parts.push_back(part.as<const float>());
    StatusOr<void *> running = scratch(kGlobalNormScratchBytes);
    if (!running)
      return running.takeStatus();
    return launchGlobalNorm(f(out[0]), parts.data(), int64_t(parts.size()),
                            *running, s);
  }
  case Kernel::ClipCoefficient:
    return launchClipCoefficient(f(out[0]), f(in[0]), f(in[1]), s);
  case Kernel::AdamW: {
    // grad, grad_scale, lr, beta1, beta2, eps, weight_decay, step -> param,
    // m, v (in place)[, the bf16 compute copy]; ints: n, decay.
    const AdamWScalars scalars = adamwScalars(in, 1);
    __nv_bfloat16 *copy =
        out.size() == 4 ? out[3].as<__nv_bfloat16>() : nullptr;
    return launchAdamW(f(out[0]), f(out[1]), f(out[2]), f(in[0]), a[0], scalars,
                       a[1] != 0, copy, errorSink(inst), s);
  }
  case Kernel::AdamWMulti: {
    // grads, then adamw's seven scalars -> params, ms, vs[, copies]; ints:
    // n and decay per tensor.
    const size_t k = in.size() - kAdamWScalarInputs;
    const bool copies = out.size() == 4 * k;
    const AdamWScalars scalars = adamwScalars(in, k);
    std::vector<AdamWTensor> tensors(k);
    for (size_t t = 0; t < k; ++t) {
      AdamWTensor &x = tensors[t];
      x.param = f(out[t]);
      x.m = f(out[k + t]);
      x.v = f(out[2 * k + t]);
      x.grad = f(in[t]);
      x.copy = copies ? out[3 * k + t].as<__nv_bfloat16>() : nullptr;
      x.n = a[2 * t];
      x.decay = a[2 * t + 1] != 0;
    }
    return launchAdamWMulti(tensors.data(), tensors.size(), scalars,
                            errorSink(inst), s);
  }

  // embedding.h
  case Kernel::EmbeddingFwd:
  case Kernel::EmbeddingBwd:
  case Kernel::EmbeddingFwdVP:
  case Kernel::EmbeddingBwdVP: {
    // ids, table -> out or ids, dout -> dtable (f32); ints: tokens, vocab
    // (local), hidden[, axis]. A sharded rank holds rows from coordinate *
    // vocab_local.
    const int64_t tokens = a[0], vocabLocal = a[1], hidden = a[2];
    int64_t offset = 0, total = vocabLocal;
    if (inst.kernel == Kernel::EmbeddingFwdVP ||
        inst.kernel == Kernel::EmbeddingBwdVP) {
      StatusOr<AxisPosition> position = axisPosition(a[3]);
      if (!position)
        return position.takeStatus();
      offset = position->coordinate * vocabLocal;
      total = position->size * vocabLocal;
    }
    const int32_t *ids = in[0].as<const int32_t>();
    const bool forward = inst.kernel == Kernel::EmbeddingFwd ||
                         inst.kernel == Kernel::EmbeddingFwdVP;
    const size_t bytes =
        forward ? 0 : embeddingBackwardScratchBytes(tokens, vocabLocal);
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return area.takeStatus();
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      if (forward)
        return launchEmbeddingForward(out[0].as<T>(), ids, in[1].as<const T>(),
                                      tokens, vocabLocal, hidden, offset, total,
                                      errorSink(inst), s);
      return launchEmbeddingBackward(f(out[0]), ids, in[1].as<const T>(),
                                     tokens, vocabLocal, hidden, offset, total,
                                     *area, bytes, errorSink(inst), s);
    });
  }

  // rmsnorm.h: the plan keeps no rstd (the backward recomputes it), and
  // rms_norm_bwd overwrites dw, which is f32 (a parameter's gradient) for
  // bf16 activations.
  case Kernel::RMSNormFwd: // x, w -> y; rows, dim; eps
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchRmsNormFwd(out[0].as<T>(), nullptr, in[0].as<const T>(),
                              in[1].as<const T>(), a[0], a[1], inst.floats[0],
                              s);
    });
  case Kernel::RMSNormBwd:      // dy, x, w -> dx, dw; rows, dim; eps
  case Kernel::RMSNormBwdAdd: { // dy, x, w, addend -> dx, dw
    const size_t bytes = rmsNormBwdScratchBytes(a[0], a[1]);
    StatusOr<void *> partials = scratch(bytes);
    if (!partials)
      return partials.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      const T *addend =
          inst.kernel == Kernel::RMSNormBwdAdd ? in[3].as<const T>() : nullptr;
      return launchRmsNormBwd(out[0].as<T>(), f(out[1]), in[0].as<const T>(),
                              in[1].as<const T>(), in[2].as<const T>(), addend,
                              a[0], a[1], inst.floats[0], *partials, bytes, s);
    });
  }

  // rope.h: x -> y; batch, seq, heads, head_dim, inverse, position_offset;
  // theta.
  case Kernel::Rope:
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchRope(out[0].as<T>(), in[0].as<const T>(), a[0], a[1], a[2],
                        a[3], a[4] != 0, a[5], inst.floats[0], s);
    });

  // attention.h: ints batch, seq, q_heads, kv_heads, head_dim, causal;
  // floats scale. lse is f32 for both compute types.
  case Kernel::AttentionFwd:   // q, k, v -> out, lse
  case Kernel::AttentionBwd: { // dout, q, k, v, out, lse -> dq, dk, dv
    AttentionShape shape;
    shape.batch = a[0];
    shape.seq = a[1];
    shape.qHeads = a[2];
    shape.kvHeads = a[3];
    shape.headDim = a[4];
    shape.causal = a[5] != 0;
    shape.scale = inst.floats[0];
    const bool forward = inst.kernel == Kernel::AttentionFwd;
    if (in[0].dtype == ElementType::BF16 && shape.headDim != 64 &&
        shape.headDim != 128)
      return attentionThroughF32(inst, in, out, shape);
    const size_t bytes = forward ? 0 : attentionBwdScratchBytes(shape);
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return area.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      auto t = [](const BufferView &b) { return b.as<T>(); };
      if (forward)
        return launchAttentionFwd(t(out[0]), f(out[1]), t(in[0]), t(in[1]),
                                  t(in[2]), shape, s);
      return launchAttentionBwd(t(out[0]), t(out[1]), t(out[2]), t(in[0]),
                                t(in[1]), t(in[2]), t(in[3]), t(in[4]),
                                f(in[5]), shape, *area, bytes, s);
    });
  }

  // cross_entropy.h: logits and dlogits in the compute type, statistics,
  // loss and dloss f32; labels are checked on the device (errorSink). The
  // plan keeps no lse between cross_entropy_fwd and cross_entropy_bwd: the
  // backward recomputes it.
  case Kernel::CrossEntropyFwd: { // logits, labels -> loss; rows, vocab
    const size_t bytes = crossEntropyFwdScratchBytes(a[0]);
    StatusOr<void *> rowLosses = scratch(bytes);
    if (!rowLosses)
      return rowLosses.takeStatus();
    return withComputeType(in[0].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyFwd(f(out[0]), in[0].as<const T>(),
                                   in[1].as<const int32_t>(), a[0], a[1], a[0],
                                   *rowLosses, bytes, errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyBwd: // dloss, logits, labels -> dlogits
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyBwd(
          out[0].as<T>(), f(in[0]), in[1].as<const T>(),
          in[2].as<const int32_t>(), a[0], a[1], a[0], errorSink(inst), s);
    });
  case Kernel::CrossEntropyStats:      // logits, labels -> lse, target
  case Kernel::CrossEntropyBwdStats: { // dloss, logits, labels, lse -> dlogits
    // ints: rows, vocab_local, axis[, row_count]. The rank holds columns from
    // coordinate * vocab_local of G * vocab_local.
    const int64_t rows = a[0], vocabLocal = a[1];
    StatusOr<AxisPosition> position = axisPosition(a[2]);
    if (!position)
      return position.takeStatus();
    const int64_t offset = position->coordinate * vocabLocal;
    const int64_t total = position->size * vocabLocal;
    if (inst.kernel == Kernel::CrossEntropyStats)
      return withComputeType(in[0].dtype, [&](auto tag) -> Status {
        using T = decltype(tag);
        return launchCrossEntropyStats(
            f(out[0]), f(out[1]), in[0].as<const T>(),
            in[1].as<const int32_t>(), rows, vocabLocal, offset, total,
            errorSink(inst), s);
      });
    return withComputeType(in[1].dtype, [&](auto tag) -> Status {
      using T = decltype(tag);
      return launchCrossEntropyBwdStats(
          out[0].as<T>(), f(in[0]), in[1].as<const T>(),
          in[2].as<const int32_t>(), f(in[3]), rows, vocabLocal, offset, total,
          a[3], errorSink(inst), s);
    });
  }
  case Kernel::CrossEntropyCombine: // parts, target -> lse, loss; rows, G,
                                    // row_count
    return launchCrossEntropyCombine(f(out[0]), f(out[1]), f(in[0]), f(in[1]),
                                     a[0], a[1], a[2], s);

  // Collectives.h: NCCL on the communication stream (stream 0), or on the
  // plan stream the instruction names, which its tokens order.
  case Kernel::AllReduceSum:
  case Kernel::ReduceScatterSum:
  case Kernel::AllGather:
    return launchCollective(collectives_.get(), inst, in[0], out[0], stream_,
                            s == stream_ ? nullptr : s);

  default:
    break;
  }
  return errorf("kernel '", kernelName(inst.kernel),
                "' has no CUDA implementation yet");
}

class CudaBackend final : public Backend {
public:
  std::string_view name() const override { return "cuda"; }

  Status checkSupported(const RankPlan &rank) const override {
    for (const BufferDesc &buffer : rank.buffers)
      if (buffer.dtype == ElementType::F16)
        return errorf("buffer '", buffer.name,
                      "' is f16, which the CUDA backend does not support");
    for (const ProgramDesc &program : rank.programs) {
      for (size_t i = 0; i < program.instructions.size(); ++i) {
        const InstructionDesc &inst = program.instructions[i];
        auto fail = [&](auto &&...message) {
          return errorf("program '", program.name, "' instruction ", i, " (",
                        kernelName(inst.kernel), "): ", message...);
        };
        // Collectives are type-free (NCCL sums f32, f64 and bf16, and the
        // plan verifier checked the types); they need a NCCL communicator,
        // which launch asks for (Collectives.h).
        if (isCollectiveKernel(inst.kernel))
          continue;
        if (inst.stream != 0)
          return fail("runs on stream ", unsigned(inst.stream),
                      "; the CUDA backend runs only collectives on streams "
                      "other than 0 (kernels share the compute stream's "
                      "scratch memory and matrix-product workspace)");
        if (!supportsKernel(inst.kernel))
          return fail("the CUDA backend has no kernel for it yet");
        if (inst.kernel == Kernel::Cast) {
          for (uint32_t index : {inst.inputs[0], inst.outputs[0]}) {
            const BufferDesc &buffer = rank.buffers[index];
            if (!isCastType(buffer.dtype))
              return fail("buffer '", buffer.name, "' is ",
                          elementTypeName(buffer.dtype),
                          "; cast converts between f32, f64 and bf16");
          }
          continue;
        }
        if (inst.kernel == Kernel::Transpose) {
          const int64_t r = inst.ints[0];
          const int64_t merged = mergedTransposeRank(
              inst.ints.data() + 1, inst.ints.data() + 1 + r, r);
          if (merged > kMaxTransposeRank)
            return fail(merged,
                        " dimensions once unit dimensions are dropped "
                        "and adjacent ones merged; the CUDA kernel takes at "
                        "most ",
                        kMaxTransposeRank);
          continue;
        }
        if (isTypeFreeKernel(inst.kernel))
          continue;
        Status operands = checkComputeOperands(
            rank, inst, [](const BufferDesc &buffer) -> Status {
              if (buffer.dtype != ElementType::F32 &&
                  buffer.dtype != ElementType::BF16)
                return errorf("buffer '", buffer.name, "' is ",
                              elementTypeName(buffer.dtype),
                              ", but the CUDA backend computes in f32 and "
                              "bf16 only (f64 is CPU-only)");
              return Status::ok();
            });
        if (operands)
          operands = checkGradientOutputs(rank, inst);
        if (!operands)
          return fail(operands.message());
      }
    }
    return Status::ok();
  }

  StatusOr<std::unique_ptr<DeviceContext>>
  createContext(const RankInfo &rank) override {
    int count = 0;
    MLT_RETURN_IF_ERROR(probeCudaDevices(count));
    // One process per GPU: the device the NCCL communicator was made on.
    int device = communicatorDevice(rank);
    if (device >= count)
      return errorf("CUDA device ", device, " is not visible (",
                    devicesAre(count), ")");
    if (device < 0 && rank.worldSize > 1) {
      // Ranks as threads of this process: one device each.
      if (int64_t(rank.worldSize) > count)
        return errorf("the plan has ", rank.worldSize, " ranks but only ",
                      devicesAre(count), " visible");
      device = int(rank.rank);
    }
    device = std::max(device, 0);
    cudaDeviceProp properties;
    MLT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device));
    if (properties.major < 9)
      return errorf("CUDA device ", device, " (", properties.name,
                    ") has compute capability ", properties.major, ".",
                    properties.minor,
                    "; this build's kernels need 9.0 or newer (sm_90)");
    auto context =
        std::make_unique<CudaDeviceContext>(device, rank.communicator);
    MLT_RETURN_IF_ERROR(context->init());
    return std::unique_ptr<DeviceContext>(std::move(context));
  }
};

} // namespace

std::unique_ptr<Backend> mlt::rt::createCudaBackend() {
  return std::make_unique<CudaBackend>();
}

Status mlt::rt::probeCudaDevices(int &count) {
  count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    count = 0;
    return errorf("no CUDA device is visible (cudaGetDeviceCount: ",
                  cudaGetErrorString(error), ")");
  }
  if (count == 0)
    return errorf("no CUDA device is visible (cudaGetDeviceCount found 0)");
  return Status::ok();
}
