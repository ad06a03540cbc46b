// TroubleWarnings: the imbalance and trouble rules (stragglers, an underused
// GPU, throttling, Xid and ECC errors, memory close to full) and the phase
// history that says what a slow rank was doing. Driven by FakeClock.

#include "health/trouble_warnings.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/common/clock.h"
#include "health/phase_history.h"
#include "health/rank_health.h"

namespace ddp {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr Duration kBeat = milliseconds(500);

/// A heartbeat of `rank` at `step`, in `phase`; waiting in a collective when `waiting`.
RankReport beat(int rank, int64_t step, WorkerPhase phase, double busy, bool waiting = false) {
  RankReport r;
  r.rank = rank;
  r.step = step;
  r.phase = phase;
  r.busy_seconds = busy;
  r.step_seconds = 1.1;
  r.last_completed = static_cast<uint64_t>(step) * 2;
  r.last_enqueued = r.last_completed + (waiting ? 1 : 0);
  r.last_started = r.last_enqueued;
  return r;
}

GpuResources gpu(int index, double util) {
  GpuResources g;
  g.index = index;
  g.util_percent = util;
  g.mem_used_bytes = 10ull << 30;
  g.mem_total_bytes = 80ull << 30;
  return g;
}

RankResources with_gpus(std::vector<GpuResources> gpus) {
  RankResources r;
  r.pid = 1;
  r.gpus = std::move(gpus);
  return r;
}

struct Harness {
  explicit Harness(int world, TroubleConfig config = {}) : warnings(config, world, clock) {}

  /// One heartbeat interval: advances the clock, lets `each(rank)` feed every
  /// rank, then checks; returns what was given.
  std::vector<TroubleWarning> round(int world, const std::function<void(int)>& each) {
    clock.advance(kBeat);
    for (int r = 0; r < world; ++r) each(r);
    std::vector<TroubleWarning> out = warnings.check([](int rank) { return "rank " + std::to_string(rank); });
    given.insert(given.end(), out.begin(), out.end());
    return out;
  }

  /// `slow` is busy `slow_busy` s per step in `slow_phase`; the others are
  /// busy 0.03 s and wait in a collective.
  void steps(int world, int from, int to, int slow, WorkerPhase slow_phase, double slow_busy = 1.02) {
    for (int s = from; s < to; ++s) {
      round(world, [&](int r) {
        warnings.on_heartbeat(r == slow ? beat(r, s, slow_phase, slow_busy) : beat(r, s, WorkerPhase::kBackward, 0.03, true),
                              clock.now());
      });
    }
  }

