//===- CudaContext.cpp - one rank's CUDA device context -------------------===//
//
// Part of mlt. The CUDA device context (CudaContext.h), all but its launch
// switch (CudaDispatch.cpp): the device made current at every entry point,
// the compute stream and the plan's streams forked from and joined back to
// it, the tokens' events, the arena and the kernels' scratch memory, copies
// (and the reads staged until the next synchronize), launch timing, CUDA
// graph capture and replay, and `synchronize`, which turns asynchronous
// faults and the device error record into a Status.
//
//===----------------------------------------------------------------------===//

#include "CudaContext.h"
#include "KernelScratch.h"

#include "kernels/elementwise.h"

#include "mlt/Runtime/exec/Position.h"
#include "mlt/Support/FormatBytes.h"

#include <algorithm>
#include <cstdio>
#include <utility>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

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
  if (positionWords_)
    (void)cudaFreeHost(const_cast<uint64_t *>(positionWords_));
  if (stream_)
    (void)cudaStreamDestroy(stream_);
}

Status CudaDeviceContext::watchPosition(RankPosition &position) {
  MLT_RETURN_IF_ERROR(activate());
  if (!positionWords_) {
    // Mapped, so that the device writes straight into host memory, where
    // the watchdog's thread reads it without a CUDA call: a word per plan
    // stream, then two clock words per plan stream (Position.h).
    void *words = nullptr;
    MLT_CUDA_RETURN_IF_ERROR(cudaHostAlloc(
        &words, 3 * kPlanMaxStreams * sizeof(uint64_t), cudaHostAllocMapped));
    std::memset(words, 0, 3 * kPlanMaxStreams * sizeof(uint64_t));
    positionWords_ = static_cast<volatile uint64_t *>(words);
    void *onDevice = nullptr;
    MLT_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&onDevice, words, 0));
    positionWordsOnDevice_ = static_cast<volatile uint64_t *>(onDevice);
  }
  position.attachDeviceWords(positionWords_, kPlanMaxStreams);
  position.attachDeviceClocks(positionWords_ + kPlanMaxStreams,
                              kPlanMaxStreams);
  position_ = &position;
  return Status::ok();
}

PositionMark CudaDeviceContext::positionMark(unsigned stream) const {
  if (!position_ || stream >= kPlanMaxStreams)
    return {};
  return {positionWordsOnDevice_ + stream, position_->place(),
          positionWordsOnDevice_ + kPlanMaxStreams + 2 * stream};
}

Status CudaDeviceContext::init() {
  MLT_RETURN_IF_ERROR(activate());
  cudaDeviceProp properties;
  MLT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, device_));
  architecture_ =
      "sm_" + std::to_string(properties.major * 10 + properties.minor);
  deviceName_ = properties.name;
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
  StatusOr<std::unique_ptr<MatmulRunner>> matmul =
      MatmulRunner::create(matmulOptions_);
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

std::optional<uint64_t> CudaDeviceContext::memoryInUse() {
  size_t freeBytes = 0, totalBytes = 0;
  if (!activate() || cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess)
    return std::nullopt;
  return uint64_t(totalBytes - freeBytes);
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
  if (registersMemory()) {
    StatusOr<void *> registered =
        collectives_->communicator().allocateRegistered(bytes);
    if (!registered)
      return std::move(registered).takeStatus().withContext(
          "the arena (" + gib(bytes) + ") in NCCL's registered memory");
    memory = *registered;
  } else if (cudaError_t error = cudaMalloc(&memory, bytes);
             error != cudaSuccess) {
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
  if (registersMemory())
    collectives_->communicator().freeRegistered(memory);
  else
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

StatusOr<void *> CudaDeviceContext::allocateHostStaging(uint64_t bytes) {
  MLT_RETURN_IF_ERROR(activate());
  void *memory = nullptr;
  MLT_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&memory, std::max<uint64_t>(bytes, 1), cudaHostAllocDefault));
  return memory;
}

