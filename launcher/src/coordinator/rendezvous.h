#pragma once
// Rendezvous: forms the world of one generation from the agents' joins. Each
// join is parked until the world is complete, then every agent gets its node
// rank, its global rank range (prefix sums of nproc over node ranks) and node
// 0's address as MASTER_ADDR/MASTER_PORT. O(n) in the number of nodes.
//
// Complete means: nnodes agents joined; or, for an elastic job (min_nnodes <
// nnodes, torchrun's --nnodes=MIN:MAX), at least min_nnodes joined and
// last_call passed without another join (close_last_call()). The world then
// has as many nodes as joined.
//
// Node ranks: an agent may ask for one; the others get the free ranks in
// arrival order, except that a host that held a rank in an earlier generation
// gets it back when free (a restart keeps the layout). A smaller elastic world
// keeps that order and closes the gaps, so ranks run 0..n-1. A restart of an
// elastic job forms as soon as every node it expects is back (by default those
// of the previous world; the coordinator names the survivors after a node was
// lost, and the newcomers it admits).
//
// Newcomers (elastic jobs only): a join for a generation that is not open, or
// while the open one's world is complete, waits for the next generation
// instead of being refused; open() admits waiting newcomers while places are
// free (at most max_nnodes in all). Nodes are known by their agent's
// identity (JoinParams::agent_id, else their host).
//
// Threading: not thread-safe (CoordinatorJob serializes). Callbacks are
// returned to the caller to run after its lock is released.

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "ddp/common/status.h"

namespace ddp {

struct JoinParams {
  std::string host;
  std::string agent_id;  // unique per agent process; empty: the host stands for it
  bool hosts_coordinator = false;  // this agent's process serves the coordinator
  std::map<std::string, std::string> job_env;  // this node's NCCL_* (the job keeps its creator's)
  int nproc = 0;
  int node_rank = -1;  // -1: assign
  int nnodes = 0;      // the most nodes
  int min_nnodes = 0;  // the fewest (elastic); 0: nnodes
  Duration last_call_timeout = std::chrono::seconds(30);  // elastic (a new job takes its first joiner's)
  int64_t generation = 0;
  int master_port = 0;
  // The job's membership rules (a new job takes its first joiner's; see JobConfig).
  int max_node_failures = 0;
  std::string grow;  // "now" or "restart"; empty: "now"
  int endpoints = 1;  // of the job's failover list (see JobConfig::endpoints)
};

struct Assignment {
  int node_rank = 0;
  int nnodes = 0;
  int rank_start = 0;
  int world_size = 0;
  int64_t generation = 0;
  int restarts_used = 0;  // of the job's max_restarts, before this generation
  std::string master_addr;
  int master_port = 0;
  std::string host;  // this node's host as recorded
  std::map<std::string, std::string> job_env;  // JobConfig::job_env, as the agent was told
};

using JoinCallback = std::function<void(const Status&, const Assignment&)>;

struct FiredJoin {
  JoinCallback callback;
  Status status;
  Assignment assignment;
  void operator()() const { callback(status, assignment); }
};
using FiredJoins = std::vector<FiredJoin>;

class Rendezvous {
 public:
  /// nnodes (the most), nproc, min_nnodes (0: nnodes) and last_call are the
  /// job's, fixed by its first join.
  Rendezvous(int nnodes, int nproc, int min_nnodes = 0, Duration last_call = std::chrono::seconds(30))
      : max_nnodes_(nnodes), min_nnodes_(min_nnodes > 0 ? min_nnodes : nnodes), nproc_(nproc), last_call_(last_call) {}

  /// Opens generation for joins (the first is 0; then each restart's).
  /// expected: the nodes (member keys) whose return completes an elastic
  /// world before the last call; nullopt: those of the previous world.
  /// Admits waiting newcomers while places are free.
  /// expected_count: with no expected keys, how many joins complete the world
  /// before the last call (a coordinator taking over knows the survivors'
  /// number, not who they are). at_least: the fewest nodes this generation
  /// forms with, above min_nnodes (a takeover's quorum).
  void open(int64_t generation, std::optional<std::vector<std::string>> expected = std::nullopt,
            int expected_count = 0, int at_least = 0);
  int64_t open_generation() const { return generation_; }
  /// Whether the open generation's world is complete.
  bool complete() const { return complete_; }
  /// While held, newcomers wait for the next generation even when the open
  /// one is still forming (a takeover gathers the old world's survivors
  /// alone: newcomers must not count toward its quorum).
  void hold_newcomers(bool hold) { hold_newcomers_ = hold; }
  /// Forms the world of the agents present now when they are at least the
  /// fewest it forms with; returns true when it did.
  bool form_now(FiredJoins& fired);

