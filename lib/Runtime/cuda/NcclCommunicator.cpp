//===- NcclCommunicator.cpp - collectives between GPUs over NCCL ----------===//
//
// Part of mlt. The NCCL communicator of one rank (NcclCommunicator.h): a
// world communicator, one communicator split from it per mesh axis, and a
// stream of its own for the blocking calls (the base class's collectives
// and exchanges, the barrier, and the point-to-point copies of the
// RankTransport, which stage through a device buffer in chunks). Every NCCL
// failure aborts all of the rank's communicators before it is returned.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/cuda/NcclCommunicator.h"

#include "CudaCheck.h"
#include "NcclCheck.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

using namespace mlt;
using namespace mlt::rt;
using namespace mlt::cuda;

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes),
              "NcclUniqueId must hold an ncclUniqueId");

namespace {

/// The largest piece a RankTransport call stages through device memory.
constexpr size_t kTransportChunkBytes = size_t(64) << 20;

/// The rank's communicator for one mesh axis.
struct AxisComm {
  std::string name;
  ncclComm_t comm = nullptr;
  int size = 1;
  /// The rank's index in its group: its NCCL rank in `comm`.
  int index = 0;
};

class NcclCommunicator final : public CudaCommunicator {
public:
  NcclCommunicator(Mesh mesh, int rank, int device)
      : CudaCommunicator(std::move(mesh), rank, device) {}
  ~NcclCommunicator() override;

  /// Creates the communicators, the stream and the barrier's buffer.
  Status init(const NcclUniqueId &id);

  Status enqueue(std::string_view axis, const CollectiveCall &call,
                 cudaStream_t stream) override;
  Status enqueueExchange(std::string_view axis,
                         const std::vector<PointToPoint> &transfers,
                         cudaStream_t stream) override;
  Status exchange(std::string_view axis,
                  const std::vector<PointToPoint> &transfers) override;
  Status checkAsyncErrors() override;
  Status waitForStream(cudaStream_t stream, cudaError_t &cudaResult) override;
  void abort(const std::string &message) override;
  bool isAborted() const override { return aborted_.load(); }

  StatusOr<void *> allocateRegistered(size_t bytes) override;
  void freeRegistered(void *memory) override;

  Status barrier() override;
  Status send(int toRank, const void *data, size_t bytes) override;
  Status receive(int fromRank, void *data, size_t bytes) override;

protected:
  Status collective(std::string_view axis, const CollectiveCall &call) override;

private:
  Status activate() {
    MLT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device()));
    return Status::ok();
  }
  /// Fails once aborted, with the abort's message (set before the flag).
  Status checkUsable() const {
    if (aborted_.load())
      return errorf("collectives aborted: ", abortMessage_);
    return Status::ok();
  }
  /// Aborts everything and returns `failure` (a failed NCCL call).
  Status fail(Status failure) {
    abort(failure.message());
    return failure;
  }
  /// Waits for the own stream and turns a CUDA fault into a Status.
  Status waitOwnStream(const char *what);
  /// Checks a point-to-point peer and sizes the staging buffer.
  Status prepareTransport(int peer, size_t bytes, const char *what);
  /// The communicator of the axis named `name`, or an error naming it.
  StatusOr<const AxisComm *> findAxis(std::string_view name) const;
  /// findAxis, after checking that this communicator can still be used.
  StatusOr<const AxisComm *> usableAxis(std::string_view name) const;

  ncclComm_t world_ = nullptr;
  std::vector<AxisComm> axes_;
  cudaStream_t stream_ = nullptr;
  float *barrierValue_ = nullptr; // device memory, one float
  void *staging_ = nullptr;       // device memory, for send and receive
  size_t stagingBytes_ = 0;
  /// `abort` may come from another thread (the hang watchdog's) while the
  /// rank's own thread queues or polls: every use of the communicators'
  /// handles holds this lock, so that none is used while it is aborted
  /// (recursive: a failing call aborts under it).
  std::recursive_mutex commsMutex_;
  std::atomic<bool> aborted_{false};
  std::string abortMessage_;
  /// allocateRegistered's memory and its registration with each
  /// communicator.
  struct Registration {
    void *memory = nullptr;
    std::vector<std::pair<ncclComm_t, void *>> handles;
  };
  std::vector<Registration> registrations_;
};

