// HangDetector: silent ranks, stuck collectives, desyncs and stragglers,
// driven by FakeClock (no sleeping).

#include "health/hang_detector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "ddp/common/clock.h"
#include "health/rank_health.h"

namespace ddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr Duration kTick = milliseconds(100);

HangConfig test_config() {
  HangConfig c;
  c.hang_timeout = seconds(3);
  c.heartbeat_interval = seconds(1);
  c.trouble.straggler_factor = 3.0;
  c.trouble.straggler_heartbeats = 5;
  return c;
}

RankReport report(int rank, int64_t step, WorkerPhase phase = WorkerPhase::kForward) {
  RankReport r;
  r.rank = rank;
  r.node_rank = rank / 2;
  r.local_rank = rank % 2;
  r.host = "h" + std::to_string(rank);
  r.pid = 100 + rank;
  r.step = step;
  r.phase = phase;
  return r;
}

CollectiveSeen coll(uint64_t seq, std::string op, int64_t bytes, std::string state, Duration age = {},
                    std::string dtype = "float32") {
  CollectiveSeen c;
  c.sequence = seq;
  c.op = std::move(op);
  c.bytes = bytes;
  c.dtype = std::move(dtype);
  c.state = std::move(state);
  c.age = age;
  return c;
}

/// A rank that issued `seq` last (all earlier ones completed), its record `recent`.
RankReport issued(int rank, int64_t step, uint64_t seq, std::vector<CollectiveSeen> recent) {
  RankReport r = report(rank, step);
  r.last_enqueued = seq;
  r.last_completed = seq - 1;
  r.recent = std::move(recent);
  return r;
}

/// A rank waiting in collective `seq` (all earlier ones completed).
RankReport waiting_in(int rank, int64_t step, uint64_t seq, Duration age, std::string op = "all_reduce",
                      int64_t bytes = 4 << 20) {
  RankReport r = report(rank, step, WorkerPhase::kBackward);
  r.last_enqueued = seq;
  r.last_started = seq;
  r.last_completed = seq - 1;
  r.recent = {coll(seq - 1, op, bytes, "completed"), coll(seq, op, bytes, "started", age)};
  return r;
}

/// A rank that completed `last` and has nothing open.
RankReport idle_after(int rank, int64_t step, uint64_t last, WorkerPhase phase) {
  RankReport r = report(rank, step, phase);
  r.last_enqueued = last;
  r.last_started = last;
  r.last_completed = last;
  r.recent = {coll(last, "all_reduce", 4 << 20, "completed")};
  return r;
}

struct Harness {
  explicit Harness(int world, HangConfig config = test_config()) : detector(config, world, clock) {}

  /// Advances in 100 ms ticks for up to `limit`, calling `beat(elapsed)` at
  /// every whole heartbeat interval and check() at every tick. Returns the
  /// first verdict and when it came (since the start).
  std::optional<std::pair<HangVerdict, Duration>> run(Duration limit, const std::function<void(Duration)>& beat) {
    for (Duration t{}; t <= limit; t += kTick) {
      if (t % seconds(1) == Duration::zero()) beat(t);
      if (auto v = detector.check()) return std::make_pair(*v, t);
      clock.advance(kTick);
    }
    return std::nullopt;
  }

  FakeClock clock;
  HangDetector detector;
};

TEST(HangDetectorTest, NamesPhasesAndKinds) {
  EXPECT_STREQ(to_string(WorkerPhase::kUnknown), "unknown");
  EXPECT_STREQ(to_string(WorkerPhase::kData), "data");
  EXPECT_STREQ(to_string(WorkerPhase::kForward), "forward");
  EXPECT_STREQ(to_string(WorkerPhase::kBackward), "backward");
  EXPECT_STREQ(to_string(WorkerPhase::kOptimizer), "optimizer");
  EXPECT_STREQ(to_string(WorkerPhase::kCheckpoint), "checkpoint");
  EXPECT_STREQ(to_string(WorkerPhase::kOther), "other");
  EXPECT_STREQ(to_string(HangKind::kSilentRank), "silent_rank");
  EXPECT_STREQ(to_string(HangKind::kStuckCollective), "stuck_collective");
  EXPECT_STREQ(to_string(HangKind::kDesync), "desync");
}

TEST(HangDetectorTest, NoVerdictWhileProgressContinues) {
  Harness h(4);
  auto v = h.run(seconds(60), [&](Duration t) {
    const auto s = std::chrono::duration_cast<seconds>(t).count();
    for (int r = 0; r < 4; ++r) {
      // Each step is one all_reduce; every rank is in it at the heartbeat.
      h.detector.on_report(waiting_in(r, s, static_cast<uint64_t>(s) + 1, milliseconds(200)));
    }
  });
  EXPECT_FALSE(v.has_value());
  EXPECT_TRUE(h.detector.any_monitored());
}

