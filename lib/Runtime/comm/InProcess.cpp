//===- InProcess.cpp - collectives between threads ------------------------===//
//
// Part of mlt. The in-process world: ranks are threads, and a collective
// reads and writes the other ranks' buffers directly.
//
// Each group (one per axis group, one for the whole mesh) has a reusable
// generation barrier under one mutex and condition variable, and one slot per
// member where the member publishes its call (kind, type, count, root, its
// buffers and any error in its own arguments). A collective is a sequence of
// barriers with data phases between them:
//
//   arrive: publish the call, wait for the group
//   agree:  every rank checks all slots and reaches the same verdict
//           (mismatched calls, or some rank's bad arguments, fail everywhere)
//   data:   all-reduce:      rank i sums slice i of the inputs, in group
//                            order, into its own output; barrier; then copies
//                            the other slices from their owners' outputs
//           reduce-scatter:  rank i sums chunk i, in group order, into its out
//           all-gather:      rank i copies every input into its out
//           broadcast:       every rank but the root copies the root's buffer
//   depart: wait for the group, so that no rank returns (and lets its buffers
//           go) while another may still read or write them
//
// Each element of a sum is computed by one rank, always as
// ((x0 + x1) + x2) + ..., and copied to the others, so results are bit
// identical on every rank and independent of timing. In the data phases, a
// rank writes only its own output, and only where no peer reads in the same
// phase, which is also what makes the in-place forms safe.
//
// Point to point: buffered sends. An exchange first posts its sends, each
// copied into a message appended to the mailbox of its (source,
// destination) pair of world ranks, then takes, for each of its receives,
// the next message of the mailbox from that receive's source (the k-th send
// of a pair always meets the k-th receive), checks count and type, and
// finally waits until every message it posted has been taken. The bytes of
// a taken message are copied into the receive's buffer after the mailboxes'
// lock is released: a taken message belongs to its receiver, and the
// sender's buffer was let go when the message was posted. One mutex and
// condition variable serve every mailbox (exchanges are few and short next
// to the copies).
//
// Abort: a flag, then a wake-up of every group and of the mailboxes. A rank
// waiting at a barrier returns the abort error, but only once no rank of its
// group is in a data phase (the group's `busy` count), since such a rank may
// be reading its buffers; data phases never block, so that wait is short. A
// rank arriving after the abort does not join the barrier, so a barrier
// either completes for every rank or for none. A rank waiting in an exchange
// returns at once: no peer touches its buffers.
//
//===----------------------------------------------------------------------===//

#include "mlt/Runtime/comm/InProcessComm.h"

#include "mlt/Support/Bf16.h"
#include "mlt/Support/RankList.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

using namespace mlt;
using namespace mlt::rt;

namespace {

constexpr uint64_t kNeverArrived = ~uint64_t(0);

/// One member's published state in its group.
struct Slot {
  CollectiveCall call;
  /// What is wrong with this member's arguments; empty when nothing is.
  std::string error;
  /// The barrier generation this member last arrived at.
  uint64_t arrivedAt = kNeverArrived;
};

/// The shared state of one group of ranks.
struct Group {
  /// "axis 'tp'", or "the mesh" for the barrier group.
  std::string name;
  std::vector<int> ranks;

  std::mutex mutex;
  std::condition_variable wake;
  // Guarded by `mutex`:
  int arrived = 0;
  uint64_t generation = 0;
  /// Members released into a data phase that have not yet arrived at the
  /// next barrier: they may be touching other members' buffers.
  int busy = 0;
  std::vector<Slot> slots;

  int size() const { return static_cast<int>(ranks.size()); }
};

/// A rank's place in one group, and its count of calls there.
struct Membership {
  Group *group = nullptr;
  int index = 0;
  uint64_t calls = 0;
};

//===----------------------------------------------------------------------===//
// Sums in group order
//===----------------------------------------------------------------------===//

/// Elements summed per block: the accumulators live on the stack, and every
/// block of the output is written only after all inputs of that block are
/// read, which makes in-place calls safe.
constexpr size_t kBlock = 1024;

template <typename T>
void sumInGroupOrder(T *out, const std::vector<const void *> &inputs,
                     size_t count) {
  T acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    size_t n = std::min(kBlock, count - begin);
    std::memcpy(acc, static_cast<const T *>(inputs[0]) + begin, n * sizeof(T));
    for (size_t k = 1; k < inputs.size(); ++k) {
      const T *x = static_cast<const T *>(inputs[k]) + begin;
      for (size_t j = 0; j < n; ++j)
        acc[j] += x[j];
    }
    std::memcpy(out + begin, acc, n * sizeof(T));
  }
}

