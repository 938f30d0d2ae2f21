//===- GradientBucketsTest.cpp - tests of the gradient bucket planner -----===//
//
// Part of mlt. The planner on hand-made reductions (readiness order, ties,
// buckets that close exactly full, empty gradients), against the naive
// reference on random ones, and the checker's refusals: of broken plans
// written by hand, and of every plan a random edit makes out of a valid one
// (the checker admits one plan per input).
//
//===----------------------------------------------------------------------===//

#include "mlt/Analysis/GradientBuckets.h"

#include <gtest/gtest.h>

#include <random>

using namespace mlt;

namespace {

/// "[2 0]@5 [1]@7": each bucket's members, then its anchor.
std::string show(const BucketPlan &plan) {
  std::string text;
  for (const GradientBucket &bucket : plan.buckets) {
    if (!text.empty())
      text += ' ';
    text += '[';
    for (size_t i = 0; i < bucket.members.size(); ++i)
      text += (i ? " " : "") + std::to_string(bucket.members[i]);
    text += "]@" + std::to_string(bucket.anchor);
  }
  return text;
}

/// Plans with both planners, checks that they agree and that the checker
/// accepts the plan, and returns it as text.
std::string planned(const std::vector<GradientReduction> &reductions,
                    uint64_t bucketBytes) {
  BucketPlan plan = planGradientBuckets(reductions, bucketBytes);
  std::string why;
  EXPECT_TRUE(plan.verify(reductions, bucketBytes, &why)) << why;
  EXPECT_EQ(show(plan),
            show(planGradientBucketsNaive(reductions, bucketBytes)));
  return show(plan);
}

/// Whether the checker refuses `plan` with a reason that contains `reason`.
::testing::AssertionResult
refused(const BucketPlan &plan,
        const std::vector<GradientReduction> &reductions, uint64_t bucketBytes,
        const std::string &reason) {
  std::string why;
  if (plan.verify(reductions, bucketBytes, &why))
    return ::testing::AssertionFailure() << show(plan) << " is accepted";
  if (why.find(reason) == std::string::npos)
    return ::testing::AssertionFailure()
           << show(plan) << " is refused for \"" << why << "\", not \""
           << reason << "\"";
  return ::testing::AssertionSuccess();
}

TEST(GradientBuckets, TheOverlapPassExample) {
  // mlt-schedule-overlap.mlir: grad:b ready after launch 1, grad:a after
  // launch 3, grad:d untouched (ready at the start); 64 bytes each.
  std::vector<GradientReduction> reductions = {{1, 64}, {3, 64}, {-1, 64}};
  EXPECT_EQ(planned(reductions, 0), "[2]@-1 [0]@1 [1]@3");
  EXPECT_EQ(planned(reductions, 64), "[2]@-1 [0]@1 [1]@3");
  EXPECT_EQ(planned(reductions, 128), "[2 0]@1 [1]@3");
  EXPECT_EQ(planned(reductions, 32u << 20), "[2 0 1]@3");
}

TEST(GradientBuckets, TiesKeepTheOptimizerStepsOrder) {
  std::vector<GradientReduction> reductions = {
      {5, 10}, {2, 10}, {5, 10}, {2, 10}, {-1, 10}};
  EXPECT_EQ(planned(reductions, 0), "[4]@-1 [1]@2 [3]@2 [0]@5 [2]@5");
  EXPECT_EQ(planned(reductions, 20), "[4 1]@2 [3 0]@5 [2]@5");
}

TEST(GradientBuckets, ABucketClosesOnceFull) {
  // 40 + 60 reaches 100 exactly; 100 alone does; the last bucket may hold
  // less; one over-large reduction is a bucket of its own.
  std::vector<GradientReduction> reductions = {
      {0, 40}, {1, 60}, {2, 100}, {3, 1000}, {4, 30}, {5, 1}};
  EXPECT_EQ(planned(reductions, 100), "[0 1]@1 [2]@2 [3]@3 [4 5]@5");
  EXPECT_EQ(planned(reductions, 101), "[0 1 2]@2 [3]@3 [4 5]@5");
  EXPECT_EQ(planned(reductions, 1), "[0]@0 [1]@1 [2]@2 [3]@3 [4]@4 [5]@5");
}

TEST(GradientBuckets, EmptyGradientsJoinTheNextBucket) {
  // A bucket that is full takes nothing more, not even zero bytes; with
  // bucket size 0 every reduction is a bucket, the empty ones too.
  std::vector<GradientReduction> reductions = {{0, 100}, {1, 0}, {2, 50}};
  EXPECT_EQ(planned(reductions, 100), "[0]@0 [1 2]@2");
  EXPECT_EQ(planned(reductions, 0), "[0]@0 [1]@1 [2]@2");
  EXPECT_EQ(planned({{0, 0}, {1, 0}}, 10), "[0 1]@1");
}

TEST(GradientBuckets, NoReductionsNoBuckets) {
  EXPECT_EQ(planned({}, 0), "");
  EXPECT_EQ(planned({}, 1 << 20), "");
  BucketPlan oneEmpty;
  oneEmpty.buckets.emplace_back();
  EXPECT_TRUE(refused(oneEmpty, {}, 0, "bucket 0 is empty"));
}

TEST(GradientBuckets, CheckerRefusesBrokenPlans) {
  // Valid: "[0 1]@1 [2]@4 [3]@4" for bucket size 100.
  std::vector<GradientReduction> reductions = {
      {0, 50}, {1, 50}, {4, 100}, {4, 10}};
  const uint64_t size = 100;
  ASSERT_EQ(planned(reductions, size), "[0 1]@1 [2]@4 [3]@4");
  using B = std::vector<GradientBucket>;

  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{2}, 4}}}, reductions, size,
                      "reduction 3 is in no bucket"));
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{2, 3}, 4}, {{3}, 4}}}, reductions,
                      size, "reduction 3 is planned twice"));
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{2}, 4}, {{3, 4}, 4}}}, reductions,
                      size, "holds reduction 4 of 4"));
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{}, 4}, {{2}, 4}, {{3}, 4}}},
                      reductions, size, "bucket 1 is empty"));
  // Anchored before its last member is ready, or later than needed.
  EXPECT_TRUE(refused({B{{{0, 1}, 0}, {{2}, 4}, {{3}, 4}}}, reductions, size,
                      "bucket 0 is anchored after 0, its last member is "
                      "ready after 1"));
  EXPECT_TRUE(refused({B{{{0, 1}, 2}, {{2}, 4}, {{3}, 4}}}, reductions, size,
                      "bucket 0 is anchored after 2"));
  // Buckets out of anchor order, members out of readiness order, ties out
  // of the reductions' order.
  EXPECT_TRUE(refused({B{{{2}, 4}, {{0, 1}, 1}, {{3}, 4}}}, reductions, size,
                      "before bucket 0"));
  EXPECT_TRUE(refused({B{{{1, 0}, 1}, {{2}, 4}, {{3}, 4}}}, reductions, size,
                      "reduction 0 (ready after 0) is launched after "
                      "reduction 1 (ready after 1)"));
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{3}, 4}, {{2}, 4}}}, reductions, size,
                      "reduction 2 (ready after 4) is launched after "
                      "reduction 3"));
  // A bucket under the size that is not the last; one that stayed open
  // when full.
  EXPECT_TRUE(refused({B{{{0}, 0}, {{1}, 1}, {{2}, 4}, {{3}, 4}}}, reductions,
                      size, "bucket 0 holds 50 bytes, under the bucket size"));
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{2, 3}, 4}}}, reductions, size,
                      "bucket 1 holds 100 bytes without its last member"));
  // With bucket size 0 no bucket holds two.
  EXPECT_TRUE(refused({B{{{0, 1}, 1}, {{2}, 4}, {{3}, 4}}}, reductions, 0,
                      "bucket 0 holds 50 bytes without its last member"));
}

