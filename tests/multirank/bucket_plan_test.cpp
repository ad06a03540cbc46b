// Bucket planning: a pure function, tested without LibTorch.
#include "ddp/runtime/bucket_plan.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace ddp {
namespace {

std::vector<BucketParam> floats(const std::vector<int64_t>& numels, const std::string& dtype = "Float") {
  std::vector<BucketParam> out;
  for (size_t i = 0; i < numels.size(); ++i) {
    out.push_back(BucketParam{static_cast<int64_t>(i), numels[i], 4, dtype, "cpu"});
  }
  return out;
}

std::vector<std::vector<int64_t>> members(const std::vector<PlannedBucket>& buckets) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : buckets) out.push_back(b.params);
  return out;
}

TEST(BucketPlan, DefaultIsReverseOrderInOneBucketWhenSmall) {
  auto buckets = plan_buckets(floats({10, 20, 30}), BucketCaps{1000, 1000});
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].params, (std::vector<int64_t>{2, 1, 0}));
  EXPECT_EQ(buckets[0].offsets, (std::vector<int64_t>{0, 30, 50}));
  EXPECT_EQ(buckets[0].numel, 60);
  EXPECT_EQ(buckets[0].bytes, 240);
  EXPECT_EQ(buckets[0].dtype, "Float");
  EXPECT_EQ(buckets[0].device, "cpu");
}

// Expected layouts below are what PyTorch's own
// torch.distributed._compute_bucket_assignment_by_size returns for the same
// sizes, caps and order (Debian's python3-torch 1.13).

TEST(BucketPlan, FirstBucketUsesTheSmallerCap) {
  // 4 params of 100 bytes; first cap 100 bytes, then 250 bytes.
  auto buckets = plan_buckets(floats({25, 25, 25, 25}), BucketCaps{100, 250});
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{3}, {2, 1, 0}}));
  EXPECT_EQ(buckets[1].offsets, (std::vector<int64_t>{0, 25, 50}));
}

TEST(BucketPlan, BucketClosesOnceItReachesTheCap) {
  // 40 + 40 = 80 < 100 stays open; + 40 = 120 reaches the cap and closes it.
  auto buckets = plan_buckets(floats({10, 10, 10, 10, 10}), BucketCaps{100, 100});
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{4, 3, 2}, {1, 0}}));
}

TEST(BucketPlan, OversizedParameterClosesTheBucketItJoins) {
  auto buckets = plan_buckets(floats({5, 1000, 5}), BucketCaps{100, 100});
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{2, 1}, {0}}));
  EXPECT_EQ(buckets[0].bytes, 4020);
}

TEST(BucketPlan, EachLayersBiasSharesItsWeightsBucket) {
  // MLP 1024,2048,2048,1024,10: fc0.w, fc0.b, fc1.w, fc1.b, ... (float32).
  const auto mlp = floats({2048 * 1024, 2048, 2048 * 2048, 2048, 1024 * 2048, 1024, 10 * 1024, 10});
  EXPECT_EQ(members(plan_buckets(mlp, BucketCaps{1 << 20, 25 << 20})),
            (std::vector<std::vector<int64_t>>{{7, 6, 5, 4}, {3, 2, 1, 0}}));
  EXPECT_EQ(members(plan_buckets(mlp, BucketCaps{1 << 20, 8 << 20})),
            (std::vector<std::vector<int64_t>>{{7, 6, 5, 4}, {3, 2}, {1, 0}}));
}

TEST(BucketPlan, OnePerParameterWithTinyCaps) {
  auto buckets = plan_buckets(floats({3, 4, 5, 6}), BucketCaps{1, 1});
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{3}, {2}, {1}, {0}}));
}

TEST(BucketPlan, GroupsByDtypeAndDevice) {
  std::vector<BucketParam> params = {
      {0, 10, 4, "Float", "cpu"},
      {1, 10, 8, "Double", "cpu"},
      {2, 10, 4, "Float", "cpu"},
      {3, 10, 4, "Float", "cuda:0"},
  };
  auto buckets = plan_buckets(params, BucketCaps{1 << 20, 1 << 20});
  ASSERT_EQ(buckets.size(), 3u);
  // Ordered by first visited member: 3 (cuda), 2 (float cpu), 1 (double).
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{3}, {2, 0}, {1}}));
  EXPECT_EQ(buckets[0].device, "cuda:0");
  EXPECT_EQ(buckets[1].dtype, "Float");
  EXPECT_EQ(buckets[2].dtype, "Double");
  EXPECT_EQ(buckets[2].bytes, 80);
}

TEST(BucketPlan, FollowsTheGivenReadyOrder) {
  auto buckets = plan_buckets(floats({25, 25, 25, 25}), BucketCaps{100, 200}, {1, 3, 0, 2});
  EXPECT_EQ(members(buckets), (std::vector<std::vector<int64_t>>{{1}, {3, 0}, {2}}));
}

TEST(BucketPlan, RejectsBadInput) {
  EXPECT_THROW(plan_buckets(floats({1, 2}), BucketCaps{0, 10}), std::invalid_argument);
  EXPECT_THROW(plan_buckets(floats({1, 2}), BucketCaps{}, {0}), std::invalid_argument);
  EXPECT_THROW(plan_buckets(floats({1, 2}), BucketCaps{}, {0, 0}), std::invalid_argument);
  EXPECT_THROW(plan_buckets(floats({1, 2}), BucketCaps{}, {0, 7}), std::invalid_argument);
  std::vector<BucketParam> dup = {{0, 1, 4, "Float", "cpu"}, {0, 1, 4, "Float", "cpu"}};
  EXPECT_THROW(plan_buckets(dup), std::invalid_argument);
}

TEST(BucketPlan, EmptyInputGivesNoBuckets) { EXPECT_TRUE(plan_buckets({}).empty()); }

}  // namespace
}  // namespace ddp
