//===- FlatBuckets.h - the partitioned optimizer's flat buffers -*- C++ -*-===//
//
// Part of mlt. Lays gradients (and with them their parameters and AdamW
// moments) out in flat buckets that the data-parallel ranks split evenly,
// as a partitioned optimizer (ZeRO, Megatron's distributed optimizer) keeps
// them: rank c of G owns elements [c * n / G, (c + 1) * n / G) of a bucket
// of n, cutting through parameters wherever that falls; the bucket is
// reduce-scattered into those slices, AdamW updates each rank's slices, and
// the updated slices are all-gathered back. mlt-partition-optimizer builds
// the buffers from this plan. Plain C++: neither MLIR nor the runtime.
//
// The rules:
//  - Members of different groups never share a bucket. A group is what one
//    AdamW launch and one gradient-norm reduction can treat alike (the same
//    weight decay, the same mesh axes the parameter is split over), so that
//    a rank's slice of a bucket needs no rank-dependent case in any kernel.
//  - Within a group, members go into buckets as GradientBuckets.h groups
//    reductions: in readiness order (the backward pass finishes them in
//    that order), a bucket closing once it holds `bucketBytes` (of
//    gradients) or more; so each bucket can be reduce-scattered as soon as
//    the backward pass has finished it, and the reverse order is the order
//    in which the forward pass needs the parameters.
//  - Buckets are ordered by anchor (the point after which their last
//    member is ready), ties by group.
//  - In a bucket, members lie in their order, each at a multiple of
//    `alignment` elements; the bucket is padded to a multiple of `ranks *
//    alignment` elements, so every rank's slice has the same size and
//    starts aligned (any number of ranks, any parameter size).
//
// A plan that `verify` accepts is the only one for its inputs, so the
// checker is as strict as the reference planner.
//
//===----------------------------------------------------------------------===//

#ifndef MLT_ANALYSIS_FLATBUCKETS_H
#define MLT_ANALYSIS_FLATBUCKETS_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlt {

/// One parameter's gradient, in the optimizer step's order.
struct FlatMember {
  /// As GradientReduction's: the position of the last launch that touches
  /// the gradient in the body of the step's last micro-batch (-1: none).
  int64_t readyAfter = -1;
  /// Elements of the parameter (of the rank's block of it).
  uint64_t elements = 0;
  /// Bytes of its gradient (what the bucket size counts).
  uint64_t bytes = 0;
  /// Members of different groups never share a bucket.
  unsigned group = 0;
};

/// One flat buffer.
struct FlatBucket {
  unsigned group = 0;
  /// Indices of the members, in layout order, and the element offset of
  /// each in the bucket.
  std::vector<size_t> members;
  std::vector<uint64_t> offsets;
  /// Elements, padding included: a multiple of ranks * alignment.
  uint64_t elements = 0;
  /// The members' latest readyAfter.
  int64_t anchor = -1;

  /// Elements of each rank's slice.
  uint64_t sliceElements(uint64_t ranks) const { return elements / ranks; }

  bool operator==(const FlatBucket &other) const {
    return group == other.group && members == other.members &&
           offsets == other.offsets && elements == other.elements &&
           anchor == other.anchor;
  }
};

/// Where a flat buffer's members start: a multiple of this many elements
/// (512 bytes of f32, 256 of bf16: the plan's buffer alignment). ZeRO's
/// buckets (mlt-partition-optimizer) and the coalesced reductions' flat
/// gradients (mlt-coalesce-reductions) lay their members out by it.
inline constexpr uint64_t kFlatBufferAlignment = 128;

struct FlatBucketOptions {
  uint64_t bucketBytes = 0;
  /// Ranks that split each bucket (the data-parallel size), >= 1.
  uint64_t ranks = 1;
  /// Every member and slice starts at a multiple of this many elements, >= 1.
  uint64_t alignment = kFlatBufferAlignment;
};

/// The buckets, in launch order.
struct FlatBucketPlan {
  std::vector<FlatBucket> buckets;

  /// Checks every rule of the header against `members` and `options`: each
  /// member in exactly one bucket of its group; buckets of a group following
  /// GradientBuckets' rules (readiness order, closing sizes, anchors);
  /// buckets ordered by (anchor, group); offsets aligned, in order, not
  /// overlapping; a bucket's size the smallest multiple of ranks * alignment
  /// that holds its last member. On failure `why` names the first broken rule.
  bool verify(const std::vector<FlatMember> &members,
              const FlatBucketOptions &options, std::string *why = nullptr) const;
};

/// The reference planner: per group, the naive GradientBuckets planner;
/// buckets merged by repeatedly taking the first (anchor, group) by a scan;
/// each offset from the sum of the sizes before it, rounded up.
FlatBucketPlan planFlatBucketsNaive(const std::vector<FlatMember> &members,
                                    const FlatBucketOptions &options);

/// The planner of mlt-partition-optimizer: the same plan, from the sorting
/// GradientBuckets planner, one stable sort of the buckets and a running
/// offset.
FlatBucketPlan planFlatBuckets(const std::vector<FlatMember> &members,
                               const FlatBucketOptions &options);

} // namespace mlt

#endif // MLT_ANALYSIS_FLATBUCKETS_H