/// bf16: accumulate in f32, round once.
void sumBF16InGroupOrder(uint16_t *out, const std::vector<const void *> &inputs,
                         size_t count) {
  float acc[kBlock];
  for (size_t begin = 0; begin < count; begin += kBlock) {
    size_t n = std::min(kBlock, count - begin);
    const uint16_t *first = static_cast<const uint16_t *>(inputs[0]) + begin;
    for (size_t j = 0; j < n; ++j)
      acc[j] = mlt::bf16ToFloat(first[j]);
    for (size_t k = 1; k < inputs.size(); ++k) {
      const uint16_t *x = static_cast<const uint16_t *>(inputs[k]) + begin;
      for (size_t j = 0; j < n; ++j)
        acc[j] += mlt::bf16ToFloat(x[j]);
    }
    for (size_t j = 0; j < n; ++j)
      out[begin + j] = mlt::floatToBF16(acc[j]);
  }
}

/// out[j] = sum over k of inputs[k][j], j < count; the type was checked.
void sum(ElementType dtype, void *out, const std::vector<const void *> &inputs,
         size_t count) {
  switch (dtype) {
  case ElementType::F32:
    sumInGroupOrder(static_cast<float *>(out), inputs, count);
    return;
  case ElementType::F64:
    sumInGroupOrder(static_cast<double *>(out), inputs, count);
    return;
  case ElementType::BF16:
    sumBF16InGroupOrder(static_cast<uint16_t *>(out), inputs, count);
    return;
  default:
    return;
  }
}

const uint8_t *bytes(const void *p) { return static_cast<const uint8_t *>(p); }
uint8_t *bytes(void *p) { return static_cast<uint8_t *>(p); }

/// Copies unless source and destination are the same (an in-place chunk,
/// which peers may be reading at the same time).
void copyBytes(void *dst, const void *src, size_t n) {
  if (dst != src && n != 0)
    std::memcpy(dst, src, n);
}

/// A posted send: its bytes, copied from the sender's buffer when it was
/// posted, and what became of it (guarded by the world's mailbox mutex).
struct Message {
  /// World ranks, and the message's number among the sends of that pair.
  int source = 0;
  int destination = 0;
  uint64_t number = 0;
  ElementType dtype = ElementType::F32;
  size_t count = 0;
  std::vector<uint8_t> bytes;
  /// Set by the receiver that took it, with why it refused it (its count
  /// or type differs); `error` empty: delivered.
  bool taken = false;
  std::string error;
};

class InProcessCommunicator;

} // namespace

//===----------------------------------------------------------------------===//
// The world
//===----------------------------------------------------------------------===//

struct InProcessWorld::Impl {
  Impl(Mesh mesh, Options options);

  /// Arrives at `group`'s barrier as member `index` and waits for the other
  /// members. `publish`, at a collective's first barrier, is this member's
  /// slot. `fromDataPhase`: the member was released into a data phase by
  /// the previous barrier; `dataPhaseFollows`: this barrier releases into
  /// one. `what` and `number` name the call for a timeout message.
  Status arrive(Group &group, int index, const Slot *publish,
                bool fromDataPhase, bool dataPhaseFollows,
                std::string_view what, uint64_t number);

  void abort(const std::string &message);
  Status abortedError() const;

  Mesh mesh;
  Options options;
  std::vector<std::unique_ptr<Group>> groups;
  std::vector<std::unique_ptr<InProcessCommunicator>> communicators;

  std::atomic<bool> aborted{false};
  mutable std::mutex abortMutex;
  std::string abortMessage; // guarded by abortMutex; set once

  /// Point to point: the messages posted and not yet taken, per (source,
  /// destination) pair of world ranks, in order; guarded by mailMutex.
  std::mutex mailMutex;
  std::condition_variable mail;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Message>>> mailboxes;
};

namespace {

class InProcessCommunicator final : public Communicator {
public:
  InProcessCommunicator(InProcessWorld::Impl &world, int rank,
                        std::vector<Membership> axes, Membership wholeMesh)
      : Communicator(world.mesh, rank), world_(world), axes_(std::move(axes)),
        wholeMesh_(wholeMesh) {}

