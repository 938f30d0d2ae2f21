//===- Distributed.h - the start-up of one process per GPU ------*- C++ -*-===//
//
// Part of mlt. A plan of N ranks on GPUs runs as N processes started by
// mpirun, one rank each, training over NCCL (NcclCommunicator.h), with MPI
// for the start and the end only (MpiBootstrap.h). This is the start, from
// MPI to the NCCL communicators, in the order a tool takes it:
//
// - startMpi initializes MPI in a process the launcher started as one of
//   several (detectLaunch), and checkMpiWorld checks that MPI sees the
//   processes the launcher announced;
// - localDevice gives the process its GPU (its node-local rank), failing
//   when the node has more processes than GPUs;
// - DistributedProcess::connect creates NCCL's unique id on rank 0 and every
//   rank's communicators over the plan's mesh, the processes agreeing on
//   each step (MpiSession::agree), so that a failure on one rank stops all of
//   them before any waits for it inside NCCL;
// - DistributedProcess::abort ends the job once collectives run, when a
//   rank can no longer tell its peers that it failed.
//
// Every failure is returned as a Status: the tool reports it (one line, from
// one process: MpiSession::conclude) and decides the exit. Only in builds
// with MLT_ENABLE_CUDA (the library MLTRuntimeMPI).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_DISTRIBUTED_H
#define MLT_RUNTIME_DISTRIBUTED_H

#include "mlt/Plan/Plan.h"
#include "mlt/Runtime/cuda/NcclCommunicator.h"
#include "mlt/Runtime/mpi/MpiBootstrap.h"
#include "mlt/Support/Status.h"

#include <memory>

namespace mlt::rt {

/// Initializes MPI (MpiSession::init) in a process that a launcher started
/// as one of several. NVLink multicast is turned off first, before anything
/// can initialize NCCL, as the shared machines need: NCCL_NVLS_ENABLE=0,
/// unless the user set it.
StatusOr<std::unique_ptr<MpiSession>> startMpi(int &argc, char **&argv);

/// Fails unless MPI sees as many processes as `launch`'s launcher said it
/// started ("MPI has 1 processes, but mpirun said 2").
Status checkMpiWorld(const MpiSession &session,
                     const LaunchEnvironment &launch);

/// This process's CUDA device: its node-local rank. Fails when the launcher
/// started more processes on this node than it has GPUs, since each needs
/// one of its own. For tests of the paths that only several processes take,
/// MLT_TEST_SHARE_GPUS=1 lets processes share GPUs (process i on GPU i mod
/// count), which NCCL itself may refuse.
StatusOr<int> localDevice(const MpiSession &session);

/// One process of a run of one process per GPU (mpirun -np N, N > 1): its
/// rank and MPI session, its GPU and, once connected, its NCCL communicator.
struct DistributedProcess {
  MpiSession &session;
  /// The CUDA device of this process: its node-local rank (localDevice).
  int device = 0;
  std::unique_ptr<CudaCommunicator> communicator;

  int rank() const { return session.rank(); }
  /// Whether this process reports for the run: rank 0's prints, logs and
  /// saves; the others only train.
  bool reports() const { return session.rank() == 0; }

  /// NCCL's unique id from rank 0, broadcast over MPI, then this rank's
  /// communicators over the plan's mesh on `device`; every process learns
  /// whether any failed at each of these steps. Collective: every process
  /// calls it. A rank whose communicator init fails while others wait inside
  /// theirs cannot agree with them: after 60 s it gives up, with
  /// `session.timedOut()` set, and only `abort` ends its peers.
  Status connect(const Plan &plan);

  /// The end of a rank that fails once collectives run: its peers may be
  /// waiting for it inside a NCCL kernel, and NCCL cannot tell them. Aborts
  /// its communicators with `status`'s message, then the whole job
  /// (MpiSession::abort with `exitCode`). The caller reports the failure
  /// first. Never returns.
  [[noreturn]] void abort(const Status &status, int exitCode);
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_DISTRIBUTED_H
