#include "coordinator/coordinator_job.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "exit_codes.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// The job with its clock and ID source. Shared so that a thread left behind
// by a deadlock (see finishes_within) keeps everything it touches alive.
struct Harness {
  explicit Harness(const JobConfig& config, const std::optional<Takeover>& takeover = std::nullopt)
      : ids(make_random_id_source()), job("job-1", "secret-token-0123", config, clock, *ids, takeover) {}
  FakeClock clock;
  std::unique_ptr<UniqueIdSource> ids;
  CoordinatorJob job;
};

struct JoinOutcome {
  int calls = 0;
  Status status;
  Assignment assignment;
};

struct WatchOutcome {
  int calls = 0;
  Status status;
  GenerationView view;
};

struct WaitOutcome {
  int calls = 0;
  Status status;
};

JoinCallback record(const std::shared_ptr<JoinOutcome>& out) {
  return [out](const Status& s, const Assignment& a) {
    ++out->calls;
    out->status = s;
    out->assignment = a;
  };
}

WatchCallback record(const std::shared_ptr<WatchOutcome>& out) {
  return [out](const Status& s, const GenerationView& v) {
    ++out->calls;
    out->status = s;
    out->view = v;
  };
}

WaitCallback record(const std::shared_ptr<WaitOutcome>& out) {
  return [out](const Status& s) {
    ++out->calls;
    out->status = s;
  };
}

// Runs call on its own thread and reports whether it returned within 5 s.
// On a deadlock the thread is detached (it keeps the harness alive through
// keep_alive) so the test fails instead of hanging.
::testing::AssertionResult finishes_within(const std::shared_ptr<Harness>& keep_alive, std::function<void()> call) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> returned = done->get_future();
  std::thread worker([keep_alive, call = std::move(call), done] {
    call();
    done->set_value();
  });
  if (returned.wait_for(5s) == std::future_status::ready) {
    worker.join();
    return ::testing::AssertionSuccess();
  }
  worker.detach();
  return ::testing::AssertionFailure()
         << "the call did not return within 5 s: a callback ran under the job's mutex (deadlock)";
}

class CoordinatorJobTest : public ::testing::Test {
 protected:
  void make(int nnodes, int nproc = 2, int max_restarts = 0, Duration node_timeout = 15s) {
    JobConfig config;
    config.nnodes = nnodes;
    config.nproc = nproc;
    config.max_restarts = max_restarts;
    config.node_timeout = node_timeout;
    h = std::make_shared<Harness>(config);
  }
  CoordinatorJob& job() { return h->job; }
  FakeClock& clock() { return h->clock; }

  JoinParams params(const std::string& host, int64_t generation = 0, int node_rank = -1) const {
    JoinParams p;
    p.host = host;
    p.nproc = h->job.config().nproc;
    p.nnodes = h->job.config().nnodes;
    p.node_rank = node_rank;
    p.generation = generation;
    p.master_port = 29500;
    return p;
  }
  static std::string host(int i) { return "host-" + std::to_string(i); }

  std::shared_ptr<JoinOutcome> join(const JoinParams& p, Duration timeout = 60s) {
    auto out = std::make_shared<JoinOutcome>();
    job().join(p, timeout, record(out));
    return out;
  }

  // Joins one agent per host, in the order given, and checks that the world formed.
  std::vector<std::shared_ptr<JoinOutcome>> form_world(const std::vector<std::string>& hosts, int64_t generation = 0) {
    std::vector<std::shared_ptr<JoinOutcome>> outs;
    for (const auto& name : hosts) outs.push_back(join(params(name, generation)));
    for (const auto& o : outs) {
      EXPECT_EQ(o->calls, 1);
      EXPECT_TRUE(o->status.ok()) << o->status.message();
    }
    return outs;
  }
  // host-0 .. host-(nnodes-1), arriving in that order (so node rank i is host-i).
  std::vector<std::shared_ptr<JoinOutcome>> form_world(int64_t generation = 0) {
    std::vector<std::string> hosts;
    for (int i = 0; i < job().config().nnodes; ++i) hosts.push_back(host(i));
    return form_world(hosts, generation);
  }

  Status report(int64_t generation, int node, int exit_code, bool stopped = false, int failed_rank = -1,
                const std::string& description = "") {
    NodeOutcome o;
    o.node_rank = node;
    o.success = exit_code == 0 && !stopped;
    o.stopped = stopped;
    o.exit_code = exit_code;
    o.failed_rank = failed_rank;
    o.description = description;
    return job().report_outcome(generation, o);
  }

  std::shared_ptr<WatchOutcome> watch(int64_t generation, GenerationState known, Duration timeout = 30s) {
    auto out = std::make_shared<WatchOutcome>();
    job().watch(-1, generation, known, timeout, record(out));
    return out;
  }

  std::shared_ptr<WaitOutcome> kv_wait(int64_t generation, std::vector<std::string> keys, Duration timeout = 30s) {
    auto out = std::make_shared<WaitOutcome>();
    job().kv_wait(generation, std::move(keys), timeout, record(out));
    return out;
  }

  std::shared_ptr<Harness> h;
};

// ---------------------------------------------------------------- join

TEST_F(CoordinatorJobTest, TokenMatchesOnlyTheExactToken) {
  make(1);
  EXPECT_TRUE(job().token_matches("secret-token-0123"));
  EXPECT_FALSE(job().token_matches("secret-token-0124"));
  EXPECT_FALSE(job().token_matches("secret-token-012"));
  EXPECT_FALSE(job().token_matches(""));
}

TEST_F(CoordinatorJobTest, JoinIsParkedUntilEveryNodeHasJoined) {
  make(3);
  auto a = join(params("a"));
  auto b = join(params("b"));
  EXPECT_EQ(a->calls, 0);
  EXPECT_EQ(b->calls, 0);
  auto c = join(params("c"));
  for (const auto& o : {a, b, c}) {
    EXPECT_EQ(o->calls, 1);
    EXPECT_TRUE(o->status.ok()) << o->status.message();
  }
}

TEST_F(CoordinatorJobTest, JoinAnswersEveryAgentWithItsPlaceInTheWorld) {
  make(3, 4);
  auto outs = form_world();
  for (int i = 0; i < 3; ++i) {
    const Assignment& a = outs[static_cast<size_t>(i)]->assignment;
    EXPECT_EQ(a.node_rank, i);
    EXPECT_EQ(a.rank_start, 4 * i);
    EXPECT_EQ(a.world_size, 12);
    EXPECT_EQ(a.nnodes, 3);
    EXPECT_EQ(a.generation, 0);
    EXPECT_EQ(a.master_addr, "host-0");
    EXPECT_EQ(a.master_port, 29500);
  }
}

TEST_F(CoordinatorJobTest, JoinHonoursAnExplicitNodeRank) {
  make(2);
  auto a = join(params("a"));
  auto b = join(params("b", 0, 0));
  EXPECT_EQ(b->assignment.node_rank, 0);
  EXPECT_EQ(a->assignment.node_rank, 1);
  EXPECT_EQ(a->assignment.master_addr, "b");
}

