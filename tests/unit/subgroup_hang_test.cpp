// HangDetector over Python ranks' subgroup collectives (dist.new_group):
// the blame passes to the member of a group that never entered the
// collective the others wait in (health/subgroup_waits.h), and members that
// issued different signatures as one of its collectives (open, or among their
// last calls there) are a desync. FakeClock only.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "health/hang_detector.h"
#include "health/rank_health.h"
#include "health/subgroup_waits.h"
#include "hang_test_config.h"

namespace ddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

/// A rank that finished the default group's collective `last` and, on the
/// group `name`, entered `entered` of its collectives (the last one open
/// where `open`).
RankReport rank_report(int rank, uint64_t last, WorkerPhase phase, const std::string& name,
                       std::vector<int> members, uint64_t entered, bool open, Duration age = milliseconds(300)) {
  RankReport r;
  r.rank = rank;
  r.host = "h" + std::to_string(rank);
  r.pid = 100 + rank;
  r.step = 7;
  r.phase = phase;
  r.last_enqueued = r.last_started = r.last_completed = last;
  SubgroupProgress g;
  g.group = name;
  g.ranks = std::move(members);
  g.last_enqueued = entered;
  g.last_completed = open ? entered - 1 : entered;
  if (open) g.open = CollectiveSeen{entered, "all_reduce", 12, "float32", "started", age};
  r.subgroups.push_back(std::move(g));
  return r;
}

/// ... also waiting in the default group's collective last + 1.
RankReport in_default(RankReport r, Duration age) {
  r.last_enqueued = r.last_started = r.last_completed + 1;
  r.recent = {CollectiveSeen{r.last_enqueued, "all_reduce", 4096, "float32", "started", age}};
  r.phase = WorkerPhase::kCollective;
  return r;
}

/// Feeds `beat` every second and checks every 100 ms, up to `limit`.
std::optional<std::pair<HangVerdict, Duration>> run(HangDetector& d, FakeClock& clock, Duration limit,
                                                    const std::function<void(int64_t)>& beat) {
  for (Duration t{}; t <= limit; t += milliseconds(100)) {
    if (t % seconds(1) == Duration::zero()) beat(std::chrono::duration_cast<seconds>(t).count());
    if (auto v = d.check()) return std::make_pair(*v, t);
    clock.advance(milliseconds(100));
  }
  return std::nullopt;
}

TEST(SubgroupHangTest, TheMemberThatSkippedTheSubgroupCollectiveIsBlamed) {
  // Groups {0,1} ("1") and {2,3} ("2"). Rank 1 skipped group 1's all_reduce
  // #5: rank 0 waits in it, and ranks 1-3 went on into the default group's
  // all_reduce #21, where rank 0 never arrives.
  FakeClock clock;
  HangDetector d(short_hang_config(), 4, clock);
  const auto v = run(d, clock, seconds(30), [&](int64_t s) {
    const Duration age = seconds(s) + milliseconds(300);   // how long each has waited
    d.on_report(rank_report(0, 20, WorkerPhase::kCollective, "1", {0, 1}, 5, true, age));
    d.on_report(in_default(rank_report(1, 20, WorkerPhase::kOther, "1", {0, 1}, 4, false), age));
    d.on_report(in_default(rank_report(2, 20, WorkerPhase::kOther, "2", {2, 3}, 5, false), age));
    d.on_report(in_default(rank_report(3, 20, WorkerPhase::kOther, "2", {2, 3}, 5, false), age));
  });
  ASSERT_TRUE(v);
  const auto& [verdict, when] = *v;
  EXPECT_GT(when, seconds(3));
  EXPECT_LE(when, seconds(5));
  EXPECT_EQ(verdict.kind, HangKind::kStuckCollective);
  EXPECT_EQ(verdict.culprits, std::vector<int>({1}));
  EXPECT_EQ(verdict.waiting, std::vector<int>({0}));
  EXPECT_EQ(verdict.sequence, 5u);
  EXPECT_EQ(verdict.op, "all_reduce");
  EXPECT_EQ(verdict.group, "1");
  EXPECT_EQ(verdict.group_ranks, std::vector<int>({0, 1}));
  EXPECT_THAT(verdict.summary, HasSubstr("rank 1 (host h1, pid 101, step 7, phase collective) never entered "
                                         "all_reduce #5 (12 B float32) of group 1 (ranks 0,1) that rank 0 has "
                                         "waited in for 3."));
  EXPECT_THAT(verdict.summary, HasSubstr("; meanwhile ranks 1-3 have waited in all_reduce #21 (4.0 KiB float32) for 3."));
  EXPECT_EQ(verdict.details["group"], "1");
  EXPECT_EQ(verdict.details["group_ranks"], nlohmann::json({0, 1}));
  EXPECT_EQ(verdict.details["ranks"][1]["role"], "culprit");
  EXPECT_EQ(verdict.details["ranks"][0]["role"], "waiting");
  // The status and the report show the subgroup's open collective.
  const nlohmann::json& open = verdict.details["ranks"][0]["open_collectives"];
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0]["group"], "1");
  EXPECT_EQ(open[0]["sequence"], 5);
  EXPECT_EQ(open[0]["group_ranks"], nlohmann::json({0, 1}));
  EXPECT_EQ(verdict.details["ranks"][0]["subgroups"][0]["last_completed"], 4);
}

