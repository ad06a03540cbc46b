#include "coordinator/rendezvous.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace ddp {
namespace {

using namespace std::chrono_literals;

struct JoinOutcome {
  bool called = false;
  Status status;
  Assignment assignment;
};

class RendezvousTest : public ::testing::Test {
 protected:
  // One slot per join so the callbacks write to stable addresses.
  JoinOutcome& join(Rendezvous& rdzv, JoinParams params, Duration timeout = 60s, Duration at = 0s) {
    outcomes.push_back(std::make_unique<JoinOutcome>());
    JoinOutcome* slot = outcomes.back().get();
    rdzv.join(params, start + at, start + at + timeout, [slot](const Status& s, const Assignment& a) {
      slot->called = true;
      slot->status = s;
      slot->assignment = a;
    }, fired);
    return *slot;
  }
  static JoinParams params(const Rendezvous& rdzv, std::string host, int node_rank = -1, int master_port = 29500) {
    JoinParams p;
    p.host = std::move(host);
    p.nproc = rdzv.nproc();
    p.nnodes = rdzv.max_nnodes();
    p.min_nnodes = rdzv.min_nnodes();
    p.node_rank = node_rank;
    p.generation = rdzv.open_generation();
    p.master_port = master_port;
    return p;
  }
  void run_fired() {
    FiredJoins now;
    now.swap(fired);
    for (const auto& f : now) f();
  }

  const SteadyTime start{std::chrono::hours(1)};
  FiredJoins fired;
  std::vector<std::unique_ptr<JoinOutcome>> outcomes;
};

TEST_F(RendezvousTest, JoinIsParkedUntilNnodesAgentsHaveJoined) {
  Rendezvous rdzv(3, 2);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  join(rdzv, params(rdzv, "b"));
  EXPECT_TRUE(fired.empty());
  EXPECT_FALSE(rdzv.complete());
  join(rdzv, params(rdzv, "c"));
  EXPECT_TRUE(rdzv.complete());
  ASSERT_EQ(fired.size(), 3u);
  for (const auto& f : fired) EXPECT_TRUE(f.status.ok()) << f.status.message();
}

TEST_F(RendezvousTest, WaitingSummaryNamesTheJoinedHostsAndTheMissingRanks) {
  Rendezvous rdzv(4, 1);
  rdzv.open(0);
  EXPECT_FALSE(rdzv.waiting_summary());  // nobody waits yet
  join(rdzv, params(rdzv, "h0", 0));
  join(rdzv, params(rdzv, "h3", 3));
  EXPECT_EQ(rdzv.waiting_summary().value_or(""),
            "2 of 4 node(s) joined generation 0 (hosts: h0, h3); not joined yet: node rank(s) 1, 2");
  join(rdzv, params(rdzv, "h1", 1));
  join(rdzv, params(rdzv, "h2", 2));
  EXPECT_TRUE(rdzv.complete());
  EXPECT_FALSE(rdzv.waiting_summary());  // formed: nothing to wait for
}

TEST_F(RendezvousTest, WaitingSummaryWithAutoRanksCannotNameTheMissingRanks) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a", 0));
  join(rdzv, params(rdzv, "b"));  // holds no rank until the world forms
  EXPECT_EQ(rdzv.waiting_summary().value_or(""), "2 of 3 node(s) joined generation 0 (hosts: a, b)");
}

TEST_F(RendezvousTest, WaitingSummaryOfAThousandNodesStaysOneShortLine) {
  Rendezvous rdzv(1000, 1);
  rdzv.open(0);
  for (int r = 0; r < 990; ++r) join(rdzv, params(rdzv, "h" + std::to_string(r), r));
  const std::string line = rdzv.waiting_summary().value_or("");
  EXPECT_EQ(line, "990 of 1000 node(s) joined generation 0 (hosts: h0, h1, h2, h3, h4, h5, h6, h7, ...); "
                  "not joined yet: node rank(s) 990, 991, 992, 993, 994, 995, 996, 997, ...");
}