  Status barrier() override;
  Status exchange(std::string_view axis,
                  const std::vector<PointToPoint> &transfers) override;

protected:
  Status collective(std::string_view axis, const CollectiveCall &call) override;

private:
  Status runInGroup(Membership &member, const CollectiveCall &call,
                    uint64_t number);

  InProcessWorld::Impl &world_;
  /// One membership per mesh axis, in the mesh's order.
  std::vector<Membership> axes_;
  Membership wholeMesh_;
  /// Point to point, per world rank: the sends posted to it and the
  /// receives posted from it so far; and the exchanges so far.
  std::vector<uint64_t> sentTo_ =
      std::vector<uint64_t>(size_t(mesh().worldSize()), 0);
  std::vector<uint64_t> receivedFrom_ =
      std::vector<uint64_t>(size_t(mesh().worldSize()), 0);
  uint64_t exchanges_ = 0;
};

} // namespace

InProcessWorld::Impl::Impl(Mesh meshIn, Options optionsIn)
    : mesh(std::move(meshIn)), options(optionsIn) {
  int world = mesh.worldSize();
  std::vector<std::vector<Membership>> memberships(
      world, std::vector<Membership>(mesh.numAxes()));
  auto newGroup = [&](std::string name, std::vector<int> ranks) {
    auto group = std::make_unique<Group>();
    group->name = std::move(name);
    group->ranks = std::move(ranks);
    group->slots.resize(group->ranks.size());
    groups.push_back(std::move(group));
    return groups.back().get();
  };

  for (size_t a = 0; a < mesh.numAxes(); ++a) {
    const std::string &axis = mesh.axes()[a].name;
    for (int rank = 0; rank < world; ++rank) {
      // Create each group once, when its first member (index 0) comes up.
      MeshGroup members = *mesh.groupOf(rank, axis);
      if (members.index != 0)
        continue;
      Group *group = newGroup("axis '" + axis + "'", members.ranks);
      for (int index = 0; index < members.size(); ++index)
        memberships[members.ranks[index]][a] = {group, index, 0};
    }
  }

  std::vector<int> everyone(world);
  for (int rank = 0; rank < world; ++rank)
    everyone[rank] = rank;
  Group *wholeMesh = newGroup("the mesh", everyone);

  for (int rank = 0; rank < world; ++rank)
    communicators.push_back(std::make_unique<InProcessCommunicator>(
        *this, rank, std::move(memberships[rank]),
        Membership{wholeMesh, rank, 0}));
}

Status InProcessWorld::Impl::arrive(Group &group, int index,
                                    const Slot *publish, bool fromDataPhase,
                                    bool dataPhaseFollows,
                                    std::string_view what, uint64_t number) {
  std::unique_lock<std::mutex> lock(group.mutex);
  if (fromDataPhase) {
    --group.busy;
    if (group.busy == 0 && aborted.load())
      group.wake.notify_all();
  }
  if (aborted.load()) {
    // Do not join: the members already waiting leave with the error too.
    group.wake.wait(lock, [&] { return group.busy == 0; });
    return abortedError();
  }

  if (publish)
    group.slots[index] = *publish;
  uint64_t generation = group.generation;
  group.slots[index].arrivedAt = generation;
  if (++group.arrived == group.size()) {
    group.arrived = 0;
    ++group.generation;
    group.busy = dataPhaseFollows ? group.size() : 0;
    lock.unlock();
    group.wake.notify_all();
    return Status::ok();
  }

  auto released = [&] {
    return group.generation != generation ||
           (aborted.load() && group.busy == 0);
  };
  if (options.timeout.count() == 0) {
    group.wake.wait(lock, released);
  } else if (!group.wake.wait_for(lock, options.timeout, released)) {
    std::vector<int> missing;
    for (int k = 0; k < group.size(); ++k)
      if (group.slots[k].arrivedAt != generation)
        missing.push_back(group.ranks[k]);
    std::string message =
        "rank " + std::to_string(group.ranks[index]) + " waited over " +
        std::to_string(options.timeout.count()) + " ms in " +
        std::string(what) + " #" + std::to_string(number) + " on " +
        group.name + " for ranks " + formatRankList(missing);
    lock.unlock();
    abort(message);
    lock.lock();
    group.wake.wait(lock, released);
  }
  if (group.generation != generation)
    return Status::ok();
  return abortedError();
}

