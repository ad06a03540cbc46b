#pragma once
// StackCollection: one round of asking every rank of a job for its stacks,
// as the coordinator runs it (before stopping a hung job, or for `ddplaunch
// stacks`): which ranks each node's agent still has to be told about, and the
// answers as they come back with the agents' heartbeats. Every rank gets an
// answer in time, either its stacks or its agent's note on why it could not
// send them (worker_health_board.h); the deadline only covers a lost agent.
//
// Plain and clock-free: the caller passes the time. Threading: not
// thread-safe; CoordinatorJob calls it under its mutex.

#include <algorithm>
#include <map>
#include <vector>

#include "ddp/common/clock.h"
#include "stacks/rank_stacks.h"

namespace ddp {

/// How long an agent waits for a worker asked for its stacks before it
/// answers for it: a runtime worker answers with its next heartbeat.
inline Duration stack_answer_timeout(Duration heartbeat_interval) {
  return std::max<Duration>(std::chrono::seconds(2), 2 * heartbeat_interval);
}

/// How long the coordinator waits for every rank's answer: the request and
/// the answer each ride an agent heartbeat, plus the agent's own wait.
inline Duration stack_collection_timeout(Duration heartbeat_interval) {
  return stack_answer_timeout(heartbeat_interval) + 3 * heartbeat_interval + std::chrono::seconds(1);
}

class StackCollection {
 public:
  StackCollection(int world_size, SteadyTime deadline);

  /// The ranks in [first, first + count) not yet asked; they count as asked now.
  std::vector<int> take_requests(int first, int count);
  /// An answer; ignored for ranks outside the world or already answered.
  void on_answer(RankStacks stacks);
  /// Every rank answered, or the deadline passed.
  bool done(SteadyTime now) const;

  /// The answers, by rank.
  std::vector<RankStacks> answers() const;
  /// The ranks without an answer, ascending.
  std::vector<int> unanswered() const;
  int world_size() const { return world_size_; }

 private:
  int world_size_;
  SteadyTime deadline_;
  std::vector<bool> asked_;
  std::map<int, RankStacks> answers_;
};

}  // namespace ddp