TEST_F(RendezvousTest, CallbacksAreReturnedToTheCallerNotRunByTheRendezvous) {
  Rendezvous rdzv(1, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  EXPECT_FALSE(a.called);
  ASSERT_EQ(fired.size(), 1u);
  run_fired();
  EXPECT_TRUE(a.called);
  EXPECT_TRUE(a.status.ok());
}

TEST_F(RendezvousTest, NodeRanksFollowArrivalOrder) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  JoinOutcome& b = join(rdzv, params(rdzv, "b"));
  JoinOutcome& c = join(rdzv, params(rdzv, "c"));
  run_fired();
  EXPECT_EQ(a.assignment.node_rank, 0);
  EXPECT_EQ(b.assignment.node_rank, 1);
  EXPECT_EQ(c.assignment.node_rank, 2);
  EXPECT_EQ(rdzv.hosts(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(RendezvousTest, ExplicitNodeRankIsHonouredAndOthersFillTheFreeRanksInArrivalOrder) {
  Rendezvous rdzv(4, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  JoinOutcome& b = join(rdzv, params(rdzv, "b", 0));
  JoinOutcome& c = join(rdzv, params(rdzv, "c"));
  JoinOutcome& d = join(rdzv, params(rdzv, "d", 2));
  run_fired();
  EXPECT_EQ(b.assignment.node_rank, 0);
  EXPECT_EQ(d.assignment.node_rank, 2);
  EXPECT_EQ(a.assignment.node_rank, 1);
  EXPECT_EQ(c.assignment.node_rank, 3);
  EXPECT_EQ(rdzv.hosts(), (std::vector<std::string>{"b", "a", "d", "c"}));
}

TEST_F(RendezvousTest, RankStartIsThePrefixSumOfNprocOverNodeRanks) {
  Rendezvous rdzv(3, 4);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "a", 2));
  JoinOutcome& b = join(rdzv, params(rdzv, "b", 0));
  JoinOutcome& c = join(rdzv, params(rdzv, "c", 1));
  run_fired();
  EXPECT_EQ(b.assignment.rank_start, 0);
  EXPECT_EQ(c.assignment.rank_start, 4);
  EXPECT_EQ(a.assignment.rank_start, 8);
  for (const JoinOutcome* o : {&a, &b, &c}) {
    EXPECT_EQ(o->assignment.world_size, 12);
    EXPECT_EQ(o->assignment.nnodes, 3);
  }
}

TEST_F(RendezvousTest, EveryAgentGetsNodeZerosAddressAndPortAsMaster) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "first-host", -1, 1111));
  JoinOutcome& b = join(rdzv, params(rdzv, "node0-host", 0, 2222));
  JoinOutcome& c = join(rdzv, params(rdzv, "third-host", -1, 3333));
  run_fired();
  for (const JoinOutcome* o : {&a, &b, &c}) {
    EXPECT_EQ(o->assignment.master_addr, "node0-host");
    EXPECT_EQ(o->assignment.master_port, 2222);
  }
  EXPECT_EQ(a.assignment.host, "first-host");
  EXPECT_EQ(c.assignment.host, "third-host");
}

TEST_F(RendezvousTest, AssignmentCarriesTheOpenGeneration) {
  Rendezvous rdzv(1, 1);
  rdzv.open(7);
  EXPECT_EQ(rdzv.open_generation(), 7);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  run_fired();
  EXPECT_EQ(a.assignment.generation, 7);
}

TEST_F(RendezvousTest, HostGetsItsPreviousNodeRankBackInTheNextGeneration) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  join(rdzv, params(rdzv, "b"));
  join(rdzv, params(rdzv, "c"));
  run_fired();

  rdzv.open(1);
  EXPECT_FALSE(rdzv.complete());
  JoinOutcome& c = join(rdzv, params(rdzv, "c"));
  JoinOutcome& b = join(rdzv, params(rdzv, "b"));
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  run_fired();
  EXPECT_EQ(a.assignment.node_rank, 0);
  EXPECT_EQ(b.assignment.node_rank, 1);
  EXPECT_EQ(c.assignment.node_rank, 2);
  EXPECT_EQ(a.assignment.generation, 1);
}

TEST_F(RendezvousTest, NewHostTakesTheRankOfAHostThatDidNotReturn) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  join(rdzv, params(rdzv, "b"));
  join(rdzv, params(rdzv, "c"));
  run_fired();

  rdzv.open(1);
  JoinOutcome& fresh = join(rdzv, params(rdzv, "replacement"));
  JoinOutcome& c = join(rdzv, params(rdzv, "c"));
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  run_fired();
  EXPECT_EQ(a.assignment.node_rank, 0);
  EXPECT_EQ(c.assignment.node_rank, 2);
  EXPECT_EQ(fresh.assignment.node_rank, 1);
}

TEST_F(RendezvousTest, ExplicitRequestWinsOverAnotherHostsRememberedRank) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  join(rdzv, params(rdzv, "b"));
  run_fired();

  rdzv.open(1);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"));
  JoinOutcome& b = join(rdzv, params(rdzv, "b", 0));
  run_fired();
  EXPECT_EQ(b.assignment.node_rank, 0);
  EXPECT_EQ(a.assignment.node_rank, 1);
}