void InProcessWorld::Impl::abort(const std::string &message) {
  {
    std::lock_guard<std::mutex> lock(abortMutex);
    if (aborted.load())
      return;
    abortMessage = message;
    aborted.store(true);
  }
  // Waiters check the flag under their group's mutex: taking it here means
  // each one either sees the flag before it waits or gets this wake-up.
  for (const std::unique_ptr<Group> &group : groups) {
    std::lock_guard<std::mutex> lock(group->mutex);
    group->wake.notify_all();
  }
  std::lock_guard<std::mutex> lock(mailMutex);
  mail.notify_all();
}

Status InProcessWorld::Impl::abortedError() const {
  std::lock_guard<std::mutex> lock(abortMutex);
  return Status::error("collectives aborted: " + abortMessage);
}

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

Status InProcessCommunicator::barrier() {
  if (world_.aborted.load())
    return world_.abortedError();
  uint64_t number = wholeMesh_.calls++;
  if (wholeMesh_.group->size() == 1)
    return Status::ok();
  return world_.arrive(*wholeMesh_.group, wholeMesh_.index, nullptr,
                       /*fromDataPhase=*/false, /*dataPhaseFollows=*/false,
                       "barrier", number);
}

Status InProcessCommunicator::collective(std::string_view axis,
                                         const CollectiveCall &call) {
  if (world_.aborted.load())
    return world_.abortedError();
  std::optional<size_t> a = mesh().findAxis(axis);
  if (!a)
    return errorf(collectiveKindName(call.kind), ": mesh ", mesh().toString(),
                  " has no axis '", axis, "'");
  Membership &member = axes_[*a];
  return runInGroup(member, call, member.calls++);
}

Status InProcessCommunicator::runInGroup(Membership &member,
                                         const CollectiveCall &call,
                                         uint64_t number) {
  Group &group = *member.group;
  const int size = group.size();
  const int me = member.index;
  auto where = [&] {
    return "collective #" + std::to_string(number) + " on " + group.name +
           " (ranks " + formatRankList(group.ranks) + ")";
  };

  Slot mine;
  mine.call = call;
  if (Status check = checkCollectiveCall(call, size, me); !check)
    mine.error = check.message();
  const size_t elementBytes = call.elementBytes();

  if (size == 1) {
    // Alone in the group: every collective is a copy (or nothing).
    if (!mine.error.empty())
      return errorf(where(), ": rank ", rank(), ": ", mine.error);
    if (call.kind != CollectiveKind::Broadcast)
      copyBytes(call.out, call.in, call.count * elementBytes);
    return Status::ok();
  }

  const char *what = collectiveKindName(call.kind);
  MLT_RETURN_IF_ERROR(world_.arrive(group, me, &mine, /*fromDataPhase=*/false,
                                    /*dataPhaseFollows=*/true, what, number));

  // Every member reads the same slots, so every member reaches the same
  // verdict; the slots stay put until the last barrier of this call.
  const std::vector<Slot> &slots = group.slots;
  Status verdict = Status::ok();
  for (int k = 1; k < size && verdict; ++k)
    if (!slots[k].call.matches(slots[0].call))
      verdict = errorf(where(), ": mismatched calls: rank ", group.ranks[0],
                       " called ", slots[0].call.describe(), ", rank ",
                       group.ranks[k], " called ", slots[k].call.describe());
  for (int k = 0; k < size && verdict; ++k)
    if (!slots[k].error.empty())
      verdict =
          errorf(where(), ": rank ", group.ranks[k], ": ", slots[k].error);
  if (!verdict) {
    // The peers may still be reading the slots: leave together.
    (void)world_.arrive(group, me, nullptr, /*fromDataPhase=*/true,
                        /*dataPhaseFollows=*/false, what, number);
    return verdict;
  }

  std::vector<const void *> inputs(size);
  switch (call.kind) {
  case CollectiveKind::AllReduceSum: {
    // Slice k is [count * k / size, count * (k + 1) / size).
    auto sliceBegin = [&](int k) { return call.count * k / size; };
    size_t begin = sliceBegin(me), end = sliceBegin(me + 1);
    for (int k = 0; k < size; ++k)
      inputs[k] = bytes(slots[k].call.in) + begin * elementBytes;
    sum(call.dtype, bytes(call.out) + begin * elementBytes, inputs,
        end - begin);
    MLT_RETURN_IF_ERROR(world_.arrive(group, me, nullptr,
                                      /*fromDataPhase=*/true,
                                      /*dataPhaseFollows=*/true, what, number));
    for (int k = 0; k < size; ++k) {
      if (k == me)
        continue;
      size_t offset = sliceBegin(k) * elementBytes;
      copyBytes(bytes(call.out) + offset, bytes(slots[k].call.out) + offset,
                (sliceBegin(k + 1) - sliceBegin(k)) * elementBytes);
    }
    break;
  }
  case CollectiveKind::ReduceScatterSum:
    for (int k = 0; k < size; ++k)
      inputs[k] = bytes(slots[k].call.in) + me * call.count * elementBytes;
    sum(call.dtype, call.out, inputs, call.count);
    break;
  case CollectiveKind::AllGather:
    for (int k = 0; k < size; ++k)
      copyBytes(bytes(call.out) + k * call.count * elementBytes,
                slots[k].call.in, call.count * elementBytes);
    break;
  case CollectiveKind::Broadcast:
    if (me != call.root)
      copyBytes(call.out, slots[call.root].call.in, call.count * elementBytes);
    break;
  case CollectiveKind::Permute:
    copyBytes(call.out, slots[(me - call.shift + size) % size].call.in,
              call.count * elementBytes);
    break;
  case CollectiveKind::AllToAll: {
    // Half a block at a time: where member k's half h is taken from its
    // input (the block of this member, or a natural chunk) and where it
    // lands in this member's output (block k, or a natural chunk); every
    // member's call has this order (they matched).
    const size_t half = call.count / 2 * elementBytes;
    const size_t whole = call.count * elementBytes;
    if (call.order == BlockOrder::Blocks) {
      for (int k = 0; k < size; ++k)
        copyBytes(bytes(call.out) + k * whole,
                  static_cast<const uint8_t *>(slots[k].call.in) + me * whole,
                  whole);
      break;
    }
    for (int k = 0; k < size; ++k)
      for (int h = 0; h < 2; ++h) {
        const size_t from =
            call.order == BlockOrder::FromNatural
                ? size_t(naturalChunkOfBlock(me, h, size)) * half
                : me * whole + h * half;
        const size_t to = call.order == BlockOrder::ToNatural
                              ? size_t(naturalChunkOfBlock(k, h, size)) * half
                              : k * whole + h * half;
        copyBytes(bytes(call.out) + to,
                  static_cast<const uint8_t *>(slots[k].call.in) + from, half);
      }
    break;
  }
  }
  return world_.arrive(group, me, nullptr, /*fromDataPhase=*/true,
                       /*dataPhaseFollows=*/false, what, number);
}

