// The per-rank batch: --batch-size as given, or an equal share of
// --global-batch-size, refused with a message that names both numbers when
// the world size does not divide it.
#include "train_options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ddp::train {
namespace {

std::optional<TrainOptions> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "ddptrain");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

TEST(PerRankBatch, IsTheBatchSizeWithoutAGlobalBatch) {
  const auto o = parse({"--batch-size", "12"});
  ASSERT_TRUE(o);
  EXPECT_EQ(per_rank_batch(*o, 1), 12);
  EXPECT_EQ(per_rank_batch(*o, 7), 12);
}

TEST(PerRankBatch, SharesTheGlobalBatchOnAnyWorldSizeThatDividesIt) {
  const auto o = parse({"--global-batch-size", "48", "--grad-accum", "2"});
  ASSERT_TRUE(o);
  EXPECT_EQ(per_rank_batch(*o, 1), 48);
  EXPECT_EQ(per_rank_batch(*o, 3), 16);
  EXPECT_EQ(per_rank_batch(*o, 12), 4);
}

TEST(PerRankBatch, RefusesAWorldSizeThatDoesNotDivideIt) {
  const auto o = parse({"--global-batch-size", "10"});
  ASSERT_TRUE(o);
  try {
    per_rank_batch(*o, 4);
    FAIL() << "accepted 10 samples on 4 ranks";
  } catch (const TrainUsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--global-batch-size 10 is not divisible by the 4 ranks of this run: each rank takes an equal share, "
              "so give a multiple of the world size");
  }
  const auto accum = parse({"--global-batch-size", "12", "--grad-accum", "4"});
  ASSERT_TRUE(accum);
  EXPECT_EQ(per_rank_batch(*accum, 3), 4);
  EXPECT_THROW(per_rank_batch(*accum, 6), TrainUsageError) << "2 samples per rank in 4 micro-batches";
}

TEST(PerRankBatch, TheGlobalBatchExcludesTheRankBatchAndMustBePositive) {
  EXPECT_THROW(parse({"--global-batch-size", "8", "--batch-size", "4"}), TrainUsageError);
  EXPECT_THROW(parse({"--global-batch-size", "-8"}), TrainUsageError);
}

}  // namespace
}  // namespace ddp::train