TEST_F(RendezvousTest, JoinForALaterGenerationIsRefusedAndForAnEarlierOneJoinsTheOpenOne) {
  Rendezvous rdzv(2, 1);
  rdzv.open(1);
  JoinParams p = params(rdzv, "a");
  p.generation = 2;
  join(rdzv, p);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].status.code(), StatusCode::kFailedPrecondition);
  // An agent started again knows no later generation than 0.
  p.generation = 0;
  JoinOutcome& again = join(rdzv, p);
  EXPECT_EQ(fired.size(), 1u) << "it waits for the world of generation 1";
  JoinOutcome& other = join(rdzv, params(rdzv, "b"));
  run_fired();
  ASSERT_TRUE(again.called && other.called);
  EXPECT_TRUE(again.status.ok()) << again.status.message();
  EXPECT_EQ(again.assignment.generation, 1);
}

TEST_F(RendezvousTest, JoinAfterTheWorldIsCompleteWaitsForTheNextGenerationOrItsDeadline) {
  Rendezvous rdzv(1, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  run_fired();
  JoinOutcome& late = join(rdzv, params(rdzv, "b"), 10s);
  run_fired();
  EXPECT_FALSE(late.called);
  EXPECT_EQ(rdzv.waiting(), 1);
  rdzv.expire(start + 10s, fired);
  run_fired();
  EXPECT_TRUE(late.called);
  EXPECT_EQ(late.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status.message().find("runs with all its 1 node(s)"), std::string::npos) << late.status.message();
  EXPECT_EQ(rdzv.hosts(), std::vector<std::string>{"a"});
}

TEST_F(RendezvousTest, AgentsWaitingInAFixedSizeJobKeepTheirNodeRanksInTheNextGeneration) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a", 0));
  join(rdzv, params(rdzv, "b", 1));
  run_fired();
  JoinOutcome& b_again = join(rdzv, params(rdzv, "b", 1));
  JoinOutcome& dup = join(rdzv, params(rdzv, "c", 1), 30s);
  rdzv.open(1);
  EXPECT_EQ(rdzv.pending(), 1);
  EXPECT_EQ(rdzv.waiting(), 1) << "node rank 1 is taken by the first to wait";
  JoinOutcome& a = join(rdzv, params(rdzv, "a", 0));
  run_fired();
  ASSERT_TRUE(a.called && b_again.called);
  EXPECT_EQ(b_again.assignment.node_rank, 1);
  EXPECT_EQ(b_again.assignment.generation, 1);
  EXPECT_FALSE(dup.called);
  rdzv.expire(start + 30s, fired);
  run_fired();
  EXPECT_EQ(dup.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(dup.status.message().find("(node rank 1 among them)"), std::string::npos) << dup.status.message();
}

TEST_F(RendezvousTest, JoinWithADifferentNnodesIsRefused) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  JoinParams p = params(rdzv, "a");
  p.nnodes = 3;
  JoinOutcome& o = join(rdzv, p);
  run_fired();
  EXPECT_EQ(o.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(o.status.message().find("mismatch"), std::string::npos) << o.status.message();
}

TEST_F(RendezvousTest, JoinWithADifferentNprocIsRefused) {
  Rendezvous rdzv(2, 4);
  rdzv.open(0);
  JoinParams p = params(rdzv, "a");
  p.nproc = 8;
  JoinOutcome& o = join(rdzv, p);
  run_fired();
  EXPECT_EQ(o.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(o.status.message().find("nproc"), std::string::npos) << o.status.message();
}

TEST_F(RendezvousTest, DuplicateExplicitNodeRankIsRefused) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  JoinOutcome& first = join(rdzv, params(rdzv, "a", 1));
  JoinOutcome& dup = join(rdzv, params(rdzv, "b", 1));
  run_fired();
  EXPECT_FALSE(first.called);
  EXPECT_EQ(dup.status.code(), StatusCode::kAlreadyExists);
}

TEST_F(RendezvousTest, NodeRankOutsideTheWorldIsRefused) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  JoinOutcome& high = join(rdzv, params(rdzv, "a", 2));
  JoinOutcome& low = join(rdzv, params(rdzv, "b", -2));
  run_fired();
  EXPECT_EQ(high.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(low.status.code(), StatusCode::kInvalidArgument);
}

TEST_F(RendezvousTest, RefusedJoinsDoNotCountTowardTheWorld) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  JoinParams bad = params(rdzv, "bad");
  bad.nproc = 3;
  join(rdzv, params(rdzv, "a"));
  join(rdzv, bad);
  run_fired();
  EXPECT_FALSE(rdzv.complete());
  JoinOutcome& b = join(rdzv, params(rdzv, "b"));
  run_fired();
  EXPECT_TRUE(rdzv.complete());
  EXPECT_TRUE(b.status.ok());
  EXPECT_EQ(b.assignment.node_rank, 1);
}

