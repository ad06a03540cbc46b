// Which rank holds up sends and receives (health/peer_waits.h).
#include "health/peer_waits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>

#include "ddp/common/clock.h"
#include "health/hang_detector.h"

namespace ddp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

/// World `n`; waits[r] are rank r's waits as (op, peer).
struct World {
  explicit World(int n) : reports(static_cast<size_t>(n)) {
    for (int r = 0; r < n; ++r) reports[static_cast<size_t>(r)].rank = r;
  }
  World& wait(int rank, const std::string& op, int peer, Duration age = seconds(5)) {
    reports[static_cast<size_t>(rank)].peer_waits.push_back(PeerWait{op, peer, 64, age});
    return *this;
  }
  std::optional<PeerBlock> find(std::vector<int> among = {}) const {
    std::vector<const RankReport*> ptrs;
    for (const RankReport& r : reports) ptrs.push_back(&r);
    if (among.empty()) {
      for (size_t r = 0; r < reports.size(); ++r) among.push_back(static_cast<int>(r));
    }
    return find_peer_block(ptrs, among);
  }
  std::vector<RankReport> reports;
};

TEST(PeerWaitsTest, NoWaitForAPeerIsNoBlock) {
  EXPECT_FALSE(World(3).find().has_value());
  // A wait for itself, for a rank outside the world, or a send to any rank leads nowhere.
  EXPECT_FALSE(World(3).wait(0, "send", -1).wait(1, "recv", 1).wait(2, "send", 7).find().has_value());
}

TEST(PeerWaitsTest, AReceiveFromAnySourceWaitsForTheRanksInNoSendOrReceive) {
  // Rank 2 receives from whoever sends; 0 sleeps, 1's only wait leads nowhere.
  auto b = World(3).wait(2, "recv", -1, seconds(4)).wait(2, "irecv", -1, seconds(7)).wait(1, "send", 9).find();
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->cycle);
  EXPECT_EQ(b->culprits, std::vector<int>({0, 1}));
  EXPECT_EQ(b->waiting, std::vector<int>({2}));
  ASSERT_EQ(b->edges.size(), 1u);
  EXPECT_EQ(b->edges[0].wait.op, "irecv");   // its longest
  EXPECT_EQ(b->edges[0].wait.peer, -1);
  // Every rank receives from any source: they wait for one another.
  auto all = World(2).wait(0, "recv", -1).wait(1, "irecv", -1).find();
  ASSERT_TRUE(all.has_value());
  EXPECT_TRUE(all->cycle);
  EXPECT_EQ(all->culprits, std::vector<int>({0, 1}));
  EXPECT_TRUE(all->waiting.empty());
  // A wait for a given peer decides: the receive from any source is not followed.
  auto given = World(3).wait(0, "recv", -1).wait(1, "recv", 2).find();
  ASSERT_TRUE(given.has_value());
  EXPECT_EQ(given->culprits, std::vector<int>({2}));
  EXPECT_EQ(given->waiting, std::vector<int>({1}));
}

TEST(PeerWaitsTest, APipelineOfWaitsEndsAtTheRankThatWaitsForNoPeer) {
  // Stage 3 receives from 2, 2 from 1, 1 from 0; stage 0 is elsewhere.
  auto b = World(4).wait(3, "recv", 2).wait(2, "recv", 1).wait(1, "irecv", 0).find();
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE(b->cycle);
  EXPECT_EQ(b->culprits, std::vector<int>({0}));
  EXPECT_EQ(b->waiting, std::vector<int>({1, 2, 3}));
  ASSERT_EQ(b->edges.size(), 3u);
  EXPECT_EQ(b->edges[0].rank, 1);
  EXPECT_EQ(b->edges[0].wait.op, "irecv");
}

TEST(PeerWaitsTest, ARankWithoutHeartbeatsOrOutsideTheLookWaitsForNobody) {
  World w(3);
  w.wait(0, "recv", 1).wait(1, "recv", 2);
  std::vector<const RankReport*> ptrs = {&w.reports[0], nullptr, &w.reports[2]};
  auto b = find_peer_block(ptrs, {0, 2});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->culprits, std::vector<int>({1}));
  // Rank 1 has exited (not among those looked at): its waits no longer count.
  auto exited = w.find({0, 2});
  ASSERT_TRUE(exited.has_value());
  EXPECT_EQ(exited->culprits, std::vector<int>({1}));
}

