//===- Distributed.cpp - the start-up of one process per GPU --------------===//
//
// Part of mlt. From MPI to the NCCL communicators in a run of one process
// per GPU (Distributed.h): MPI's start and its world against the launcher's,
// each process's GPU, NCCL's unique id and communicators with the processes
// agreeing on every step, and the abort once collectives run.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/mpi/Distributed.h"
#include "mlt/Plan/Mesh.h"
#include "mlt/Runtime/cuda/CudaBackend.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

using namespace mlt;
using namespace mlt::rt;

StatusOr<std::unique_ptr<MpiSession>> mlt::rt::startMpi(int &argc,
                                                        char **&argv) {
  // NVLink multicast must stay off on the shared machines (before anything
  // can initialize NCCL); the user's setting wins.
  ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  return MpiSession::init(argc, argv);
}

Status mlt::rt::checkMpiWorld(const MpiSession &session,
                              const LaunchEnvironment &launch) {
  if (session.size() != launch.worldSize)
    return errorf("MPI has ", session.size(), " processes, but ",
                  launch.launcher, " said ", launch.worldSize);
  return Status::ok();
}

StatusOr<int> mlt::rt::localDevice(const MpiSession &session) {
  int count = 0;
  MLT_RETURN_IF_ERROR(probeCudaDevices(count));
  const int local = session.localSize();
  int device = session.localRank();
  const char *share = std::getenv("MLT_TEST_SHARE_GPUS");
  if (share && std::strcmp(share, "1") == 0) {
    device %= count;
    return device;
  }
  if (local > count)
    return errorf("mpirun started ", local, " processes on this node but ",
                  count == 1
                      ? "only 1 CUDA device is"
                      : "only " + std::to_string(count) + " CUDA devices are",
                  " visible; each process needs a GPU of its own");
  return device;
}

Status DistributedProcess::connect(const Plan &plan) {
  NcclUniqueId id;
  Status status = Status::ok();
  if (session.rank() == 0) {
    StatusOr<NcclUniqueId> created = createNcclUniqueId();
    if (created)
      id = *created;
    else
      status = created.takeStatus();
  }
  MLT_RETURN_IF_ERROR(session.agree(status));
  MLT_RETURN_IF_ERROR(session.broadcast(id.bytes.data(), id.bytes.size(), 0));
  StatusOr<Mesh> mesh = planMesh(plan);
  MLT_RETURN_IF_ERROR(session.agree(mesh ? Status::ok() : mesh.takeStatus()));
  StatusOr<std::unique_ptr<CudaCommunicator>> created =
      createNcclCommunicator(*mesh, session.rank(), device, id);
  if (created)
    communicator = std::move(*created);
  return session.agree(created ? Status::ok() : created.takeStatus(),
                       std::chrono::seconds(60));
}

void DistributedProcess::abort(const Status &status, int exitCode) {
  if (communicator)
    communicator->abort(status.message());
  session.abort(exitCode);
}