TEST_F(RendezvousTest, ExpireBeforeAnyDeadlineDoesNothing) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "a"), 10s);
  EXPECT_FALSE(rdzv.expire(start + 9s, fired));
  EXPECT_TRUE(fired.empty());
  EXPECT_FALSE(a.called);
}

TEST_F(RendezvousTest, OneExpiredJoinRefusesEveryPendingJoin) {
  Rendezvous rdzv(3, 1);
  rdzv.open(0);
  JoinOutcome& a = join(rdzv, params(rdzv, "host-a"), 10s);
  JoinOutcome& b = join(rdzv, params(rdzv, "host-b"), 100s);
  EXPECT_TRUE(rdzv.expire(start + 10s, fired));
  run_fired();
  for (const JoinOutcome* o : {&a, &b}) {
    EXPECT_TRUE(o->called);
    EXPECT_EQ(o->status.code(), StatusCode::kDeadlineExceeded);
  }
  EXPECT_NE(a.status.message().find("2 of 3"), std::string::npos) << a.status.message();
  EXPECT_NE(a.status.message().find("host-b"), std::string::npos) << a.status.message();
  EXPECT_FALSE(rdzv.complete());
}

TEST_F(RendezvousTest, ExpireWithNothingPendingReturnsFalse) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  EXPECT_FALSE(rdzv.expire(start + 1000s, fired));
}

TEST_F(RendezvousTest, ExpireAfterTheWorldFormedDoesNothing) {
  Rendezvous rdzv(1, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"), 1s);
  run_fired();
  EXPECT_FALSE(rdzv.expire(start + 100s, fired));
  EXPECT_TRUE(fired.empty());
  EXPECT_TRUE(rdzv.complete());
}

TEST_F(RendezvousTest, AfterExpiryTheRefusedAgentsExplicitRanksAreFreeAgain) {
  Rendezvous rdzv(2, 1);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a", 0), 1s);
  ASSERT_TRUE(rdzv.expire(start + 1s, fired));
  run_fired();
  JoinOutcome& again = join(rdzv, params(rdzv, "a", 0));
  JoinOutcome& b = join(rdzv, params(rdzv, "b"));
  run_fired();
  EXPECT_TRUE(again.status.ok()) << again.status.message();
  EXPECT_EQ(again.assignment.node_rank, 0);
  EXPECT_EQ(b.assignment.node_rank, 1);
}

// 2048 agents: unique, contiguous node ranks and rank_start = node_rank * nproc.
// The world forms in O(n); this must stay fast.
TEST_F(RendezvousTest, TwoThousandFortyEightNodesGetContiguousRanksAndPrefixSums) {
  constexpr int kNodes = 2048;
  constexpr int kNproc = 8;
  Rendezvous rdzv(kNodes, kNproc);
  rdzv.open(0);
  std::vector<JoinOutcome*> by_arrival;
  for (int i = 0; i < kNodes; ++i) by_arrival.push_back(&join(rdzv, params(rdzv, "node-" + std::to_string(i))));
  ASSERT_EQ(fired.size(), static_cast<size_t>(kNodes));
  run_fired();

  std::vector<int> seen(kNodes, 0);
  for (int i = 0; i < kNodes; ++i) {
    const JoinOutcome& o = *by_arrival[static_cast<size_t>(i)];
    ASSERT_TRUE(o.status.ok());
    const Assignment& a = o.assignment;
    ASSERT_GE(a.node_rank, 0);
    ASSERT_LT(a.node_rank, kNodes);
    ++seen[static_cast<size_t>(a.node_rank)];
    EXPECT_EQ(a.node_rank, i);  // arrival order
    EXPECT_EQ(a.rank_start, a.node_rank * kNproc);
    EXPECT_EQ(a.world_size, kNodes * kNproc);
    EXPECT_EQ(a.master_addr, "node-0");
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));

  // A restart with the agents arriving in reverse keeps every host's rank.
  rdzv.open(1);
  std::vector<JoinOutcome*> reversed(kNodes);
  for (int i = kNodes - 1; i >= 0; --i) {
    reversed[static_cast<size_t>(i)] = &join(rdzv, params(rdzv, "node-" + std::to_string(i)));
  }
  run_fired();
  for (int i = 0; i < kNodes; ++i) {
    const Assignment& a = reversed[static_cast<size_t>(i)]->assignment;
    ASSERT_EQ(a.node_rank, i);
    ASSERT_EQ(a.rank_start, i * kNproc);
  }
}