TEST(SubgroupHangTest, AMemberMissingFromTheSubgroupCollectiveThatStillWorksIsBlamedOnlyOnceItStops) {
  // Group "1" of ranks 0 and 1. Rank 0 waits in the group's all_reduce #5,
  // rank 2 in the default group's #21. Rank 1 entered neither: it goes
  // through its phases (a longer evaluation shard) until 10 s, then stops.
  FakeClock clock;
  HangDetector d(short_hang_config(), 3, clock);
  const auto v = run(d, clock, seconds(30), [&](int64_t s) {
    const Duration age = seconds(s) + milliseconds(300);
    d.on_report(rank_report(0, 20, WorkerPhase::kCollective, "1", {0, 1}, 5, true, age));
    RankReport evaluating = rank_report(1, 20, WorkerPhase::kForward, "1", {0, 1}, 4, false);
    evaluating.activity = static_cast<uint64_t>(std::min<int64_t>(s, 10));
    d.on_report(evaluating);
    d.on_report(in_default(rank_report(2, 20, WorkerPhase::kOther, "2", {2}, 1, false), age));
  });
  ASSERT_TRUE(v);
  const auto& [verdict, when] = *v;
  EXPECT_GT(when, seconds(13)) << verdict.summary;
  EXPECT_LE(when, seconds(15));
  EXPECT_EQ(verdict.culprits, std::vector<int>({1}));
  EXPECT_EQ(verdict.waiting, std::vector<int>({0}));
  EXPECT_EQ(verdict.group, "1");
  EXPECT_THAT(verdict.summary, HasSubstr("rank 1 (host h1, pid 101, step 7, phase forward) never entered "
                                         "all_reduce #5 (12 B float32) of group 1 (ranks 0,1)"));
}

TEST(SubgroupHangTest, WithNoDefaultCollectiveOpenTheSubgroupsAreLookedAt) {
  FakeClock clock;
  HangDetector d(short_hang_config(), 2, clock);
  const auto v = run(d, clock, seconds(30), [&](int64_t) {
    d.on_report(rank_report(0, 3, WorkerPhase::kCollective, "pp", {0, 1}, 9, true));
    d.on_report(rank_report(1, 3, WorkerPhase::kData, "pp", {0, 1}, 8, false));
  });
  ASSERT_TRUE(v);
  EXPECT_EQ(v->first.culprits, std::vector<int>({1}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({0}));
  EXPECT_EQ(v->first.group, "pp");
  EXPECT_THAT(v->first.summary, HasSubstr("phase data) never entered all_reduce #9 (12 B float32) of group pp"));
  EXPECT_EQ(v->first.summary.find("meanwhile"), std::string::npos);
}

TEST(SubgroupHangTest, SubgroupCollectivesFinishingAreProgress) {
  // Ranks that only use a subgroup, in and out of its collectives: never stuck.
  FakeClock clock;
  HangDetector d(short_hang_config(), 2, clock);
  const auto v = run(d, clock, seconds(30), [&](int64_t s) {
    const auto n = static_cast<uint64_t>(s) + 1;
    for (int r : {0, 1}) d.on_report(rank_report(r, 3, WorkerPhase::kCollective, "tp", {0, 1}, n, true));
  });
  EXPECT_FALSE(v);
}

TEST(SubgroupHangTest, EveryMemberInTheCollectiveBlamesNoMember) {
  FakeClock clock;
  HangDetector d(short_hang_config(), 2, clock);
  const auto v = run(d, clock, seconds(30), [&](int64_t) {
    for (int r : {0, 1}) d.on_report(rank_report(r, 3, WorkerPhase::kCollective, "tp", {0, 1}, 4, true));
  });
  ASSERT_TRUE(v);
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_TRUE(v->first.group.empty());
  EXPECT_THAT(v->first.summary, HasSubstr("no rank in a collective"));
}

TEST(SubgroupHangTest, MembersWithoutHeartbeatsAreNeverBlamed) {
  const RankReport waiting = rank_report(0, 3, WorkerPhase::kCollective, "g", {0, 1, 2}, 2, true);
  const RankReport behind = rank_report(2, 3, WorkerPhase::kOther, "g", {0, 1, 2}, 1, false);
  std::vector<SubgroupMember> members(3);
  members[0].report = &waiting;
  members[2].report = &behind;  // its last report, though it may have exited since
  const auto w = find_subgroup_wait(members, {0, 1, 2});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->missing, std::vector<int>({2})) << "rank 1 sent no heartbeat; rank 2 never entered it";
  EXPECT_EQ(w->waiting, std::vector<int>({0}));
  EXPECT_EQ(w->collective.sequence, 2u);
  EXPECT_FALSE(find_subgroup_wait(members, {1, 2})) << "only the ranks asked about are looked at";
  members[2].report = nullptr;
  EXPECT_FALSE(find_subgroup_wait(members, {0, 1, 2}));
}

