#pragma once
// CoordinatorCalls: the calls an agent's session makes to the coordinator
// (join, heartbeat, watch, report, stop), as a small interface with no gRPC
// types, so that AgentSession is unit-tested against a scripted fake.
// CoordinatorClient implements it over gRPC.
//
// Threading: implementations are thread-safe. A CancelToken may be cancelled
// from any thread; it ends the watch it guards at once (kCancelled), and any
// watch started with it afterwards.

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/coordinator_job.h"
#include "ddp/common/status.h"
#include "membership/job_stop.h"
#include "stacks/rank_stacks.h"

namespace ddp {

struct JoinResult {
  Assignment assignment;
  int max_restarts = 0;
};

/// Ends a blocking call from another thread.
class CancelToken {
 public:
  /// Runs the canceller under the lock, so that disarm() (and the end of
  /// the call it guards) waits for it: it never touches a finished call.
  void cancel() {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    if (canceller_) canceller_();
  }
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  /// For implementations, around a blocking call: on_cancel ends it (runs on
  /// the cancelling thread, must not block). False, and nothing kept, when
  /// already cancelled.
  bool arm(std::function<void()> on_cancel) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cancelled_) return false;
    canceller_ = std::move(on_cancel);
    return true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    canceller_ = nullptr;
  }

 private:
  mutable std::mutex mutex_;
  bool cancelled_ = false;
  std::function<void()> canceller_;
};

class CoordinatorCalls {
 public:
  virtual ~CoordinatorCalls() = default;

  /// Waits for the world to form; should_abort is polled while waiting and
  /// cancels the join when it returns true (kCancelled).
  virtual Status join(const JoinParams& params, int max_restarts, Duration timeout, JoinResult& result,
                      const std::function<bool()>& should_abort) = 0;
  /// workers: the node's latest worker heartbeats; dump_ranks gets the ranks
  /// asked for their stacks; stacks: the workers' answers since the last
  /// heartbeat; stop gets the job-wide stop at a step boundary, once there is one.
  virtual Status heartbeat(int node_rank, int64_t generation, Duration timeout,
                           const std::vector<ForwardedReport>& workers, std::vector<int>* dump_ranks,
                           const std::vector<RankStacks>& stacks, std::optional<JobStop>* stop) = 0;
  virtual Status report_outcome(int64_t generation, const NodeOutcome& outcome, Duration timeout) = 0;
  /// Long poll (CoordinatorJob::watch); cancel (optional) ends it early.
  virtual Status watch(int node_rank, int64_t generation, GenerationState known, Duration timeout,
                       GenerationView& view, CancelToken* cancel) = 0;
  /// Preemption: every rank of the job to stop at one step (CoordinatorJob::request_stop).
  virtual Status request_stop(int node_rank, int64_t generation, const std::string& reason, Duration stop_timeout,
                              Duration timeout, JobStop& stop) = 0;
};

}  // namespace ddp