TEST(PeerWaitsTest, RanksThatReceiveFromEachOtherFirstAreACycle) {
  // 0 and 1 each receive from the other before sending; 2 waits for 0.
  auto b = World(3).wait(0, "recv", 1).wait(1, "recv", 0).wait(2, "recv", 0).find();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->cycle);
  EXPECT_EQ(b->culprits, std::vector<int>({0, 1}));
  EXPECT_EQ(b->waiting, std::vector<int>({2}));
}

TEST(PeerWaitsTest, EachRankCountsItsLongestWaitForAPeer) {
  auto b = World(2).wait(1, "irecv", 0, seconds(2)).wait(1, "irecv", 0, seconds(9)).find();
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->edges.size(), 1u);
  EXPECT_EQ(b->edges[0].wait.age, Duration(seconds(9)));
}

TEST(PeerWaitsTest, AWaitReadsAsWhatItIs) {
  EXPECT_EQ(describe_peer_wait(PeerWait{"recv", 0, 2048, {}}), "recv (2.0 KiB) from rank 0");
  EXPECT_EQ(describe_peer_wait(PeerWait{"isend", 3, 0, {}}), "isend to rank 3");
  EXPECT_EQ(describe_peer_wait(PeerWait{"recv", -1, 0, {}}), "recv from any rank");
  EXPECT_EQ(describe_peer_wait(PeerWait{"irecv", 2, 64, {}}, false), "irecv from rank 2");
}

// The hang detector over pipeline stages (HangDetector::peer_verdict): no
// rank in a collective, so the waits say whom to blame.

/// A stage at step 20 that finished collective #5 and has nothing open.
RankReport stage(int rank, std::vector<std::pair<std::string, int>> waits, Duration age) {
  RankReport r;
  r.rank = rank;
  r.host = "h" + std::to_string(rank);
  r.pid = 100 + rank;
  r.step = 20;
  r.phase = WorkerPhase::kOther;
  r.last_enqueued = r.last_started = r.last_completed = 5;
  for (const auto& [op, peer] : waits) r.peer_waits.push_back(PeerWait{op, peer, 2048, age});
  return r;
}

/// Every second: reports(seconds since the start); checks every 100 ms, up
/// to 30 s. The first verdict and when it came.
std::optional<std::pair<HangVerdict, Duration>> run(int world, const std::function<std::vector<RankReport>(int64_t)>& reports) {
  HangConfig config;
  config.hang_timeout = seconds(3);
  config.heartbeat_interval = seconds(1);
  FakeClock clock;
  HangDetector d(config, world, clock);
  for (Duration t{}; t <= seconds(30); t += milliseconds(100)) {
    if (t % seconds(1) == Duration::zero()) {
      for (RankReport& r : reports(std::chrono::duration_cast<seconds>(t).count())) d.on_report(std::move(r));
    }
    if (auto v = d.check()) return std::make_pair(*v, t);
    clock.advance(milliseconds(100));
  }
  return std::nullopt;
}