  FakeClock clock;
  TroubleWarnings warnings;
  std::vector<TroubleWarning> given;
};

TEST(PhaseHistory, KeepsTheLastHeartbeatsAndTheirShares) {
  PhaseHistory h;
  EXPECT_EQ(h.size(), 0);
  EXPECT_EQ(h.dominant(), WorkerPhase::kUnknown);
  for (int i = 0; i < 40; ++i) h.add(WorkerPhase::kData);
  EXPECT_EQ(h.size(), PhaseHistory::kCapacity);
  EXPECT_EQ(h.count(WorkerPhase::kData), PhaseHistory::kCapacity);
  // The oldest fall out: 20 newer heartbeats in a collective push 20 data ones out.
  for (int i = 0; i < 20; ++i) h.add(WorkerPhase::kCollective);
  EXPECT_EQ(h.size(), PhaseHistory::kCapacity);
  EXPECT_EQ(h.count(WorkerPhase::kCollective), 20);
  EXPECT_EQ(h.count(WorkerPhase::kData), PhaseHistory::kCapacity - 20);
  EXPECT_EQ(h.dominant(), WorkerPhase::kCollective);
  h.clear();
  EXPECT_EQ(h.size(), 0);
}

TEST(PhaseHistory, TheLastFewAreAHistoryOfTheirOwn) {
  PhaseHistory h;
  for (int i = 0; i < 40; ++i) h.add(WorkerPhase::kCollective);
  for (int i = 0; i < 5; ++i) h.add(WorkerPhase::kData);
  EXPECT_EQ(h.added(), 45u);
  const PhaseHistory newest = h.last(6);
  EXPECT_EQ(newest.size(), 6);
  EXPECT_EQ(newest.count(WorkerPhase::kData), 5);
  EXPECT_EQ(newest.count(WorkerPhase::kCollective), 1);
  EXPECT_EQ(newest.dominant(), WorkerPhase::kData);
  EXPECT_EQ(h.last(1000).size(), PhaseHistory::kCapacity);
  EXPECT_EQ(h.last(0).size(), 0);
}

TEST(PhaseHistory, AnOpenCollectiveIsWaitingWhateverThePhase) {
  EXPECT_EQ(activity_of(beat(0, 3, WorkerPhase::kBackward, 0, true)), WorkerPhase::kCollective);
  EXPECT_EQ(activity_of(beat(0, 3, WorkerPhase::kBackward, 0, false)), WorkerPhase::kBackward);
  EXPECT_EQ(activity_of(beat(0, 3, WorkerPhase::kData, 0, false)), WorkerPhase::kData);
}

TEST(TroubleWarnings, StragglerIsNamedOnceWithWhatItAndTheOthersDid) {
  Harness h(4);
  h.steps(4, 1, 5, 2, WorkerPhase::kOther);
  EXPECT_TRUE(h.given.empty()) << "4 slow steps are not enough";
  h.steps(4, 5, 6, 2, WorkerPhase::kOther);
  ASSERT_EQ(h.given.size(), 1u);
  const TroubleWarning& w = h.given[0];
  EXPECT_EQ(w.kind, TroubleKind::kStraggler);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.gpu, -1);
  EXPECT_EQ(w.summary,
            "rank 2 is a straggler: busy 1.02 s per step, the others 30.0 ms (median), above 3x for 5 consecutive "
            "steps; its heartbeats found it in phase other 100% of the time, the others waited in a collective "
            "100% of theirs");
  EXPECT_EQ(w.look_at, "work only rank 2 does outside the training step (logging, evaluation, saving)");
  EXPECT_EQ(w.line(), w.summary + "; look at: " + w.look_at);
  h.steps(4, 6, 40, 2, WorkerPhase::kOther);
  EXPECT_EQ(h.given.size(), 1u) << "given once per generation";
  EXPECT_EQ(h.warnings.given(), 1u);
}

// A Python rank under DDP waits for the others inside backward, where the
// companion cannot tell the wait from the compute: its busy time includes
// the wait, so every rank's looks alike. The sync span of each (the time in
// DDP's forward and backward) tells them apart: the rank the others wait for
// waits least there, and only that least span counts as work.
TEST(TroubleWarnings, AStragglerUnderDdpIsFoundByItsSyncSpan) {
  Harness h(3);
  const auto ddp_beat = [](int rank, int64_t step, WorkerPhase phase, double busy, double sync) {
    RankReport r = beat(rank, step, phase, busy);
    r.sync_seconds = sync;
    return r;
  };
  for (int s = 1; s <= 5; ++s) {
    h.round(3, [&](int r) {
      // Rank 1 reads its data for 0.20 s; ranks 0 and 2 wait that long in backward.
      h.warnings.on_heartbeat(r == 1 ? ddp_beat(r, s, WorkerPhase::kData, 0.23, 0.02)
                                     : ddp_beat(r, s, WorkerPhase::kBackward, 0.23, 0.22),
                              h.clock.now());
    });
  }
  ASSERT_EQ(h.given.size(), 1u);
  const TroubleWarning& w = h.given[0];
  EXPECT_EQ(w.rank, 1);
  EXPECT_DOUBLE_EQ(w.value, 0.23);               // 0.21 outside DDP + the least span, 0.02
  EXPECT_NEAR(w.others, 0.03, 1e-12);            // 0.01 outside DDP + 0.02
  EXPECT_THAT(w.summary, HasSubstr("rank 1 is a straggler: busy 0.23 s per step, the others 30.0 ms (median)"));
  EXPECT_THAT(w.summary, HasSubstr("its heartbeats found it in phase data 100% of the time"));
}