//===----------------------------------------------------------------------===//
// Point to point
//===----------------------------------------------------------------------===//

Status
InProcessCommunicator::exchange(std::string_view axis,
                                const std::vector<PointToPoint> &transfers) {
  if (world_.aborted.load())
    return world_.abortedError();
  std::optional<size_t> a = mesh().findAxis(axis);
  if (!a)
    return errorf("exchange: mesh ", mesh().toString(), " has no axis '", axis,
                  "'");
  const Group &group = *axes_[*a].group;
  const uint64_t number = exchanges_++;
  auto where = [&] {
    return "exchange #" + std::to_string(number) + " on " + group.name;
  };
  MLT_RETURN_IF_ERROR(
      checkExchange(transfers, group.size())
          .withContext(where() + ": rank " + std::to_string(rank())));
  if (transfers.empty())
    return Status::ok();

  // The messages of the sends, and the receives with the number each has
  // among the receives from its source.
  std::vector<std::shared_ptr<Message>> sends;
  struct Receive {
    size_t transfer;
    int source;
    uint64_t number;
    std::shared_ptr<Message> message; // once taken
  };
  std::vector<Receive> receives;
  for (size_t i = 0; i < transfers.size(); ++i) {
    const PointToPoint &transfer = transfers[i];
    const int peer = group.ranks[size_t(transfer.peer)];
    if (transfer.kind == TransferKind::Receive) {
      receives.push_back({i, peer, receivedFrom_[size_t(peer)]++, nullptr});
      continue;
    }
    auto message = std::make_shared<Message>();
    message->source = rank();
    message->destination = peer;
    message->number = sentTo_[size_t(peer)]++;
    message->dtype = transfer.dtype;
    message->count = transfer.count;
    const auto *data = static_cast<const uint8_t *>(transfer.buffer);
    message->bytes.assign(data, data + transfer.bytes());
    sends.push_back(std::move(message));
  }

  std::unique_lock<std::mutex> lock(world_.mailMutex);
  for (const std::shared_ptr<Message> &message : sends)
    world_.mailboxes[{message->source, message->destination}].push_back(
        message);
  world_.mail.notify_all();
  // Takes what has arrived for the receives (from one source in order) and
  // says whether the exchange is complete.
  auto progress = [&] {
    bool took = false, complete = true;
    for (Receive &receive : receives) {
      if (receive.message)
        continue;
      std::deque<std::shared_ptr<Message>> &box =
          world_.mailboxes[{receive.source, rank()}];
      if (box.empty() || box.front()->number != receive.number) {
        complete = false;
        continue;
      }
      receive.message = std::move(box.front());
      box.pop_front();
      Message &message = *receive.message;
      message.taken = true;
      took = true;
      const PointToPoint &transfer = transfers[receive.transfer];
      if (message.count != transfer.count || message.dtype != transfer.dtype)
        message.error = "mismatched transfer on " + group.name + ": rank " +
                        std::to_string(message.source) + "'s send #" +
                        std::to_string(message.number) + " to rank " +
                        std::to_string(rank()) + " is " +
                        std::to_string(message.count) + " " +
                        elementTypeName(message.dtype) + ", rank " +
                        std::to_string(rank()) + "'s receive #" +
                        std::to_string(receive.number) + " from rank " +
                        std::to_string(message.source) + " is " +
                        std::to_string(transfer.count) + " " +
                        elementTypeName(transfer.dtype);
    }
    if (took)
      world_.mail.notify_all();
    for (const std::shared_ptr<Message> &message : sends)
      complete &= message->taken;
    return complete;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + world_.options.timeout;
  while (!progress()) {
    if (world_.aborted.load()) {
      lock.unlock();
      return world_.abortedError();
    }
    if (world_.options.timeout.count() == 0) {
      world_.mail.wait(lock);
      continue;
    }
    if (world_.mail.wait_until(lock, deadline) != std::cv_status::timeout ||
        progress())
      continue;
    // What it still waits for: the first few transfers.
    std::string waiting;
    size_t listed = 0;
    for (const Receive &receive : receives)
      if (!receive.message && listed++ < 4)
        waiting += std::string(waiting.empty() ? "" : ", ") + "receive #" +
                   std::to_string(receive.number) + " from rank " +
                   std::to_string(receive.source);
    for (const std::shared_ptr<Message> &message : sends)
      if (!message->taken && listed++ < 4)
        waiting += std::string(waiting.empty() ? "" : ", ") + "send #" +
                   std::to_string(message->number) + " to rank " +
                   std::to_string(message->destination) + " (not received)";
    lock.unlock();
    world_.abort("rank " + std::to_string(rank()) + " waited over " +
                 std::to_string(world_.options.timeout.count()) + " ms in " +
                 where() + " for " + waiting);
    return world_.abortedError();
  }
  lock.unlock();

  // The messages taken are this rank's alone now.
  for (const Receive &receive : receives)
    if (receive.message->error.empty())
      copyBytes(transfers[receive.transfer].buffer,
                receive.message->bytes.data(), receive.message->bytes.size());
  // The first failure in the order of the transfers.
  for (size_t i = 0, s = 0, r = 0; i < transfers.size(); ++i) {
    const std::string &error = transfers[i].kind == TransferKind::Send
                                   ? sends[s++]->error
                                   : receives[r++].message->error;
    if (!error.empty())
      return Status::error(error);
  }
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// InProcessWorld
//===----------------------------------------------------------------------===//

InProcessWorld::InProcessWorld(Mesh mesh, Options options)
    : impl_(std::make_unique<Impl>(std::move(mesh), options)) {}

InProcessWorld::~InProcessWorld() = default;

const Mesh &InProcessWorld::mesh() const { return impl_->mesh; }

StatusOr<Communicator *> InProcessWorld::communicator(int rank) {
  if (rank < 0 || rank >= impl_->mesh.worldSize())
    return errorf("rank ", rank, " is outside mesh ", impl_->mesh.toString(),
                  " of ", impl_->mesh.worldSize(), " ranks");
  return static_cast<Communicator *>(impl_->communicators[rank].get());
}

void InProcessWorld::abort(const std::string &message) {
  impl_->abort(message);
}

bool InProcessWorld::isAborted() const { return impl_->aborted.load(); }

std::string InProcessWorld::abortMessage() const {
  std::lock_guard<std::mutex> lock(impl_->abortMutex);
  return impl_->abortMessage;
}