  /// Parks the join (or refuses it at once through fired).
  void join(const JoinParams& params, SteadyTime now, SteadyTime deadline, JoinCallback done, FiredJoins& fired);
  /// Elastic jobs: forms the world of the agents present once at least
  /// min_nnodes joined and last_call passed since the latest join; returns
  /// true when it did.
  bool close_last_call(SteadyTime now, FiredJoins& fired);
  /// Refuses parked joins whose deadline passed; returns true when that
  /// happened (the generation can then no longer form). Waiting newcomers
  /// whose deadline passed are refused alone.
  bool expire(SteadyTime now, FiredJoins& fired);
  /// Refuses every parked join with status (the coordinator shuts down).
  void abort(const Status& status, FiredJoins& fired);

  /// While agents wait for the rest of the world: who joined and, when the
  /// joined agents all asked for their ranks, which node ranks are missing.
  /// Empty when nobody waits. now: for an elastic job's last call.
  std::optional<std::string> waiting_summary(SteadyTime now = {}) const;

  /// The hosts of the formed world, by node rank.
  const std::vector<std::string>& hosts() const { return hosts_by_rank_; }
  /// The member keys (agent identity, else host) of the formed world, by node rank.
  const std::vector<std::string>& members() const { return members_by_rank_; }
  /// Whether node_rank's agent serves the coordinator (formed world).
  bool hosts_coordinator(int node_rank) const;
  /// Agents joined to the open generation, waiting for its world.
  int pending() const { return static_cast<int>(pending_.size()); }
  /// Newcomers waiting for the next generation.
  int waiting() const { return static_cast<int>(waiting_.size()); }
  static std::string member_key(const JoinParams& p) { return p.agent_id.empty() ? p.host : p.agent_id; }
  /// The nodes of the last formed world (before any formed: the most).
  int nnodes() const { return world_nnodes_ > 0 ? world_nnodes_ : max_nnodes_; }
  int max_nnodes() const { return max_nnodes_; }
  int min_nnodes() const { return min_nnodes_; }
  bool elastic() const { return min_nnodes_ < max_nnodes_; }
  int nproc() const { return nproc_; }

 private:
  struct Pending {
    JoinParams params;
    SteadyTime deadline;
    JoinCallback done;
  };
  Status check_shape(const JoinParams& params) const;
  Status check(const JoinParams& params) const;
  bool is_newcomer(const JoinParams& params) const;
  /// A fixed-size job's agent asking for a generation whose world it cannot
  /// join (formed already, or an earlier one): one started again.
  bool is_restarted_agent(const JoinParams& params) const;
  void admit_waiting();
  void form_world(FiredJoins& fired);
  std::string expected_nodes() const;  // "2" or "1:2"
  /// An elastic generation need not wait for the last call once every
  /// expected node has joined.
  bool expected_are_back() const;
  void expire_waiting(SteadyTime now, FiredJoins& fired);
  /// The fewest nodes the open generation forms with.
  int fewest() const { return std::max(min_nnodes_, at_least_); }

  int max_nnodes_;
  int min_nnodes_;
  int nproc_;
  Duration last_call_;
  int world_nnodes_ = 0;
  std::optional<SteadyTime> last_call_at_;  // elastic, once min_nnodes joined
  int64_t generation_ = 0;
  bool complete_ = false;
  std::vector<Pending> pending_;
  std::vector<Pending> waiting_;  // newcomers (or restarted agents of a fixed-size job), for the next generation
  std::vector<std::string> expected_;  // member keys
  int expected_count_ = 0;             // see open()
  int at_least_ = 0;                   // see open()
  bool hold_newcomers_ = false;         // see hold_newcomers()
  std::vector<bool> rank_taken_;                         // explicit ranks among pending
  std::multimap<std::string, int> previous_rank_of_host_;  // from the last formed world
  std::vector<std::string> hosts_by_rank_;
  std::vector<std::string> members_by_rank_;
  std::vector<bool> coordinator_host_by_rank_;
};

}  // namespace ddp
