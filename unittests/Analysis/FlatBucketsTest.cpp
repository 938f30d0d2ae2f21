//===- FlatBucketsTest.cpp - tests of the flat bucket planner -------------===//
//
// Part of mlt. The planner on hand-made gradients (groups kept apart,
// alignment and padding for ranks that do not divide the sizes, buckets
// ordered by anchor), against the naive reference on random ones, and the
// checker's refusals of broken plans and of random edits of valid ones.
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/FlatBuckets.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;

namespace {

/// "g0[2@0 0@128]/256@5": each bucket's group, members at their offsets,
/// size and anchor.
std::string show(const FlatBucketPlan &plan) {
  std::string text;
  for (const FlatBucket &bucket : plan.buckets) {
    if (!text.empty())
      text += ' ';
    text += "g" + std::to_string(bucket.group) + "[";
    for (size_t i = 0; i < bucket.members.size(); ++i)
      text += (i ? " " : "") + std::to_string(bucket.members[i]) + "@" +
              std::to_string(i < bucket.offsets.size() ? bucket.offsets[i] : -1);
    text += "]/" + std::to_string(bucket.elements) + "@" +
            std::to_string(bucket.anchor);
  }
  return text;
}

std::string planned(const std::vector<FlatMember> &members,
                    const FlatBucketOptions &options) {
  FlatBucketPlan plan = planFlatBuckets(members, options);
  std::string why;
  EXPECT_TRUE(plan.verify(members, options, &why)) << why;
  EXPECT_EQ(show(plan), show(planFlatBucketsNaive(members, options)));
  return show(plan);
}

::testing::AssertionResult refused(const FlatBucketPlan &plan,
                                   const std::vector<FlatMember> &members,
                                   const FlatBucketOptions &options,
                                   const std::string &reason) {
  std::string why;
  if (plan.verify(members, options, &why))
    return ::testing::AssertionFailure() << show(plan) << " is accepted";
  if (why.find(reason) == std::string::npos)
    return ::testing::AssertionFailure()
           << show(plan) << " is refused for \"" << why << "\", not \""
           << reason << "\"";
  return ::testing::AssertionSuccess();
}

FlatMember member(int64_t readyAfter, uint64_t elements, unsigned group = 0) {
  return {readyAfter, elements, elements * 4, group};
}

TEST(FlatBuckets, MembersAlignedAndBucketsPaddedForAnyRankCount) {
  // 100 + 300 + 7 elements, all ready together: one bucket.
  std::vector<FlatMember> members = {member(3, 100), member(3, 300),
                                     member(3, 7)};
  // Offsets 0, 128, 512 (300 ends at 428, aligned up); the end, 519, is
  // padded to a multiple of ranks * 128.
  EXPECT_EQ(planned(members, {1u << 20, 1, 128}), "g0[0@0 1@128 2@512]/640@3");
  EXPECT_EQ(planned(members, {1u << 20, 2, 128}), "g0[0@0 1@128 2@512]/768@3");
  EXPECT_EQ(planned(members, {1u << 20, 3, 128}), "g0[0@0 1@128 2@512]/768@3");
  EXPECT_EQ(planned(members, {1u << 20, 6, 128}), "g0[0@0 1@128 2@512]/768@3");
  EXPECT_EQ(planned(members, {1u << 20, 8, 128}),
            "g0[0@0 1@128 2@512]/1024@3");
  // Every rank's slice is aligned.
  for (uint64_t ranks : {1, 2, 3, 5, 6, 8})
    for (const FlatBucket &bucket :
         planFlatBuckets(members, {1u << 20, ranks, 128}).buckets)
      EXPECT_EQ(bucket.sliceElements(ranks) % 128, 0u) << ranks;
}

TEST(FlatBuckets, GroupsNeverShareABucket) {
  // Weights (group 0) and norm weights (group 1) interleave in readiness
  // order; each group gets buckets of its own, ordered by anchor.
  std::vector<FlatMember> members = {member(1, 256, 0), member(2, 64, 1),
                                     member(4, 256, 0), member(5, 64, 1),
                                     member(7, 256, 0)};
  // 2 KiB buckets: group 0 closes after two members (2 x 1 KiB).
  EXPECT_EQ(planned(members, {2048, 2, 128}),
            "g0[0@0 2@256]/512@4 g1[1@0 3@128]/256@5 g0[4@0]/256@7");
  // Bucket size 0: one member per bucket, by readiness.
  EXPECT_EQ(planned(members, {0, 1, 64}),
            "g0[0@0]/256@1 g1[1@0]/64@2 g0[2@0]/256@4 g1[3@0]/64@5 "
            "g0[4@0]/256@7");
}

TEST(FlatBuckets, EqualAnchorsOrderedByGroup) {
  std::vector<FlatMember> members = {member(2, 10, 1), member(2, 10, 0)};
  EXPECT_EQ(planned(members, {0, 2, 8}), "g0[1@0]/16@2 g1[0@0]/16@2");
}

TEST(FlatBuckets, NoMembersNoBuckets) {
  EXPECT_EQ(planned({}, {1024, 4, 128}), "");
}

TEST(FlatBuckets, AgreesWithTheNaivePlannerOnRandomGradients) {
  std::mt19937_64 random(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<FlatMember> members(random() % 40);
    for (FlatMember &m : members)
      m = member(int64_t(random() % 30) - 1, 1 + random() % 5000,
                 unsigned(random() % 3));
    FlatBucketOptions options{random() % 40000, 1 + random() % 8,
                              uint64_t(1) << (random() % 8)};
    planned(members, options);
  }
}

TEST(FlatBuckets, TheCheckerRefusesBrokenPlans) {
  std::vector<FlatMember> members = {member(1, 100, 0), member(2, 100, 1),
                                     member(3, 100, 0)};
  FlatBucketOptions options{0, 2, 128};
  const FlatBucketPlan good = planFlatBuckets(members, options);
  ASSERT_EQ(show(good), "g0[0@0]/256@1 g1[1@0]/256@2 g0[2@0]/256@3");

  FlatBucketPlan plan = good;
  plan.buckets[0].elements = 128;
  EXPECT_TRUE(refused(plan, members, options, "expected 256"));
  plan = good;
  plan.buckets[1].offsets[0] = 64;
  EXPECT_TRUE(refused(plan, members, options, "lies at 64"));
  plan = good;
  std::swap(plan.buckets[0], plan.buckets[2]);
  EXPECT_TRUE(refused(plan, members, options, "comes after"));
  plan = good;
  plan.buckets[1].group = 0;
  EXPECT_TRUE(refused(plan, members, options, "of group 1 is in bucket 1"));
  plan = good;
  plan.buckets.pop_back();
  EXPECT_TRUE(refused(plan, members, options, "member 2 is in no bucket"));
  plan = good;
  plan.buckets[2].members[0] = 0;
  EXPECT_TRUE(refused(plan, members, options, "is in buckets 0 and 2"));
  plan = good;
  plan.buckets[0].members.push_back(2);
  plan.buckets[0].offsets.push_back(128);
  plan.buckets.pop_back();
  EXPECT_TRUE(refused(plan, members, options, "group 0:"));
}

TEST(FlatBuckets, TheCheckerRefusesEveryRandomEdit) {
  std::mt19937_64 random(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<FlatMember> members(2 + random() % 12);
    for (FlatMember &m : members)
      m = member(int64_t(random() % 10), 1 + random() % 500,
                 unsigned(random() % 2));
    FlatBucketOptions options{random() % 3000, 1 + random() % 6, 32};
    FlatBucketPlan plan = planFlatBuckets(members, options);
    FlatBucket &bucket = plan.buckets[random() % plan.buckets.size()];
    switch (random() % 3) {
    case 0:
      bucket.elements += options.ranks * options.alignment;
      break;
    case 1:
      bucket.offsets.back() += options.alignment;
      break;
    case 2:
      bucket.anchor += 1;
      break;
    }
    EXPECT_FALSE(plan.verify(members, options)) << show(plan);
  }
}

} // namespace