// Without the span, the same figures name nobody; and ranks whose spans
// differ only by compute jitter are not stragglers either.
TEST(TroubleWarnings, SyncSpansOfBalancedRanksNameNobody) {
  Harness h(3);
  for (int s = 1; s <= 20; ++s) {
    h.round(3, [&](int r) {
      RankReport without = beat(r, s, WorkerPhase::kBackward, 0.23);
      h.warnings.on_heartbeat(without, h.clock.now());
    });
  }
  EXPECT_TRUE(h.given.empty());
  Harness balanced(3);
  for (int s = 1; s <= 20; ++s) {
    balanced.round(3, [&](int r) {
      RankReport rep = beat(r, s, WorkerPhase::kBackward, 0.05 + 0.01 * r);
      rep.sync_seconds = 0.04 + 0.01 * r;   // rank 2 computes a little slower in backward
      balanced.warnings.on_heartbeat(rep, balanced.clock.now());
    });
  }
  EXPECT_TRUE(balanced.given.empty());
}

// A rank that falls behind after a long lock-step run: its story tells of
// its slow steps (data), not of the half minute before, when it waited in
// the collectives like every rank.
TEST(TroubleWarnings, AStragglersStoryTellsOnlyOfItsSlowSteps) {
  Harness h(3);
  for (int s = 1; s <= 30; ++s) {
    h.round(3, [&](int r) { h.warnings.on_heartbeat(beat(r, s, WorkerPhase::kBackward, 0.03, true), h.clock.now()); });
  }
  h.steps(3, 31, 36, 2, WorkerPhase::kData, 0.5);
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_THAT(h.given[0].summary, HasSubstr("its heartbeats found it in phase data 100% of the time, the others "
                                            "waited in a collective 100% of theirs"));
  EXPECT_EQ(h.given[0].look_at, "the DataLoader workers of rank 2 and the storage its node reads from");
}

// The hint follows what the slow rank's heartbeats mostly found it doing.
TEST(TroubleWarnings, TheHintFollowsTheDominantPhase) {
  const std::vector<std::pair<WorkerPhase, std::string>> cases = {
      {WorkerPhase::kData, "the DataLoader workers of rank 1 and the storage its node reads from"},
      {WorkerPhase::kForward, "rank 1's device: its clocks, throttling, other processes using it"},
      {WorkerPhase::kBackward, "rank 1's device"},
      {WorkerPhase::kCheckpoint, "saving on rank 1"},
      {WorkerPhase::kOther, "work only rank 1 does"},
      {WorkerPhase::kCollective, "the network and rank 1's peers"},
  };
  for (const auto& [phase, hint] : cases) {
    Harness h(3);
    h.steps(3, 1, 8, 1, phase);
    ASSERT_EQ(h.given.size(), 1u) << to_string(phase);
    EXPECT_THAT(h.given[0].look_at, HasSubstr(hint)) << to_string(phase);
    EXPECT_THAT(h.given[0].summary,
                HasSubstr(phase == WorkerPhase::kCollective
                              ? std::string("found it waiting in a collective 100% of the time")
                              : std::string("found it in phase ") + to_string(phase) + " 100% of the time"));
  }
}

