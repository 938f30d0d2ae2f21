//===- GradientBuckets.cpp - gradient reductions grouped by readiness -----===//
//
// Part of mlt. The naive and sorting bucket planners, and the plan checker.
// The naive planner finds each next reduction by a scan and each bucket's
// bytes and anchor by summing over its members again; the sorting one (the
// pass's) sorts once and keeps a running total.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/GradientBuckets.h"

#include <algorithm>
#include <numeric>

using namespace mlt;

namespace {

/// Whether reduction `a` is ready before reduction `b`: earlier, or as early
/// and listed first.
bool readyBefore(const std::vector<GradientReduction> &reductions, size_t a,
                 size_t b) {
  if (reductions[a].readyAfter != reductions[b].readyAfter)
    return reductions[a].readyAfter < reductions[b].readyAfter;
  return a < b;
}

/// The bytes of `bucket`'s members.
uint64_t heldBy(const std::vector<GradientReduction> &reductions,
                const GradientBucket &bucket) {
  uint64_t held = 0;
  for (size_t member : bucket.members)
    held += reductions[member].bytes;
  return held;
}

} // namespace

bool BucketPlan::verify(const std::vector<GradientReduction> &reductions,
                        uint64_t bucketBytes, std::string *why) const {
  auto fail = [&](const std::string &message) {
    if (why)
      *why = message;
    return false;
  };
  auto str = [](auto value) { return std::to_string(value); };

  std::vector<int64_t> bucketOf(reductions.size(), -1);
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].members.empty())
      return fail("bucket " + str(b) + " is empty");
    for (size_t member : buckets[b].members) {
      if (member >= reductions.size())
        return fail("bucket " + str(b) + " holds reduction " + str(member) +
                    " of " + str(reductions.size()));
      if (bucketOf[member] >= 0)
        return fail("reduction " + str(member) + " is planned twice (buckets " +
                    str(bucketOf[member]) + " and " + str(b) + ")");
      bucketOf[member] = int64_t(b);
    }
  }
  for (size_t r = 0; r < reductions.size(); ++r)
    if (bucketOf[r] < 0)
      return fail("reduction " + str(r) + " is in no bucket");

  for (size_t b = 0; b < buckets.size(); ++b) {
    const GradientBucket &bucket = buckets[b];
    int64_t latest = reductions[bucket.members.front()].readyAfter;
    for (size_t member : bucket.members)
      latest = std::max(latest, reductions[member].readyAfter);
    if (bucket.anchor != latest)
      return fail("bucket " + str(b) + " is anchored after " +
                  str(bucket.anchor) + ", its last member is ready after " +
                  str(latest));
    if (b > 0 && bucket.anchor < buckets[b - 1].anchor)
      return fail("bucket " + str(b) + " is anchored after " +
                  str(bucket.anchor) + ", before bucket " + str(b - 1) +
                  " (after " + str(buckets[b - 1].anchor) + ")");
  }

  std::vector<size_t> launched;
  for (const GradientBucket &bucket : buckets)
    launched.insert(launched.end(), bucket.members.begin(),
                    bucket.members.end());
  for (size_t i = 1; i < launched.size(); ++i) {
    size_t before = launched[i - 1], after = launched[i];
    if (!readyBefore(reductions, before, after))
      return fail("reduction " + str(after) + " (ready after " +
                  str(reductions[after].readyAfter) +
                  ") is launched after reduction " + str(before) +
                  " (ready after " + str(reductions[before].readyAfter) + ")");
  }

  for (size_t b = 0; b < buckets.size(); ++b) {
    const std::vector<size_t> &members = buckets[b].members;
    uint64_t held = 0;
    for (size_t i = 0; i + 1 < members.size(); ++i)
      held += reductions[members[i]].bytes;
    if (members.size() > 1 && held >= bucketBytes)
      return fail("bucket " + str(b) + " holds " + str(held) +
                  " bytes without its last member, the bucket size " +
                  str(bucketBytes) + " or more");
    held += reductions[members.back()].bytes;
    if (b + 1 < buckets.size() && held < bucketBytes)
      return fail("bucket " + str(b) + " holds " + str(held) +
                  " bytes, under the bucket size " + str(bucketBytes) +
                  ", and is not the last");
  }
  return true;
}

BucketPlan
mlt::planGradientBucketsNaive(const std::vector<GradientReduction> &reductions,
                              uint64_t bucketBytes) {
  BucketPlan plan;
  std::vector<bool> taken(reductions.size(), false);
  for (size_t planned = 0; planned < reductions.size(); ++planned) {
    size_t next = reductions.size();
    for (size_t r = 0; r < reductions.size(); ++r)
      if (!taken[r] &&
          (next == reductions.size() || readyBefore(reductions, r, next)))
        next = r;
    taken[next] = true;
    if (plan.buckets.empty() ||
        heldBy(reductions, plan.buckets.back()) >= bucketBytes)
      plan.buckets.emplace_back();
    plan.buckets.back().members.push_back(next);
  }
  for (GradientBucket &bucket : plan.buckets) {
    bucket.anchor = reductions[bucket.members.front()].readyAfter;
    for (size_t member : bucket.members)
      bucket.anchor = std::max(bucket.anchor, reductions[member].readyAfter);
  }
  return plan;
}

BucketPlan
mlt::planGradientBuckets(const std::vector<GradientReduction> &reductions,
                         uint64_t bucketBytes) {
  std::vector<size_t> order(reductions.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reductions[a].readyAfter < reductions[b].readyAfter;
  });
  BucketPlan plan;
  for (size_t begin = 0; begin < order.size();) {
    GradientBucket &bucket = plan.buckets.emplace_back();
    uint64_t held = 0;
    size_t end = begin;
    while (end < order.size() && (end == begin || held < bucketBytes)) {
      bucket.members.push_back(order[end]);
      held += reductions[order[end]].bytes;
      ++end;
    }
    // Its last member is the latest ready: `order` is by readiness.
    bucket.anchor = reductions[order[end - 1]].readyAfter;
    begin = end;
  }
  return plan;
}