TEST(HangDetectorTest, StuckCollectiveNamesTheRankThatNeverEnteredIt) {
  Harness h(4);
  auto v = h.run(seconds(30), [&](Duration t) {
    for (int r : {0, 1, 3}) h.detector.on_report(waiting_in(r, 41, 57, milliseconds(100) + t));
    h.detector.on_report(idle_after(2, 41, 56, WorkerPhase::kBackward));
  });
  ASSERT_TRUE(v.has_value());
  const auto& [verdict, when] = *v;
  // Not before the timeout, and within timeout + 2 heartbeat intervals.
  EXPECT_GT(when, seconds(3));
  EXPECT_LE(when, seconds(5));
  EXPECT_EQ(verdict.kind, HangKind::kStuckCollective);
  EXPECT_EQ(verdict.culprits, std::vector<int>({2}));
  EXPECT_EQ(verdict.waiting, std::vector<int>({0, 1, 3}));
  EXPECT_EQ(verdict.sequence, 57u);
  EXPECT_EQ(verdict.op, "all_reduce");
  EXPECT_THAT(verdict.summary,
              HasSubstr("rank 2 (host h2, pid 102, step 41, phase backward) never entered all_reduce #57 "
                        "(4.0 MiB float32) that ranks 0,1,3 have waited in for 3."));
  EXPECT_EQ(verdict.summary.find('\n'), std::string::npos);

  const nlohmann::json& d = verdict.details;
  EXPECT_EQ(d["kind"], "stuck_collective");
  EXPECT_EQ(d["sequence"], 57);
  EXPECT_EQ(d["culprits"], nlohmann::json({2}));
  EXPECT_EQ(d["waiting"], nlohmann::json({0, 1, 3}));
  EXPECT_EQ(d["summary"], verdict.summary);
  ASSERT_EQ(d["ranks"].size(), 4u);
  EXPECT_EQ(d["ranks"][2]["role"], "culprit");
  EXPECT_EQ(d["ranks"][2]["host"], "h2");
  EXPECT_EQ(d["ranks"][2]["pid"], 102);
  EXPECT_EQ(d["ranks"][2]["phase"], "backward");
  EXPECT_EQ(d["ranks"][2]["last_completed"], 56);
  EXPECT_TRUE(d["ranks"][2]["open_collectives"].empty());
  EXPECT_EQ(d["ranks"][0]["role"], "waiting");
  ASSERT_EQ(d["ranks"][0]["open_collectives"].size(), 1u);
  EXPECT_EQ(d["ranks"][0]["open_collectives"][0]["sequence"], 57);
  EXPECT_EQ(d["ranks"][0]["open_collectives"][0]["op"], "all_reduce");
  EXPECT_EQ(d["ranks"][0]["open_collectives"][0]["bytes"], 4 << 20);
  EXPECT_EQ(d["ranks"][0]["open_collectives"][0]["state"], "started");
  EXPECT_GT(d["ranks"][0]["open_collectives"][0]["age_s"].get<double>(), 3.0);

  // Returned once per generation.
  EXPECT_FALSE(h.detector.check().has_value());
  ASSERT_TRUE(h.detector.last_verdict().has_value());
  EXPECT_EQ(h.detector.last_verdict()->culprits, std::vector<int>({2}));
}

TEST(HangDetectorTest, NoVerdictJustBeforeTheTimeoutAndOneJustAfter) {
  Harness h(2);
  auto beat = [&](Duration t) {
    h.detector.on_report(waiting_in(0, 7, 9, t));
    h.detector.on_report(idle_after(1, 7, 8, WorkerPhase::kData));
  };
  beat(Duration::zero());  // the last progress
  h.clock.advance(seconds(1));
  beat(seconds(1));
  h.clock.advance(seconds(1));
  beat(seconds(2));
  h.clock.advance(seconds(1));  // exactly the timeout
  beat(seconds(3));
  EXPECT_FALSE(h.detector.check().has_value());
  h.clock.advance(milliseconds(1));
  auto v = h.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kStuckCollective);
  EXPECT_EQ(v->culprits, std::vector<int>({1}));
  EXPECT_EQ(v->waiting, std::vector<int>({0}));
  EXPECT_THAT(v->summary, HasSubstr("that rank 0 has waited in for 3.0 s"));
}

