//===- Collectives.cpp - a CUDA context's collectives over NCCL
//------------===//
//
// Part of mlt. The communication stream and its events (Collectives.h): a
// collective instruction becomes event record, stream wait, NCCL call, event
// record, stream wait, all queued without the host waiting.
//
//===----------------------------------------------------------------------===//

#include "Collectives.h"

#include "CudaCheck.h"
#include "kernels/position.h"

#include "mlt/Plan/KernelInfo.h"
#include "mlt/Runtime/exec/Position.h"

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

StatusOr<std::unique_ptr<CudaCollectives>>
CudaCollectives::create(CudaCommunicator &communicator) {
  std::unique_ptr<CudaCollectives> collectives(
      new CudaCollectives(communicator));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&collectives->stream_, cudaStreamNonBlocking));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&collectives->ready_, cudaEventDisableTiming));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaEventCreateWithFlags(&collectives->done_, cudaEventDisableTiming));
  return collectives;
}

CudaCollectives::~CudaCollectives() {
  // The context made its device current and waited for its compute stream,
  // which waited for every collective; an aborted communicator has stopped
  // the rest.
  if (stream_)
    (void)cudaStreamSynchronize(stream_);
  if (ready_)
    (void)cudaEventDestroy(ready_);
  if (done_)
    (void)cudaEventDestroy(done_);
  if (stream_)
    (void)cudaStreamDestroy(stream_);
}

namespace {

/// Queues `call` on `stream` between the device's writes of `mark`'s place
/// (entered, then left), when there is a word to write.
template <typename Call>
Status marked(const PositionMark &mark, cudaStream_t stream, Call call) {
  if (mark.word)
    MLT_RETURN_IF_ERROR(launchWritePosition(
        mark.word, deviceEnteredWord(mark.place), mark.clock, false, stream));
  MLT_RETURN_IF_ERROR(call());
  if (mark.word)
    MLT_RETURN_IF_ERROR(launchWritePosition(
        mark.word, deviceLeftWord(mark.place), mark.clock, true, stream));
  return Status::ok();
}

} // namespace

Status CudaCollectives::launch(const InstructionDesc &inst,
                               const BufferView &in, const BufferView &out,
                               cudaStream_t compute, PositionMark mark) {
  MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready_, compute));
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, ready_, 0));
  MLT_RETURN_IF_ERROR(launchOn(inst, in, out, stream_, mark));
  MLT_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_));
  MLT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute, done_, 0));
  return Status::ok();
}

Status CudaCollectives::launchOn(const InstructionDesc &inst,
                                 const BufferView &in, const BufferView &out,
                                 cudaStream_t stream, PositionMark mark) {
  if (!isCollectiveKernel(inst.kernel))
    return errorf("kernel '", kernelName(inst.kernel), "' is not a collective");
  const Mesh &mesh = communicator_.mesh();
  const int64_t axis = collectiveAttrs(inst).axis;
  MLT_RETURN_IF_ERROR(checkMeshAxis(mesh, axis));
  CollectiveCall call = collectiveCall(inst, in.dtype);
  call.in = in.data;
  call.out = out.data;

  MLT_RETURN_IF_ERROR(marked(mark, stream, [&] {
    return communicator_.enqueue(mesh.axes()[size_t(axis)].name, call, stream);
  }));
  launchedAny_ = true;
  return Status::ok();
}

Status CudaCollectives::exchange(std::string_view axis,
                                 const std::vector<PointToPoint> &transfers,
                                 cudaStream_t compute, PositionMark mark) {
  MLT_RETURN_IF_ERROR(marked(mark, compute, [&] {
    return communicator_.enqueueExchange(axis, transfers, compute);
  }));
  launchedAny_ = true;
  return Status::ok();
}

Status CudaCollectives::wait(cudaStream_t compute, cudaError_t &cudaResult) {
  if (!launchedAny_) {
    cudaResult = cudaStreamSynchronize(compute);
    return Status::ok();
  }
  return communicator_.waitForStream(compute, cudaResult);
}

Status mlt::cuda::launchCollective(CudaCollectives *collectives,
                                   const InstructionDesc &inst,
                                   const BufferView &in, const BufferView &out,
                                   cudaStream_t compute, cudaStream_t side,
                                   PositionMark mark) {
  if (!collectives)
    return errorf("collectives on the CUDA backend go through NCCL, one "
                  "process per GPU: start the plan's ranks with mpirun -np N "
                  "mlt-run PLAN --device cuda (this rank's communicator is not "
                  "a NCCL one)");
  return side ? collectives->launchOn(inst, in, out, side, mark)
              : collectives->launch(inst, in, out, compute, mark);
}

Status mlt::cuda::launchExchange(CudaCollectives *collectives,
                                 std::string_view axis,
                                 const std::vector<PointToPoint> &transfers,
                                 cudaStream_t compute, PositionMark mark) {
  if (!collectives)
    return errorf("sends and receives on the CUDA backend go through NCCL, "
                  "one process per GPU: start the plan's ranks with mpirun -np "
                  "N mlt-run PLAN --device cuda (this rank's communicator is "
                  "not a NCCL one)");
  return collectives->exchange(axis, transfers, compute, mark);
}

int mlt::cuda::communicatorDevice(const RankInfo &rank) {
  if (auto *cuda = dynamic_cast<CudaCommunicator *>(rank.communicator))
    return cuda->device();
  return -1;
}
