//===- InProcessComm.h - collectives between threads ------------*- C++ -*-===//
//
// Part of mlt. An `InProcessWorld` runs the ranks of a mesh as threads of one
// process: it owns the shared state of every group (one per axis group, plus
// the whole mesh for `barrier`) and the mailboxes of the point-to-point
// exchanges, and hands each thread the Communicator of its rank. The
// collectives read and write the other ranks' buffers directly, so they are
// exact (no staging); an exchange's sends are copied into their receiver's
// mailbox when posted (buffered), its receives copied out of it. Both keep
// every invariant of Communicator.h, determinism and mismatch detection
// included.
//
// Use: create the world, start one thread per rank, each calling
// `communicator(rank)` and then its collectives; join the threads before
// destroying the world. A thread that stops early (an error, an exception)
// must call `abort` so that its peers do not wait for it forever. `abort`
// may be called from any thread at any time, more than once (the first
// message wins).
//
//===----------------------------------------------------------------------===//

#ifndef MLT_RUNTIME_INPROCESSCOMM_H
#define MLT_RUNTIME_INPROCESSCOMM_H

#include "mlt/Plan/Mesh.h"
#include "mlt/Runtime/comm/Communicator.h"
#include "mlt/Support/Status.h"

#include <chrono>
#include <memory>
#include <string>

namespace mlt::rt {

class InProcessWorld {
public:
  struct Options {
    /// How long a rank waits in one collective for the rest of its group,
    /// or in one exchange for its peers, before it aborts the world, naming
    /// the ranks that did not arrive or the transfers not matched (a
    /// deadlock or a rank that stopped without aborting). Zero waits
    /// forever.
    std::chrono::milliseconds timeout{0};
  };

  explicit InProcessWorld(Mesh mesh) : InProcessWorld(std::move(mesh), {}) {}
  InProcessWorld(Mesh mesh, Options options);
  /// Every thread must have returned from its calls.
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld &) = delete;
  InProcessWorld &operator=(const InProcessWorld &) = delete;

  const Mesh &mesh() const;

  /// The communicator of `rank`, owned by the world; fails when `rank` is
  /// outside the mesh.
  StatusOr<Communicator *> communicator(int rank);

  /// Fails every collective blocked now and every later call, on every rank,
  /// with "collectives aborted: <message>". A call already past waiting for
  /// its group may still finish; none returns while another rank may still
  /// touch its buffers.
  void abort(const std::string &message);

  /// Whether `abort` was called, and its (first) message.
  bool isAborted() const;
  std::string abortMessage() const;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace mlt::rt

#endif // MLT_RUNTIME_INPROCESSCOMM_H
