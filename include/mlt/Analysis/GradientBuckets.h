//===- GradientBuckets.h - reductions grouped by readiness ------*- C++ -*-===//
//
// Part of mlt. Groups the reductions of gradients over the ranks that share
// them (data parallelism) into buckets launched during the backward pass:
// each reduction is ready once the last launch that touches its gradient
// has run, the reductions are taken in the order they become ready, and a
// bucket closes once it holds at least the bucket size in bytes. Each bucket
// is launched after the launch where its last member becomes ready, its
// anchor. mlt-schedule-overlap turns the plan into launches on the gradient
// stream. Plain C++: the planner needs neither MLIR nor the runtime.
//
// A plan that `verify` accepts is the only one for its inputs: the
// readiness order fixes the sequence of reductions, and the size rules fix
// where each bucket ends. So the checker is as strict as the reference.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_GRADIENTBUCKETS_H
#define MLT_ANALYSIS_GRADIENTBUCKETS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// One reduction of a gradient, as the optimizer step lists it.
struct GradientReduction {
  /// The position of the last launch that touches the gradient in the
  /// program that computes it: the reduction may start right after it. -1:
  /// nothing there touches it, so it is ready at the program's start.
  int64_t readyAfter = -1;
  /// The gradient's size in bytes.
  uint64_t bytes = 0;
};

/// Reductions launched together, one after another.
struct GradientBucket {
  /// Indices into the planned reductions, in the order they are launched.
  std::vector<size_t> members;
  /// The position after which the bucket is launched: its members' latest
  /// `readyAfter` (-1: at the program's start).
  int64_t anchor = -1;

  bool operator==(const GradientBucket &other) const {
    return members == other.members && anchor == other.anchor;
  }
};

/// The buckets, in the order they are launched.
struct BucketPlan {
  std::vector<GradientBucket> buckets;

  /// Checks the plan against `reductions` and `bucketBytes`:
  ///  - every reduction is in exactly one bucket, and no bucket is empty;
  ///  - a bucket's anchor is its members' latest `readyAfter`;
  ///  - anchors never decrease from one bucket to the next;
  ///  - the members of all buckets, read in order, are the reductions in
  ///    readiness order: by `readyAfter`, ties in the reductions' order;
  ///  - every bucket but the last holds at least `bucketBytes`;
  ///  - a bucket of more than one member holds less than `bucketBytes`
  ///    without its last member (it closed as soon as it was full). With
  ///    `bucketBytes` 0 every bucket therefore holds one reduction; the
  ///    last bucket may hold less than `bucketBytes`.
  /// On failure `why` names the first broken rule.
  bool verify(const std::vector<GradientReduction> &reductions,
              uint64_t bucketBytes, std::string *why = nullptr) const;
};

/// The reference planner: repeatedly takes the earliest-ready reduction not
/// yet planned (the first in the reductions' order among equally ready
/// ones) by scanning them all, adds it to the open bucket, and closes the
/// bucket once it holds `bucketBytes`. Quadratic in the reductions.
BucketPlan
planGradientBucketsNaive(const std::vector<GradientReduction> &reductions,
                         uint64_t bucketBytes);

/// The planner of mlt-schedule-overlap: the same plan, from one stable sort
/// by readiness and one pass over the sorted reductions.
BucketPlan planGradientBuckets(const std::vector<GradientReduction> &reductions,
                               uint64_t bucketBytes);

} // namespace mlt

#endif // MLT_ANALYSIS_GRADIENTBUCKETS_H