TEST(SubgroupHangTest, DifferentSizesInOneSubgroupCollectiveAreADesync) {
  // Group "3" of ranks 0-2: rank 2 all-reduces 4000 B as the group's #6,
  // ranks 0 and 1 12 B. Rank 3 (no member) goes on meanwhile.
  FakeClock clock;
  HangDetector d(short_hang_config(), 4, clock);
  RankReport odd = rank_report(2, 20, WorkerPhase::kCollective, "3", {0, 1, 2}, 6, true);
  odd.subgroups[0].open->bytes = 4000;
  d.on_report(rank_report(0, 20, WorkerPhase::kCollective, "3", {0, 1, 2}, 6, true));
  d.on_report(odd);
  d.on_report(rank_report(1, 20, WorkerPhase::kCollective, "3", {0, 1, 2}, 6, true));
  d.on_report(rank_report(3, 20, WorkerPhase::kOther, "4", {3}, 2, false));
  const auto v = d.check();
  ASSERT_TRUE(v);
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_EQ(v->sequence, 6u);
  EXPECT_EQ(v->group, "3");
  EXPECT_EQ(v->group_ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v->culprits, (std::vector<int>{2}));
  EXPECT_EQ(v->waiting, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(v->summary, "desync at collective #6 of group 3 (ranks 0-2): ranks 0,1 all_reduce 12 B float32, "
                        "rank 2 all_reduce 3.9 KiB (4000 B) float32");
  EXPECT_EQ(v->details["group_ranks"], nlohmann::json({0, 1, 2}));
}

TEST(SubgroupHangTest, ACompletedSubgroupCollectiveOfAnotherDtypeIsADesync) {
  // Group "1" of ranks 0 and 1: its #31 moved 4 B on both, float32 on rank 0
  // and int32 on rank 1. Gloo completes that (with a wrong sum), so neither
  // has it open: only their last calls there show it. Both are at #33 now.
  FakeClock clock;
  HangDetector d(short_hang_config(), 2, clock);
  auto finished = [](int rank, const std::string& dtype_of_31) {
    RankReport r = rank_report(rank, 90, WorkerPhase::kForward, "1", {0, 1}, 33, false);
    for (uint64_t k = 30; k <= 33; ++k) {
      r.subgroups[0].recent.push_back(
          CollectiveSeen{k, "all_reduce", 4, k == 31 ? dtype_of_31 : "float32", "completed", milliseconds(40)});
    }
    return r;
  };
  d.on_report(finished(0, "float32"));
  EXPECT_FALSE(d.check());   // one member's calls alone are no desync
  d.on_report(finished(1, "int32"));
  const auto v = d.check();
  ASSERT_TRUE(v);
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_EQ(v->sequence, 31u);
  EXPECT_EQ(v->group, "1");
  EXPECT_EQ(v->group_ranks, (std::vector<int>{0, 1}));
  EXPECT_TRUE(v->waiting.empty());   // it completed
  EXPECT_EQ(v->summary, "desync at collective #31 of group 1 (ranks 0,1): rank 0 all_reduce 4 B float32, "
                        "rank 1 all_reduce 4 B int32");
}

TEST(SubgroupHangTest, TheSameNumberInTwoGroupsIsNoDesync) {
  // Each group counts its own collectives: #6 of group "1" and #6 of group
  // "2" are different collectives, whatever their sizes.
  FakeClock clock;
  HangDetector d(short_hang_config(), 4, clock);
  RankReport other = rank_report(2, 20, WorkerPhase::kCollective, "2", {2, 3}, 6, true);
  other.subgroups[0].open->bytes = 4000;
  d.on_report(rank_report(0, 20, WorkerPhase::kCollective, "1", {0, 1}, 6, true));
  d.on_report(other);
  EXPECT_FALSE(d.check());
}

}  // namespace
}  // namespace ddp
