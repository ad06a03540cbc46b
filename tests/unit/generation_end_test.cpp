#include "membership/generation_end.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "exit_codes.h"
#include "membership/failover.h"

namespace ddp {
namespace {

NodeOutcome success(int node) {
  NodeOutcome o;
  o.node_rank = node;
  o.success = true;
  return o;
}

NodeOutcome stopped(int node) {
  NodeOutcome o;
  o.node_rank = node;
  o.stopped = true;
  return o;
}

NodeOutcome failed(int node, int code = 3) {
  NodeOutcome o;
  o.node_rank = node;
  o.exit_code = code;
  o.failed_rank = node;
  o.description = "rank " + std::to_string(node) + " failed: exit code " + std::to_string(code);
  return o;
}

NodeOutcome lost(int node) {
  NodeOutcome o;
  o.node_rank = node;
  o.exit_code = exit_code::kNodeLost;
  o.description = "node " + std::to_string(node) + " (h" + std::to_string(node) + ") went silent";
  return o;
}

std::vector<NodeEnd> nodes_of(const std::vector<NodeOutcome>& outcomes, std::vector<int> streaks = {}) {
  std::vector<NodeEnd> nodes;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    NodeEnd n;
    n.member = "agent-" + std::to_string(i);
    n.host = "h" + std::to_string(i);
    n.hosts_coordinator = i == 0;
    n.outcome = outcomes[i];
    n.failure_streak = i < streaks.size() ? streaks[i] : 0;
    nodes.push_back(n);
  }
  return nodes;
}

MembershipRules elastic(int min, int max, int max_restarts = 0, int restarts_used = 0) {
  MembershipRules r;
  r.min_nnodes = min;
  r.max_nnodes = max;
  r.max_restarts = max_restarts;
  r.restarts_used = restarts_used;
  return r;
}

TEST(GenerationEnd, EveryNodeSucceededFinishesWithZero) {
  const auto end = decide_generation_end(nodes_of({success(0), success(1)}), std::nullopt, elastic(2, 2));
  EXPECT_FALSE(end.restart);
  EXPECT_EQ(end.exit_code, 0);
  EXPECT_TRUE(end.departures.empty());
}

TEST(GenerationEnd, ALostNodeOfAnElasticJobIsAMembershipChangeThatUsesNoRestart) {
  const auto nodes = nodes_of({stopped(0), failed(1, 1), lost(2)});
  // The survivor's rank failed first (its peer vanished): still the node loss decides.
  const auto end = decide_generation_end(nodes, failed(1, 1), elastic(2, 3, /*max_restarts=*/0));
  EXPECT_TRUE(end.restart);
  EXPECT_TRUE(end.membership_change);
  EXPECT_FALSE(end.counts_as_restart);
  ASSERT_EQ(end.departures.size(), 1u);
  EXPECT_EQ(end.departures[0].node_rank, 2);
  EXPECT_EQ(end.departures[0].why, Departure::Why::kLost);
  EXPECT_NE(end.reason.find("node 2 (h2) went silent"), std::string::npos) << end.reason;
  EXPECT_NE(end.reason.find("re-forming with the 2 other node(s)"), std::string::npos) << end.reason;
  // The survivor's failure was a consequence: no streak grows.
  EXPECT_EQ(end.failure_streaks, (std::vector<int>{0, 0, 0}));
}

TEST(GenerationEnd, TooFewSurvivorsMakeTheLossAFailure) {
  const auto nodes = nodes_of({stopped(0), lost(1)});
  const auto end = decide_generation_end(nodes, lost(1), elastic(2, 3));
  EXPECT_FALSE(end.restart);
  EXPECT_EQ(end.exit_code, exit_code::kNodeLost);
  const auto again = decide_generation_end(nodes, lost(1), elastic(2, 3, /*max_restarts=*/1));
  EXPECT_TRUE(again.restart);
  EXPECT_TRUE(again.counts_as_restart);
  EXPECT_FALSE(again.membership_change);
}

TEST(GenerationEnd, AFixedSizeJobTreatsALostNodeAsAFailure) {
  const auto nodes = nodes_of({stopped(0), lost(1)});
  const auto end = decide_generation_end(nodes, lost(1), elastic(2, 2, /*max_restarts=*/2, /*restarts_used=*/1));
  EXPECT_TRUE(end.restart);
  EXPECT_TRUE(end.counts_as_restart);
  EXPECT_NE(end.reason.find("restart 2 of 2"), std::string::npos) << end.reason;
  const auto spent = decide_generation_end(nodes, lost(1), elastic(2, 2, 2, 2));
  EXPECT_FALSE(spent.restart);
  EXPECT_EQ(spent.exit_code, exit_code::kNodeLost);
}

TEST(GenerationEnd, ASignalledAgentLeavesAnElasticJob) {
  NodeOutcome left = failed(1, exit_code::for_signal(15));
  left.leaving = true;
  const auto end = decide_generation_end(nodes_of({stopped(0), left, stopped(2)}), left, elastic(1, 3));
  EXPECT_TRUE(end.membership_change);
  ASSERT_EQ(end.departures.size(), 1u);
  EXPECT_EQ(end.departures[0].why, Departure::Why::kLeft);
}

TEST(GenerationEnd, AWorkerFailureUsesARestartWhileTheBudgetLasts) {
  const auto nodes = nodes_of({stopped(0), failed(1, 7)});
  const auto end = decide_generation_end(nodes, failed(1, 7), elastic(1, 2, 1, 0));
  EXPECT_TRUE(end.restart);
  EXPECT_TRUE(end.counts_as_restart);
  EXPECT_EQ(end.failure_streaks, (std::vector<int>{0, 1}));
  const auto spent = decide_generation_end(nodes, failed(1, 7), elastic(1, 2, 1, 1));
  EXPECT_FALSE(spent.restart);
  EXPECT_EQ(spent.exit_code, 7);
  EXPECT_EQ(spent.reason, "rank 1 failed: exit code 7");
}

TEST(GenerationEnd, ANodeFailingKGenerationsInARowIsExcluded) {
  MembershipRules rules = elastic(1, 3, 10, 1);
  rules.max_node_failures = 2;
  const auto nodes = nodes_of({stopped(0), stopped(1), failed(2, 4)}, {0, 0, 1});
  const auto end = decide_generation_end(nodes, failed(2, 4), rules);
  EXPECT_TRUE(end.restart);
  EXPECT_TRUE(end.counts_as_restart);  // the failure itself is a failure
  ASSERT_EQ(end.departures.size(), 1u);
  EXPECT_EQ(end.departures[0].node_rank, 2);
  EXPECT_EQ(end.departures[0].why, Departure::Why::kExcluded);
  EXPECT_EQ(end.departures[0].exit_code, 4);
  EXPECT_NE(end.departures[0].description.find("node 2 (h2) is excluded from the job: its workers failed 2 "
                                               "generation(s) in a row (last: rank 2 failed: exit code 4)"),
            std::string::npos)
      << end.departures[0].description;
  // One failure short of K: stays.
  const auto once = decide_generation_end(nodes_of({stopped(0), stopped(1), failed(2, 4)}), failed(2, 4), rules);
  EXPECT_TRUE(once.departures.empty());
}

TEST(GenerationEnd, ExclusionNeverGoesBelowMinNorRemovesTheCoordinatorsNode) {
  MembershipRules rules = elastic(2, 2, 10, 1);
  rules.max_node_failures = 1;
  // A fixed-size job never excludes.
  EXPECT_TRUE(decide_generation_end(nodes_of({stopped(0), failed(1)}), failed(1), rules).departures.empty());
  rules.min_nnodes = 2;
  rules.max_nnodes = 3;
  // Two nodes, MIN 2: excluding would leave one.
  EXPECT_TRUE(decide_generation_end(nodes_of({stopped(0), failed(1)}), failed(1), rules).departures.empty());
  rules.min_nnodes = 1;
  // Node 0 hosts the coordinator.
  EXPECT_TRUE(decide_generation_end(nodes_of({failed(0), stopped(1)}), failed(0), rules).departures.empty());
}

TEST(GenerationEnd, ASuccessOrAStopBreaksTheStreak) {
  const auto nodes = nodes_of({stopped(0), failed(1)}, {0, 5});
  EXPECT_EQ(decide_generation_end(nodes, failed(0), elastic(1, 2, 9)).failure_streaks, (std::vector<int>{0, 6}));
  const auto healthy = nodes_of({failed(0), stopped(1)}, {0, 5});
  EXPECT_EQ(decide_generation_end(healthy, failed(0), elastic(1, 2, 9)).failure_streaks, (std::vector<int>{1, 0}));
}

TEST(GenerationEnd, NodesWaitingToJoinEndAHealthyGenerationInAMembershipChange) {
  MembershipRules rules = elastic(1, 3);
  rules.grow_requested = true;
  const auto end = decide_generation_end(nodes_of({stopped(0), stopped(1)}), std::nullopt, rules);
  EXPECT_TRUE(end.restart);
  EXPECT_TRUE(end.membership_change);
  EXPECT_FALSE(end.counts_as_restart);
  EXPECT_TRUE(end.departures.empty());
}

TEST(GenerationEnd, PreemptionFinishesTheJobForARequeue) {
  NodeOutcome drained = failed(1, exit_code::kRequeue);
  drained.leaving = true;
  const auto end = decide_generation_end(nodes_of({stopped(0), drained}), drained, elastic(1, 2, 5));
  EXPECT_FALSE(end.restart);
  EXPECT_EQ(end.exit_code, exit_code::kRequeue);
}

// ---------------------------------------------------------------- failover majority

TEST(GenerationEnd, WhileAnotherEndpointCouldTakeOverOnlyAMajorityReforms) {
  MembershipRules rules = elastic(1, 4);
  rules.majority_needed = true;
  // 2 of 3 remain: a majority.
  auto end = decide_generation_end(nodes_of({stopped(0), stopped(1), lost(2)}), lost(2), rules);
  EXPECT_TRUE(end.membership_change);
  // 1 of 3 remains: the others may be failing over; MIN would allow 1, the majority rule does not.
  end = decide_generation_end(nodes_of({stopped(0), lost(1), lost(2)}), lost(1), rules);
  EXPECT_FALSE(end.restart);
  EXPECT_EQ(end.exit_code, exit_code::kNodeLost);
  EXPECT_NE(end.reason.find("only 1 of the generation's 3 node(s) remain here, not a majority"), std::string::npos)
      << end.reason;
  // 2 of 4 is a tie, which this side (the old coordinator's) never wins.
  end = decide_generation_end(nodes_of({stopped(0), stopped(1), lost(2), lost(3)}), lost(2), rules);
  EXPECT_FALSE(end.restart);
  // Without another endpoint the same loss shrinks the job.
  rules.majority_needed = false;
  end = decide_generation_end(nodes_of({stopped(0), lost(1), lost(2)}), lost(1), rules);
  EXPECT_TRUE(end.membership_change);
}

TEST(GenerationEnd, NodesThatLeftOnASignalDoNotCountAgainstTheMajority) {
  MembershipRules rules = elastic(1, 4);
  rules.majority_needed = true;
  NodeOutcome left = failed(1, exit_code::for_signal(15));
  left.leaving = true;
  // Node 1 left (it runs nowhere); of the other 3, 2 remain.
  const auto end = decide_generation_end(nodes_of({stopped(0), left, stopped(2), lost(3)}), lost(3), rules);
  EXPECT_TRUE(end.membership_change) << end.reason;
}

TEST(FailoverQuorum, TheNextEndpointWinsATieAndASkippingSideNeedsAStrictMajority) {
  Takeover t;
  for (const auto& [previous, quorum, skipping_quorum] :
       std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {2, 1, 2}, {3, 2, 2}, {4, 2, 3}, {5, 3, 3}}) {
    t.previous_nnodes = previous;
    t.skipped = 0;
    EXPECT_EQ(takeover_quorum(t), quorum) << previous;
    t.skipped = 1;
    EXPECT_EQ(takeover_quorum(t), skipping_quorum) << previous;
  }
  EXPECT_TRUE(majority_needed(0, 2));
  EXPECT_FALSE(majority_needed(1, 2));
  EXPECT_TRUE(keeps_majority(2, 3));
  EXPECT_FALSE(keeps_majority(2, 4));
}

}  // namespace
}  // namespace ddp
