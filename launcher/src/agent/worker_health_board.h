#pragma once
// WorkerHealthBoard: the latest heartbeat of each of this node's workers, as
// the local agent service receives them, until the agent's heartbeat thread
// forwards them to the coordinator; and the coordinator's requests for stack
// dumps on their way back to the workers (answered in their next heartbeat).
//
// Threading: thread-safe (gRPC threads write, the heartbeat thread reads).

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "coordinator/coordinator_job.h"

namespace ddp {

class WorkerHealthBoard {
 public:
  explicit WorkerHealthBoard(const Clock& clock) : clock_(clock) {}

  void record(RankReport report);
  /// The latest report of each worker, with how long it has been held here.
  std::vector<ForwardedReport> latest() const;
  /// A new generation: forget every worker and request.
  void clear();

  void request_stack_dumps(const std::vector<int>& ranks);
  /// True once per request: the worker should dump its stacks now.
  bool take_stack_dump_request(int rank);

 private:
  const Clock& clock_;
  mutable std::mutex mutex_;
  std::map<int, std::pair<RankReport, SteadyTime>> latest_;  // by rank
  std::set<int> dump_requests_;
};

}  // namespace ddp
