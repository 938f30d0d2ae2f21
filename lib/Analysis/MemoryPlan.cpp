//===- MemoryPlan.cpp - static arena offsets from buffer lifetimes --------===//
//
// Part of mlt. The naive and greedy-by-size arena planners, the choice of
// the buffers that share memory in place, and the plan checker. Both
// planners place chains of in-place buffers as single buffers, so the
// greedy one only decides where things go, never what may share.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/MemoryPlan.h"

#include "FirstFit.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <queue>
#include <sstream>

using namespace mlt;

using mlt::analysis::alignUp;
using mlt::analysis::firstFit;
using mlt::analysis::PlacedRanges;
using mlt::analysis::TimeSlots;

namespace {

/// Whether two buffers need memory of their own at some instant: both hold
/// bytes and their lifetimes overlap.
bool liveTogether(const BufferLifetime &a, const BufferLifetime &b) {
  return a.bytes && b.bytes && a.overlaps(b);
}

/// The chains of in-place buffers as single buffers: for each chain, the
/// indices of its members, in order, and a lifetime spanning them all, as
/// large as the largest.
struct Chains {
  std::vector<std::vector<size_t>> members;
  std::vector<BufferLifetime> lifetimes;
};

Chains buildChains(const std::vector<BufferLifetime> &lifetimes) {
  std::vector<int64_t> donorOf = chooseInPlace(lifetimes);
  std::vector<int64_t> recipientOf(lifetimes.size(), -1);
  for (size_t i = 0; i < lifetimes.size(); ++i)
    if (donorOf[i] >= 0)
      recipientOf[donorOf[i]] = int64_t(i);
  Chains chains;
  // Chains in the order of their first members' indices: deterministic.
  for (size_t head = 0; head < lifetimes.size(); ++head) {
    if (donorOf[head] >= 0)
      continue;
    std::vector<size_t> &members = chains.members.emplace_back();
    BufferLifetime span = lifetimes[head];
    span.inPlaceOf.clear();
    for (int64_t m = int64_t(head); m >= 0; m = recipientOf[m]) {
      const BufferLifetime &member = lifetimes[m];
      members.push_back(size_t(m));
      span.bytes = std::max(span.bytes, member.bytes);
      span.firstUse = std::min(span.firstUse, member.firstUse);
      span.lastUse = std::max(span.lastUse, member.lastUse);
    }
    chains.lifetimes.push_back(span);
  }
  return chains;
}

/// Gives every member of a chain its chain's offset.
MemoryPlan expandChains(const Chains &chains, const MemoryPlan &chainPlan,
                        size_t numBuffers) {
  MemoryPlan plan;
  plan.offsets.assign(numBuffers, 0);
  plan.peakBytes = chainPlan.peakBytes;
  for (size_t c = 0; c < chains.members.size(); ++c)
    for (size_t member : chains.members[c])
      plan.offsets[member] = chainPlan.offsets[c];
  return plan;
}

MemoryPlan placeNaive(const std::vector<BufferLifetime> &lifetimes,
                      uint64_t alignment) {
  MemoryPlan plan;
  uint64_t next = 0;
  for (const BufferLifetime &b : lifetimes) {
    plan.offsets.push_back(next);
    next = alignUp(next + b.bytes, alignment);
  }
  plan.peakBytes = next;
  return plan;
}

/// Largest first; ties by first use, then index, so the plan is
/// deterministic.
std::vector<size_t> greedyOrder(const std::vector<BufferLifetime> &lifetimes) {
  std::vector<size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (lifetimes[a].bytes != lifetimes[b].bytes)
      return lifetimes[a].bytes > lifetimes[b].bytes;
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });
  return order;
}

/// Every buffer's index by first use (ties in index order): the order the
/// in-place choosers offer recipients their donors in.
std::vector<size_t>
orderByFirstUse(const std::vector<BufferLifetime> &lifetimes) {
  std::vector<size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });
  return order;
}