// 3 of its 5 heartbeats in data, the rest spread: data is the dominant share.
TEST(TroubleWarnings, SaysTheDominantShareOfAMixedHistory) {
  Harness h(3);
  int k = 0;
  for (int s = 1; s <= 8; ++s) {
    const WorkerPhase mine = (k++ % 2 == 0) ? WorkerPhase::kData : (s % 4 == 0 ? WorkerPhase::kForward : WorkerPhase::kOther);
    h.round(3, [&](int r) {
      h.warnings.on_heartbeat(r == 0 ? beat(r, s, mine, 2.0) : beat(r, s, WorkerPhase::kBackward, 0.1, true), h.clock.now());
    });
  }
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_THAT(h.given[0].summary, HasSubstr("found it in phase data 60% of the time"));
  EXPECT_THAT(h.given[0].look_at, HasSubstr("DataLoader"));
}

// An agent may forward one heartbeat twice: the history takes it once.
TEST(TroubleWarnings, TheSameHeartbeatTwiceCountsOnce) {
  Harness h(3);
  for (int s = 1; s <= 6; ++s) {
    h.round(3, [&](int r) {
      const RankReport rep = r == 0 ? beat(r, s, WorkerPhase::kData, 2.0) : beat(r, s, WorkerPhase::kBackward, 0.1, true);
      h.warnings.on_heartbeat(rep, h.clock.now());
      if (r == 0) h.warnings.on_heartbeat(beat(r, s, WorkerPhase::kOther, 2.0), h.clock.now() + milliseconds(5));
    });
  }
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_THAT(h.given[0].summary, HasSubstr("phase data 100%"));
}

// Heartbeats from before training (no step, no phase) are not what the step waits on.
TEST(TroubleWarnings, HeartbeatsBeforeTrainingAreLeftOutOfTheHistory) {
  Harness h(3);
  for (int i = 0; i < 20; ++i) {
    h.round(3, [&](int r) { h.warnings.on_heartbeat(beat(r, -1, WorkerPhase::kUnknown, 0), h.clock.now()); });
  }
  h.steps(3, 0, 5, 1, WorkerPhase::kOther);
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_THAT(h.given[0].summary, HasSubstr("its heartbeats found it in phase other 100% of the time, the others "
                                            "waited in a collective 100% of theirs"));
}

TEST(TroubleWarnings, BalancedRanksGetNoWarning) {
  Harness h(4);
  for (int s = 1; s <= 60; ++s) {
    h.round(4, [&](int r) {
      h.warnings.on_heartbeat(beat(r, s, r % 2 ? WorkerPhase::kData : WorkerPhase::kBackward, 0.30 + 0.02 * r, r % 2 == 0),
                              h.clock.now());
      h.warnings.on_resources(r, with_gpus({gpu(r, 90.0 + r)}), h.clock.now());
    });
  }
  EXPECT_TRUE(h.given.empty());
  EXPECT_EQ(h.warnings.recent_json(), nlohmann::json::array());
  EXPECT_EQ(h.warnings.given(), 0u);
}

TEST(TroubleWarnings, AGpuUsedFarLessThanTheOthersIsNamedWithItsPhase) {
  Harness h(4);
  for (int s = 1; s <= 12; ++s) {
    h.round(4, [&](int r) {
      // Rank 1 waits on its data; its busy time is no outlier (same step
      // time: it is the GPU that is idle), so only the GPU rule fires.
      h.warnings.on_heartbeat(r == 1 ? beat(r, s, WorkerPhase::kData, 0.3) : beat(r, s, WorkerPhase::kForward, 0.3),
                              h.clock.now());
      h.warnings.on_resources(r, with_gpus({gpu(r, r == 1 ? 12.0 : 95.0)}), h.clock.now());
    });
  }
  ASSERT_EQ(h.given.size(), 1u);
  const TroubleWarning& w = h.given[0];
  EXPECT_EQ(w.kind, TroubleKind::kGpuUnderused);
  EXPECT_EQ(w.rank, 1);
  EXPECT_DOUBLE_EQ(w.value, 12.0);
  EXPECT_DOUBLE_EQ(w.others, 95.0);
  EXPECT_THAT(w.summary, HasSubstr("rank 1 keeps its GPU far less busy than the others: 12% against 95% (median) in 5 "
                                   "consecutive samples"));
  EXPECT_THAT(w.summary, HasSubstr("its heartbeats found it in phase data 100% of the time"));
  EXPECT_THAT(w.look_at, HasSubstr("DataLoader workers of rank 1"));
}

