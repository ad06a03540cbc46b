#pragma once
// Rendezvous: forms the world of one generation from the agents' joins. Each
// join is parked until nnodes agents have joined, then every agent gets its
// node rank, its global rank range (prefix sums of nproc over node ranks) and
// node 0's address as MASTER_ADDR/MASTER_PORT. O(n) in the number of nodes.
//
// Node ranks: an agent may ask for one; the others get the free ranks in
// arrival order, except that a host that held a rank in an earlier generation
// gets it back when free (a restart keeps the layout).
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
  int nnodes = 0;
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
  /// nnodes and nproc are the job's, fixed by its first join.
  Rendezvous(int nnodes, int nproc) : nnodes_(nnodes), nproc_(nproc) {}

  /// Opens generation for joins (the first is 0; then each restart's).
  void open(int64_t generation);
  int64_t open_generation() const { return generation_; }
  /// Whether the open generation's world is complete.
  bool complete() const { return complete_; }

  /// Parks the join (or refuses it at once through fired).
  void join(const JoinParams& params, SteadyTime deadline, JoinCallback done, FiredJoins& fired);
  /// Refuses parked joins whose deadline passed; returns true when that
  /// happened (the generation can then no longer form).
  bool expire(SteadyTime now, FiredJoins& fired);
  /// Refuses every parked join with status (the coordinator shuts down).
  void abort(const Status& status, FiredJoins& fired);

  /// While agents wait for the rest of the world: who joined and, when the
  /// joined agents all asked for their ranks, which node ranks are missing.
  /// Empty when nobody waits.
  std::optional<std::string> waiting_summary() const;

  /// The hosts of the formed world, by node rank.
  const std::vector<std::string>& hosts() const { return hosts_by_rank_; }
  int nnodes() const { return nnodes_; }
  int nproc() const { return nproc_; }

 private:
  struct Pending {
    JoinParams params;
    SteadyTime deadline;
    JoinCallback done;
  };
  Status check(const JoinParams& params) const;
  void form_world(FiredJoins& fired);

  int nnodes_;
  int nproc_;
  int64_t generation_ = 0;
  bool complete_ = false;
  std::vector<Pending> pending_;
  std::vector<bool> rank_taken_;                         // explicit ranks among pending
  std::multimap<std::string, int> previous_rank_of_host_;  // from the last formed world
  std::vector<std::string> hosts_by_rank_;
};

}  // namespace ddp