NcclCommunicator::~NcclCommunicator() {
  if (cudaSetDevice(device()) != cudaSuccess)
    return;
  if (stream_)
    (void)cudaStreamSynchronize(stream_);
  while (!registrations_.empty())
    freeRegistered(registrations_.back().memory);
  if (!aborted_) {
    // The split communicators before the one they were split from.
    for (AxisComm &axis : axes_)
      if (axis.comm)
        (void)ncclCommDestroy(axis.comm);
    if (world_)
      (void)ncclCommDestroy(world_);
  }
  if (staging_)
    (void)cudaFree(staging_);
  if (barrierValue_)
    (void)cudaFree(barrierValue_);
  if (stream_)
    (void)cudaStreamDestroy(stream_);
}

Status NcclCommunicator::init(const NcclUniqueId &id) {
  MLT_RETURN_IF_ERROR(activate());
  MLT_CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  MLT_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void **>(&barrierValue_), sizeof(float)));
  MLT_CUDA_RETURN_IF_ERROR(cudaMemset(barrierValue_, 0, sizeof(float)));

  ncclUniqueId uniqueId;
  std::memcpy(&uniqueId, id.bytes.data(), sizeof(uniqueId));
  const int worldSize = mesh().worldSize();
  Status status =
      MLT_NCCL_STATUS(ncclCommInitRank(&world_, worldSize, uniqueId, rank()));
  if (!status) {
    world_ = nullptr;
    return status;
  }
  for (const MeshAxis &meshAxis : mesh().axes()) {
    StatusOr<MeshGroup> group = mesh().groupOf(rank(), meshAxis.name);
    if (!group)
      return fail(group.takeStatus());
    AxisComm axis;
    axis.name = meshAxis.name;
    axis.size = group->size();
    axis.index = group->index;
    // Collective over the world communicator: every rank splits every axis,
    // in the mesh's order.
    status = MLT_NCCL_STATUS(ncclCommSplit(world_, group->ranks.front(),
                                           group->index, &axis.comm, nullptr));
    if (!status)
      return fail(std::move(status).withContext("axis '" + axis.name + "'"));
    axes_.push_back(axis);
    int count = 0, userRank = 0;
    status = MLT_NCCL_STATUS(ncclCommCount(axis.comm, &count));
    if (status)
      status = MLT_NCCL_STATUS(ncclCommUserRank(axis.comm, &userRank));
    if (!status)
      return fail(std::move(status));
    if (count != axis.size || userRank != axis.index)
      return fail(errorf("the NCCL communicator of axis '", axis.name, "' has ",
                         count, " ranks and this rank at ", userRank,
                         "; its group has ", axis.size,
                         " ranks and this rank at ", axis.index));
  }
  return Status::ok();
}

StatusOr<const AxisComm *>
NcclCommunicator::findAxis(std::string_view name) const {
  for (const AxisComm &candidate : axes_)
    if (candidate.name == name)
      return &candidate;
  return errorf("'", name, "' is not an axis of the mesh ", mesh().toString());
}

StatusOr<const AxisComm *>
NcclCommunicator::usableAxis(std::string_view name) const {
  MLT_RETURN_IF_ERROR(checkUsable());
  return findAxis(name);
}