/// The reference placement: for each buffer, the ranges of every placed
/// buffer live with it, then firstFit over them.
MemoryPlan placeGreedyByScan(const std::vector<BufferLifetime> &lifetimes,
                             uint64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : greedyOrder(lifetimes)) {
    const BufferLifetime &buffer = lifetimes[i];
    // The ranges of placed buffers that are live at the same time, by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t j : placed)
      if (lifetimes[j].overlaps(buffer) && lifetimes[j].bytes)
        busy.push_back({plan.offsets[j], plan.offsets[j] + lifetimes[j].bytes});
    const uint64_t candidate = firstFit(busy, buffer.bytes, alignment);
    plan.offsets[i] = candidate;
    plan.peakBytes =
        std::max(plan.peakBytes, alignUp(candidate + buffer.bytes, alignment));
    placed.push_back(i);
  }
  return plan;
}

/// Whether a lifetime ends before it begins: outside what the indexed
/// planner, the sweeping checker and chooseInPlace's argument assume (no
/// program has one), so they hand such lifetimes to their references.
bool hasInvertedLifetime(const std::vector<BufferLifetime> &lifetimes) {
  return std::any_of(
      lifetimes.begin(), lifetimes.end(),
      [](const BufferLifetime &b) { return b.lastUse < b.firstUse; });
}

/// The same placement, the ranges live with each buffer found in a
/// PlacedRanges over the lifetimes' instructions: O(n log^2 n) for n buffers
/// (times the ranges a query moves past), where the scan is O(n^2).
MemoryPlan placeGreedy(const std::vector<BufferLifetime> &lifetimes,
                       uint64_t alignment) {
  // (Which lifetimes overlap is defined for firstUse <= lastUse; the pass
  // makes no others, the reference takes any.)
  if (hasInvertedLifetime(lifetimes))
    return placeGreedyByScan(lifetimes, alignment);
  std::vector<int64_t> times;
  for (const BufferLifetime &b : lifetimes)
    times.insert(times.end(), {b.firstUse, b.lastUse});
  TimeSlots slot(std::move(times));
  PlacedRanges placed(slot.size(), alignment);
  MemoryPlan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  for (size_t i : greedyOrder(lifetimes)) {
    const BufferLifetime &buffer = lifetimes[i];
    const int64_t first = slot(buffer.firstUse), last = slot(buffer.lastUse);
    const uint64_t candidate = placed.firstFit({{first, last}}, buffer.bytes);
    plan.offsets[i] = candidate;
    plan.peakBytes =
        std::max(plan.peakBytes, alignUp(candidate + buffer.bytes, alignment));
    placed.add(first, last, candidate, candidate + buffer.bytes);
  }
  return plan;
}

} // namespace

bool BufferLifetime::mayTakeOver(size_t donorIndex,
                                 const BufferLifetime &donor) const {
  return donor.lastUse == firstUse && bytes <= donor.bytes &&
         std::find(inPlaceOf.begin(), inPlaceOf.end(), donorIndex) !=
             inPlaceOf.end();
}

namespace {

/// Whether `plan` passes every check of MemoryPlan::verifyAllPairs, in
/// O(n log n) (n buffers; given firstUse <= lastUse, and as many offsets as
/// buffers).
bool validBySweep(const MemoryPlan &plan,
                  const std::vector<BufferLifetime> &lifetimes,
                  uint64_t alignment) {
  const std::vector<uint64_t> &offsets = plan.offsets;
  const size_t n = lifetimes.size();
  for (size_t i = 0; i < n; ++i)
    if (offsets[i] % alignment != 0 ||
        offsets[i] + lifetimes[i].bytes > plan.peakBytes)
      return false;
  // By first use: each buffer meets the buffers still live (those that
  // began before it and end at or after its start), which all are live
  // together. Those checked so far are apart in memory, but a donor and its
  // recipient at one offset, so they are groups at distinct offsets whose
  // extents are disjoint: a buffer can only overlap its own offset's group,
  // the group below it and the one above it.
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i)
    if (lifetimes[i].bytes)
      order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });
  std::map<uint64_t, std::vector<size_t>> live; // by offset
  using Ending = std::pair<int64_t, size_t>;    // (lastUse, buffer)
  std::priority_queue<Ending, std::vector<Ending>, std::greater<Ending>> ends;
  auto extent = [&](const std::vector<size_t> &group) {
    uint64_t end = 0;
    for (size_t member : group)
      end = std::max(end, offsets[member] + lifetimes[member].bytes);
    return end;
  };
  for (size_t i : order) {
    const BufferLifetime &buffer = lifetimes[i];
    while (!ends.empty() && ends.top().first < buffer.firstUse) {
      size_t gone = ends.top().second;
      ends.pop();
      auto group = live.find(offsets[gone]);
      group->second.erase(
          std::find(group->second.begin(), group->second.end(), gone));
      if (group->second.empty())
        live.erase(group);
    }
    const uint64_t begin = offsets[i], end = begin + buffer.bytes;
    auto above = live.lower_bound(begin);
    if (above != live.end() && above->first == begin) {
      for (size_t other : above->second)
        if (!buffer.mayTakeOver(other, lifetimes[other]) &&
            !lifetimes[other].mayTakeOver(i, buffer))
          return false;
      ++above;
    }
    if (above != live.end() && above->first < end)
      return false;
    auto below = live.lower_bound(begin);
    if (below != live.begin() && extent(std::prev(below)->second) > begin)
      return false;
    live[begin].push_back(i);
    ends.push({buffer.lastUse, i});
  }
  return true;
}

} // namespace