// ------------------------------------------------- elastic (--nnodes=MIN:MAX)

TEST_F(RendezvousTest, ElasticFormsAtOnceWhenMaxNodesHaveJoined) {
  Rendezvous rdzv(2, 1, /*min_nnodes=*/1, 30s);
  rdzv.open(0);
  EXPECT_TRUE(rdzv.elastic());
  join(rdzv, params(rdzv, "a"));
  EXPECT_FALSE(rdzv.complete());
  join(rdzv, params(rdzv, "b"), 60s, 1s);
  EXPECT_TRUE(rdzv.complete());
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(fired[0].assignment.nnodes, 2);
  EXPECT_EQ(fired[0].assignment.world_size, 2);
}

TEST_F(RendezvousTest, ElasticFormsWithTheNodesPresentOnceTheLastCallPassesWithoutANewcomer) {
  Rendezvous rdzv(4, 2, /*min_nnodes=*/2, 10s);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  EXPECT_FALSE(rdzv.close_last_call(start + 100s, fired));  // below MIN: no last call yet
  join(rdzv, params(rdzv, "b"), 60s, 5s);                    // MIN reached at 5 s: last call at 15 s
  join(rdzv, params(rdzv, "c"), 60s, 12s);                   // a newcomer: last call at 22 s
  EXPECT_FALSE(rdzv.close_last_call(start + 21s, fired));
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(rdzv.waiting_summary(start + 20s).value_or(""),
            "3 of 2:4 node(s) joined generation 0 (hosts: a, b, c); MIN reached: the world forms with the nodes "
            "present in 2 s unless another joins");
  EXPECT_TRUE(rdzv.close_last_call(start + 22s, fired));
  EXPECT_TRUE(rdzv.complete());
  EXPECT_EQ(rdzv.nnodes(), 3);
  ASSERT_EQ(fired.size(), 3u);
  std::set<int> ranks;
  for (const auto& f : fired) {
    EXPECT_TRUE(f.status.ok());
    EXPECT_EQ(f.assignment.nnodes, 3);
    EXPECT_EQ(f.assignment.world_size, 6);
    EXPECT_EQ(f.assignment.rank_start, 2 * f.assignment.node_rank);
    ranks.insert(f.assignment.node_rank);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  EXPECT_FALSE(rdzv.close_last_call(start + 100s, fired));  // formed already
}

TEST_F(RendezvousTest, ElasticWorldClosesTheGapsBetweenAskedRanksAndKeepsTheirOrder) {
  Rendezvous rdzv(4, 1, /*min_nnodes=*/1, 1s);
  rdzv.open(0);
  join(rdzv, params(rdzv, "c", 3));
  join(rdzv, params(rdzv, "a", 1));
  ASSERT_TRUE(rdzv.close_last_call(start + 1s, fired));
  std::map<std::string, int> rank_of_host;
  for (const auto& f : fired) rank_of_host[f.assignment.host] = f.assignment.node_rank;
  EXPECT_EQ(rank_of_host, (std::map<std::string, int>{{"a", 0}, {"c", 1}}));
  EXPECT_EQ(rdzv.hosts(), (std::vector<std::string>{"a", "c"}));
}

TEST_F(RendezvousTest, ElasticAgentsMustAgreeOnTheRange) {
  Rendezvous rdzv(2, 1, /*min_nnodes=*/1, 30s);
  rdzv.open(0);
  JoinParams fixed = params(rdzv, "a");
  fixed.min_nnodes = 2;  // --nnodes=2 against a 1:2 job
  auto& refused = join(rdzv, fixed);
  run_fired();
  EXPECT_EQ(refused.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status.message().find("this agent expects 2 node(s), the job has 1:2"), std::string::npos)
      << refused.status.message();
}

TEST_F(RendezvousTest, ElasticRestartFormsAsSoonAsThePreviousWorldIsBack) {
  Rendezvous rdzv(3, 1, /*min_nnodes=*/1, 30s);
  rdzv.open(0);
  join(rdzv, params(rdzv, "a"));
  join(rdzv, params(rdzv, "b"));
  ASSERT_TRUE(rdzv.close_last_call(start + 30s, fired));
  fired.clear();
  rdzv.open(1);
  join(rdzv, params(rdzv, "b"), 60s, 40s);
  EXPECT_FALSE(rdzv.complete());
  join(rdzv, params(rdzv, "a"), 60s, 41s);
  EXPECT_TRUE(rdzv.complete());  // no last call: both nodes of generation 0 are back
  EXPECT_EQ(rdzv.nnodes(), 2);
}

}  // namespace
}  // namespace ddp
