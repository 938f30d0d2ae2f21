//===- Distributed.h - a run's process among several ------------*- C++ -*-===//
//
// Part of mlt. Private to lib/Run. A run of one process per GPU (mpirun
// -np N, N > 1): this process's rank, MPI session and NCCL communicator
// (mlt/Runtime/mpi/Distributed.h), and how the run ends the job when a
// rank fails once collectives run. Without the CUDA backend there is no
// such run, and the run's code takes none.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_LIB_RUN_DISTRIBUTED_H
#define MLT_LIB_RUN_DISTRIBUTED_H

#include "mlt/Run/RunObserver.h"
#include "mlt/Support/Status.h"

#ifdef MLT_HAVE_CUDA
#include "mlt/Runtime/mpi/Distributed.h"
#endif

#include <cstdlib>

namespace mlt::run {

#ifdef MLT_HAVE_CUDA
struct Distributed : rt::DistributedProcess {
  /// Told of the failure that ends the job.
  RunObserver &observer;

  /// Reports the rank's failure, then aborts its communicators and the
  /// whole job (its peers may be waiting for it inside a NCCL kernel).
  [[noreturn]] void fatal(const Status &status) {
    observer.aborting(rank(), status.message());
    abort(status, 1);
  }
};
#else
/// Runs of one process per GPU need the CUDA backend.
struct Distributed {
  bool reports() const { return true; }
  [[noreturn]] void fatal(const Status &) { std::abort(); }
};
#endif

} // namespace mlt::run

#endif // MLT_LIB_RUN_DISTRIBUTED_H
