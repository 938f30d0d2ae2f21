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
#include <numeric>
#include <sstream>

using namespace mlt;

using mlt::analysis::alignUp;
using mlt::analysis::firstFit;

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

MemoryPlan placeGreedy(const std::vector<BufferLifetime> &lifetimes,
                       uint64_t alignment) {
  std::vector<size_t> order(lifetimes.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; ties by first use, then index, so the plan is deterministic.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (lifetimes[a].bytes != lifetimes[b].bytes)
      return lifetimes[a].bytes > lifetimes[b].bytes;
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });

  MemoryPlan plan;
  plan.offsets.assign(lifetimes.size(), 0);
  std::vector<size_t> placed;
  for (size_t i : order) {
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

} // namespace

bool BufferLifetime::mayTakeOver(size_t donorIndex,
                                 const BufferLifetime &donor) const {
  return donor.lastUse == firstUse && bytes <= donor.bytes &&
         std::find(inPlaceOf.begin(), inPlaceOf.end(), donorIndex) !=
             inPlaceOf.end();
}

bool MemoryPlan::verify(const std::vector<BufferLifetime> &lifetimes,
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

std::vector<int64_t>
mlt::chooseInPlace(const std::vector<BufferLifetime> &lifetimes) {
  const size_t n = lifetimes.size();
  std::vector<int64_t> donorOf(n, -1), recipientOf(n, -1);
  // The chain of each buffer (the index of its entry in `chains`), and each
  // chain's members.
  std::vector<size_t> chainOf(n);
  std::iota(chainOf.begin(), chainOf.end(), 0);
  std::vector<std::vector<size_t>> chains(n);
  for (size_t i = 0; i < n; ++i)
    chains[i] = {i};

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lifetimes[a].firstUse < lifetimes[b].firstUse;
  });
  for (size_t recipient : order) {
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

MemoryPlan mlt::planMemoryNaive(const std::vector<BufferLifetime> &lifetimes,
                                uint64_t alignment) {
  Chains chains = buildChains(lifetimes);
  return expandChains(chains, placeNaive(chains.lifetimes, alignment),
                      lifetimes.size());
}

MemoryPlan mlt::planMemory(const std::vector<BufferLifetime> &lifetimes,
                           uint64_t alignment) {
  Chains chains = buildChains(lifetimes);
  return expandChains(chains, placeGreedy(chains.lifetimes, alignment),
                      lifetimes.size());
}