TEST_F(CoordinatorJobTest, JoinAfterTheWorldFormedWaitsForAPlaceAndIsRefusedAtItsDeadline) {
  // One too many for a fixed-size job whose nodes all run: it may be a
  // restarted agent whose node is not known lost yet, so it waits.
  make(1);
  form_world();
  int64_t current = 0;
  auto late = join(params("late"), 10s);
  EXPECT_EQ(late->calls, 0);
  for (int i = 0; i < 11; ++i) {
    clock().advance(1s);
    ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
    job().tick();
  }
  EXPECT_EQ(late->calls, 1);
  EXPECT_EQ(late->status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(late->status.message().find("generation 0 runs with all its 1 node(s) and none of them left"),
            std::string::npos)
      << late->status.message();
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
}

TEST_F(CoordinatorJobTest, AnAgentStartedAgainAfterItsNodeWasLostJoinsTheNextGeneration) {
  // Node 1's agent is killed and a supervisor starts it again at once: it
  // asks for generation 0, whose world is complete. It waits; node 1 is
  // found silent, the job restarts, and the new agent takes node rank 1.
  make(2, 1, /*max_restarts=*/1, 10s);
  form_world();
  auto again = join(params(host(1), 0, 1));
  EXPECT_EQ(again->calls, 0);
  int64_t current = 0;
  for (int i = 0; i < 12 && job().current_view().generation == 0; ++i) {
    clock().advance(1s);
    ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
    job().tick();
    if (job().current_view().state == GenerationState::kStopping) {
      ASSERT_TRUE(report(0, 0, 143, true).ok());
    }
  }
  ASSERT_EQ(job().current_view().generation, 1);
  EXPECT_EQ(again->calls, 0) << "the world of generation 1 forms once node 0 is back";
  auto node0 = join(params(host(0), 1, 0));
  ASSERT_EQ(node0->calls, 1);
  ASSERT_EQ(again->calls, 1);
  ASSERT_TRUE(again->status.ok()) << again->status.message();
  EXPECT_EQ(again->assignment.node_rank, 1);
  EXPECT_EQ(again->assignment.generation, 1);
  EXPECT_EQ(again->assignment.restarts_used, 1);
}

TEST_F(CoordinatorJobTest, AnAgentStartedAgainWhileTheNextGenerationFormsJoinsIt) {
  make(2, 1, /*max_restarts=*/1);
  form_world();
  ASSERT_TRUE(report(0, 1, 9).ok());
  ASSERT_TRUE(report(0, 0, 143, true).ok());
  ASSERT_EQ(job().current_view().generation, 1);
  auto node0 = join(params(host(0), 1, 0));
  auto again = join(params(host(1), 0, 1));  // knows nothing of generation 1
  ASSERT_EQ(again->calls, 1);
  ASSERT_TRUE(again->status.ok()) << again->status.message();
  EXPECT_EQ(again->assignment.generation, 1);
  EXPECT_EQ(node0->calls, 1);
}

TEST_F(CoordinatorJobTest, AnAgentWaitingForTheNextGenerationIsAnsweredWhenTheJobFinishesInstead) {
  make(2, 1, /*max_restarts=*/0);
  form_world();
  auto again = join(params(host(1), 0, 1));
  EXPECT_EQ(again->calls, 0);
  ASSERT_TRUE(report(0, 1, 9).ok());
  ASSERT_TRUE(report(0, 0, 143, true).ok());
  ASSERT_TRUE(job().finished());
  ASSERT_EQ(again->calls, 1);
  EXPECT_EQ(again->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(again->status.message(), "the job has finished");
}

TEST_F(CoordinatorJobTest, JoinWithAMismatchedWorldIsRefused) {
  make(2, 4);
  JoinParams p = params("a");
  p.nproc = 2;
  auto o = join(p);
  EXPECT_EQ(o->status.code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorJobTest, JoinForAFinishedJobIsRefused) {
  make(1);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  ASSERT_TRUE(job().finished());
  auto o = join(params("a", 0));
  EXPECT_EQ(o->calls, 1);
  EXPECT_EQ(o->status.code(), StatusCode::kFailedPrecondition);
  auto next = join(params("a", 1));
  EXPECT_EQ(next->calls, 1);
  EXPECT_EQ(next->status.code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorJobTest, JoinNotCompletedBeforeItsTimeoutIsRefusedOnTick) {
  make(2);
  auto a = join(params("a"), 10s);
  clock().advance(9s);
  job().tick();
  EXPECT_EQ(a->calls, 0);
  clock().advance(1s);
  job().tick();
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorJobTest, TwoThousandFortyEightAgentsGetContiguousRanks) {
  constexpr int kNodes = 2048;
  constexpr int kNproc = 8;
  make(kNodes, kNproc);
  std::vector<std::shared_ptr<JoinOutcome>> outs;
  outs.reserve(kNodes);
  for (int i = 0; i < kNodes; ++i) outs.push_back(join(params(host(i))));
  std::set<int> ranks;
  for (const auto& o : outs) {
    ASSERT_EQ(o->calls, 1);
    ASSERT_TRUE(o->status.ok());
    ranks.insert(o->assignment.node_rank);
    EXPECT_EQ(o->assignment.rank_start, o->assignment.node_rank * kNproc);
    EXPECT_EQ(o->assignment.world_size, kNodes * kNproc);
  }
  ASSERT_EQ(ranks.size(), static_cast<size_t>(kNodes));
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), kNodes - 1);
}

// ---------------------------------------------------------------- heartbeats

TEST_F(CoordinatorJobTest, HeartbeatReportsTheCurrentGeneration) {
  make(1, 1, 1);
  form_world();
  int64_t current = -1;
  ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
  EXPECT_EQ(current, 0);
  ASSERT_TRUE(report(0, 0, 1).ok());  // failure with a restart left
  ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
  EXPECT_EQ(current, 1);
}

TEST_F(CoordinatorJobTest, HeartbeatWithANodeRankOutsideTheWorldIsInvalid) {
  make(2);
  int64_t current = -1;
  EXPECT_EQ(job().heartbeat(2, 0, current).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(job().heartbeat(-1, 0, current).code(), StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorJobTest, NoNodeIsLostBeforeNodeTimeout) {
  make(2, 1, 0, 10s);
  form_world();
  clock().advance(10s - 1ms);
  job().tick();
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
}

TEST_F(CoordinatorJobTest, NodesAreNotDeclaredLostBeforeTheWorldForms) {
  make(2, 1, 0, 10s);
  clock().advance(1h);
  job().tick();
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  EXPECT_FALSE(job().finished());
}

TEST_F(CoordinatorJobTest, HeartbeatKeepsANodeAlivePastNodeTimeoutWhileASilentNodeIsLost) {
  make(2, 1, 0, 10s);
  form_world();
  int64_t current = 0;
  for (int i = 0; i < 3; ++i) {
    clock().advance(6s);
    ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
    job().tick();
  }
  // 18 s in: node 0 heartbeated 0 s ago, node 1 never.
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.state, GenerationState::kStopping);
  EXPECT_EQ(v.failed_node, 1);
  EXPECT_NE(v.reason.find("host-1"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("silent"), std::string::npos) << v.reason;
  EXPECT_FALSE(job().finished());

  ASSERT_TRUE(report(0, 0, 143, /*stopped=*/true).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kNodeLost);
}

TEST_F(CoordinatorJobTest, HeartbeatForAnEarlierGenerationDoesNotKeepANodeAlive) {
  make(1, 1, 1, 10s);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  form_world(1);
  int64_t current = 0;
  clock().advance(6s);
  ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
  EXPECT_EQ(current, 1);
  clock().advance(6s);
  job().tick();
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kNodeLost);
}

TEST_F(CoordinatorJobTest, EveryNodeSilentFinishesTheJobWithTheNodeLostCode) {
  make(2, 1, 0, 10s);
  form_world();
  clock().advance(10s);
  job().tick();
  EXPECT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.state, GenerationState::kFinished);
  EXPECT_EQ(v.exit_code, exit_code::kNodeLost);
  EXPECT_EQ(v.failed_node, 0);
}

TEST_F(CoordinatorJobTest, ANodeThatReportedIsNotDeclaredLostLater) {
  make(2, 1, 0, 10s);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());  // node 0 done, success
  int64_t current = 0;
  clock().advance(8s);
  ASSERT_TRUE(job().heartbeat(1, 0, current).ok());
  clock().advance(8s);
  job().tick();
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  ASSERT_TRUE(report(0, 1, 0).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 0);
}

// ---------------------------------------------------------------- outcomes and verdict

TEST_F(CoordinatorJobTest, AllNodesSucceedingFinishesTheJobWithZero) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  EXPECT_FALSE(job().finished());
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  ASSERT_TRUE(report(0, 1, 0).ok());
  EXPECT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.state, GenerationState::kFinished);
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.failed_node, -1);
}

TEST_F(CoordinatorJobTest, FirstFailureStopsTheGenerationAndNamesTheRootCause) {
  make(3);
  form_world();
  ASSERT_TRUE(report(0, 2, 9, false, 17, "rank 17 exited with code 9").ok());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.state, GenerationState::kStopping);
  EXPECT_EQ(v.failed_node, 2);
  EXPECT_EQ(v.failed_rank, 17);
  EXPECT_EQ(v.reason, "rank 17 exited with code 9");
  EXPECT_FALSE(job().finished());
}

TEST_F(CoordinatorJobTest, FailureWithNoRestartsLeftFinishesWithTheRootCausesExitCode) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 1, 7).ok());
  ASSERT_TRUE(report(0, 0, 143, /*stopped=*/true).ok());
  EXPECT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.exit_code, 7);
  EXPECT_EQ(v.failed_node, 1);
  EXPECT_EQ(v.generation, 0);
}

TEST_F(CoordinatorJobTest, StoppedOutcomeIsNotARootCause) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 0, 143, /*stopped=*/true).ok());
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  EXPECT_EQ(job().current_view().failed_node, -1);
  ASSERT_TRUE(report(0, 1, 7).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 7);
  EXPECT_EQ(job().current_view().failed_node, 1);
}

TEST_F(CoordinatorJobTest, OnlyStoppedOutcomesFinishTheJobWithZero) {
  make(1);
  form_world();
  ASSERT_TRUE(report(0, 0, 143, /*stopped=*/true).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 0);
}

TEST_F(CoordinatorJobTest, TheFirstFailureRemainsTheRootCause) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 1, 3).ok());
  ASSERT_TRUE(report(0, 0, 5).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 3);
  EXPECT_EQ(job().current_view().failed_node, 1);
}

TEST_F(CoordinatorJobTest, AFailureSeenEarlierButReportedLaterIsTheRootCause) {
  // Rank 2 (node 1) exits with code 7; rank 1 (node 0), in a collective with
  // it, fails 243 ms later of the reset connection. Node 0 finishes stopping
  // its other rank first and reports first: the earlier failure is still the
  // cause, and the job ends with its exit code.
  make(3);
  form_world();
  NodeOutcome consequence;
  consequence.node_rank = 0;
  consequence.exit_code = 1;
  consequence.failed_rank = 1;
  consequence.failed_at_unix_ms = 1'796'540'007'163;
  consequence.description = "rank 1 (node 0, local rank 1, pid 19404) failed: exit code 1";
  NodeOutcome cause = consequence;
  cause.node_rank = 1;
  cause.exit_code = 7;
  cause.failed_rank = 2;
  cause.failed_at_unix_ms = 1'796'540'006'920;
  cause.description = "rank 2 (node 1, local rank 0, pid 19402) failed: exit code 7";
  ASSERT_TRUE(job().report_outcome(0, consequence).ok());
  EXPECT_EQ(job().current_view().failed_rank, 1);
  ASSERT_TRUE(job().report_outcome(0, cause).ok());
  EXPECT_EQ(job().current_view().failed_rank, 2) << "named before the last node reports";
  ASSERT_TRUE(report(0, 2, 0, /*stopped=*/true).ok());
  ASSERT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.exit_code, 7);
  EXPECT_EQ(v.failed_node, 1);
  EXPECT_EQ(v.failed_rank, 2);
  EXPECT_EQ(v.reason, "rank 2 (node 1, local rank 0, pid 19402) failed: exit code 7; reported after rank 1 "
                      "(node 0, local rank 1, pid 19404) failed: exit code 1, seen 0.24 s later and taken as its "
                      "consequence");

  // One whose time is unknown (an older agent) changes nothing: the first reported stays.
  make(2);
  form_world();
  ASSERT_TRUE(job().report_outcome(0, cause).ok());
  NodeOutcome unknown = consequence;
  unknown.failed_at_unix_ms = 0;
  ASSERT_TRUE(job().report_outcome(0, unknown).ok());
  ASSERT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().failed_rank, 2);
  EXPECT_EQ(job().current_view().reason, cause.description);
}

TEST_F(CoordinatorJobTest, ANodeSilentSinceBeforeTheFirstFailureIsItsRootCause) {
  // Node 1's agent is killed: its rank vanishes, node 0's rank fails in a
  // collective at once, and node 0 reports that before node 1's silence is
  // sure. The silence began first: the job ends as node lost, naming node 1.
  make(2, 1, 0, 10s);
  form_world();
  int64_t current = 0;
  clock().advance(500ms);
  ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
  ASSERT_TRUE(job().heartbeat(1, 0, current).ok());  // node 1's last heartbeat
  clock().advance(300ms);
  ASSERT_TRUE(report(0, 0, 1, false, 0, "rank 0 failed: exit code 1 (Connection closed by peer)").ok());
  EXPECT_EQ(job().current_view().failed_node, 0);
  for (int i = 0; i < 20 && !job().finished(); ++i) {
    clock().advance(500ms);
    job().tick();
  }
  ASSERT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.exit_code, exit_code::kNodeLost);
  EXPECT_EQ(v.failed_node, 1);
  EXPECT_EQ(v.failed_rank, -1);
  EXPECT_NE(v.reason.find("node 1 (host-1) went silent"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("taken as its consequence: rank 0 failed: exit code 1"), std::string::npos) << v.reason;
}