Status NcclCommunicator::enqueue(std::string_view axisName,
                                 const CollectiveCall &call,
                                 cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(commsMutex_);
  StatusOr<const AxisComm *> found = usableAxis(axisName);
  if (!found)
    return found.takeStatus();
  const AxisComm *axis = *found;
  Status check = checkCollectiveCall(call, axis->size, axis->index);
  if (!check)
    return std::move(check).withContext(
        std::string(collectiveKindName(call.kind)) + " over axis '" +
        axis->name + "'");
  if (call.count == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(activate());

  // Sums in the element type (bf16 in NCCL's bf16 arithmetic); moves as
  // bytes, whatever the type.
  ncclDataType_t sumType = ncclFloat32;
  switch (call.dtype) {
  case ElementType::F32:
    sumType = ncclFloat32;
    break;
  case ElementType::F64:
    sumType = ncclFloat64;
    break;
  case ElementType::BF16:
    sumType = ncclBfloat16;
    break;
  default:
    break; // checkCollectiveCall refused sums of other types
  }
  const size_t bytes = call.count * call.elementBytes();
  Status status = Status::ok();
  switch (call.kind) {
  case CollectiveKind::AllReduceSum:
    status = MLT_NCCL_STATUS(ncclAllReduce(
        call.in, call.out, call.count, sumType, ncclSum, axis->comm, stream));
    break;
  case CollectiveKind::ReduceScatterSum:
    status = MLT_NCCL_STATUS(ncclReduceScatter(
        call.in, call.out, call.count, sumType, ncclSum, axis->comm, stream));
    break;
  case CollectiveKind::AllGather:
    status = MLT_NCCL_STATUS(
        ncclAllGather(call.in, call.out, bytes, ncclUint8, axis->comm, stream));
    break;
  case CollectiveKind::Broadcast:
    status = MLT_NCCL_STATUS(ncclBroadcast(call.in, call.out, bytes, ncclUint8,
                                           call.root, axis->comm, stream));
    break;
  case CollectiveKind::AllToAll: {
    // One group of a send and a receive per member (the own block too, a
    // copy inside NCCL), as NCCL's documentation builds its all-to-all. A
    // failure inside still ends the group, so NCCL's state is left clean.
    status = MLT_NCCL_STATUS(ncclGroupStart());
    if (!status)
      break;
    // With an order of blocks, a block is moved as its two halves, each
    // from or to its chunk of the natural order (Collective.h): the same
    // bytes in two sends or receives of half the size.
    const auto *in = static_cast<const char *>(call.in);
    auto *out = static_cast<char *>(call.out);
    const bool halves = call.order != BlockOrder::Blocks;
    const size_t piece = halves ? bytes / 2 : bytes;
    auto at = [&](int k, int h, bool natural) {
      return natural ? size_t(naturalChunkOfBlock(k, h, axis->size)) * piece
                     : size_t(k) * bytes + size_t(h) * piece;
    };
    for (int k = 0; k < axis->size && status; ++k)
      for (int h = 0; h < (halves ? 2 : 1) && status; ++h) {
        status = MLT_NCCL_STATUS(ncclSend(
            in + at(k, h, call.order == BlockOrder::FromNatural), piece,
            ncclUint8, k, axis->comm, stream));
        if (status)
          status = MLT_NCCL_STATUS(ncclRecv(
              out + at(k, h, call.order == BlockOrder::ToNatural), piece,
              ncclUint8, k, axis->comm, stream));
      }
    Status ended = MLT_NCCL_STATUS(ncclGroupEnd());
    if (status)
      status = std::move(ended);
    break;
  }
  case CollectiveKind::Permute: {
    // One group of a send to the member `shift` after this one and a
    // receive from the one `shift` before it: around the ring, every
    // member's send meets its successor's receive.
    const int index = axis->index;
    const int to = (index + call.shift) % axis->size;
    const int from = (index - call.shift + axis->size) % axis->size;
    status = MLT_NCCL_STATUS(ncclGroupStart());
    if (!status)
      break;
    status = MLT_NCCL_STATUS(
        ncclSend(call.in, bytes, ncclUint8, to, axis->comm, stream));
    if (status)
      status = MLT_NCCL_STATUS(
          ncclRecv(call.out, bytes, ncclUint8, from, axis->comm, stream));
    Status ended = MLT_NCCL_STATUS(ncclGroupEnd());
    if (status)
      status = std::move(ended);
    break;
  }
  }
  if (!status)
    return fail(std::move(status).withContext(call.describe() + " over axis '" +
                                              axis->name + "'"));
  return Status::ok();
}

Status
NcclCommunicator::enqueueExchange(std::string_view axisName,
                                  const std::vector<PointToPoint> &transfers,
                                  cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(commsMutex_);
  StatusOr<const AxisComm *> found = usableAxis(axisName);
  if (!found)
    return found.takeStatus();
  const AxisComm *axis = *found;
  MLT_RETURN_IF_ERROR(
      checkExchange(transfers, axis->size)
          .withContext("exchange over axis '" + axis->name + "'"));
  MLT_RETURN_IF_ERROR(activate());
  // One group: NCCL posts every send and receive together. A failure inside
  // the group still ends it (ncclGroupEnd), so that NCCL's group state is
  // left clean, and then aborts.
  Status status = MLT_NCCL_STATUS(ncclGroupStart());
  if (!status)
    return fail(std::move(status).withContext("exchange over axis '" +
                                              axis->name + "'"));
  for (size_t i = 0; i < transfers.size() && status; ++i) {
    const PointToPoint &transfer = transfers[i];
    if (transfer.count == 0)
      continue;
    status = transfer.kind == TransferKind::Send
                 ? MLT_NCCL_STATUS(ncclSend(transfer.buffer, transfer.bytes(),
                                            ncclUint8, transfer.peer,
                                            axis->comm, stream))
                 : MLT_NCCL_STATUS(ncclRecv(transfer.buffer, transfer.bytes(),
                                            ncclUint8, transfer.peer,
                                            axis->comm, stream));
    if (!status)
      status = std::move(status).withContext("transfer #" + std::to_string(i) +
                                             " (" + transfer.describe() + ")");
  }
  Status ended = MLT_NCCL_STATUS(ncclGroupEnd());
  if (status)
    status = std::move(ended);
  if (!status)
    return fail(std::move(status).withContext("exchange over axis '" +
                                              axis->name + "'"));
  return Status::ok();
}

Status NcclCommunicator::exchange(std::string_view axis,
                                  const std::vector<PointToPoint> &transfers) {
  MLT_RETURN_IF_ERROR(enqueueExchange(axis, transfers, stream_));
  return waitOwnStream("exchange");
}

Status NcclCommunicator::checkAsyncErrors() {
  std::lock_guard<std::recursive_mutex> lock(commsMutex_);
  MLT_RETURN_IF_ERROR(checkUsable());
  auto check = [&](ncclComm_t comm, const std::string &what) -> Status {
    if (!comm)
      return Status::ok();
    ncclResult_t async = ncclSuccess;
    MLT_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &async));
    if (async == ncclSuccess || async == ncclInProgress)
      return Status::ok();
    std::string detail;
    if (const char *last = ncclGetLastError(comm); last && *last)
      detail = std::string(" (NCCL: ") + last + ")";
    return errorf("NCCL reported an asynchronous error on ", what, ": ",
                  ncclGetErrorString(async), detail);
  };
  for (const AxisComm &axis : axes_) {
    Status status =
        check(axis.comm, "the communicator of axis '" + axis.name + "'");
    if (!status)
      return fail(std::move(status));
  }
  Status status = check(world_, "the world communicator");
  if (!status)
    return fail(std::move(status));
  return Status::ok();
}