TEST(TroubleWarnings, ARankWithoutGpuSamplesIsNeverWarnedAboutItsGpu) {
  Harness h(4);
  for (int s = 1; s <= 12; ++s) {
    h.round(4, [&](int r) {
      h.warnings.on_heartbeat(beat(r, s, WorkerPhase::kForward, 0.3), h.clock.now());
      if (r == 3) {
        h.warnings.on_resources(r, with_gpus({}), h.clock.now());  // a CPU rank
      } else if (r == 2) {
        GpuResources g = gpu(2, 0);
        g.util_percent.reset();  // a GPU that does not report utilisation
        h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
      } else {
        h.warnings.on_resources(r, with_gpus({gpu(r, 97.0)}), h.clock.now());
      }
    });
  }
  EXPECT_TRUE(h.given.empty()) << h.given[0].summary;
}

TEST(TroubleWarnings, ALowGpuAmongLowGpusIsNoOutlier) {
  Harness h(3);  // everyone at 10-20%: the gap to the median is too small to mean anything
  for (int s = 1; s <= 12; ++s) {
    h.round(3, [&](int r) { h.warnings.on_resources(r, with_gpus({gpu(r, r == 0 ? 5.0 : 20.0)}), h.clock.now()); });
  }
  EXPECT_TRUE(h.given.empty());
}

TEST(TroubleWarnings, ThermalThrottlingInConsecutiveSamples) {
  Harness h(2);
  auto sample = [&](std::vector<std::string> reasons) {
    h.round(2, [&](int r) {
      GpuResources g = gpu(r == 0 ? 3 : 4, 90);
      if (r == 0) g.throttle_reasons = reasons;
      h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
    });
  };
  sample({"hw_thermal_slowdown"});
  sample({"hw_thermal_slowdown"});
  sample({});  // the run breaks
  sample({"sw_power_cap"});  // a busy GPU at its power limit: normal
  sample({"sw_power_cap"});
  sample({"sw_power_cap"});
  EXPECT_TRUE(h.given.empty());
  sample({"sw_thermal_slowdown", "sw_power_cap"});
  sample({"sw_thermal_slowdown"});
  sample({"sw_thermal_slowdown", "hw_slowdown"});
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_EQ(h.given[0].kind, TroubleKind::kGpuThrottled);
  EXPECT_EQ(h.given[0].rank, 0);
  EXPECT_EQ(h.given[0].gpu, 3);
  EXPECT_EQ(h.given[0].summary, "rank 0: GPU 3 is throttled (sw_thermal_slowdown, hw_slowdown) in 3 consecutive samples");
  EXPECT_THAT(h.given[0].look_at, HasSubstr("cooling and power of GPU 3"));
  for (int i = 0; i < 5; ++i) sample({"hw_thermal_slowdown"});
  EXPECT_EQ(h.given.size(), 1u);
}

// An agent may forward one sample twice (its age restated): it counts once.
TEST(TroubleWarnings, TheSameSampleTwiceCountsOnce) {
  Harness h(1);
  GpuResources hot = gpu(0, 90);
  hot.throttle_reasons = {"hw_thermal_slowdown"};
  for (int i = 0; i < 2; ++i) {
    h.round(1, [&](int r) {
      h.warnings.on_resources(r, with_gpus({hot}), h.clock.now());
      h.warnings.on_resources(r, with_gpus({hot}), h.clock.now() + milliseconds(5));
    });
  }
  EXPECT_TRUE(h.given.empty()) << "2 samples, not 4";
  h.round(1, [&](int r) { h.warnings.on_resources(r, with_gpus({hot}), h.clock.now()); });
  EXPECT_EQ(h.given.size(), 1u);
}