void CudaDeviceContext::freeHostStaging(void *memory) {
  if (memory)
    (void)cudaFreeHost(memory);
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
      // The highest priority: the collectives there need few SMs, but when
      // the compute stream's kernels hold them all a collective would wait
      // for them to drain, which serializes the overlap the plan asks for.
      int least = 0, greatest = 0;
      MLT_CUDA_RETURN_IF_ERROR(
          cudaDeviceGetStreamPriorityRange(&least, &greatest));
      MLT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(
          &planStreams_[index], cudaStreamNonBlocking, greatest));
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
  MLT_RETURN_IF_ERROR(beginTimed(s));
  MLT_RETURN_IF_ERROR(launchKernel(inst, in, out, s));
  MLT_RETURN_IF_ERROR(endTimed(s));
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

Status CudaDeviceContext::exchange(std::string_view axis,
                                   const std::vector<PointToPoint> &transfers) {
  MLT_RETURN_IF_ERROR(activate());
  ++launchesSinceSync_;
  lastKernel_ = transfers.empty() || transfers[0].kind == TransferKind::Send
                    ? Kernel::Send
                    : Kernel::Recv;
  MLT_RETURN_IF_ERROR(beginTimed(stream_));
  MLT_RETURN_IF_ERROR(launchExchange(collectives_.get(), axis, transfers,
                                     stream_, positionMark(0)));
  MLT_RETURN_IF_ERROR(endTimed(stream_));
  if (syncEachLaunch_)
    return synchronize();
  return Status::ok();
}

Status CudaDeviceContext::beginTimed(cudaStream_t s) {
  if (!timing_)
    return Status::ok();
  while (timingEvents_.size() < 2 * (timedLaunches_ + 1)) {
    cudaEvent_t event;
    MLT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
    timingEvents_.push_back(event);
  }
  MLT_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(timingEvents_[2 * timedLaunches_], s));
  return Status::ok();
}

Status CudaDeviceContext::endTimed(cudaStream_t s) {
  if (!timing_)
    return Status::ok();
  MLT_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(timingEvents_[2 * timedLaunches_ + 1], s));
  ++timedLaunches_;
  return Status::ok();
}

Status CudaDeviceContext::beginLaunchTiming() {
  timing_ = true;
  timedLaunches_ = 0;
  return Status::ok();
}

StatusOr<std::vector<DeviceContext::LaunchTiming>>
CudaDeviceContext::endLaunchTiming() {
  timing_ = false;
  MLT_RETURN_IF_ERROR(synchronize());
  std::vector<LaunchTiming> launches(timedLaunches_);
  for (size_t i = 0; i < timedLaunches_; ++i) {
    // Events of one device compare across its streams.
    float start = 0.0f, elapsed = 0.0f;
    MLT_CUDA_RETURN_IF_ERROR(
        cudaEventElapsedTime(&start, timingEvents_[0], timingEvents_[2 * i]));
    MLT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(
        &elapsed, timingEvents_[2 * i], timingEvents_[2 * i + 1]));
    launches[i] = {start, elapsed};
  }
  timedLaunches_ = 0;
  return launches;
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

Status CudaDeviceContext::reserveScratch(uint64_t bytes) {
  if (bytes > 0) {
    StatusOr<void *> area = scratch(bytes);
    if (!area)
      return std::move(area.takeStatus())
          .withContext("allocating the kernels' scratch memory of " +
                       std::to_string(bytes) + " bytes (" +
                       formatBytes(bytes) + ")");
  }
  scratchReserved_ = true;
  return Status::ok();
}

StatusOr<void *> CudaDeviceContext::scratch(size_t bytes) {
  if (bytes <= scratchBytes_)
    return scratch_;
  if (scratchReserved_)
    return errorf("a launch asks for ", bytes,
                  " bytes of scratch memory, more than the ", scratchBytes_,
                  " reserved for the plan's kernels (KernelScratch.cpp "
                  "disagrees with the launch switch)");
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
  const size_t rounded = scratchAreaBytes(bytes);
  MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&scratch_, rounded));
  scratchBytes_ = rounded;
  return scratch_;
}
