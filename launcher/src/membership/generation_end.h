#pragma once
// The coordinator's decision once every node of a generation has ended:
// finish the job, or run the next generation, and with which nodes. A pure
// function of the generation's outcomes and the job's rules, so that every
// rule below is unit-tested without a network or a clock.
//
// The rules (the README states them for users):
// - A node is gone when its agent went silent (lost: the coordinator recorded
//   exit_code::kNodeLost for it) or is going away (it was signalled). In an
//   elastic job (min_nnodes < max_nnodes) whose other nodes are at least
//   min_nnodes, a generation that lost a node ends in a membership change: the
//   survivors form the next generation, and the restart budget is untouched.
//   Failures of the survivors' workers in that generation are taken as its
//   consequence (their peers vanished). Otherwise a lost node is a failure.
// - Nodes waiting to join (grow_requested) end a healthy generation in a
//   membership change too.
// - Any other failure uses one restart while max_restarts lasts, as torchrun's
//   does; then the job finishes with the root cause's exit code.
// - A node whose own workers failed max_node_failures generations in a row
//   (0: never) is excluded from the next generation of an elastic job while
//   at least min_nnodes others remain; never the node hosting the coordinator.
// - A generation ended by preemption (exit_code::kRequeue) finishes the job.
// - While another endpoint could take the job over (membership/failover.h),
//   a generation that lost a node re-forms only with more than half of its
//   nodes (those that left on a signal aside); otherwise the job ends here
//   with exit_code::kNodeLost, as the other side may be running it.

#include <optional>
#include <string>
#include <vector>

#include "membership/node_outcome.h"

namespace ddp {

/// One node of the ended generation.
struct NodeEnd {
  std::string member;  // the agent's identity (survives in the next generation's expectations)
  std::string host;
  bool hosts_coordinator = false;
  NodeOutcome outcome;
  int failure_streak = 0;  // generations in a row that ended with its own workers failing, before this one
};

struct MembershipRules {
  int min_nnodes = 1;
  int max_nnodes = 1;
  int max_restarts = 0;
  int restarts_used = 0;
  int max_node_failures = 0;  // 0: nodes are never excluded
  bool grow_requested = false;
  bool majority_needed = false;  // see membership/failover.h
};

/// A node that does not belong to the next generation.
struct Departure {
  enum class Why { kLost, kLeft, kExcluded };
  int node_rank = 0;
  Why why = Why::kLost;
  std::string description;  // e.g. "node 2 (host-c) went silent: ..."
  int exit_code = 0;        // what an excluded node's agent exits with
};

struct GenerationEnd {
  bool restart = false;
  bool counts_as_restart = false;  // uses one of max_restarts
  bool membership_change = false;
  int exit_code = 0;  // when !restart
  std::vector<Departure> departures;
  /// By node rank: the failure streak each node carries into the next generation.
  std::vector<int> failure_streaks;
  std::string reason;  // the verdict in words, for every agent's console
};

/// nodes: every node of the generation, by node rank, each with its outcome.
/// root_cause: the generation's first failure, if any.
GenerationEnd decide_generation_end(const std::vector<NodeEnd>& nodes, const std::optional<NodeOutcome>& root_cause,
                                    const MembershipRules& rules);

const char* to_string(Departure::Why why);

/// Of a generation of `nodes` nodes, those that could run the job elsewhere
/// (all but those that left on a signal or were excluded): what a majority
/// is counted of (membership/failover.h).
int voters(const GenerationEnd& end, int nodes);

}  // namespace ddp