TEST(TroubleWarnings, XidErrorsNameTheLastXid) {
  Harness h(2);
  auto sample = [&](uint64_t xids, int last) {
    h.round(2, [&](int r) {
      GpuResources g = gpu(r, 90);
      g.xid_errors = r == 1 ? xids : 0;
      if (r == 1 && xids > 0) g.last_xid = last;
      h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
    });
  };
  sample(0, 0);
  sample(0, 0);
  EXPECT_TRUE(h.given.empty());
  sample(2, 79);
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_EQ(h.given[0].kind, TroubleKind::kGpuXid);
  EXPECT_EQ(h.given[0].rank, 1);
  EXPECT_EQ(h.given[0].gpu, 1);
  EXPECT_EQ(h.given[0].summary, "rank 1: GPU 1 reported 2 critical Xid error(s), the last Xid 79");
  sample(3, 48);
  EXPECT_EQ(h.given.size(), 1u);
}

TEST(TroubleWarnings, EccErrorsRisingAboveTheFirstCount) {
  Harness h(1);
  auto sample = [&](uint64_t ecc) {
    h.round(1, [&](int r) {
      GpuResources g = gpu(0, 90);
      g.ecc_errors = ecc;
      h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
    });
  };
  sample(5);  // old errors, from before this job
  sample(5);
  EXPECT_TRUE(h.given.empty());
  sample(7);
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_EQ(h.given[0].kind, TroubleKind::kGpuEcc);
  EXPECT_THAT(h.given[0].summary, HasSubstr("GPU 0 has 2 new uncorrected ECC error(s) in this generation (7 since"));
}

TEST(TroubleWarnings, MemoryCloseToFullSaysHowClose) {
  Harness h(2);
  h.round(2, [&](int r) {
    GpuResources g = gpu(r, 90);
    if (r == 1) {
      g.mem_used_bytes = static_cast<uint64_t>(79.1 * (1ull << 30));
      g.rank_mem_bytes = static_cast<uint64_t>(78.0 * (1ull << 30));
    }
    h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
  });
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_EQ(h.given[0].kind, TroubleKind::kMemoryFull);
  EXPECT_EQ(h.given[0].rank, 1);
  EXPECT_EQ(h.given[0].summary, "rank 1: GPU 1 memory is close to full: 79.1 of 80.0 GiB in use (78.0 GiB held by this rank)");
  EXPECT_THAT(h.given[0].look_at, HasSubstr("batch size"));
}

// Each GPU of a rank is its own (rank, kind, GPU).
TEST(TroubleWarnings, TwoFullGpusOfOneRankAreTwoWarnings) {
  Harness h(1);
  GpuResources a = gpu(0, 90);
  GpuResources b = gpu(1, 90);
  a.mem_used_bytes = b.mem_used_bytes = 79ull << 30;
  h.round(1, [&](int r) { h.warnings.on_resources(r, with_gpus({a, b}), h.clock.now()); });
  h.round(1, [&](int r) { h.warnings.on_resources(r, with_gpus({a, b}), h.clock.now()); });
  ASSERT_EQ(h.given.size(), 2u);
  EXPECT_EQ(h.given[0].gpu, 0);
  EXPECT_EQ(h.given[1].gpu, 1);
  EXPECT_EQ(h.warnings.rank_json(0),
            nlohmann::json::parse(R"([{"kind":"memory_full","gpu":0},{"kind":"memory_full","gpu":1}])"));
}

TEST(TroubleWarnings, ANewGenerationForgetsAndWarnsAgain) {
  Harness h(3);
  h.steps(3, 1, 8, 0, WorkerPhase::kData);
  ASSERT_EQ(h.given.size(), 1u);
  h.warnings.reset(3);
  EXPECT_EQ(h.warnings.given(), 0u);
  EXPECT_EQ(h.warnings.recent_json(), nlohmann::json::array());
  EXPECT_EQ(h.warnings.rank_json(0), nlohmann::json::array());
  h.steps(3, 1, 4, 0, WorkerPhase::kData);
  EXPECT_EQ(h.given.size(), 1u) << "the history starts afresh";
  h.steps(3, 4, 6, 0, WorkerPhase::kData);
  ASSERT_EQ(h.given.size(), 2u);
  EXPECT_EQ(h.given[1].rank, 0);
}