TEST(PeerWaitsTest, TheHangDetectorBlamesTheStageTheOthersWaitFor) {
  // Stage 0 stops (a sleep, a stuck data loader); 1 waits to receive from it, 2 from 1.
  const auto v = run(3, [](int64_t s) {
    return std::vector<RankReport>{stage(0, {}, {}), stage(1, {{"recv", 0}}, seconds(s)),
                                   stage(2, {{"recv", 1}}, seconds(s))};
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_EQ(v->first.culprits, std::vector<int>({0}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({1, 2}));
  EXPECT_EQ(v->first.op, "recv");
  EXPECT_LE(v->second, seconds(3) + seconds(2)) << "within the hang timeout and two intervals";
  EXPECT_THAT(v->first.summary,
              HasSubstr("rank 0 (host h0, pid 100, step 20, phase other) is in no send or receive while ranks 1,2 "
                        "wait for it: rank 1 in recv (2.0 KiB) from rank 0 for 3."));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 2 in recv (2.0 KiB) from rank 1 for 3."));
}

/// A rank of a script that only sends and receives (forward-only pipeline
/// inference): no steps, no collectives; `done` of its calls completed.
RankReport p2p_only(int rank, std::vector<std::pair<std::string, int>> waits, Duration age, uint64_t done) {
  RankReport r = stage(rank, std::move(waits), age);
  r.step = -1;
  r.last_enqueued = r.last_started = r.last_completed = 0;
  r.peer_calls_done = done;
  return r;
}

TEST(PeerWaitsTest, RanksThatOnlySendAndReceiveAreCalledStuckOnceTheirCallsStopCompleting) {
  // Stage 1 stops at second 10: 0 then waits to send to it, 2 to receive from it.
  const auto v = run(3, [](int64_t s) {
    if (s < 10) {
      const uint64_t done = static_cast<uint64_t>(s) * 40;
      return std::vector<RankReport>{p2p_only(0, {{"send", 1}}, milliseconds(5), done),
                                     p2p_only(1, {}, {}, done * 2), p2p_only(2, {{"recv", 1}}, milliseconds(5), done)};
    }
    const Duration age = seconds(s - 10);
    return std::vector<RankReport>{p2p_only(0, {{"send", 1}}, age, 400), p2p_only(1, {}, {}, 800),
                                   p2p_only(2, {{"recv", 1}}, age, 400)};
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.kind, HangKind::kStuckCollective);
  EXPECT_EQ(v->first.culprits, std::vector<int>({1}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({0, 2}));
  EXPECT_GE(v->second, seconds(10) + seconds(3)) << "not while the calls completed";
  EXPECT_LE(v->second, seconds(10) + seconds(3) + seconds(2)) << "within the hang timeout and two intervals";
  EXPECT_THAT(v->first.summary, HasSubstr("rank 1 (host h1, pid 101, phase other) is in no send or receive while "
                                          "ranks 0,2 wait for it: rank 0 in send (2.0 KiB) to rank 1 for 3."));
}

TEST(PeerWaitsTest, SendsAndReceivesThatKeepCompletingAreNoHang) {
  // Every heartbeat finds each rank in a call, but a new one each time.
  const auto v = run(2, [](int64_t s) {
    const uint64_t done = static_cast<uint64_t>(s) * 40 + 1;
    return std::vector<RankReport>{p2p_only(0, {{"send", 1}}, milliseconds(5), done),
                                   p2p_only(1, {{"recv", 0}}, milliseconds(5), done)};
  });
  EXPECT_FALSE(v.has_value()) << v->first.summary;
}

TEST(PeerWaitsTest, TheHangDetectorNamesStagesThatReceiveFromEachOtherFirst) {
  // Stages 1 and 2 each receive from the other first; stage 0 waits for its gradient from 1.
  const auto v = run(3, [](int64_t s) {
    return std::vector<RankReport>{stage(0, {{"irecv", 1}}, seconds(s)), stage(1, {{"irecv", 2}}, seconds(s)),
                                   stage(2, {{"recv", 1}}, seconds(s))};
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.culprits, std::vector<int>({1, 2}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({0}));
  EXPECT_THAT(v->first.summary, HasSubstr("ranks 1,2 wait for one another in sends and receives that never pair "
                                          "up: rank 1 in irecv (2.0 KiB) from rank 2 for 3."));
  EXPECT_THAT(v->first.summary, HasSubstr("; rank 0 waits for them: rank 0 in irecv (2.0 KiB) from rank 1 for 3."));
}

TEST(PeerWaitsTest, TheHangDetectorBlamesTheRanksAReceiveFromAnySourceWaitsFor) {
  // Rank 2 receives from whoever sends first; 0 and 1 stopped elsewhere.
  const auto v = run(3, [](int64_t s) {
    return std::vector<RankReport>{stage(0, {}, {}), stage(1, {}, {}), stage(2, {{"recv", -1}}, seconds(s))};
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->first.culprits, std::vector<int>({0, 1}));
  EXPECT_EQ(v->first.waiting, std::vector<int>({2}));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 0 (host h0, pid 100, step 20, phase other), rank 1 (host h1, pid 101, "
                                          "step 20, phase other) are in no send or receive while rank 2 waits for "
                                          "them: rank 2 in recv (2.0 KiB) from any rank for 3."));
}

TEST(PeerWaitsTest, WithoutAnyWaitTheVerdictStaysTheGeneralOne) {
  const auto v = run(2, [](int64_t) {
    return std::vector<RankReport>{stage(0, {}, {}), stage(1, {{"send", 5}}, seconds(1))};
  });
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->first.culprits.empty());
  EXPECT_THAT(v->first.summary, HasSubstr("no rank in a collective"));
  EXPECT_THAT(v->first.summary, HasSubstr("rank 1 step 20 phase other"));
}

}  // namespace
}  // namespace ddp