TEST_F(CoordinatorJobTest, ANodeThatHeartbeatedAfterTheFailureAndThenWentSilentIsNotItsRootCause) {
  make(2, 1, 0, 10s);
  form_world();
  int64_t current = 0;
  clock().advance(500ms);
  ASSERT_TRUE(report(0, 0, 1, false, 0, "rank 0 failed: exit code 1").ok());
  clock().advance(500ms);
  ASSERT_TRUE(job().heartbeat(1, 0, current).ok());  // alive after the failure, then gone
  for (int i = 0; i < 40 && !job().finished(); ++i) {
    clock().advance(500ms);
    job().tick();
  }
  ASSERT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_EQ(v.failed_node, 0);
  EXPECT_EQ(v.reason, "rank 0 failed: exit code 1");
}

TEST_F(CoordinatorJobTest, ASecondReportFromTheSameNodeIsIgnored) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  ASSERT_TRUE(report(0, 0, 9).ok());
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  ASSERT_TRUE(report(0, 1, 0).ok());
  EXPECT_EQ(job().current_view().exit_code, 0);
}

TEST_F(CoordinatorJobTest, ReportBeforeTheWorldFormsIsRefused) {
  make(2);
  EXPECT_EQ(report(0, 0, 1).code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorJobTest, ReportForAnotherGenerationIsRefused) {
  make(1);
  form_world();
  EXPECT_EQ(report(1, 0, 1).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(job().finished());
}

TEST_F(CoordinatorJobTest, ReportWithANodeRankOutsideTheWorldIsInvalid) {
  make(2);
  form_world();
  EXPECT_EQ(report(0, 2, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(report(0, -1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
}

// ---------------------------------------------------------------- restarts

TEST_F(CoordinatorJobTest, FailureWithARestartLeftOpensTheNextGeneration) {
  make(2, 2, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  EXPECT_FALSE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.generation, 1);
  EXPECT_EQ(v.state, GenerationState::kRunning);

  auto outs = form_world({host(0), host(1)}, 1);
  EXPECT_EQ(outs[0]->assignment.generation, 1);
}

TEST_F(CoordinatorJobTest, StatusGivesHowLongTheRendezvousAndTheLastTeardownTook) {
  make(2, 2, 1);
  auto status = [&] { return nlohmann::json::parse(job().status_json()); };
  EXPECT_FALSE(status().contains("rendezvous_s")) << "no world yet";
  join(params(host(0)));
  clock().advance(1500ms);
  join(params(host(1)));
  EXPECT_DOUBLE_EQ(status()["rendezvous_s"].get<double>(), 1.5);
  EXPECT_FALSE(status().contains("teardown_s")) << "no generation has ended";

  clock().advance(10s);
  ASSERT_TRUE(report(0, 0, 1).ok());  // the first node's ranks ended: the teardown begins
  clock().advance(2s);
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  EXPECT_DOUBLE_EQ(status()["teardown_s"].get<double>(), 2.0);
  EXPECT_FALSE(status().contains("rendezvous_s")) << "generation 1's world has not formed";

  clock().advance(3s);  // the next rendezvous counts from the end of the last generation
  form_world(1);
  EXPECT_DOUBLE_EQ(status()["rendezvous_s"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(status()["teardown_s"].get<double>(), 2.0) << "the last teardown stays until the next";
}

TEST_F(CoordinatorJobTest, WhileTheNextGenerationFormsTheStatusListsNoRankOfTheEndedOne) {
  make(2, 1, 1);
  form_world();
  for (int rank = 0; rank < 2; ++rank) {
    RankReport r;
    r.rank = rank;
    r.step = 40;
    int64_t current = 0;
    ASSERT_TRUE(job().heartbeat(rank, 0, current, {{r, 0s}}).ok());
  }
  auto status = [&] { return nlohmann::json::parse(job().status_json()); };
  ASSERT_EQ(status()["ranks"]["ranks"].size(), 2u);
  EXPECT_EQ(status()["ranks"]["ranks"][1]["step"], 40);
  ASSERT_TRUE(report(0, 0, 1).ok());
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  ASSERT_EQ(status()["generation"], 1);
  EXPECT_EQ(status()["state"], "rendezvous");
  EXPECT_EQ(status()["ranks"]["ranks"], nlohmann::json::array()) << "generation 0's ranks run no more";
  EXPECT_TRUE(status()["ranks"]["seconds_since_progress"].is_null());

  form_world(1);
  EXPECT_EQ(status()["state"], "running");
  ASSERT_EQ(status()["ranks"]["ranks"].size(), 2u);
  EXPECT_FALSE(status()["ranks"]["ranks"][1].contains("step")) << "no heartbeat in generation 1 yet";
}

TEST_F(CoordinatorJobTest, ARestartedGenerationDoesNotCarryThePreviousFailure) {
  make(2, 2, 1);
  form_world();
  ASSERT_TRUE(report(0, 1, 1, false, 3, "rank 3 failed").ok());
  ASSERT_TRUE(report(0, 0, 143, true).ok());
  const GenerationView v = job().current_view();
  ASSERT_EQ(v.generation, 1);
  EXPECT_EQ(v.failed_node, -1);
  EXPECT_EQ(v.failed_rank, -1);
  EXPECT_EQ(v.reason, "");
}

TEST_F(CoordinatorJobTest, RestartKeepsEveryHostsNodeRank) {
  make(3, 1, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  ASSERT_TRUE(report(0, 2, 143, true).ok());
  auto outs = form_world({host(2), host(0), host(1)}, 1);
  EXPECT_EQ(outs[0]->assignment.node_rank, 2);
  EXPECT_EQ(outs[1]->assignment.node_rank, 0);
  EXPECT_EQ(outs[2]->assignment.node_rank, 1);
  EXPECT_EQ(outs[0]->assignment.master_addr, host(0));
}

TEST_F(CoordinatorJobTest, RestartEmptiesTheKeyValueStore) {
  make(1, 1, 1);
  form_world();
  ASSERT_TRUE(job().kv_set(0, "k", "v").ok());
  ASSERT_TRUE(report(0, 0, 1).ok());
  std::optional<std::string> value = std::string("sentinel");
  ASSERT_TRUE(job().kv_get(1, "k", value).ok());
  EXPECT_FALSE(value.has_value());
}

TEST_F(CoordinatorJobTest, RestartGivesNewNcclIds) {
  make(1, 1, 1);
  form_world();
  std::string before, after;
  ASSERT_TRUE(job().nccl_id(0, "world", before).ok());
  ASSERT_TRUE(report(0, 0, 1).ok());
  ASSERT_TRUE(job().nccl_id(1, "world", after).ok());
  EXPECT_EQ(after.size(), kUniqueIdBytes);
  EXPECT_NE(before, after);
}

TEST_F(CoordinatorJobTest, CallsForTheEndedGenerationAreRefusedAfterARestart) {
  make(1, 1, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  std::string id;
  std::optional<std::string> value;
  EXPECT_EQ(job().kv_set(0, "k", "v").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().kv_get(0, "k", value).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().nccl_id(0, "world", id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(report(0, 0, 1).code(), StatusCode::kFailedPrecondition);
  // A join for generation 0 is an agent started again: it joins generation 1.
  auto again = join(params("host-0", 0));
  ASSERT_EQ(again->calls, 1);
  EXPECT_TRUE(again->status.ok()) << again->status.message();
  EXPECT_EQ(again->assignment.generation, 1);
}

TEST_F(CoordinatorJobTest, JobFinishesOnceTheRestartsAreSpent) {
  make(1, 1, 2);
  for (int64_t gen = 0; gen < 3; ++gen) {
    form_world({host(0)}, gen);
    EXPECT_FALSE(job().finished());
    ASSERT_TRUE(report(gen, 0, 10 + static_cast<int>(gen)).ok());
  }
  EXPECT_TRUE(job().finished());
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.generation, 2);
  EXPECT_EQ(v.exit_code, 12);
}

TEST_F(CoordinatorJobTest, SuccessAfterARestartFinishesWithZero) {
  make(2, 1, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  form_world(1);
  ASSERT_TRUE(report(1, 0, 0).ok());
  ASSERT_TRUE(report(1, 1, 0).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 0);
  EXPECT_EQ(job().current_view().generation, 1);
}

TEST_F(CoordinatorJobTest, SuccessDoesNotSpendARestart) {
  make(1, 1, 5);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().generation, 0);
}

// ---------------------------------------------------------------- watch

TEST_F(CoordinatorJobTest, WatchIsAnsweredAtOnceWhenTheStateAlreadyDiffers) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 0, 4).ok());
  auto w = watch(0, GenerationState::kRunning);
  EXPECT_EQ(w->calls, 1);
  EXPECT_TRUE(w->status.ok());
  EXPECT_EQ(w->view.state, GenerationState::kStopping);
}

TEST_F(CoordinatorJobTest, WatchParkedOnRunningIsAnsweredWithStoppingWhenAnotherNodeFails) {
  make(2);
  form_world();
  auto w = watch(0, GenerationState::kRunning, 30s);
  EXPECT_EQ(w->calls, 0);
  ASSERT_TRUE(report(0, 1, 6, false, 2, "rank 2 died").ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_TRUE(w->status.ok());
  EXPECT_EQ(w->view.generation, 0);
  EXPECT_EQ(w->view.state, GenerationState::kStopping);
  EXPECT_EQ(w->view.failed_node, 1);
  EXPECT_EQ(w->view.failed_rank, 2);
  EXPECT_EQ(w->view.reason, "rank 2 died");
}

TEST_F(CoordinatorJobTest, WatchParkedOnRunningIsAnsweredWithStoppingWhenANodeIsLost) {
  make(2, 1, 0, 10s);
  form_world();
  auto w = watch(0, GenerationState::kRunning, 60s);
  int64_t current = 0;
  clock().advance(6s);
  ASSERT_TRUE(job().heartbeat(0, 0, current).ok());
  clock().advance(6s);
  job().tick();
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->view.state, GenerationState::kStopping);
  EXPECT_EQ(w->view.failed_node, 1);
}

TEST_F(CoordinatorJobTest, WatchParkedOnRunningIsAnsweredWithFinishedWhenAllSucceed) {
  make(1);
  form_world();
  auto w = watch(0, GenerationState::kRunning);
  ASSERT_TRUE(report(0, 0, 0).ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->view.state, GenerationState::kFinished);
  EXPECT_EQ(w->view.exit_code, 0);
}

TEST_F(CoordinatorJobTest, WatchParkedOnStoppingIsAnsweredWithFinishedAndTheExitCode) {
  make(2);
  form_world();
  ASSERT_TRUE(report(0, 0, 42).ok());
  auto w = watch(0, GenerationState::kStopping);
  EXPECT_EQ(w->calls, 0);
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->view.state, GenerationState::kFinished);
  EXPECT_EQ(w->view.exit_code, 42);
  EXPECT_EQ(w->view.failed_node, 0);
}

TEST_F(CoordinatorJobTest, WatchParkedOnStoppingIsAnsweredWithRestartingWhenTheJobRestarts) {
  make(2, 1, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 42).ok());
  auto w = watch(0, GenerationState::kStopping);
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->view.generation, 0);
  EXPECT_EQ(w->view.state, GenerationState::kRestarting);
}

TEST_F(CoordinatorJobTest, WatchOfAnEndedGenerationSeesRestarting) {
  make(1, 1, 1);
  form_world();
  ASSERT_TRUE(report(0, 0, 1).ok());
  auto w = watch(0, GenerationState::kStopping);
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->view.state, GenerationState::kRestarting);
}

TEST_F(CoordinatorJobTest, WatchWithNoChangeIsAnsweredWithTheUnchangedStateAfterItsTimeout) {
  make(2);
  form_world();
  auto w = watch(0, GenerationState::kRunning, 5s);
  clock().advance(4s);
  job().tick();
  EXPECT_EQ(w->calls, 0);
  clock().advance(1s);
  job().tick();
  EXPECT_EQ(w->calls, 1);
  EXPECT_TRUE(w->status.ok());
  EXPECT_EQ(w->view.state, GenerationState::kRunning);
  // Answered once only.
  ASSERT_TRUE(report(0, 0, 1).ok());
  EXPECT_EQ(w->calls, 1);
}

// ---------------------------------------------------------------- key-value store

TEST_F(CoordinatorJobTest, KvSetThenGetRoundTripsWithinTheGeneration) {
  make(1);
  ASSERT_TRUE(job().kv_set(0, "k", "v").ok());
  std::optional<std::string> value;
  ASSERT_TRUE(job().kv_get(0, "k", value).ok());
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(*value, "v");
  ASSERT_TRUE(job().kv_get(0, "absent", value).ok());
  EXPECT_FALSE(value.has_value());
}

TEST_F(CoordinatorJobTest, KvAddCompareSetAndDeletePrefixWorkThroughTheJob) {
  make(1);
  int64_t sum = 0;
  ASSERT_TRUE(job().kv_add(0, "n", 2, sum).ok());
  ASSERT_TRUE(job().kv_add(0, "n", 3, sum).ok());
  EXPECT_EQ(sum, 5);

  ASSERT_TRUE(job().kv_set(0, "text", "abc").ok());
  EXPECT_EQ(job().kv_add(0, "text", 1, sum).code(), StatusCode::kInvalidArgument);

  bool swapped = false;
  std::string current;
  ASSERT_TRUE(job().kv_compare_set(0, "cas", std::nullopt, "x", swapped, current).ok());
  EXPECT_TRUE(swapped);
  ASSERT_TRUE(job().kv_compare_set(0, "cas", std::string("y"), "z", swapped, current).ok());
  EXPECT_FALSE(swapped);
  EXPECT_EQ(current, "x");

  ASSERT_TRUE(job().kv_set(0, "p/1", "").ok());
  ASSERT_TRUE(job().kv_set(0, "p/2", "").ok());
  int64_t deleted = 0;
  ASSERT_TRUE(job().kv_delete_prefix(0, "p/", deleted).ok());
  EXPECT_EQ(deleted, 2);
}

TEST_F(CoordinatorJobTest, KvCallsForAnotherGenerationAreRefused) {
  make(1);
  std::optional<std::string> value;
  int64_t n = 0;
  bool swapped = false;
  std::string current;
  EXPECT_EQ(job().kv_set(1, "k", "v").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().kv_get(1, "k", value).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().kv_add(1, "k", 1, n).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().kv_compare_set(1, "k", std::nullopt, "v", swapped, current).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(job().kv_delete_prefix(1, "k", n).code(), StatusCode::kFailedPrecondition);
  auto w = kv_wait(1, {"k"});
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->status.code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorJobTest, KvCallsAfterTheJobFinishedAreRefused) {
  make(1);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  EXPECT_EQ(job().kv_set(0, "k", "v").code(), StatusCode::kFailedPrecondition);
  std::string id;
  EXPECT_EQ(job().nccl_id(0, "world", id).code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorJobTest, KvWaitIsReleasedByAnotherCallersSet) {
  make(1);
  auto w = kv_wait(0, {"a", "b"});
  ASSERT_TRUE(job().kv_set(0, "a", "1").ok());
  EXPECT_EQ(w->calls, 0);
  ASSERT_TRUE(job().kv_set(0, "b", "2").ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_TRUE(w->status.ok());
}

TEST_F(CoordinatorJobTest, KvWaitOnPresentKeysIsAnsweredAtOnce) {
  make(1);
  ASSERT_TRUE(job().kv_set(0, "a", "1").ok());
  auto w = kv_wait(0, {"a"});
  EXPECT_EQ(w->calls, 1);
  EXPECT_TRUE(w->status.ok());
}

TEST_F(CoordinatorJobTest, KvWaitTimesOutOnTick) {
  make(1);
  auto w = kv_wait(0, {"never"}, 5s);
  clock().advance(4s);
  job().tick();
  EXPECT_EQ(w->calls, 0);
  clock().advance(1s);
  job().tick();
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->status.code(), StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorJobTest, WaitsOfAGenerationAreAbortedWhenTheJobFinishes) {
  make(2);
  form_world();
  auto w = kv_wait(0, {"never"}, 1h);
  ASSERT_TRUE(report(0, 0, 5).ok());
  EXPECT_EQ(w->calls, 0);  // the generation is stopping, not over
  ASSERT_TRUE(report(0, 1, 143, true).ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->status.code(), StatusCode::kAborted);
}

TEST_F(CoordinatorJobTest, WaitsOfAGenerationAreAbortedWhenItRestarts) {
  make(1, 1, 1);
  form_world();
  auto w = kv_wait(0, {"never"}, 1h);
  auto b = std::make_shared<WaitOutcome>();
  job().barrier(0, "sync", 2, 1h, record(b));
  ASSERT_TRUE(report(0, 0, 1).ok());
  EXPECT_EQ(w->calls, 1);
  EXPECT_EQ(w->status.code(), StatusCode::kAborted);
  EXPECT_EQ(b->calls, 1);
  EXPECT_EQ(b->status.code(), StatusCode::kAborted);
  // And the new generation's waits are untouched by the old one's end.
  auto fresh = kv_wait(1, {"k"}, 1h);
  ASSERT_TRUE(job().kv_set(1, "k", "v").ok());
  EXPECT_EQ(fresh->calls, 1);
  EXPECT_TRUE(fresh->status.ok());
}

// ---------------------------------------------------------------- barrier

TEST_F(CoordinatorJobTest, BarrierCompletesWhenTheLastParticipantEnters) {
  make(1);
  std::vector<std::shared_ptr<WaitOutcome>> outs;
  for (int i = 0; i < 3; ++i) {
    outs.push_back(std::make_shared<WaitOutcome>());
    job().barrier(0, "init", 3, 30s, record(outs.back()));
    if (i < 2) {
      for (const auto& o : outs) EXPECT_EQ(o->calls, 0);
    }
  }
  for (const auto& o : outs) {
    EXPECT_EQ(o->calls, 1);
    EXPECT_TRUE(o->status.ok()) << o->status.message();
  }
}

TEST_F(CoordinatorJobTest, BarriersWithDifferentNamesAreIndependent) {
  make(1);
  auto a = std::make_shared<WaitOutcome>();
  auto b = std::make_shared<WaitOutcome>();
  job().barrier(0, "a", 2, 30s, record(a));
  job().barrier(0, "b", 2, 30s, record(b));
  EXPECT_EQ(a->calls, 0);
  EXPECT_EQ(b->calls, 0);
}

TEST_F(CoordinatorJobTest, BarrierWithMissingParticipantsTimesOutOnTick) {
  make(1);
  auto a = std::make_shared<WaitOutcome>();
  job().barrier(0, "init", 2, 5s, record(a));
  clock().advance(5s);
  job().tick();
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorJobTest, BarrierForAnotherGenerationIsRefused) {
  make(1);
  auto a = std::make_shared<WaitOutcome>();
  job().barrier(3, "init", 1, 5s, record(a));
  EXPECT_EQ(a->calls, 1);
  EXPECT_EQ(a->status.code(), StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------- NCCL IDs

TEST_F(CoordinatorJobTest, NcclIdIsTheSameBytesForEveryCallerOfAKey) {
  make(1);
  std::string first, second;
  ASSERT_TRUE(job().nccl_id(0, "world", first).ok());
  ASSERT_TRUE(job().nccl_id(0, "world", second).ok());
  EXPECT_EQ(first.size(), kUniqueIdBytes);
  EXPECT_EQ(first, second);
}

TEST_F(CoordinatorJobTest, NcclIdDiffersBetweenCommKeys) {
  make(1);
  std::string world, pipeline;
  ASSERT_TRUE(job().nccl_id(0, "world", world).ok());
  ASSERT_TRUE(job().nccl_id(0, "pp/0", pipeline).ok());
  EXPECT_NE(world, pipeline);
}

TEST_F(CoordinatorJobTest, NcclIdForAnotherGenerationIsRefused) {
  make(1);
  std::string id;
  EXPECT_EQ(job().nccl_id(1, "world", id).code(), StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------- callbacks never under the mutex

TEST_F(CoordinatorJobTest, JoinCallbacksMayCallBackIntoTheJob) {
  make(2);
  CoordinatorJob* j = &job();
  auto reentered = std::make_shared<std::atomic<int>>(0);
  auto callback = [j, reentered](const Status& s, const Assignment& a) {
    if (!s.ok()) return;
    int64_t current = -1;
    if (j->heartbeat(a.node_rank, a.generation, current).ok() && j->current_view().generation == 0) ++*reentered;
  };
  j->join(params("a"), 60s, callback);
  const JoinParams last = params("b");
  ASSERT_TRUE(finishes_within(h, [j, last, callback] { j->join(last, 60s, callback); }));
  EXPECT_EQ(reentered->load(), 2);
}

TEST_F(CoordinatorJobTest, RefusedJoinCallbackMayCallBackIntoTheJob) {
  make(1);
  form_world();
  ASSERT_TRUE(report(0, 0, 0).ok());
  CoordinatorJob* j = &job();
  auto saw_finished = std::make_shared<std::atomic<bool>>(false);
  const JoinParams p = params("late");
  ASSERT_TRUE(finishes_within(h, [j, p, saw_finished] {
    j->join(p, 60s, [j, saw_finished](const Status& s, const Assignment&) {
      if (!s.ok()) *saw_finished = j->finished();
    });
  }));
  EXPECT_TRUE(saw_finished->load());
}

TEST_F(CoordinatorJobTest, KvWaitCallbackMayCallBackIntoTheJob) {
  make(1);
  CoordinatorJob* j = &job();
  auto seen = std::make_shared<std::string>();
  j->kv_wait(0, {"k"}, 30s, [j, seen](const Status& s) {
    std::optional<std::string> v;
    if (s.ok() && j->kv_get(0, "k", v).ok() && v) *seen = *v;
    j->kv_set(0, "ack", "1");
  });
  ASSERT_TRUE(finishes_within(h, [j] { j->kv_set(0, "k", "value"); }));
  EXPECT_EQ(*seen, "value");
  std::optional<std::string> ack;
  ASSERT_TRUE(job().kv_get(0, "ack", ack).ok());
  EXPECT_TRUE(ack.has_value());
}

TEST_F(CoordinatorJobTest, KvWaitAnsweredAtOnceMayCallBackIntoTheJob) {
  make(1);
  ASSERT_TRUE(job().kv_set(0, "k", "v").ok());
  CoordinatorJob* j = &job();
  auto calls = std::make_shared<std::atomic<int>>(0);
  ASSERT_TRUE(finishes_within(h, [j, calls] {
    j->kv_wait(0, {"k"}, 30s, [j, calls](const Status&) {
      j->kv_set(0, "again", "1");
      ++*calls;
    });
    j->kv_wait(7, {"k"}, 30s, [j, calls](const Status&) {  // refused: wrong generation
      j->current_view();
      ++*calls;
    });
  }));
  EXPECT_EQ(calls->load(), 2);
}

TEST_F(CoordinatorJobTest, BarrierCallbackMayCallBackIntoTheJob) {
  make(1);
  CoordinatorJob* j = &job();
  auto released = std::make_shared<std::atomic<int>>(0);
  auto callback = [j, released](const Status& s) {
    int64_t n = 0;
    if (s.ok() && j->kv_add(0, "released", 1, n).ok()) ++*released;
  };
  j->barrier(0, "b", 2, 30s, callback);
  ASSERT_TRUE(finishes_within(h, [j, callback] { j->barrier(0, "b", 2, 30s, callback); }));
  EXPECT_EQ(released->load(), 2);
}

TEST_F(CoordinatorJobTest, WatchCallbackMayCallBackIntoTheJob) {
  make(2);
  form_world();
  CoordinatorJob* j = &job();
  auto seen = std::make_shared<std::atomic<int>>(0);
  auto callback = [j, seen](const Status&, const GenerationView& v) {
    if (j->current_view().state == v.state) ++*seen;
  };
  j->watch(-1, 0, GenerationState::kRunning, 30s, callback);  // parked
  NodeOutcome failure;
  failure.node_rank = 1;
  failure.exit_code = 3;
  ASSERT_TRUE(finishes_within(h, [j, failure] { j->report_outcome(0, failure); }));
  EXPECT_EQ(seen->load(), 1);
  // Answered at once (the state already differs).
  ASSERT_TRUE(finishes_within(h, [j, callback] { j->watch(-1, 0, GenerationState::kRunning, 30s, callback); }));
  EXPECT_EQ(seen->load(), 2);
}

TEST_F(CoordinatorJobTest, CallbacksEndedByTheGenerationsEndMayCallBackIntoTheJob) {
  make(2);
  form_world();
  CoordinatorJob* j = &job();
  auto aborted = std::make_shared<std::atomic<bool>>(false);
  auto finished_watch = std::make_shared<std::atomic<bool>>(false);
  j->kv_wait(0, {"never"}, 1h, [j, aborted](const Status& s) {
    if (s.code() == StatusCode::kAborted) *aborted = j->finished();
  });
  ASSERT_TRUE(report(0, 0, 9).ok());
  j->watch(-1, 0, GenerationState::kStopping, 1h, [j, finished_watch](const Status&, const GenerationView& v) {
    if (v.state == GenerationState::kFinished) *finished_watch = j->finished();
  });
  NodeOutcome stopped;
  stopped.node_rank = 1;
  stopped.stopped = true;
  stopped.exit_code = 143;
  ASSERT_TRUE(finishes_within(h, [j, stopped] { j->report_outcome(0, stopped); }));
  EXPECT_TRUE(aborted->load());
  EXPECT_TRUE(finished_watch->load());
}

TEST_F(CoordinatorJobTest, CallbacksRunByTickMayCallBackIntoTheJob) {
  make(3, 1, 0, 10s);
  CoordinatorJob* j = &job();
  auto calls = std::make_shared<std::atomic<int>>(0);
  // A wait that will time out, and a watch whose state changes when tick
  // declares the silent nodes lost.
  j->kv_wait(0, {"never"}, 5s, [j, calls](const Status& s) {
    std::optional<std::string> v;
    if (s.code() == StatusCode::kDeadlineExceeded && j->kv_get(0, "never", v).ok()) ++*calls;
  });
  clock().advance(5s);
  ASSERT_TRUE(finishes_within(h, [j] { j->tick(); }));
  EXPECT_EQ(calls->load(), 1);

  // The world forms; every node goes silent; tick ends the job.
  form_world();
  j->watch(-1, 0, GenerationState::kRunning, 1h, [j, calls](const Status&, const GenerationView& v) {
    if (v.state != GenerationState::kRunning) {
      j->finished();
      ++*calls;
    }
  });
  j->watch(-1, 0, GenerationState::kRunning, 1s, [j, calls](const Status&, const GenerationView&) {
    int64_t current = 0;
    j->heartbeat(0, 0, current);
    ++*calls;
  });
  clock().advance(10s);
  ASSERT_TRUE(finishes_within(h, [j] { j->tick(); }));
  EXPECT_EQ(calls->load(), 3);
  EXPECT_TRUE(job().finished());
}

TEST_F(CoordinatorJobTest, RendezvousTimeoutEndsTheJobAndItsCallbackMayCallBackIn) {
  make(3, 1, 0, 10s);
  CoordinatorJob* j = &job();
  auto calls = std::make_shared<std::atomic<int>>(0);
  j->join(params("alone"), 5s, [j, calls](const Status& s, const Assignment&) {
    if (s.code() == StatusCode::kDeadlineExceeded) {
      j->current_view();
      ++*calls;
    }
  });
  clock().advance(5s);
  ASSERT_TRUE(finishes_within(h, [j] { j->tick(); }));
  EXPECT_EQ(calls->load(), 1);
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kRendezvous);
}

// Agents on many threads: joins, barrier and outcomes complete without a lost
// wake-up or a deadlock.
TEST_F(CoordinatorJobTest, ConcurrentAgentsFormTheWorldPassABarrierAndFinish) {
  constexpr int kNodes = 16;
  make(kNodes, 1);
  CoordinatorJob* j = &job();
  auto ranks = std::make_shared<std::vector<int>>(kNodes, -1);
  std::vector<JoinParams> joins;
  for (int i = 0; i < kNodes; ++i) joins.push_back(params(host(i)));
  ASSERT_TRUE(finishes_within(h, [j, ranks, joins] {
    std::vector<std::thread> agents;
    for (int i = 0; i < kNodes; ++i) {
      agents.emplace_back([j, p = joins[static_cast<size_t>(i)], i, ranks] {
        // Shared promises: the callback may run on another agent's thread.
        auto joined = std::make_shared<std::promise<Assignment>>();
        std::future<Assignment> assignment = joined->get_future();
        j->join(p, 60s, [joined](const Status&, const Assignment& a) { joined->set_value(a); });
        const Assignment a = assignment.get();
        (*ranks)[static_cast<size_t>(i)] = a.node_rank;
        auto passed = std::make_shared<std::promise<Status>>();
        std::future<Status> barrier = passed->get_future();
        j->barrier(0, "start", kNodes, 60s, [passed](const Status& s) { passed->set_value(s); });
        if (!barrier.get().ok()) return;
        NodeOutcome done;
        done.node_rank = a.node_rank;
        done.success = true;
        j->report_outcome(0, done);
      });
    }
    for (auto& t : agents) t.join();
  }));
  std::set<int> unique(ranks->begin(), ranks->end());
  EXPECT_EQ(unique.size(), static_cast<size_t>(kNodes));
  EXPECT_EQ(*unique.begin(), 0);
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 0);
}

// An elastic job (--nnodes=1:3): the world forms from the nodes present once
// the last call passes, and everything after counts only those nodes.
TEST_F(CoordinatorJobTest, ElasticJobFormsAtTheLastCallAndFinishesWithTheNodesPresent) {
  JobConfig config;
  config.nnodes = 3;
  config.min_nnodes = 1;
  config.last_call_timeout = 2s;
  config.nproc = 2;
  h = std::make_shared<Harness>(config);
  JoinParams p = params(host(0));
  p.min_nnodes = 1;
  auto a = join(p);
  clock().advance(1s);
  p.host = host(1);
  auto b = join(p);
  job().tick();
  EXPECT_EQ(a->calls, 0);
  clock().advance(2s);  // two seconds after the second join, nobody new
  job().tick();
  ASSERT_EQ(a->calls, 1);
  ASSERT_EQ(b->calls, 1);
  EXPECT_EQ(a->assignment.nnodes, 2);
  EXPECT_EQ(b->assignment.world_size, 4);
  const auto status = nlohmann::json::parse(job().status_json());
  EXPECT_EQ(status["nnodes"], 2);
  EXPECT_EQ(status["nnodes_range"], nlohmann::json::array({1, 3}));
  // a third node's outcome would be out of range; two outcomes finish the job
  EXPECT_EQ(report(0, 2, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(report(0, 0, 0).ok());
  EXPECT_FALSE(job().finished());
  EXPECT_TRUE(report(0, 1, 0).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, 0);
}

// ------------------------------------------------------------ membership

class MembershipTest : public CoordinatorJobTest {
 protected:
  void make_elastic(int min_nnodes, int max_nnodes, int max_restarts = 0, int max_node_failures = 0,
                    JobConfig::Grow grow = JobConfig::Grow::kNow) {
    JobConfig config;
    config.nnodes = max_nnodes;
    config.min_nnodes = min_nnodes;
    config.nproc = 1;
    config.max_restarts = max_restarts;
    config.node_timeout = 5s;
    config.last_call_timeout = 30s;
    config.max_node_failures = max_node_failures;
    config.grow = grow;
    h = std::make_shared<Harness>(config);
  }
  JoinParams elastic_params(const std::string& name, int64_t generation = 0) const {
    JoinParams p = params(name, generation);
    p.min_nnodes = job().config().min_nnodes;
    p.agent_id = "agent-" + name;
    p.hosts_coordinator = name == host(0);
    return p;
  }
  // Joins every name (in order) to generation; checks that the world formed at once.
  // at_once false: a world of fewer than the most nodes, formed by the last call.
  std::vector<std::shared_ptr<JoinOutcome>> form(const std::vector<std::string>& names, int64_t generation,
                                                 bool at_once = true) {
    std::vector<std::shared_ptr<JoinOutcome>> outs;
    for (const auto& name : names) outs.push_back(join(elastic_params(name, generation)));
    if (!at_once) {
      clock().advance(job().config().last_call_timeout + 1s);
      job().tick();
    }
    for (const auto& o : outs) {
      EXPECT_EQ(o->calls, 1);
      EXPECT_TRUE(o->status.ok()) << o->status.message();
    }
    return outs;
  }
  void heartbeat(int node, int64_t generation) {
    int64_t current = 0;
    EXPECT_TRUE(job().heartbeat(node, generation, current).ok());
  }
  std::shared_ptr<WatchOutcome> watch_as(int node, int64_t generation, GenerationState known) {
    auto out = std::make_shared<WatchOutcome>();
    job().watch(node, generation, known, 30s, record(out));
    return out;
  }
  const CoordinatorJob& job() const { return h->job; }
  using CoordinatorJobTest::job;
};

TEST_F(MembershipTest, WhileTheWorldFormsTheStatusSaysWhoJoinedAndTheLastCall) {
  make_elastic(2, 4);
  auto status = [&] { return nlohmann::json::parse(job().status_json()); };
  EXPECT_EQ(status()["state"], "rendezvous");
  EXPECT_EQ(status()["rendezvous"], "no node joined generation 0 yet");
  auto a = join(elastic_params(host(0)));
  EXPECT_EQ(status()["state"], "rendezvous");
  EXPECT_NE(status()["rendezvous"].get<std::string>().find("1 of 2:4 node(s) joined generation 0"), std::string::npos)
      << status()["rendezvous"];
  auto b = join(elastic_params(host(1)));
  clock().advance(10s);
  const std::string both = status()["rendezvous"];
  EXPECT_NE(both.find("2 of 2:4 node(s) joined"), std::string::npos) << both;
  EXPECT_NE(both.find("forms with the nodes present in 20 s"), std::string::npos) << both;
  clock().advance(21s);
  job().tick();
  ASSERT_EQ(a->calls, 1);
  EXPECT_EQ(status()["state"], "running");
  EXPECT_FALSE(status().contains("rendezvous"));
}

TEST_F(MembershipTest, ALostNodeShrinksTheJobWithoutUsingARestartAndTheSurvivorsFormAtOnce) {
  make_elastic(2, 3, /*max_restarts=*/0);
  auto first = form({host(0), host(1), host(2)}, 0);
  auto watcher = watch_as(0, 0, GenerationState::kRunning);
  // Node 2 goes silent; nodes 0 and 1 keep heartbeating.
  for (int i = 0; i < 6; ++i) {
    clock().advance(1s);
    heartbeat(0, 0);
    heartbeat(1, 0);
    job().tick();
  }
  ASSERT_EQ(watcher->calls, 1);
  EXPECT_EQ(watcher->view.state, GenerationState::kStopping);
  EXPECT_NE(watcher->view.reason.find("node 2 (host-2) went silent"), std::string::npos) << watcher->view.reason;
  EXPECT_TRUE(report(0, 0, 0, /*stopped=*/true).ok());
  auto verdict = watch_as(1, 0, GenerationState::kStopping);
  EXPECT_EQ(verdict->calls, 0);
  EXPECT_TRUE(report(0, 1, 1, false, 1, "rank 1 failed: exit code 1 (its peer vanished)").ok());
  ASSERT_EQ(verdict->calls, 1);
  EXPECT_EQ(verdict->view.state, GenerationState::kRestarting);
  EXPECT_TRUE(verdict->view.membership_change);
  EXPECT_NE(verdict->view.reason.find("re-forming with the 2 other node(s)"), std::string::npos)
      << verdict->view.reason;
  // Both survivors back: generation 1 forms without waiting for the last call.
  auto second = form({host(1), host(0)}, 1);
  EXPECT_EQ(second[0]->assignment.nnodes, 2);
  EXPECT_EQ(second[0]->assignment.world_size, 2);
  EXPECT_EQ(second[0]->assignment.restarts_used, 0);
  EXPECT_EQ(second[1]->assignment.node_rank, 0);  // host-0 keeps node rank 0
  const auto status = nlohmann::json::parse(job().status_json());
  EXPECT_EQ(status["restarts_used"], 0);
  EXPECT_EQ(status["membership_changes"], 1);
  EXPECT_EQ(status["membership"].size(), 2u);
  EXPECT_EQ(status["departed"].size(), 1u);
  EXPECT_NE(status["departed"][0].get<std::string>().find("node 2 (host-2) went silent"), std::string::npos);
}

TEST_F(MembershipTest, WhileTheGenerationStopsASilentNodeIsLostAfterThreeOfItsHeartbeatGaps) {
  make_elastic(2, 3);
  JobConfig config = job().config();
  config.node_timeout = 15s;
  h = std::make_shared<Harness>(config);
  form({host(0), host(1), host(2)}, 0);
  for (int i = 0; i < 3; ++i) {  // every node beats once a second
    clock().advance(1s);
    for (int node = 0; node < 3; ++node) heartbeat(node, 0);
  }
  // Node 2 dies; node 1's rank fails at once (its peer vanished); node 0 is stopped.
  EXPECT_TRUE(report(0, 1, 1, false, 1, "rank 1 failed: exit code 1").ok());
  EXPECT_TRUE(report(0, 0, 0, true).ok());
  clock().advance(2900ms);
  job().tick();
  EXPECT_EQ(job().current_view().generation, 0);  // 2.9 s: not yet
  clock().advance(200ms);
  job().tick();
  const GenerationView v = job().current_view();
  EXPECT_EQ(v.generation, 1);  // 3.1 s of silence, not node_timeout's 15 s
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["membership_changes"], 1);
}

TEST_F(MembershipTest, APreemptedNodeStopsEveryRankOfTheJobAtOneStepAndTheJobEndsForARequeue) {
  make(2, 1, /*max_restarts=*/3, 15s);
  form_world();
  for (int rank = 0; rank < 2; ++rank) {
    RankReport r;
    r.rank = rank;
    r.step = 100 + rank;
    r.step_seconds = 0.1;
    int64_t current = 0;
    ASSERT_TRUE(job().heartbeat(rank, 0, current, {{r, 0s}}).ok());
  }
  std::optional<JobStop> heard;
  int64_t current = 0;
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  EXPECT_FALSE(heard.has_value());
  JobStop stop;
  ASSERT_TRUE(job().request_stop(1, 0, "SIGTERM to ddplaunch on node 1", 60s, stop).ok());
  // Rank 1 began step 101; four 1 s heartbeat intervals at 0.1 s a step, plus one.
  ASSERT_TRUE(stop.stop_at_step.has_value());
  EXPECT_EQ(*stop.stop_at_step, 102 + 40 + 1);
  EXPECT_EQ(stop.stop_timeout, 60s);
  // Node 0 hears the same with its next heartbeat; a second request changes nothing.
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  ASSERT_TRUE(heard.has_value());
  EXPECT_EQ(heard->stop_at_step, stop.stop_at_step);
  EXPECT_EQ(heard->reason, "SIGTERM to ddplaunch on node 1");
  JobStop again;
  ASSERT_TRUE(job().request_stop(0, 0, "SIGTERM to ddplaunch on node 0", 5s, again).ok());
  EXPECT_EQ(again.stop_at_step, stop.stop_at_step);
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["stop_requested"]["stop_at_step"], 143);
  // Node 1's ranks stop first: node 0's must still reach the step, so nothing stops them.
  auto watcher = watch_as(0, 0, GenerationState::kRunning);
  EXPECT_TRUE(report(0, 1, exit_code::kRequeue).ok());
  EXPECT_EQ(watcher->calls, 0);
  EXPECT_TRUE(report(0, 0, exit_code::kRequeue).ok());
  ASSERT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kRequeue);  // not a restart, whatever the budget
}

TEST_F(MembershipTest, AStopAskedBeforeAnyRankReportsStepsIsChosenWithTheFirstReportOfSteps) {
  // SIGTERM right after the first steps, before a report of them arrived
  // (the race a CI run met): the step is chosen once a report has one, and
  // every node, the one that asked included, hears it with its heartbeats.
  make(2, 1, /*max_restarts=*/3, 15s);
  form_world();
  JobStop stop;
  ASSERT_TRUE(job().request_stop(1, 0, "SIGTERM to ddplaunch on node 1", 60s, stop).ok());
  EXPECT_TRUE(stop.pending);
  EXPECT_FALSE(stop.stop_at_step.has_value());
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["stop_requested"]["step_not_chosen_yet"], true);
  std::optional<JobStop> heard;
  int64_t current = 0;
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  EXPECT_FALSE(heard.has_value());
  JobStop again;  // asking again neither chooses nor restarts the wait
  ASSERT_TRUE(job().request_stop(0, 0, "SIGTERM to ddplaunch on node 0", 5s, again).ok());
  EXPECT_TRUE(again.pending);
  EXPECT_EQ(again.reason, "SIGTERM to ddplaunch on node 1");
  RankReport r;
  r.rank = 1;
  r.step = 7;
  r.step_seconds = 0.1;
  ASSERT_TRUE(job().heartbeat(1, 0, current, {{r, 0s}}, nullptr, {}, &heard).ok());
  ASSERT_TRUE(heard.has_value());
  EXPECT_FALSE(heard->pending);
  EXPECT_EQ(heard->stop_at_step, 8 + 40 + 1);
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  EXPECT_EQ(heard->stop_at_step, 8 + 40 + 1);
}

TEST_F(MembershipTest, AStopAskedWhenTheRanksReportedOnlyTheirFirstStepWaitsForTheirStepTime) {
  // The race a CI run met next: the last reports were of step 1, without a
  // step time, and the steps after it took 10 ms. Two steps of margin chose
  // step 5, which the ranks had passed when they read it: they stopped after
  // different steps and the job failed with a desync instead of ending for a
  // requeue.
  make(2, 1, /*max_restarts=*/3, 15s);
  form_world();
  int64_t current = 0;
  for (int rank = 0; rank < 2; ++rank) {
    RankReport r;
    r.rank = rank;
    r.step = 1;
    ASSERT_TRUE(job().heartbeat(rank, 0, current, {{r, 0s}}).ok());
  }
  JobStop stop;
  ASSERT_TRUE(job().request_stop(0, 0, "SIGTERM to ddplaunch on node 0", 60s, stop).ok());
  EXPECT_TRUE(stop.pending);
  RankReport r;
  r.rank = 1;
  r.step = 30;
  r.step_seconds = 0.01;
  std::optional<JobStop> heard;
  clock().advance(1s);
  ASSERT_TRUE(job().heartbeat(1, 0, current, {{r, 0s}}, nullptr, {}, &heard).ok());
  ASSERT_TRUE(heard.has_value());
  EXPECT_FALSE(heard->pending);
  // Four 1 s heartbeat intervals at 10 ms a step past step 31.
  EXPECT_EQ(heard->stop_at_step, 31 + 400 + 1);
}

TEST_F(MembershipTest, AStopAfterASlowStepCountsTheFasterStepsBeforeIt) {
  make(2, 1, /*max_restarts=*/3, 15s);
  form_world();
  int64_t current = 0;
  RankReport r;
  r.rank = 0;
  r.step = 99;
  r.step_seconds = 0.1;
  ASSERT_TRUE(job().heartbeat(0, 0, current, {{r, 0s}}).ok());
  clock().advance(1s);
  r.step = 100;
  r.step_seconds = 30;  // a step with an evaluation in it
  ASSERT_TRUE(job().heartbeat(0, 0, current, {{r, 0s}}).ok());
  JobStop stop;
  ASSERT_TRUE(job().request_stop(0, 0, "SIGTERM to ddplaunch on node 0", 60s, stop).ok());
  ASSERT_TRUE(stop.stop_at_step.has_value());
  EXPECT_EQ(*stop.stop_at_step, 101 + 40 + 1);
}

TEST_F(MembershipTest, AStopOfRanksThatReportNoStepsIsAtTheNextBoundaryAfterFourHeartbeatIntervals) {
  make(2, 1, /*max_restarts=*/3, 15s);
  form_world();
  JobStop stop;
  ASSERT_TRUE(job().request_stop(1, 0, "SIGTERM to ddplaunch on node 1", 60s, stop).ok());
  ASSERT_TRUE(stop.pending);
  std::optional<JobStop> heard;
  int64_t current = 0;
  clock().advance(3900ms);
  job().tick();
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  EXPECT_FALSE(heard.has_value());
  clock().advance(100ms);
  job().tick();
  ASSERT_TRUE(job().heartbeat(0, 0, current, {}, nullptr, {}, &heard).ok());
  ASSERT_TRUE(heard.has_value());
  EXPECT_FALSE(heard->pending);
  EXPECT_FALSE(heard->stop_at_step.has_value());
}

TEST_F(MembershipTest, ALostNodeOfAFixedSizeJobStillEndsIt) {
  make(2, 1, 0, 5s);
  form_world();
  for (int i = 0; i < 6; ++i) {
    clock().advance(1s);
    heartbeat(0, 0);
    job().tick();
  }
  EXPECT_TRUE(report(0, 0, 0, true).ok());
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kNodeLost);
}

TEST_F(MembershipTest, ANewcomerMakesARunningJobGrowAtOnce) {
  make_elastic(1, 3);
  form({host(0), host(1)}, 0, /*at_once=*/false);
  ASSERT_EQ(job().current_view().state, GenerationState::kRunning);
  auto watcher = watch_as(0, 0, GenerationState::kRunning);
  auto newcomer = join(elastic_params(host(2), 0));
  EXPECT_EQ(newcomer->calls, 0);  // waits; not refused
  ASSERT_EQ(watcher->calls, 1);
  EXPECT_EQ(watcher->view.state, GenerationState::kStopping);
  EXPECT_NE(watcher->view.reason.find("1 node(s) waiting to join"), std::string::npos) << watcher->view.reason;
  EXPECT_TRUE(report(0, 0, 0, true).ok());
  EXPECT_TRUE(report(0, 1, 0, true).ok());
  auto verdict = watch_as(0, 0, GenerationState::kStopping);
  ASSERT_EQ(verdict->calls, 1);
  EXPECT_EQ(verdict->view.state, GenerationState::kRestarting);
  EXPECT_TRUE(verdict->view.membership_change);
  auto a = join(elastic_params(host(0), 1));
  EXPECT_EQ(a->calls, 0);
  auto b = join(elastic_params(host(1), 1));
  ASSERT_EQ(newcomer->calls, 1);
  ASSERT_TRUE(newcomer->status.ok()) << newcomer->status.message();
  EXPECT_EQ(newcomer->assignment.generation, 1);
  EXPECT_EQ(newcomer->assignment.nnodes, 3);
  EXPECT_EQ(newcomer->assignment.node_rank, 2);
  EXPECT_EQ(b->assignment.world_size, 3);
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["restarts_used"], 0);
}

TEST_F(MembershipTest, WithTheRestartPolicyANewcomerWaitsForTheNextRestart) {
  make_elastic(1, 3, /*max_restarts=*/1, 0, JobConfig::Grow::kAtRestart);
  form({host(0), host(1)}, 0, /*at_once=*/false);
  auto newcomer = join(elastic_params(host(2), 0), 600s);
  job().tick();
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["waiting_nodes"], 1);
  EXPECT_TRUE(report(0, 1, 3, false, 1, "rank 1 failed").ok());
  EXPECT_TRUE(report(0, 0, 0, true).ok());
  form({host(0), host(1)}, 1);
  ASSERT_EQ(newcomer->calls, 1);
  EXPECT_EQ(newcomer->assignment.generation, 1);
  EXPECT_EQ(newcomer->assignment.nnodes, 3);
  EXPECT_EQ(newcomer->assignment.restarts_used, 1);
}

TEST_F(MembershipTest, ANewcomerThatFindsNoPlaceBeforeItsTimeoutIsRefusedAlone) {
  make_elastic(1, 2);
  form({host(0), host(1)}, 0);  // full
  auto newcomer = join(elastic_params(host(2), 0), 10s);
  clock().advance(11s);
  heartbeat(0, 0);
  heartbeat(1, 0);
  job().tick();
  ASSERT_EQ(newcomer->calls, 1);
  EXPECT_EQ(newcomer->status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(newcomer->status.message().find("timed out waiting for a place in the job"), std::string::npos);
  EXPECT_EQ(job().current_view().state, GenerationState::kRunning);
}

TEST_F(MembershipTest, ANodeWhoseWorkersKeepFailingIsExcludedAndToldTheJobIsOverForIt) {
  make_elastic(1, 2, /*max_restarts=*/5, /*max_node_failures=*/2);
  form({host(0), host(1)}, 0);
  for (int64_t g = 0; g < 2; ++g) {
    if (g == 1) form({host(0), host(1)}, 1);
    EXPECT_TRUE(report(g, 1, 9, false, 1, "rank 1 failed: exit code 9").ok());
    EXPECT_TRUE(report(g, 0, 0, true).ok());
  }
  auto told_1 = watch_as(1, 1, GenerationState::kRunning);
  ASSERT_EQ(told_1->calls, 1);
  EXPECT_EQ(told_1->view.state, GenerationState::kFinished);
  EXPECT_EQ(told_1->view.exit_code, 9);
  EXPECT_NE(told_1->view.reason.find("node 1 (host-1) is excluded from the job: its workers failed 2 generation(s) "
                                     "in a row"),
            std::string::npos)
      << told_1->view.reason;
  auto told_0 = watch_as(0, 1, GenerationState::kRunning);
  EXPECT_EQ(told_0->view.state, GenerationState::kRestarting);
  // Node 0 re-forms alone at once; the excluded agent cannot come back.
  auto alone = form({host(0)}, 2);
  EXPECT_EQ(alone[0]->assignment.nnodes, 1);
  auto back = join(elastic_params(host(1), 2));
  ASSERT_EQ(back->calls, 1);
  EXPECT_EQ(back->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(back->status.message().find("excluded"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(job().status_json())["restarts_used"], 2);
}

// ---------------------------------------------------------------- failover

class FailoverTest : public MembershipTest {
 protected:
  // An elastic 1:3 job at endpoint `epoch` of `endpoints`.
  void make_failover(int epoch, int endpoints, const std::optional<Takeover>& takeover = std::nullopt) {
    JobConfig config;
    config.nnodes = 3;
    config.min_nnodes = 1;
    config.nproc = 1;
    config.node_timeout = 5s;
    config.last_call_timeout = 2s;
    config.epoch = epoch;
    config.endpoints = endpoints;
    h = std::make_shared<Harness>(config, takeover);
  }
  // Nodes 1 and 2 fall silent past node_timeout while node 0 keeps beating.
  void lose_nodes_1_and_2(int64_t generation) {
    for (int i = 0; i < 6; ++i) {
      clock().advance(1s);
      heartbeat(0, generation);
      job().tick();
    }
  }
};

TEST_F(FailoverTest, ACoordinatorCutOffFromTheMajorityEndsItsSideEvenWhenMinWouldAllowIt) {
  make_failover(/*epoch=*/0, /*endpoints=*/2);
  form({host(0), host(1), host(2)}, 0);
  lose_nodes_1_and_2(0);
  auto verdict = watch_as(0, 0, GenerationState::kStopping);
  EXPECT_TRUE(report(0, 0, 1, false, 0, "rank 0 failed: exit code 1 (its peers vanished)").ok());
  ASSERT_EQ(verdict->calls, 1);
  EXPECT_EQ(verdict->view.state, GenerationState::kFinished);
  EXPECT_EQ(verdict->view.exit_code, exit_code::kNodeLost);
  EXPECT_NE(verdict->view.reason.find("only 1 of the generation's 3 node(s) remain here, not a majority"),
            std::string::npos)
      << verdict->view.reason;
  // The partition heals: the old coordinator never forms a world again.
  auto late = join(elastic_params(host(0), 1));
  ASSERT_EQ(late->calls, 1);
  EXPECT_FALSE(late->status.ok());
}

TEST_F(FailoverTest, WithoutALaterEndpointTheSameLossShrinksTheJobAsMinAllows) {
  make_failover(/*epoch=*/1, /*endpoints=*/2);
  form({host(0), host(1), host(2)}, 0);
  lose_nodes_1_and_2(0);
  EXPECT_TRUE(report(0, 0, 1, false, 0, "rank 0 failed").ok());
  auto verdict = watch_as(0, 0, GenerationState::kStopping);
  ASSERT_EQ(verdict->calls, 1);
  EXPECT_EQ(verdict->view.state, GenerationState::kRestarting);
  EXPECT_TRUE(verdict->view.membership_change);
}

TEST_F(FailoverTest, ACallFromALaterEpochFencesTheOldCoordinatorWhichEndsItsCopyOfTheJob) {
  make_failover(/*epoch=*/0, /*endpoints=*/2);
  form({host(0), host(1), host(2)}, 0);
  auto running = watch_as(0, 0, GenerationState::kRunning);
  EXPECT_TRUE(job().check_epoch(0).ok());
  const Status fenced = job().check_epoch(1);
  EXPECT_EQ(fenced.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(fenced.message().find("replaced by epoch 1"), std::string::npos) << fenced.message();
  ASSERT_EQ(running->calls, 1);
  EXPECT_EQ(running->view.state, GenerationState::kFinished) << "its own nodes stop at once";
  EXPECT_EQ(running->view.exit_code, exit_code::kNodeLost);
  EXPECT_NE(running->view.reason.find("has taken the job over"), std::string::npos) << running->view.reason;
  auto again = join(elastic_params(host(1), 1));
  EXPECT_FALSE(again->status.ok());
  EXPECT_TRUE(job().finished());
}

TEST_F(FailoverTest, TheNextEndpointTakesTheJobOverWithTheSurvivorsInTheNextGeneration) {
  Takeover t;
  t.epoch = 1;
  t.generation = 4;
  t.restarts_used = 2;
  t.previous_nnodes = 3;
  make_failover(1, 2, t);
  // Both survivors of the 3-node world: it forms at once, without the last call.
  auto outs = form({host(1), host(2)}, 4);
  EXPECT_EQ(outs[0]->assignment.generation, 4);
  EXPECT_EQ(outs[0]->assignment.nnodes, 2);
  EXPECT_EQ(outs[0]->assignment.restarts_used, 2);
  const auto status = nlohmann::json::parse(job().status_json());
  EXPECT_EQ(status["generation"], 4);
  EXPECT_EQ(status["restarts_used"], 2);
  EXPECT_EQ(status["coordinator_epoch"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(status["membership_changes"], 1);
  EXPECT_EQ(status["departed"][0], "the coordinator of epoch 0 was lost; this one (epoch 1) took the job over at "
                                   "generation 4");
}

TEST_F(FailoverTest, ATakeoverFormsWithAQuorumAfterTheLastCallButNotWithLess) {
  Takeover t;
  t.epoch = 1;
  t.generation = 1;
  t.previous_nnodes = 4;  // half of 4 suffices at the next endpoint
  EXPECT_EQ(takeover_quorum(t), 2);
  make_failover(1, 3, t);
  auto outs = form({host(1), host(2)}, 1, /*at_once=*/false);
  EXPECT_EQ(outs[0]->assignment.nnodes, 2);

  t.skipped = 1;  // a side that skipped an endpoint needs more than half
  EXPECT_EQ(takeover_quorum(t), 3);
  make_failover(2, 3, t);
  auto alone = join(elastic_params(host(3), 1));
  auto second = join(elastic_params(host(2), 1));
  clock().advance(3s);  // past the last call: 2 of 4 are no quorum
  job().tick();
  EXPECT_EQ(alone->calls, 0);
  clock().advance(2 * 5s + 2s + 30s);  // past the takeover's deadline
  job().tick();
  ASSERT_EQ(alone->calls, 1);
  ASSERT_EQ(second->calls, 1);
  EXPECT_EQ(alone->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(alone->status.message().find("only 2 of the 4 node(s) of generation 0 reached this coordinator"),
            std::string::npos)
      << alone->status.message();
  EXPECT_TRUE(job().finished());
  EXPECT_EQ(job().current_view().exit_code, exit_code::kNodeLost);
}

TEST_F(FailoverTest, NewcomersWaitWhileATakeoverGathersItsQuorumAndGetInAfterIt) {
  Takeover t;
  t.generation = 1;
  t.previous_nnodes = 3;  // 2 needed
  make_failover(1, 2, t);
  auto newcomer = join(elastic_params(host(9), 0));
  auto survivor = join(elastic_params(host(1), 1));
  clock().advance(3s);  // past the last call: 1 survivor and a newcomer are no quorum
  job().tick();
  EXPECT_EQ(survivor->calls, 0);
  EXPECT_EQ(newcomer->calls, 0);
  auto other = join(elastic_params(host(2), 1));  // both survivors: the world forms without the newcomer
  ASSERT_EQ(survivor->calls, 1);
  EXPECT_EQ(survivor->assignment.nnodes, 2);
  EXPECT_EQ(newcomer->calls, 0) << "the newcomer waits for the next generation";
  EXPECT_NE(job().current_view().reason.find("waiting to join"), std::string::npos) << "and the job grows for it";
}

TEST_F(FailoverTest, AtTheDeadlineATakeoverWithItsQuorumFormsInsteadOfEnding) {
  Takeover t;
  t.generation = 1;
  t.previous_nnodes = 4;  // 2 needed, 3 expected
  make_failover(1, 2, t);
  JobConfig config = job().config();
  config.last_call_timeout = 100s;  // longer than the deadline
  h = std::make_shared<Harness>(config, t);
  auto a = join(elastic_params(host(1), 1));
  auto b = join(elastic_params(host(2), 1));
  clock().advance(2 * 5s + 100s + 31s);
  job().tick();
  ASSERT_EQ(a->calls, 1);
  EXPECT_TRUE(a->status.ok()) << a->status.message();
  EXPECT_EQ(a->assignment.nnodes, 2);
}

TEST_F(FailoverTest, WhileAMajorityIsNeededARestartedGenerationWaitsForOne) {
  make_failover(/*epoch=*/0, /*endpoints=*/2);
  form({host(0), host(1), host(2)}, 0);
  // Node 3's agent is signalled away: a membership change (3 -> 2 voters, 2 needed).
  NodeOutcome leaving;
  leaving.node_rank = 2;
  leaving.leaving = true;
  leaving.exit_code = 143;
  leaving.description = "ddplaunch on node 2 received SIGTERM";
  EXPECT_TRUE(job().report_outcome(0, leaving).ok());
  EXPECT_TRUE(report(0, 0, 0, /*stopped=*/true).ok());
  EXPECT_TRUE(report(0, 1, 0, /*stopped=*/true).ok());
  ASSERT_EQ(job().current_view().generation, 1);
  // A partition right after the verdict: node 0 alone cannot re-form (MIN would allow it).
  auto alone = join(elastic_params(host(0), 1));
  clock().advance(3s);
  job().tick();
  EXPECT_EQ(alone->calls, 0);
  clock().advance(2 * 5s + 2s + 30s);
  job().tick();
  ASSERT_EQ(alone->calls, 1);
  EXPECT_NE(alone->status.message().find("only 1 of the 2 node(s) of generation 0 reached this coordinator"),
            std::string::npos)
      << alone->status.message();
}

TEST_F(FailoverTest, ARestartedCoordinatorThatHearsAnAgentOfItsEarlierLifeEndsItsCopy) {
  make_failover(/*epoch=*/0, /*endpoints=*/2);
  auto own = join(elastic_params(host(0), 0));  // its own node's agent, restarted with it
  int64_t current = 0;
  const Status s = job().heartbeat(1, 3, current);  // a survivor of generation 3 of the job's earlier life
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << "the survivor's coordinator is gone: it fails over";
  ASSERT_EQ(own->calls, 1);
  EXPECT_EQ(own->status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(own->status.message().find("its node restarted"), std::string::npos) << own->status.message();
  EXPECT_TRUE(job().finished());
}


// ------------------------------------------- found by coordinator_rpc_fuzz

// Nothing stays parked on a finished job: the coordinator forgets a finished
// job 10 minutes on, and a call still parked then would never be answered.
TEST_F(CoordinatorJobTest, AKvWaitMadeBeforeTheRendezvousTimedOutIsAnsweredWhenTheJobEnds) {
  make(2, 1);
  auto alone = join(params("alone"), 5s);
  auto wait = kv_wait(0, {"never-set"}, 1h);
  clock().advance(5s);
  job().tick();
  ASSERT_TRUE(job().finished());
  ASSERT_EQ(alone->calls, 1);
  ASSERT_EQ(wait->calls, 1) << "answered now, not in an hour";
  EXPECT_EQ(wait->status.code(), StatusCode::kAborted) << wait->status.message();
}

TEST_F(MembershipTest, ANewcomerWaitingForTheNextRestartHearsAtOnceThatTheJobHasFinished) {
  make_elastic(1, 3, /*max_restarts=*/1, 0, JobConfig::Grow::kAtRestart);
  form({host(0), host(1)}, 0, /*at_once=*/false);
  auto newcomer = join(elastic_params(host(2), 0), 3600s);
  EXPECT_TRUE(report(0, 0, 0).ok());
  EXPECT_TRUE(report(0, 1, 0).ok());
  ASSERT_TRUE(job().finished());
  ASSERT_EQ(newcomer->calls, 1) << "answered now, not in an hour";
  EXPECT_EQ(newcomer->status.code(), StatusCode::kFailedPrecondition) << newcomer->status.message();
}

// A generation that never ended here is not "the last restart's": generation
// -1 before any restart, and the lost coordinator's last generation after a
// takeover, are over (restarting), and a watch answers for the generation
// it asked about.
TEST_F(CoordinatorJobTest, AWatchOfTheGenerationBeforeTheFirstIsAnsweredForThatGeneration) {
  make(1);
  form_world();
  auto before = watch(-1, GenerationState::kRunning);
  ASSERT_EQ(before->calls, 1);
  EXPECT_TRUE(before->status.ok());
  EXPECT_EQ(before->view.generation, -1);
  EXPECT_EQ(before->view.state, GenerationState::kRestarting);
}

TEST_F(FailoverTest, TheGenerationATakeoverContinuesFromIsOverForAWatch) {
  Takeover t;
  t.epoch = 1;
  t.generation = 1;
  t.previous_nnodes = 2;
  make_failover(1, 2, t);
  auto lost = watch(0, GenerationState::kRunning);
  ASSERT_EQ(lost->calls, 1) << "generation 0 ran at the lost coordinator; it is not running here";
  EXPECT_EQ(lost->view.generation, 0);
  EXPECT_EQ(lost->view.state, GenerationState::kRestarting);
}

TEST_F(FailoverTest, AnEpochOfIntMaxFencesTheJobAndNamesItsEntryWithoutOverflowing) {
  make_failover(/*epoch=*/0, /*endpoints=*/2);
  form({host(0), host(1), host(2)}, 0);
  EXPECT_EQ(job().check_epoch(std::numeric_limits<int>::max()).code(), StatusCode::kFailedPrecondition);
  const std::string reason = job().current_view().reason;
  EXPECT_NE(reason.find("(--rdzv-endpoint entry 2147483648)"), std::string::npos) << reason;
}

}  // namespace
}  // namespace ddp