/// Random reductions: many ties (launch positions from -1 to 15), sizes up
/// to 5000 bytes, one in ten empty.
std::vector<GradientReduction> randomReductions(std::mt19937 &rng) {
  std::vector<GradientReduction> reductions(rng() % 40);
  for (GradientReduction &r : reductions) {
    r.readyAfter = int64_t(rng() % 17) - 1;
    r.bytes = rng() % 10 == 0 ? 0 : 1 + rng() % 5000;
  }
  return reductions;
}

/// A bucket size from none to more than all the gradients hold.
uint64_t randomBucketBytes(std::mt19937 &rng) {
  switch (rng() % 4) {
  case 0:
    return 0;
  case 1:
    return 1 + rng() % 5000;
  case 2:
    return 1 + rng() % 30000;
  default:
    return 1u << 30;
  }
}

TEST(GradientBuckets, RandomReductionsAgreeWithTheReference) {
  std::mt19937 rng(2718);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<GradientReduction> reductions = randomReductions(rng);
    uint64_t bucketBytes = randomBucketBytes(rng);
    BucketPlan fast = planGradientBuckets(reductions, bucketBytes);
    BucketPlan naive = planGradientBucketsNaive(reductions, bucketBytes);
    std::string why;
    ASSERT_TRUE(fast.verify(reductions, bucketBytes, &why)) << why;
    ASSERT_TRUE(naive.verify(reductions, bucketBytes, &why)) << why;
    ASSERT_EQ(show(fast), show(naive)) << "trial " << trial;
  }
}