bool MemoryPlan::verifyAllPairs(const std::vector<BufferLifetime> &lifetimes,
                                uint64_t alignment, std::string *why) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  if (offsets.size() != lifetimes.size())
    return fail("plan has " + std::to_string(offsets.size()) + " offsets for " +
                std::to_string(lifetimes.size()) + " buffers");
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    if (offsets[i] % alignment != 0)
      return fail("buffer " + std::to_string(i) + " is not aligned");
    if (offsets[i] + lifetimes[i].bytes > peakBytes)
      return fail("buffer " + std::to_string(i) + " ends past the peak");
    for (size_t j = 0; j < i; ++j) {
      if (!liveTogether(lifetimes[i], lifetimes[j]))
        continue;
      bool apart = offsets[i] + lifetimes[i].bytes <= offsets[j] ||
                   offsets[j] + lifetimes[j].bytes <= offsets[i];
      bool inPlace = offsets[i] == offsets[j] &&
                     (lifetimes[i].mayTakeOver(j, lifetimes[j]) ||
                      lifetimes[j].mayTakeOver(i, lifetimes[i]));
      if (!apart && !inPlace) {
        std::ostringstream os;
        os << "buffers " << j << " and " << i
           << " are live together and overlap in memory";
        return fail(os.str());
      }
    }
  }
  return true;
}

bool MemoryPlan::verify(const std::vector<BufferLifetime> &lifetimes,
                        uint64_t alignment, std::string *why) const {
  if (offsets.size() != lifetimes.size() || hasInvertedLifetime(lifetimes) ||
      !validBySweep(*this, lifetimes, alignment))
    return verifyAllPairs(lifetimes, alignment, why);
  return true;
}

std::vector<int64_t>
mlt::chooseInPlaceByPairs(const std::vector<BufferLifetime> &lifetimes) {
  const size_t n = lifetimes.size();
  std::vector<int64_t> donorOf(n, -1), recipientOf(n, -1);
  // The chain of each buffer (the index of its entry in `chains`), and each
  // chain's members.
  std::vector<size_t> chainOf(n);
  std::iota(chainOf.begin(), chainOf.end(), 0);
  std::vector<std::vector<size_t>> chains(n);
  for (size_t i = 0; i < n; ++i)
    chains[i] = {i};

  for (size_t recipient : orderByFirstUse(lifetimes)) {
    const BufferLifetime &buffer = lifetimes[recipient];
    for (size_t donor : buffer.inPlaceOf) {
      if (donor >= n || donor == recipient || recipientOf[donor] >= 0 ||
          !buffer.mayTakeOver(donor, lifetimes[donor]))
        continue;
      const std::vector<size_t> &from = chains[chainOf[donor]];
      const std::vector<size_t> &to = chains[chainOf[recipient]];
      if (chainOf[donor] == chainOf[recipient])
        continue;
      // Joined, the two chains share one range: the donor and the
      // recipient may overlap in time (the recipient takes over), no other
      // pair of their members may.
      bool compatible = true;
      for (size_t a : from)
        for (size_t b : to)
          if (!(a == donor && b == recipient) &&
              liveTogether(lifetimes[a], lifetimes[b]))
            compatible = false;
      if (!compatible)
        continue;
      donorOf[recipient] = int64_t(donor);
      recipientOf[donor] = int64_t(recipient);
      size_t keep = chainOf[donor], gone = chainOf[recipient];
      for (size_t member : chains[gone]) {
        chainOf[member] = keep;
        chains[keep].push_back(member);
      }
      chains[gone].clear();
      break;
    }
  }
  return donorOf;
}