Status NcclCommunicator::waitForStream(cudaStream_t stream,
                                       cudaError_t &cudaResult) {
  // Spin briefly (a short wait costs no latency), then back off to sleeps
  // so that a long step does not burn a core.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t query = cudaStreamQuery(stream);
    if (query != cudaErrorNotReady) {
      cudaResult = query;
      return Status::ok();
    }
    Status health = checkAsyncErrors();
    if (!health) {
      cudaResult = cudaSuccess;
      return health;
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < std::chrono::microseconds(200))
      std::this_thread::yield();
    else if (waited < std::chrono::milliseconds(20))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status NcclCommunicator::waitOwnStream(const char *what) {
  cudaError_t result = cudaSuccess;
  MLT_RETURN_IF_ERROR(waitForStream(stream_, result));
  if (result != cudaSuccess)
    return errorf(what, ": ", cudaGetErrorString(result));
  return Status::ok();
}

void NcclCommunicator::abort(const std::string &message) {
  std::lock_guard<std::recursive_mutex> lock(commsMutex_);
  if (aborted_.load())
    return;
  abortMessage_ = message;
  aborted_.store(true);
  (void)cudaSetDevice(device());
  for (AxisComm &axis : axes_) {
    if (axis.comm)
      (void)ncclCommAbort(axis.comm);
    axis.comm = nullptr;
  }
  if (world_)
    (void)ncclCommAbort(world_);
  world_ = nullptr;
}

Status NcclCommunicator::collective(std::string_view axis,
                                    const CollectiveCall &call) {
  MLT_RETURN_IF_ERROR(enqueue(axis, call, stream_));
  return waitOwnStream(collectiveKindName(call.kind));
}

StatusOr<void *> NcclCommunicator::allocateRegistered(size_t bytes) {
  MLT_RETURN_IF_ERROR(checkUsable());
  MLT_RETURN_IF_ERROR(activate());
  Registration registration;
  MLT_RETURN_IF_ERROR(
      MLT_NCCL_STATUS(ncclMemAlloc(&registration.memory, bytes)));
  std::vector<ncclComm_t> comms{world_};
  for (const AxisComm &axis : axes_)
    comms.push_back(axis.comm);
  for (ncclComm_t comm : comms) {
    void *handle = nullptr;
    Status status = MLT_NCCL_STATUS(
        ncclCommRegister(comm, registration.memory, bytes, &handle));
    if (!status) {
      for (auto &[registered, done] : registration.handles)
        (void)ncclCommDeregister(registered, done);
      (void)ncclMemFree(registration.memory);
      return status;
    }
    registration.handles.emplace_back(comm, handle);
  }
  registrations_.push_back(std::move(registration));
  return registrations_.back().memory;
}

void NcclCommunicator::freeRegistered(void *memory) {
  auto found = std::find_if(
      registrations_.begin(), registrations_.end(),
      [&](const Registration &r) { return r.memory == memory; });
  if (found == registrations_.end() || cudaSetDevice(device()) != cudaSuccess)
    return;
  // An aborted communicator has released its registrations with itself.
  if (!aborted_)
    for (auto &[comm, handle] : found->handles)
      (void)ncclCommDeregister(comm, handle);
  (void)ncclMemFree(found->memory);
  registrations_.erase(found);
}

Status NcclCommunicator::barrier() {
  {
    std::lock_guard<std::recursive_mutex> lock(commsMutex_);
    MLT_RETURN_IF_ERROR(checkUsable());
    MLT_RETURN_IF_ERROR(activate());
    Status status =
        MLT_NCCL_STATUS(ncclAllReduce(barrierValue_, barrierValue_, 1,
                                      ncclFloat32, ncclSum, world_, stream_));
    if (!status)
      return fail(std::move(status).withContext("barrier"));
  }
  return waitOwnStream("barrier");
}

Status NcclCommunicator::prepareTransport(int peer, size_t bytes,
                                          const char *what) {
  MLT_RETURN_IF_ERROR(checkUsable());
  if (peer < 0 || peer >= mesh().worldSize() || peer == rank())
    return errorf(what, ": rank ", peer, " is not another rank of the ",
                  mesh().worldSize());
  MLT_RETURN_IF_ERROR(activate());
  const size_t want = std::min(bytes, kTransportChunkBytes);
  if (want > stagingBytes_) {
    if (staging_) {
      MLT_RETURN_IF_ERROR(waitOwnStream(what));
      MLT_CUDA_RETURN_IF_ERROR(cudaFree(staging_));
      staging_ = nullptr;
      stagingBytes_ = 0;
    }
    MLT_CUDA_RETURN_IF_ERROR(cudaMalloc(&staging_, want));
    stagingBytes_ = want;
  }
  return Status::ok();
}

Status NcclCommunicator::send(int toRank, const void *data, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(prepareTransport(toRank, bytes, "send"));
  const auto *host = static_cast<const uint8_t *>(data);
  for (size_t offset = 0; offset < bytes; offset += stagingBytes_) {
    const size_t n = std::min(stagingBytes_, bytes - offset);
    MLT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_, host + offset, n,
                                             cudaMemcpyHostToDevice, stream_));
    {
      std::lock_guard<std::recursive_mutex> lock(commsMutex_);
      MLT_RETURN_IF_ERROR(checkUsable());
      Status status = MLT_NCCL_STATUS(
          ncclSend(staging_, n, ncclUint8, toRank, world_, stream_));
      if (!status)
        return fail(std::move(status).withContext("send to rank " +
                                                  std::to_string(toRank)));
    }
    MLT_RETURN_IF_ERROR(waitOwnStream("send"));
  }
  return Status::ok();
}