TEST(TroubleWarnings, AnExitedRankIsNeitherWarnedNorCountedAmongTheOthers) {
  Harness h(3);
  h.warnings.on_rank_exited(2);
  h.steps(3, 1, 10, 2, WorkerPhase::kOther);
  EXPECT_TRUE(h.given.empty());
  // With 2 left, rank 1 against rank 0 alone.
  h.steps(3, 10, 16, 1, WorkerPhase::kOther);
  ASSERT_EQ(h.given.size(), 1u);
  EXPECT_EQ(h.given[0].rank, 1);
  EXPECT_DOUBLE_EQ(h.given[0].others, 0.03);
}

TEST(TroubleWarnings, JsonListsTheRecentWarningsWithTheirAge) {
  Harness h(3);
  h.steps(3, 1, 6, 1, WorkerPhase::kData);
  h.round(3, [&](int r) {
    GpuResources g = gpu(5, 90);
    g.xid_errors = r == 0 ? 1 : 0;
    h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
  });
  ASSERT_EQ(h.given.size(), 2u);
  h.clock.advance(std::chrono::seconds(4));
  const nlohmann::json list = h.warnings.recent_json();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["kind"], "straggler");
  EXPECT_EQ(list[0]["rank"], 1);
  EXPECT_FALSE(list[0].contains("gpu"));
  EXPECT_EQ(list[0]["summary"], h.given[0].summary);
  EXPECT_EQ(list[0]["look_at"], h.given[0].look_at);
  EXPECT_DOUBLE_EQ(list[0]["age_s"].get<double>(), 4.5);
  EXPECT_EQ(list[1]["kind"], "gpu_xid");
  EXPECT_EQ(list[1]["rank"], 0);
  EXPECT_EQ(list[1]["gpu"], 5);
  EXPECT_DOUBLE_EQ(list[1]["age_s"].get<double>(), 4.0);
  EXPECT_EQ(h.warnings.rank_json(1), nlohmann::json::parse(R"([{"kind":"straggler"}])"));
  EXPECT_EQ(h.warnings.rank_json(2), nlohmann::json::array());
}

// The list stays bounded however many warnings a big job gives.
TEST(TroubleWarnings, TheListIsBounded) {
  const int world = 200;
  Harness h(world);
  h.round(world, [&](int r) {
    GpuResources g = gpu(0, 90);
    g.xid_errors = 1;
    h.warnings.on_resources(r, with_gpus({g}), h.clock.now());
  });
  EXPECT_EQ(h.given.size(), static_cast<size_t>(world));
  EXPECT_EQ(h.warnings.given(), static_cast<uint64_t>(world));
  const nlohmann::json list = h.warnings.recent_json();
  ASSERT_EQ(list.size(), TroubleWarnings::kListed);
  EXPECT_EQ(list.back()["rank"], world - 1);
}

TEST(TroubleWarnings, NamesItsKinds) {
  EXPECT_STREQ(to_string(TroubleKind::kStraggler), "straggler");
  EXPECT_STREQ(to_string(TroubleKind::kGpuUnderused), "gpu_underused");
  EXPECT_STREQ(to_string(TroubleKind::kGpuThrottled), "gpu_throttled");
  EXPECT_STREQ(to_string(TroubleKind::kGpuXid), "gpu_xid");
  EXPECT_STREQ(to_string(TroubleKind::kGpuEcc), "gpu_ecc");
  EXPECT_STREQ(to_string(TroubleKind::kMemoryFull), "memory_full");
}

}  // namespace
}  // namespace ddp
