//===- FlatBuckets.cpp - the partitioned optimizer's flat buffers ---------===//
//
// Part of mlt. The reference and the pass's planners of flat buckets, and
// the plan checker. Both planners bucket each group with a GradientBuckets
// planner (the naive one the naive one); they differ in how they merge the
// groups' buckets (a scan for the least per bucket against one stable sort)
// and lay members out (a sum over the members before each against a
// running offset).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/FlatBuckets.h"
#include "mlt/Analysis/GradientBuckets.h"

#include <algorithm>
#include <map>

using namespace mlt;

namespace {

uint64_t alignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// The members of each group (in their order), by group.
std::map<unsigned, std::vector<size_t>>
membersByGroup(const std::vector<FlatMember> &members) {
  std::map<unsigned, std::vector<size_t>> groups;
  for (size_t i = 0; i < members.size(); ++i)
    groups[members[i].group].push_back(i);
  return groups;
}

std::vector<GradientReduction>
reductionsOf(const std::vector<FlatMember> &members,
             const std::vector<size_t> &group) {
  std::vector<GradientReduction> reductions;
  for (size_t member : group)
    reductions.push_back({members[member].readyAfter, members[member].bytes});
  return reductions;
}

/// Every group's buckets in its own order (members not laid out yet).
template <typename Planner>
std::vector<FlatBucket> bucketGroups(const std::vector<FlatMember> &members,
                                     const FlatBucketOptions &options,
                                     Planner plan) {
  std::vector<FlatBucket> buckets;
  for (const auto &[group, indices] : membersByGroup(members)) {
    BucketPlan groupPlan =
        plan(reductionsOf(members, indices), options.bucketBytes);
    for (const GradientBucket &bucket : groupPlan.buckets) {
      FlatBucket flat;
      flat.group = group;
      flat.anchor = bucket.anchor;
      for (size_t member : bucket.members)
        flat.members.push_back(indices[member]);
      buckets.push_back(std::move(flat));
    }
  }
  return buckets;
}

bool launchedBefore(const FlatBucket &a, const FlatBucket &b) {
  return a.anchor != b.anchor ? a.anchor < b.anchor : a.group < b.group;
}

} // namespace

bool FlatBucketPlan::verify(const std::vector<FlatMember> &members,
                            const FlatBucketOptions &options,
                            std::string *why) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  auto str = [](auto value) { return std::to_string(value); };
  if (options.ranks < 1 || options.alignment < 1)
    return fail("ranks and alignment must be at least 1");

  std::vector<int64_t> bucketOf(members.size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b) {
    const FlatBucket &bucket = buckets[b];
    if (bucket.members.empty())
      return fail("bucket " + str(b) + " is empty");
    if (bucket.offsets.size() != bucket.members.size())
      return fail("bucket " + str(b) + " has " + str(bucket.offsets.size()) +
                  " offsets for " + str(bucket.members.size()) + " members");
    uint64_t next = 0; // where the next member must start
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      size_t member = bucket.members[i];
      if (member >= members.size())
        return fail("bucket " + str(b) + " holds member " + str(member) +
                    " of " + str(members.size()));
      if (bucketOf[member] >= 0)
        return fail("member " + str(member) + " is in buckets " +
                    str(bucketOf[member]) + " and " + str(b));
      bucketOf[member] = int64_t(b);
      if (members[member].group != bucket.group)
        return fail("member " + str(member) + " of group " +
                    str(members[member].group) + " is in bucket " + str(b) +
                    " of group " + str(bucket.group));
      if (bucket.offsets[i] != next)
        return fail("member " + str(member) + " lies at " +
                    str(bucket.offsets[i]) + " in bucket " + str(b) +
                    ", expected " + str(next) + " (aligned to " +
                    str(options.alignment) + ", after the member before)");
      next = alignUp(bucket.offsets[i] + members[member].elements,
                     options.alignment);
    }
    const uint64_t size = alignUp(next, options.ranks * options.alignment);
    if (bucket.elements != size)
      return fail("bucket " + str(b) + " has " + str(bucket.elements) +
                  " elements, expected " + str(size) +
                  " (its members padded to a multiple of " +
                  str(options.ranks * options.alignment) + ")");
    if (b > 0 && launchedBefore(bucket, buckets[b - 1]))
      return fail("bucket " + str(b) + " (anchor " + str(bucket.anchor) +
                  ", group " + str(bucket.group) + ") comes after bucket " +
                  str(b - 1) + " (anchor " + str(buckets[b - 1].anchor) +
                  ", group " + str(buckets[b - 1].group) + ")");
  }
  for (size_t member = 0; member < members.size(); ++member)
    if (bucketOf[member] < 0)
      return fail("member " + str(member) + " is in no bucket");

  // Each group's buckets, in plan order, are GradientBuckets' plan.
  for (const auto &[group, indices] : membersByGroup(members)) {
    std::map<size_t, size_t> local; // member -> index in the group
    for (size_t i = 0; i < indices.size(); ++i)
      local[indices[i]] = i;
    BucketPlan groupPlan;
    for (const FlatBucket &bucket : buckets) {
      if (bucket.group != group)
        continue;
      GradientBucket gradientBucket;
      gradientBucket.anchor = bucket.anchor;
      for (size_t member : bucket.members)
        gradientBucket.members.push_back(local.at(member));
      groupPlan.buckets.push_back(std::move(gradientBucket));
    }
    std::string groupWhy;
    if (!groupPlan.verify(reductionsOf(members, indices), options.bucketBytes,
                          &groupWhy))
      return fail("group " + str(group) + ": " + groupWhy);
  }
  return true;
}

FlatBucketPlan mlt::planFlatBucketsNaive(const std::vector<FlatMember> &members,
                                         const FlatBucketOptions &options) {
  std::vector<FlatBucket> pending =
      bucketGroups(members, options, planGradientBucketsNaive);
  FlatBucketPlan plan;
  std::vector<bool> taken(pending.size(), false);
  for (size_t n = 0; n < pending.size(); ++n) {
    // The first untaken bucket that no other untaken one precedes.
    size_t best = pending.size();
    for (size_t i = 0; i < pending.size(); ++i)
      if (!taken[i] &&
          (best == pending.size() || launchedBefore(pending[i], pending[best])))
        best = i;
    taken[best] = true;
    FlatBucket bucket = pending[best];
    for (size_t i = 0; i < bucket.members.size(); ++i) {
      uint64_t offset = 0;
      for (size_t j = 0; j < i; ++j)
        offset = alignUp(offset + members[bucket.members[j]].elements,
                         options.alignment);
      bucket.offsets.push_back(offset);
    }
    uint64_t end = 0;
    for (size_t member : bucket.members)
      end = alignUp(end + members[member].elements, options.alignment);
    bucket.elements = alignUp(end, options.ranks * options.alignment);
    plan.buckets.push_back(std::move(bucket));
  }
  return plan;
}

FlatBucketPlan mlt::planFlatBuckets(const std::vector<FlatMember> &members,
                                    const FlatBucketOptions &options) {
  FlatBucketPlan plan;
  plan.buckets = bucketGroups(members, options, planGradientBuckets);
  std::stable_sort(plan.buckets.begin(), plan.buckets.end(), launchedBefore);
  for (FlatBucket &bucket : plan.buckets) {
    uint64_t offset = 0;
    for (size_t member : bucket.members) {
      bucket.offsets.push_back(offset);
      offset = alignUp(offset + members[member].elements, options.alignment);
    }
    bucket.elements = alignUp(offset, options.ranks * options.alignment);
  }
  return plan;
}
