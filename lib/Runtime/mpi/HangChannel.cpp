//===- HangChannel.cpp - the watchdogs' line between processes ------------===//
//
// Part of mlt. See HangChannel.h. Every request is nonblocking and polled
// every millisecond against a deadline; requests still posted at the end
// are cancelled before the communicator is freed.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/mpi/HangChannel.h"

#include <mpi.h>

#include <thread>
#include <type_traits>

using namespace mlt;
using namespace mlt::rt;

static_assert(std::is_trivially_copyable_v<PositionSnapshot>,
              "positions travel between processes as bytes");

namespace {

constexpr int kAlarmTag = 1;
constexpr int kPositionTag = 2;

} // namespace

struct HangChannel::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  /// The alarm's receive, posted from the start, and what it receives.
  MPI_Request alarm = MPI_REQUEST_NULL;
  int alarmValue = 0;
  bool alarmed = false;
  /// What raise sends (it must outlive the sends, which nobody waits for).
  int raised = 1;
  /// gather's requests and buffers (rank 0: a receive per other rank).
  std::vector<MPI_Request> pending;
  std::vector<PositionSnapshot> received;
  PositionSnapshot sent;
};

StatusOr<std::unique_ptr<HangChannel>> HangChannel::open(MpiSession &session) {
  if (!session.threadMultiple())
    return errorf("MPI does not provide MPI_THREAD_MULTIPLE, which the "
                  "hang watchdog's thread needs to reach the other "
                  "processes");
  std::unique_ptr<HangChannel> channel(new HangChannel());
  channel->impl_ = std::make_unique<Impl>();
  channel->rank_ = session.rank();
  channel->size_ = session.size();
  Impl &impl = *channel->impl_;
  if (int code = MPI_Comm_dup(MPI_COMM_WORLD, &impl.comm); code != MPI_SUCCESS)
    return errorf("MPI_Comm_dup for the hang watchdog: MPI error ", code);
  (void)MPI_Comm_set_errhandler(impl.comm, MPI_ERRORS_RETURN);
  if (int code = MPI_Irecv(&impl.alarmValue, 1, MPI_INT, MPI_ANY_SOURCE,
                           kAlarmTag, impl.comm, &impl.alarm);
      code != MPI_SUCCESS) {
    (void)MPI_Comm_free(&impl.comm);
    return errorf("MPI_Irecv for the hang watchdog's alarm: MPI error ",
                  code);
  }
  return channel;
}

HangChannel::~HangChannel() {
  if (!impl_)
    return;
  auto cancel = [](MPI_Request &request) {
    if (request == MPI_REQUEST_NULL)
      return;
    (void)MPI_Cancel(&request);
    (void)MPI_Wait(&request, MPI_STATUS_IGNORE);
  };
  cancel(impl_->alarm);
  for (MPI_Request &request : impl_->pending)
    cancel(request);
  if (impl_->comm != MPI_COMM_NULL)
    (void)MPI_Comm_free(&impl_->comm);
}

bool HangChannel::alarmed() {
  if (!impl_->alarmed && impl_->alarm != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(&impl_->alarm, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
        done)
      impl_->alarmed = true;
  }
  return impl_->alarmed;
}

void HangChannel::raise() {
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_)
      continue;
    MPI_Request request = MPI_REQUEST_NULL;
    if (MPI_Isend(&impl_->raised, 1, MPI_INT, peer, kAlarmTag, impl_->comm,
                  &request) == MPI_SUCCESS)
      (void)MPI_Request_free(&request);
  }
}

std::vector<std::optional<PositionSnapshot>>
HangChannel::gather(const PositionSnapshot &mine,
                    std::chrono::steady_clock::time_point deadline) {
  Impl &impl = *impl_;
  // Rank 0: a receive per other rank (entry 0 unused); the others: a send.
  impl.pending.assign(rank_ == 0 ? size_t(size_) : 1, MPI_REQUEST_NULL);
  std::vector<bool> posted(impl.pending.size(), false);
  if (rank_ != 0) {
    impl.sent = mine;
    posted[0] = MPI_Isend(&impl.sent, int(sizeof(PositionSnapshot)), MPI_BYTE,
                          0, kPositionTag, impl.comm,
                          &impl.pending[0]) == MPI_SUCCESS;
  } else {
    impl.received.assign(size_t(size_), PositionSnapshot{});
    for (int peer = 1; peer < size_; ++peer)
      posted[size_t(peer)] =
          MPI_Irecv(&impl.received[size_t(peer)],
                    int(sizeof(PositionSnapshot)), MPI_BYTE, peer,
                    kPositionTag, impl.comm,
                    &impl.pending[size_t(peer)]) == MPI_SUCCESS;
  }
  // Polled, against the deadline: a process that is gone must not hold
  // this one. A completed request is MPI_REQUEST_NULL.
  for (;;) {
    bool all = true;
    for (size_t k = 0; k < impl.pending.size(); ++k) {
      if (!posted[k] || impl.pending[k] == MPI_REQUEST_NULL)
        continue;
      int done = 0;
      if (MPI_Test(&impl.pending[k], &done, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS)
        posted[k] = false;
      else if (!done)
        all = false;
    }
    if (all || std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (rank_ != 0)
    return {};
  std::vector<std::optional<PositionSnapshot>> positions(
      static_cast<size_t>(size_));
  positions[0] = mine;
  for (size_t peer = 1; peer < size_t(size_); ++peer)
    if (posted[peer] && impl.pending[peer] == MPI_REQUEST_NULL)
      positions[peer] = impl.received[peer];
  return positions;
}