/// `plan` changed in one random way: two members swapped, a member moved
/// to the neighbouring bucket, a bucket split or merged with the next, or
/// an anchor moved.
BucketPlan randomEdit(BucketPlan plan, std::mt19937 &rng) {
  std::vector<GradientBucket> &buckets = plan.buckets;
  size_t b = rng() % buckets.size();
  switch (rng() % 5) {
  case 0: {
    size_t c = rng() % buckets.size();
    std::swap(buckets[b].members[rng() % buckets[b].members.size()],
              buckets[c].members[rng() % buckets[c].members.size()]);
    break;
  }
  case 1:
    if (b + 1 < buckets.size()) {
      if (rng() % 2) {
        buckets[b + 1].members.insert(buckets[b + 1].members.begin(),
                                      buckets[b].members.back());
        buckets[b].members.pop_back();
      } else {
        buckets[b].members.push_back(buckets[b + 1].members.front());
        buckets[b + 1].members.erase(buckets[b + 1].members.begin());
      }
    }
    break;
  case 2:
    if (buckets[b].members.size() > 1) {
      GradientBucket tail;
      size_t at = 1 + rng() % (buckets[b].members.size() - 1);
      tail.members.assign(buckets[b].members.begin() + at,
                          buckets[b].members.end());
      tail.anchor = buckets[b].anchor;
      buckets[b].members.resize(at);
      buckets.insert(buckets.begin() + b + 1, tail);
    }
    break;
  case 3:
    if (b + 1 < buckets.size()) {
      buckets[b].members.insert(buckets[b].members.end(),
                                buckets[b + 1].members.begin(),
                                buckets[b + 1].members.end());
      buckets[b].anchor = buckets[b + 1].anchor;
      buckets.erase(buckets.begin() + b + 1);
    }
    break;
  default:
    buckets[b].anchor += rng() % 2 ? 1 : -1;
    break;
  }
  return plan;
}

TEST(GradientBuckets, CheckerRefusesEveryOtherPlan) {
  // The rules fix the plan: whatever a random edit changes, the checker
  // refuses. (A split leaves the head under the bucket size, whatever the
  // anchors; a move may leave a bucket empty.)
  std::mt19937 rng(31415);
  int edited = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<GradientReduction> reductions = randomReductions(rng);
    if (reductions.empty())
      continue;
    uint64_t bucketBytes = randomBucketBytes(rng);
    BucketPlan valid = planGradientBuckets(reductions, bucketBytes);
    BucketPlan edit = randomEdit(valid, rng);
    if (edit.buckets == valid.buckets)
      continue;
    ++edited;
    EXPECT_FALSE(edit.verify(reductions, bucketBytes))
        << show(valid) << " edited to " << show(edit) << ", bucket size "
        << bucketBytes;
  }
  EXPECT_GT(edited, 1000);
}

} // namespace
