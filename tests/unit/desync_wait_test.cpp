// HangDetector's desync verdict waits for the ranks that have not reported
// the collective yet, so that it lists every rank (health/desync_check.h),
// and counts what a report overtaken in transit shows. FakeClock only.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "health/hang_detector.h"
#include "health/rank_health.h"
#include "hang_test_config.h"

namespace ddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

/// A rank that finished collectives up to `seq - 1` and waits in `seq`,
/// issued as `op` of `bytes`; `seq` 0: it issued none yet.
RankReport in_collective(int rank, uint64_t seq, const std::string& op, int64_t bytes) {
  RankReport r;
  r.rank = rank;
  r.host = "h";
  r.pid = 100 + rank;
  r.step = 3;
  r.phase = WorkerPhase::kBackward;
  if (seq == 0) return r;
  r.last_enqueued = r.last_started = seq;
  r.last_completed = seq - 1;
  r.recent = {CollectiveSeen{seq - 1, "all_reduce", 4, "float32", "completed", milliseconds(50)},
              CollectiveSeen{seq, op, bytes, "float32", "started", milliseconds(20)}};
  return r;
}

TEST(DesyncWaitTest, TheVerdictWaitsForTheRankWhoseReportOfTheCollectiveIsOnItsWay) {
  // Rank 2 issued #97 as rank 0 did, but its heartbeat saying so comes
  // later than rank 1's: named at once, the desync would leave it out.
  FakeClock clock;
  HangDetector d(short_hang_config(), 3, clock);
  d.on_report(in_collective(2, 96, "all_reduce", 4));
  d.on_report(in_collective(0, 97, "all_reduce", 4));
  d.on_report(in_collective(1, 97, "barrier", 0));
  EXPECT_FALSE(d.check().has_value());
  clock.advance(milliseconds(400));
  EXPECT_FALSE(d.check().has_value());
  d.on_report(in_collective(2, 97, "all_reduce", 4));
  const auto v = d.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_THAT(v->summary, HasSubstr("desync at collective #97: ranks 0,2 all_reduce 4 B float32, rank 1 barrier"));
  EXPECT_EQ(v->culprits, std::vector<int>({1}));
  EXPECT_EQ(v->waiting, std::vector<int>({0, 1, 2}));
}

TEST(DesyncWaitTest, ARankThatNeverReachesTheCollectiveDelaysTheVerdictTwoHeartbeatIntervalsAtMost) {
  FakeClock clock;
  HangDetector d(short_hang_config(), 3, clock);
  d.on_report(in_collective(2, 0, "", 0));  // still in its first forward pass
  d.on_report(in_collective(0, 5, "all_reduce", 4));
  d.on_report(in_collective(1, 5, "broadcast", 4));
  clock.advance(milliseconds(1900));
  d.on_report(in_collective(2, 0, "", 0));
  EXPECT_FALSE(d.check().has_value());
  clock.advance(milliseconds(100));
  const auto v = d.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->summary, HasSubstr("desync at collective #5: rank 0 all_reduce 4 B float32, rank 1 broadcast"));
}

TEST(DesyncWaitTest, RanksThatExitedOrWentPastTheCollectiveAreNotWaitedFor) {
  FakeClock clock;
  HangDetector d(short_hang_config(), 4, clock);
  RankReport past = in_collective(2, 9, "all_reduce", 4);
  past.recent.clear();  // #5 is out of its record: what it issued there is lost
  d.on_report(past);
  d.on_report(in_collective(3, 1, "all_reduce", 4));
  d.on_rank_exited(3);
  d.on_report(in_collective(0, 5, "all_reduce", 4));
  d.on_report(in_collective(1, 5, "all_reduce", 8));
  const auto v = d.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->summary, HasSubstr("desync at collective #5: rank 0 all_reduce 4 B float32, rank 1 all_reduce 8 B"));
}

TEST(DesyncWaitTest, AtAFailureTheDesyncIsNamedWithoutWaiting) {
  FakeClock clock;
  HangDetector d(short_hang_config(), 3, clock);
  d.on_report(in_collective(2, 4, "all_reduce", 4));
  d.on_report(in_collective(0, 5, "all_reduce", 4));
  d.on_report(in_collective(1, 5, "all_reduce", 4000));
  const auto v = d.check_at_once();
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->summary, HasSubstr("rank 0 all_reduce 4 B float32, rank 1 all_reduce 3.9 KiB (4000 B) float32"));
  EXPECT_FALSE(d.check().has_value()) << "a verdict is given once per generation";
}

TEST(DesyncWaitTest, WhatAReportOvertakenInTransitShowsCounts) {
  // The agent's last heartbeat before rank 0 aborted reads as older than the
  // one before it (a faster transit): it is not the rank's latest report, but
  // what it issued as #5 is a fact.
  FakeClock clock;
  HangDetector d(short_hang_config(), 3, clock);
  d.on_report(in_collective(0, 4, "all_reduce", 4));
  d.on_report(in_collective(1, 5, "all_reduce", 4000));
  clock.advance(milliseconds(500));
  d.on_report(in_collective(2, 5, "all_reduce", 4));
  d.on_report(in_collective(0, 4, "all_reduce", 4), milliseconds(10));
  d.on_report(in_collective(0, 5, "all_reduce", 4), milliseconds(12));  // made before the one above
  d.on_rank_exited(0);
  const auto v = d.check_at_once();
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->summary, HasSubstr("desync at collective #5: ranks 0,2 all_reduce 4 B float32, "
                                    "rank 1 all_reduce 3.9 KiB (4000 B) float32"));
  EXPECT_EQ(v->culprits, std::vector<int>({1}));
}

}  // namespace
}  // namespace ddp