TEST(HangDetectorTest, StuckCollectiveWithEveryRankInItBlamesNoRank) {
  Harness h(4);
  auto v = h.run(seconds(30), [&](Duration t) {
    for (int r = 0; r < 4; ++r) h.detector.on_report(waiting_in(r, 3, 9, t, "all_gather", 1536));
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_EQ(v->first.waiting, std::vector<int>({0, 1, 2, 3}));
  EXPECT_EQ(v->first.sequence, 9u);
  EXPECT_THAT(v->first.summary, HasSubstr("all ranks (0-3) have waited in all_gather #9 (1.5 KiB float32)"));
  EXPECT_THAT(v->first.summary, HasSubstr("transport"));
}

TEST(HangDetectorTest, NoProgressWithNoRankInACollective) {
  Harness h(2);
  auto v = h.run(seconds(30), [&](Duration) {
    h.detector.on_report(idle_after(0, 5, 10, WorkerPhase::kData));
    h.detector.on_report(idle_after(1, 5, 10, WorkerPhase::kCheckpoint));
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_EQ(v->first.sequence, 0u);
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_TRUE(v->first.waiting.empty());
  EXPECT_THAT(v->first.summary, HasSubstr("no progress for 3.1 s"));
  EXPECT_THAT(v->first.summary,
              HasSubstr("no rank in a collective: rank 0 step 5 phase data, rank 1 step 5 phase checkpoint"));
}

// An evaluation pass: no step, no collective, but every rank goes through
// its phases (batches, forwards). Not a hang for as long as that goes on;
// once the phases stop, the verdict comes one hang timeout later.
TEST(HangDetectorTest, RanksStillGoingThroughTheirPhasesOutsideCollectivesAreNotStuck) {
  Harness h(2);
  const Duration evaluation = seconds(20);
  auto v = h.run(seconds(60), [&](Duration t) {
    for (int r = 0; r < 2; ++r) {
      RankReport rep = idle_after(r, 5, 10, WorkerPhase::kForward);
      rep.activity = static_cast<uint64_t>(std::chrono::duration_cast<seconds>(std::min(t, evaluation)).count());
      h.detector.on_report(rep);
    }
  });
  ASSERT_TRUE(v.has_value()) << "the phases stopped at 20 s";
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_GT(v->second, evaluation + test_config().hang_timeout) << "not while they went on";
  EXPECT_LE(v->second, evaluation + test_config().hang_timeout + seconds(1));
  EXPECT_THAT(v->first.summary, HasSubstr("no rank in a collective"));
}

// Ranks 0 and 1 wait in the all_reduce after evaluation; rank 2's shard is
// longer and it still goes through batches: it is on its way, not the
// culprit, until its phases stop.
TEST(HangDetectorTest, ARankMissingFromACollectiveIsBlamedOnlyOnceItStopsGoingThroughItsPhases) {
  Harness h(3);
  const Duration longer_shard = seconds(15);
  auto v = h.run(seconds(60), [&](Duration t) {
    for (int r : {0, 1}) h.detector.on_report(waiting_in(r, 41, 57, milliseconds(100) + t));
    RankReport slow = idle_after(2, 41, 56, WorkerPhase::kData);
    slow.activity = static_cast<uint64_t>(std::chrono::duration_cast<seconds>(std::min(t, longer_shard)).count());
    h.detector.on_report(slow);
  });
  ASSERT_TRUE(v.has_value()) << "rank 2's phases stopped at 15 s";
  EXPECT_GT(v->second, longer_shard + test_config().hang_timeout);
  EXPECT_LE(v->second, longer_shard + test_config().hang_timeout + seconds(1));
  EXPECT_EQ(v->first.culprits, std::vector<int>({2}));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 2 (host h2, pid 102, step 41, phase data) never entered all_reduce #57"));
}

/// The agent's sample of a rank's process: `written` bytes so far (wchar),
/// `dirtied` (write_bytes), `pid` 100 + rank.
RankReport resources_of(int rank, uint64_t written, uint64_t dirtied = 0) {
  RankReport r;
  r.rank = rank;
  r.pid = 100 + rank;
  r.resources_only = true;
  r.resources = RankResources{};
  r.resources->pid = 100 + rank;
  r.resources->written_bytes = written;
  r.resources->dirtied_bytes = dirtied;
  return r;
}

// torch.save writes a tensor with the GIL held: a rank saving a big
// checkpoint to slow storage sends no heartbeat, its last one saying
// "checkpoint", while the others wait in a collective. Its process's writes go
// on: not silent, and not stuck, until they stop.
TEST(HangDetectorTest, ARankSavingACheckpointIsNeitherSilentNorStuckWhileItsWritesGoOn) {
  Harness h(3);
  const Duration writes_stop = seconds(20);
  uint64_t written = 0;
  auto v = h.run(seconds(60), [&](Duration t) {
    for (int r : {0, 1}) h.detector.on_report(waiting_in(r, 41, 57, milliseconds(100) + t));
    if (t == Duration::zero()) h.detector.on_report(idle_after(2, 41, 56, WorkerPhase::kCheckpoint));
    if (t <= writes_stop) written += 64 << 20;   // the agent samples the process, heartbeats or not
    h.detector.on_report(resources_of(2, written));
  });
  ASSERT_TRUE(v.has_value()) << "its writes stopped at 20 s";
  EXPECT_GT(v->second, writes_stop + test_config().hang_timeout);
  EXPECT_LE(v->second, writes_stop + test_config().hang_timeout + seconds(1));
  EXPECT_EQ(v->first.kind, HangKind::kSilentRank);
  EXPECT_EQ(v->first.culprits, std::vector<int>({2}));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 2 (host h2, pid 102, step 41, phase checkpoint) sent no heartbeat"));
}

/// Rank 0 waits in #57; rank 1 last reported at t = 0 in `phase`, outside
/// it; then the agent's sample of rank 1's process every second,
/// `sample_at(t)`. The first verdict within `limit`, if any.
std::optional<std::pair<HangVerdict, Duration>> one_waits_one_sampled(
    Harness& h, WorkerPhase phase, Duration limit, const std::function<RankReport(Duration)>& sample_at) {
  return h.run(limit, [&](Duration t) {
    h.detector.on_report(waiting_in(0, 41, 57, milliseconds(100) + t));
    if (t == Duration::zero()) h.detector.on_report(idle_after(1, 41, 56, phase));
    h.detector.on_report(sample_at(t));
  });
}

// One write() of a big tensor into the page cache moves wchar only when it
// returns (2 GiB at most at once); the pages it dirties count as it goes.
TEST(HangDetectorTest, PagesDirtiedCountAsWritesWhileOneBigWriteGoesOn) {
  Harness h(2);
  uint64_t dirtied = 0;
  auto v = one_waits_one_sampled(h, WorkerPhase::kCheckpoint, seconds(12),
                                 [&](Duration) { return resources_of(1, 2048, dirtied += 512 << 20); });
  EXPECT_FALSE(v.has_value()) << v->first.summary;
}

// torch.save checksums a big tensor before it writes a byte of it: seconds
// of CPU and no write. A process that neither writes nor computes (blocked on
// storage) is not saving.
TEST(HangDetectorTest, AProcessBusyOnACoreCountsAsSavingWithoutWrites) {
  Harness h(2);
  const Duration busy_until = seconds(8);
  auto v = one_waits_one_sampled(h, WorkerPhase::kCheckpoint, seconds(30), [&](Duration t) {
    RankReport sample = resources_of(1, 2048);
    sample.resources->cpu_percent = t <= busy_until ? 99.5 : 0.5;
    return sample;
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kSilentRank);
  EXPECT_GT(v->second, busy_until + test_config().hang_timeout);
  EXPECT_LE(v->second, busy_until + test_config().hang_timeout + seconds(1));
}

// Writes count only in the checkpoint phase: a rank silent elsewhere is
// silent whatever its process writes (a thread of it logging, say), and one
// saving with heartbeats whose writes stopped is blamed as before.
TEST(HangDetectorTest, WritesCountOnlyForARankInTheCheckpointPhase) {
  {
    Harness h(2);
    uint64_t written = 0;
    auto v = one_waits_one_sampled(h, WorkerPhase::kData, seconds(30),
                                   [&](Duration) { return resources_of(1, written += 4096); });
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->first.kind, HangKind::kSilentRank);
    EXPECT_LE(v->second, test_config().hang_timeout + seconds(1));
  }
  {
    Harness h(2);
    auto v = h.run(seconds(30), [&](Duration t) {
      h.detector.on_report(waiting_in(0, 41, 57, milliseconds(100) + t));
      h.detector.on_report(idle_after(1, 41, 56, WorkerPhase::kCheckpoint));
      h.detector.on_report(resources_of(1, 1 << 20));   // nothing written since the first sample
    });
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
    EXPECT_EQ(v->first.culprits, std::vector<int>({1}));
    EXPECT_LE(v->second, test_config().hang_timeout + seconds(1));
  }
}

// The counter alone is no progress: a rank that goes through phases does not
// hide that the others are stuck among themselves.
TEST(HangDetectorTest, ARankGoingThroughItsPhasesDoesNotHideAStuckCollectiveItEntered) {
  Harness h(3);
  auto v = h.run(seconds(30), [&](Duration t) {
    for (int r : {0, 1}) h.detector.on_report(waiting_in(r, 41, 57, milliseconds(100) + t));
    RankReport past = idle_after(2, 41, 57, WorkerPhase::kForward);   // it passed #57 (async) and works on
    past.activity = static_cast<uint64_t>(std::chrono::duration_cast<seconds>(t).count());
    h.detector.on_report(past);
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_LE(v->second, test_config().hang_timeout + seconds(1));
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_THAT(v->first.summary, HasSubstr("no rank is missing from it"));
}

TEST(HangDetectorTest, SilentRankIsNamedWithinTimeoutPlusTwoIntervals) {
  Harness h(3);
  const Duration last_beat = seconds(2);
  auto v = h.run(seconds(30), [&](Duration t) {
    const auto s = std::chrono::duration_cast<seconds>(t).count();
    h.detector.on_report(idle_after(0, s, static_cast<uint64_t>(s), WorkerPhase::kForward));
    if (t <= last_beat) h.detector.on_report(idle_after(1, s, static_cast<uint64_t>(s), WorkerPhase::kOptimizer));
    h.detector.on_report(idle_after(2, s, static_cast<uint64_t>(s), WorkerPhase::kForward));
  });
  ASSERT_TRUE(v.has_value());
  const auto& [verdict, when] = *v;
  EXPECT_GT(when - last_beat, seconds(3));
  EXPECT_LE(when - last_beat, seconds(3) + 2 * seconds(1));
  EXPECT_EQ(verdict.kind, HangKind::kSilentRank);
  EXPECT_EQ(verdict.culprits, std::vector<int>({1}));
  EXPECT_TRUE(verdict.waiting.empty());
  EXPECT_EQ(verdict.sequence, 0u);
  EXPECT_THAT(verdict.summary,
              HasSubstr("rank 1 (host h1, pid 101, step 2, phase optimizer) sent no heartbeat for 3.1 s"));
  EXPECT_EQ(verdict.details["kind"], "silent_rank");
  EXPECT_EQ(verdict.details["ranks"][1]["role"], "culprit");
  EXPECT_GT(verdict.details["ranks"][1]["heartbeat_age_s"].get<double>(), 3.0);
  EXPECT_LT(verdict.details["ranks"][0]["heartbeat_age_s"].get<double>(), 1.0);
}

TEST(HangDetectorTest, SilentRankReportsWhatTheOthersWaitIn) {
  Harness h(3);
  auto v = h.run(seconds(30), [&](Duration t) {
    h.detector.on_report(waiting_in(0, 12, 12, t));
    h.detector.on_report(waiting_in(2, 12, 12, t));
    if (t == Duration::zero()) h.detector.on_report(idle_after(1, 12, 11, WorkerPhase::kForward));
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kSilentRank);  // before the stuck collective
  EXPECT_EQ(v->first.culprits, std::vector<int>({1}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({0, 2}));
  EXPECT_EQ(v->first.sequence, 12u);
  EXPECT_EQ(v->first.op, "all_reduce");
  EXPECT_THAT(v->first.summary, HasSubstr("(hang timeout 3.0 s); ranks 0,2 have waited in all_reduce #12"));
}

TEST(HangDetectorTest, HeartbeatAgeCounts) {
  Harness h(1);
  h.detector.on_report(idle_after(0, 1, 1, WorkerPhase::kForward), seconds(2));  // held 2 s by the agent
  h.clock.advance(seconds(1));
  EXPECT_FALSE(h.detector.check().has_value());
  h.clock.advance(milliseconds(1));
  auto v = h.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kSilentRank);
  EXPECT_EQ(v->culprits, std::vector<int>({0}));
}

TEST(HangDetectorTest, UnmonitoredRanksAreNeverBlamed) {
  Harness h(4);
  // Ranks 2 and 3 are plain scripts without the runtime: they never report.
  auto v = h.run(seconds(30), [&](Duration t) {
    h.detector.on_report(waiting_in(0, 4, 5, t));
    h.detector.on_report(waiting_in(1, 4, 5, t));
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_EQ(v->first.waiting, std::vector<int>({0, 1}));
  EXPECT_THAT(v->first.summary, HasSubstr("all monitored ranks (0,1) have waited in all_reduce #5"));
  EXPECT_THAT(v->first.summary, HasSubstr("ranks 2,3 send no heartbeats (supervised by process state only)"));
  const nlohmann::json& r2 = v->first.details["ranks"][2];
  EXPECT_EQ(r2["monitored"], false);
  EXPECT_EQ(r2["note"], "no runtime heartbeats: supervised by process state only");
  EXPECT_FALSE(r2.contains("role"));
}

TEST(HangDetectorTest, NoRankMonitoredMeansNoVerdictEver) {
  Harness h(2);
  auto v = h.run(seconds(1000), [](Duration) {});
  EXPECT_FALSE(v.has_value());
  EXPECT_FALSE(h.detector.any_monitored());
}

TEST(HangDetectorTest, ProgramsWithoutStepsOrCollectivesAreNotCalledStuck) {
  Harness h(2);
  auto v = h.run(seconds(30), [&](Duration) {
    h.detector.on_report(report(0, -1, WorkerPhase::kUnknown));
    h.detector.on_report(report(1, -1, WorkerPhase::kUnknown));
  });
  EXPECT_FALSE(v.has_value());
}

TEST(HangDetectorTest, ExitedRankIsNotSilentButCanBeTheCulprit) {
  Harness h(3);
  auto v = h.run(seconds(2), [&](Duration t) {
    const auto s = std::chrono::duration_cast<seconds>(t).count();
    for (int r = 0; r < 3; ++r) h.detector.on_report(idle_after(r, s, static_cast<uint64_t>(s), WorkerPhase::kForward));
  });
  ASSERT_FALSE(v.has_value());
  h.detector.on_rank_exited(2);  // finished early, at step 2 after collective #2
  v = h.run(seconds(30), [&](Duration t) {
    h.detector.on_report(waiting_in(0, 3, 3, t));
    h.detector.on_report(waiting_in(1, 3, 3, t));
    h.detector.on_report(idle_after(2, 99, 99, WorkerPhase::kForward));  // late report: ignored
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_EQ(v->first.culprits, std::vector<int>({2}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({0, 1}));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 2 (host h2, pid 102, step 2, phase forward, exited) never entered"));
}

TEST(HangDetectorTest, DesyncIsReportedAtOnce) {
  Harness h(2);
  RankReport r0 = report(0, 3);
  r0.last_enqueued = 12;
  r0.last_completed = 11;
  r0.recent = {coll(11, "all_reduce", 4096, "completed"), coll(12, "all_reduce", 4096, "started")};
  RankReport r1 = r0;
  r1.rank = 1;
  r1.host = "h1";
  r1.pid = 101;
  r1.recent = {coll(11, "all_reduce", 4096, "completed"), coll(12, "broadcast", 4096, "started")};
  h.detector.on_report(r0);
  EXPECT_FALSE(h.detector.check().has_value());
  h.detector.on_report(r1);
  auto v = h.detector.check();  // no time has passed
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_EQ(v->sequence, 12u);
  EXPECT_EQ(v->culprits, std::vector<int>({0, 1}));  // no majority: both named
  EXPECT_EQ(v->waiting, std::vector<int>({0, 1}));
  EXPECT_THAT(v->summary,
              HasSubstr("collective #12: rank 0 all_reduce 4.0 KiB float32, rank 1 broadcast 4.0 KiB float32"));
  EXPECT_EQ(v->details["kind"], "desync");
}

TEST(HangDetectorTest, DesyncBlamesTheMinorityAndShowsExactSizes) {
  Harness h(3);
  // Rank 0 reports #12 first; by the time rank 1 reports it, rank 0's record
  // has moved on: the detector still remembers what rank 0 issued.
  RankReport r0 = report(0, 3);
  r0.last_enqueued = 12;
  r0.last_completed = 11;
  r0.recent = {coll(12, "all_reduce", 4096, "started")};
  h.detector.on_report(r0);
  h.clock.advance(seconds(1));
  r0.last_completed = 13;
  r0.last_enqueued = 13;
  r0.recent = {coll(13, "all_reduce", 4096, "completed")};
  h.detector.on_report(r0);
  h.detector.on_report(issued(2, 3, 12, {coll(12, "all_reduce", 4096, "started")}));
  EXPECT_FALSE(h.detector.check().has_value());
  h.detector.on_report(issued(1, 3, 12, {coll(12, "all_reduce", 4100, "started")}));
  auto v = h.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_EQ(v->culprits, std::vector<int>({1}));
  EXPECT_EQ(v->op, "all_reduce");
  EXPECT_THAT(v->summary, HasSubstr("collective #12: ranks 0,2 all_reduce 4.0 KiB (4096 B) float32, "
                                    "rank 1 all_reduce 4.0 KiB (4100 B) float32"));
}

TEST(HangDetectorTest, DtypeMismatchIsADesync) {
  Harness h(2);
  RankReport r0 = report(0, 1);
  r0.last_enqueued = 1;
  r0.recent = {coll(1, "all_reduce", 64, "enqueued", {}, "float32")};
  RankReport r1 = report(1, 1);
  r1.last_enqueued = 1;
  r1.recent = {coll(1, "all_reduce", 64, "enqueued", {}, "bfloat16")};
  h.detector.on_report(r0);
  h.detector.on_report(r1);
  auto v = h.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_THAT(v->summary, HasSubstr("rank 0 all_reduce 64 B float32, rank 1 all_reduce 64 B bfloat16"));
}

TEST(HangDetectorTest, AnUnobservedOpMatchesAnyOp) {
  // A Python rank sees DDP's bucket all-reduce only as a sequence number; it
  // labels it by the phase it passed in, which differs between ranks with the
  // moment of the heartbeat. "unknown" is no evidence of a different call.
  Harness h(2);
  RankReport r0 = report(0, 1);
  r0.last_enqueued = 7;
  r0.recent = {coll(7, "unknown", 0, "completed")};
  RankReport r1 = report(1, 1);
  r1.last_enqueued = 7;
  r1.recent = {coll(7, "all_reduce", 0, "completed")};
  h.detector.on_report(r0);
  h.detector.on_report(r1);
  EXPECT_FALSE(h.detector.check().has_value());
  r1.recent = {coll(7, "broadcast", 0, "completed")};  // two observed ops that differ still do
  r0.recent = {coll(7, "all_reduce", 0, "completed")};
  Harness h2(2);
  h2.detector.on_report(r0);
  h2.detector.on_report(r1);
  auto v = h2.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
}

TEST(HangDetectorTest, WhatARankLearnsLaterOfACollectiveIsComparedToo) {
  // Rank 0 is first seen inside a coalesced block whose bytes it does not know
  // yet (0: unknown); its next report has them. Rank 1's block of another size
  // is then a desync, whichever report of rank 0 came first.
  Harness h(2);
  h.detector.on_report(issued(0, 1, 5, {coll(5, "all_reduce", 0, "started")}));
  h.detector.on_report(issued(0, 1, 5, {coll(5, "all_reduce", 32, "started")}));
  EXPECT_FALSE(h.detector.check().has_value());
  h.detector.on_report(issued(1, 1, 5, {coll(5, "all_reduce", 28, "started")}));
  auto v = h.detector.check();
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->kind, HangKind::kDesync);
  EXPECT_THAT(v->summary, HasSubstr("collective #5: rank 0 all_reduce 32 B float32, rank 1 all_reduce 28 B float32"));

  // What a rank said it knew is kept: a later report without it changes nothing.
  Harness h2(2);
  h2.detector.on_report(issued(0, 1, 5, {coll(5, "all_reduce", 32, "started")}));
  h2.detector.on_report(issued(0, 1, 5, {coll(5, "unknown", 0, "started")}));
  h2.detector.on_report(issued(1, 1, 5, {coll(5, "all_reduce", 32, "started")}));
  EXPECT_FALSE(h2.detector.check().has_value());
}

TEST(HangDetectorTest, ResetForgetsEverything) {
  Harness h(2);
  auto v = h.run(seconds(30), [&](Duration t) {
    h.detector.on_report(waiting_in(0, 4, 5, t));
    h.detector.on_report(idle_after(1, 4, 4, WorkerPhase::kData));
  });
  ASSERT_TRUE(v.has_value());
  h.detector.reset(3);
  EXPECT_EQ(h.detector.world_size(), 3);
  EXPECT_FALSE(h.detector.any_monitored());
  EXPECT_FALSE(h.detector.last_verdict().has_value());
  EXPECT_FALSE(h.detector.check().has_value());
  const nlohmann::json snap = h.detector.snapshot();
  ASSERT_EQ(snap["ranks"].size(), 3u);
  for (const auto& r : snap["ranks"]) EXPECT_EQ(r["monitored"], false);
  // The new generation is watched afresh.
  h.clock.advance(seconds(100));
  EXPECT_FALSE(h.detector.check().has_value());
  v = h.run(seconds(30), [&](Duration t) {
    if (t == Duration::zero()) h.detector.on_report(idle_after(2, 0, 0, WorkerPhase::kData));
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kSilentRank);
  EXPECT_EQ(v->first.culprits, std::vector<int>({2}));
}

TEST(HangDetectorTest, StragglerIsWarnedOnce) {
  Harness h(4);
  std::vector<TroubleWarning> warnings;
  auto step = [&](int64_t s, double slow) {
    h.clock.advance(seconds(1));
    for (int r = 0; r < 4; ++r) {
      RankReport rep = idle_after(r, s, static_cast<uint64_t>(s), WorkerPhase::kForward);
      rep.step_seconds = r == 3 ? slow : 1.0;
      h.detector.on_report(rep);
    }
    for (TroubleWarning& w : h.detector.take_warnings()) warnings.push_back(std::move(w));
  };
  step(1, 4.0);
  step(2, 4.0);
  step(3, 1.0);  // a normal step breaks the run
  for (int64_t s = 4; s < 8; ++s) step(s, 4.0);
  // The same step again is not a new step.
  step(7, 4.0);
  EXPECT_TRUE(warnings.empty());
  step(8, 4.0);  // the fifth consecutive slow step
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].kind, TroubleKind::kStraggler);
  EXPECT_EQ(warnings[0].rank, 3);
  EXPECT_DOUBLE_EQ(warnings[0].value, 4.0);
  EXPECT_DOUBLE_EQ(warnings[0].others, 1.0);
  EXPECT_THAT(warnings[0].summary, HasSubstr("rank 3 (host h3, pid 103) is a straggler"));
  EXPECT_THAT(warnings[0].summary, HasSubstr("4.00 s"));
  EXPECT_THAT(warnings[0].summary, HasSubstr("its heartbeats found it in phase forward 100% of the time"));
  for (int64_t s = 9; s < 30; ++s) step(s, 4.0);
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_FALSE(h.detector.check().has_value());  // a warning, never a verdict
  // The health view lists it, and the rank's entry names its kind.
  const nlohmann::json snap = h.detector.snapshot();
  EXPECT_EQ(snap["warnings_total"], 1);
  ASSERT_EQ(snap["warnings"].size(), 1u);
  EXPECT_EQ(snap["warnings"][0]["kind"], "straggler");
  EXPECT_EQ(snap["warnings"][0]["rank"], 3);
  EXPECT_EQ(snap["ranks"][3]["warnings"], nlohmann::json::parse(R"([{"kind":"straggler"}])"));
  EXPECT_FALSE(snap["ranks"][0].contains("warnings"));
}

// A hang report keeps the warnings given before it.
TEST(HangDetectorTest, TheHangReportCarriesTheWarningsGivenBefore) {
  Harness h(2);
  RankReport full = idle_after(0, 1, 1, WorkerPhase::kForward);
  GpuResources gpu;
  gpu.index = 1;
  gpu.mem_used_bytes = 79ull << 30;
  gpu.mem_total_bytes = 80ull << 30;
  full.resources = RankResources{};
  full.resources->gpus = {gpu};
  h.detector.on_report(full);
  h.detector.on_report(idle_after(1, 1, 1, WorkerPhase::kForward));
  const std::vector<TroubleWarning> given = h.detector.take_warnings();
  ASSERT_EQ(given.size(), 1u);
  EXPECT_EQ(given[0].kind, TroubleKind::kMemoryFull);
  auto v = h.run(seconds(30), [&](Duration t) {
    if (t == Duration::zero()) h.detector.on_report(idle_after(1, 2, 1, WorkerPhase::kForward));
  });
  ASSERT_TRUE(v.has_value());
  ASSERT_TRUE(v->first.details.contains("warnings")) << v->first.details.dump(2);
  EXPECT_EQ(v->first.details["warnings"][0]["kind"], "memory_full");
  EXPECT_EQ(v->first.details["warnings"][0]["gpu"], 1);
  EXPECT_EQ(v->first.details["warnings"][0]["rank"], 0);
}

// In lock-step training every rank's step lasts as long as the slowest's; the
// busy time (the step less its waits for the others) tells the straggler.
TEST(HangDetectorTest, StragglerIsFoundByBusyTimeWhenStepTimesAreEqual) {
  Harness h(3);
  std::vector<TroubleWarning> warnings;
  for (int64_t s = 1; s <= 5; ++s) {
    for (int r = 0; r < 3; ++r) {
      RankReport rep = idle_after(r, s, static_cast<uint64_t>(s), WorkerPhase::kForward);
      rep.step_seconds = 0.35;                  // equal everywhere
      rep.busy_seconds = r == 1 ? 0.34 : 0.05;  // the others wait for rank 1
      h.detector.on_report(rep);
    }
    for (TroubleWarning& w : h.detector.take_warnings()) warnings.push_back(std::move(w));
  }
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rank, 1);
  EXPECT_DOUBLE_EQ(warnings[0].value, 0.34);
  EXPECT_DOUBLE_EQ(warnings[0].others, 0.05);
  EXPECT_THAT(warnings[0].summary, HasSubstr("busy 0.34 s per step, the others 50.0 ms (median)"));
}

TEST(HangDetectorTest, KeepsTheFastestStepTimeOfTheGenerationForChoosingAStopStep) {
  Harness h(2);
  EXPECT_EQ(h.detector.fastest_step_seconds(), 0);  // none reported yet
  RankReport r0 = report(0, 40);
  r0.step_seconds = 0.25;
  h.detector.on_report(r0);
  RankReport r1 = report(1, 40);  // no step time (0): not the fastest
  h.detector.on_report(r1);
  EXPECT_DOUBLE_EQ(h.detector.fastest_step_seconds(), 0.25);
  // A later, slower step (an evaluation in it) does not replace it.
  h.clock.advance(seconds(1));
  r0.step = 41;
  r0.step_seconds = 60;
  h.detector.on_report(r0);
  EXPECT_DOUBLE_EQ(h.detector.fastest_step_seconds(), 0.25);
  r1.step = 41;
  r1.step_seconds = 0.125;
  h.detector.on_report(r1);
  EXPECT_DOUBLE_EQ(h.detector.fastest_step_seconds(), 0.125);
  h.detector.reset(2);  // a new generation measures its own
  EXPECT_EQ(h.detector.fastest_step_seconds(), 0);
}

TEST(HangDetectorTest, SnapshotShowsEveryRank) {
  Harness h(3);
  RankReport r0 = waiting_in(0, 41, 57, milliseconds(500));
  r0.step_seconds = 0.25;
  h.detector.on_report(r0, milliseconds(200));
  h.detector.on_report(idle_after(1, 41, 56, WorkerPhase::kData));
  h.clock.advance(seconds(1));
  const nlohmann::json s = h.detector.snapshot();
  EXPECT_EQ(s["world_size"], 3);
  EXPECT_EQ(s["monitored_ranks"], 2);
  EXPECT_DOUBLE_EQ(s["hang_timeout_s"].get<double>(), 3.0);
  ASSERT_EQ(s["ranks"].size(), 3u);
  const nlohmann::json& a = s["ranks"][0];
  EXPECT_EQ(a["rank"], 0);
  EXPECT_EQ(a["monitored"], true);
  EXPECT_EQ(a["node"], 0);
  EXPECT_EQ(a["local_rank"], 0);
  EXPECT_EQ(a["host"], "h0");
  EXPECT_EQ(a["pid"], 100);
  EXPECT_EQ(a["step"], 41);
  EXPECT_EQ(a["phase"], "backward");
  EXPECT_DOUBLE_EQ(a["step_seconds"].get<double>(), 0.25);
  EXPECT_NEAR(a["heartbeat_age_s"].get<double>(), 1.2, 1e-9);
  EXPECT_EQ(a["last_enqueued"], 57);
  EXPECT_EQ(a["last_started"], 57);
  EXPECT_EQ(a["last_completed"], 56);
  ASSERT_EQ(a["open_collectives"].size(), 1u);
  EXPECT_EQ(a["open_collectives"][0]["sequence"], 57);
  EXPECT_EQ(a["open_collectives"][0]["dtype"], "float32");
  EXPECT_NEAR(a["open_collectives"][0]["age_s"].get<double>(), 1.7, 1e-9);
  EXPECT_NEAR(s["ranks"][1]["heartbeat_age_s"].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(s["ranks"][2]["monitored"], false);
  EXPECT_EQ(s["ranks"][2]["note"], "no runtime heartbeats: supervised by process state only");
}

// CoordinatorJob copies the view under its mutex and formats it after: the
// copy must show the ranks as they were, whatever arrives in between.
TEST(HangDetectorTest, AViewCopiedEarlierIsFormattedAsItWasWhateverCameLater) {
  Harness h(2);
  RankReport r0 = waiting_in(0, 41, 57, milliseconds(500));
  r0.resources = RankResources{};
  r0.resources->pid = 100;
  r0.resources->cpu_percent = 50.0;
  h.detector.on_report(r0);
  h.clock.advance(seconds(1));
  const HealthView view = h.detector.view();
  const nlohmann::json then = h.detector.snapshot();
  EXPECT_EQ(health_view_json(view), then);

  RankReport later = report(0, 42);
  later.resources = RankResources{};
  later.resources->pid = 100;
  later.resources->cpu_percent = 99.0;
  h.detector.on_report(later);
  h.detector.on_report(report(1, 42));
  h.detector.on_rank_exited(1);
  h.clock.advance(seconds(5));
  EXPECT_EQ(health_view_json(view), then);
  EXPECT_EQ(then["ranks"][0]["step"], 41);
  EXPECT_EQ(then["ranks"][0]["resources"]["cpu_percent"], 50.0);
  EXPECT_EQ(then["ranks"][1]["monitored"], false);
  const nlohmann::json now = h.detector.snapshot();
  EXPECT_EQ(now["ranks"][0]["step"], 42);
  EXPECT_EQ(now["ranks"][0]["resources"]["cpu_percent"], 99.0);
  EXPECT_EQ(now["ranks"][1]["exited"], true);
}

TEST(HangDetectorTest, IgnoresReportsForUnknownRanks) {
  Harness h(2);
  h.detector.on_report(report(5, 1));
  h.detector.on_report(report(-1, 1));
  EXPECT_FALSE(h.detector.any_monitored());
}

}  // namespace
}  // namespace ddp