Status NcclCommunicator::receive(int fromRank, void *data, size_t bytes) {
  if (bytes == 0)
    return Status::ok();
  MLT_RETURN_IF_ERROR(prepareTransport(fromRank, bytes, "receive"));
  auto *host = static_cast<uint8_t *>(data);
  for (size_t offset = 0; offset < bytes; offset += stagingBytes_) {
    const size_t n = std::min(stagingBytes_, bytes - offset);
    {
      std::lock_guard<std::recursive_mutex> lock(commsMutex_);
      MLT_RETURN_IF_ERROR(checkUsable());
      Status status = MLT_NCCL_STATUS(
          ncclRecv(staging_, n, ncclUint8, fromRank, world_, stream_));
      if (!status)
        return fail(std::move(status).withContext("receive from rank " +
                                                  std::to_string(fromRank)));
    }
    MLT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host + offset, staging_, n,
                                             cudaMemcpyDeviceToHost, stream_));
    MLT_RETURN_IF_ERROR(waitOwnStream("receive"));
  }
  return Status::ok();
}

} // namespace

StatusOr<NcclUniqueId> mlt::rt::createNcclUniqueId() {
  ncclUniqueId id;
  MLT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  NcclUniqueId result;
  std::memcpy(result.bytes.data(), &id, sizeof(id));
  return result;
}

std::string mlt::rt::ncclLibraryVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess)
    return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." +
         std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

StatusOr<std::unique_ptr<CudaCommunicator>>
mlt::rt::createNcclCommunicator(const Mesh &mesh, int rank, int device,
                                const NcclUniqueId &id) {
  if (rank < 0 || rank >= mesh.worldSize())
    return errorf("rank ", rank, " is outside the mesh ", mesh.toString(),
                  " of ", mesh.worldSize(), " ranks");
  // NVLink multicast must stay off (see the header); the user's setting, if
  // any, wins.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  auto communicator = std::make_unique<NcclCommunicator>(mesh, rank, device);
  Status status = communicator->init(id);
  if (!status)
    return std::move(status).withContext(
        "NCCL init (rank " + std::to_string(rank) + " of " +
        std::to_string(mesh.worldSize()) + ", CUDA device " +
        std::to_string(device) + ")");
  return std::unique_ptr<CudaCommunicator>(std::move(communicator));
}
