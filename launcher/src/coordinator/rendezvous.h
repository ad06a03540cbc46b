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
// elastic job forms as soon as every node of the previous world is back.
//
// Threading: not thread-safe (CoordinatorJob serializes). Callbacks are
// returned to the caller to run after its lock is released.

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
  std::map<std::string, std::string> job_env;  // this node's NCCL_* (the job keeps its creator's)
  int nproc = 0;
  int node_rank = -1;  // -1: assign
  int nnodes = 0;      // the most nodes
  int min_nnodes = 0;  // the fewest (elastic); 0: nnodes
  Duration last_call_timeout = std::chrono::seconds(30);  // elastic (a new job takes its first joiner's)
  int64_t generation = 0;
  int master_port = 0;
};

struct Assignment {
  int node_rank = 0;
  int nnodes = 0;
  int rank_start = 0;
  int world_size = 0;
  int64_t generation = 0;
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
  void open(int64_t generation);
  int64_t open_generation() const { return generation_; }
  /// Whether the open generation's world is complete.
  bool complete() const { return complete_; }

  /// Parks the join (or refuses it at once through fired).
  void join(const JoinParams& params, SteadyTime now, SteadyTime deadline, JoinCallback done, FiredJoins& fired);
  /// Elastic jobs: forms the world of the agents present once at least
  /// min_nnodes joined and last_call passed since the latest join; returns
  /// true when it did.
  bool close_last_call(SteadyTime now, FiredJoins& fired);
  /// Refuses parked joins whose deadline passed; returns true when that
  /// happened (the generation can then no longer form).
  bool expire(SteadyTime now, FiredJoins& fired);
  /// Refuses every parked join with status (the coordinator shuts down).
  void abort(const Status& status, FiredJoins& fired);

  /// While agents wait for the rest of the world: who joined and, when the
  /// joined agents all asked for their ranks, which node ranks are missing.
  /// Empty when nobody waits. now: for an elastic job's last call.
  std::optional<std::string> waiting_summary(SteadyTime now = {}) const;

  /// The hosts of the formed world, by node rank.
  const std::vector<std::string>& hosts() const { return hosts_by_rank_; }
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
  Status check(const JoinParams& params) const;
  void form_world(FiredJoins& fired);
  std::string expected_nodes() const;  // "2" or "1:2"
  /// A restart of an elastic job need not wait for the last call once every
  /// node of the world before has joined again.
  bool previous_world_is_back() const;

  int max_nnodes_;
  int min_nnodes_;
  int nproc_;
  Duration last_call_;
  int world_nnodes_ = 0;
  std::optional<SteadyTime> last_call_at_;  // elastic, once min_nnodes joined
  int64_t generation_ = 0;
  bool complete_ = false;
  std::vector<Pending> pending_;
  std::vector<bool> rank_taken_;                         // explicit ranks among pending
  std::multimap<std::string, int> previous_rank_of_host_;  // from the last formed world
  std::vector<std::string> hosts_by_rank_;
};

}  // namespace ddp