namespace {

/// The chains of in-place buffers as a union-find forest: which chain a
/// buffer is in, in nearly constant time.
class ChainSets {
public:
  explicit ChainSets(size_t n) : parent(n) {
    std::iota(parent.begin(), parent.end(), 0);
  }
  size_t find(size_t x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) { parent[find(b)] = find(a); }

private:
  std::vector<size_t> parent;
};

} // namespace

std::vector<int64_t>
mlt::chooseInPlace(const std::vector<BufferLifetime> &lifetimes) {
  // (The argument below needs firstUse <= lastUse; the pass makes no
  // others.)
  if (hasInvertedLifetime(lifetimes))
    return chooseInPlaceByPairs(lifetimes);
  const size_t n = lifetimes.size();
  std::vector<int64_t> donorOf(n, -1), recipientOf(n, -1);
  ChainSets chains(n);
  // The members of a chain follow each other in time, each donor's last use
  // its recipient's first: a donor's chain (the donor its last member) lies
  // at or before t, the donor's last use, and the recipient's chain (the
  // recipient its first) at or after t. So the only pairs of their members
  // that can be live together are those live at t: the members of the
  // donor's chain that end at t (the donor, and before it only members
  // live at t alone) with the members of the recipient's chain that begin
  // there. Joined, the chains share one range if no such pair but the donor
  // and the recipient holds bytes on both sides, as chooseInPlaceByPairs
  // finds comparing every pair.
  auto othersLiveAt = [&](int64_t t, int64_t from,
                          const std::vector<int64_t> &next, bool ending) {
    for (int64_t m = next[from]; m >= 0; m = next[m]) {
      const BufferLifetime &member = lifetimes[m];
      if ((ending ? member.lastUse : member.firstUse) != t)
        break;
      if (member.bytes)
        return true;
    }
    return false;
  };
  for (size_t recipient : orderByFirstUse(lifetimes)) {
    const BufferLifetime &buffer = lifetimes[recipient];
    for (size_t donor : buffer.inPlaceOf) {
      if (donor >= n || donor == recipient || recipientOf[donor] >= 0 ||
          !buffer.mayTakeOver(donor, lifetimes[donor]) ||
          chains.find(donor) == chains.find(recipient))
        continue;
      const int64_t t = buffer.firstUse;
      const bool donorSide =
          othersLiveAt(t, int64_t(donor), donorOf, /*ending=*/true);
      const bool recipientSide =
          othersLiveAt(t, int64_t(recipient), recipientOf, /*ending=*/false);
      if ((donorSide && (recipientSide || buffer.bytes)) ||
          (recipientSide && lifetimes[donor].bytes))
        continue;
      donorOf[recipient] = int64_t(donor);
      recipientOf[donor] = int64_t(recipient);
      chains.join(donor, recipient);
      break;
    }
  }
  return donorOf;
}

MemoryPlan mlt::planMemoryNaive(const std::vector<BufferLifetime> &lifetimes,
                                uint64_t alignment) {
  Chains chains = buildChains(lifetimes);
  return expandChains(chains, placeNaive(chains.lifetimes, alignment),
                      lifetimes.size());
}

MemoryPlan mlt::planMemoryByScan(const std::vector<BufferLifetime> &lifetimes,
                                 uint64_t alignment) {
  Chains chains = buildChains(lifetimes);
  return expandChains(chains, placeGreedyByScan(chains.lifetimes, alignment),
                      lifetimes.size());
}

MemoryPlan mlt::planMemory(const std::vector<BufferLifetime> &lifetimes,
                           uint64_t alignment) {
  Chains chains = buildChains(lifetimes);
  return expandChains(chains, placeGreedy(chains.lifetimes, alignment),
                      lifetimes.size());
}
