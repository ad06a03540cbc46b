#pragma once
// AgentSession: this node's membership in a job, as the coordinator sees it.
// It joins each generation (the rank layout for plan_attempt), keeps the node
// alive with heartbeats, watches for a failure elsewhere (then wakes the event
// loop through an eventfd so the local workers are stopped at once), reports
// how the local workers ended and waits for the coordinator's verdict:
// restart as the next generation, or finish with the job's exit code.
//
// It reaches the coordinator through CoordinatorCalls (gRPC in production, a
// scripted fake in its unit tests) and judges time by the injected Clock (how
// long the coordinator has been unreachable); its waits between calls are
// real time.
//
// When the coordinator is lost and the job lists more endpoints, the session
// fails over (CoordinatorFailover): the next endpoint's coordinator takes the
// job over, and this node re-joins it in the next generation as a membership
// change. A join there that cannot reach it moves on to the one after.
//
// Threading: join()/conclude() run on the event-loop thread; a heartbeat
// thread and a watch thread run per generation and touch only atomics, their
// mutex-guarded fields and the thread-safe calls. The destructor stops them.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/coordinator_failover.h"
#include "agent/worker_health_board.h"
#include "coordinator/coordinator_calls.h"
#include "supervise/supervisor.h"

namespace ddp {

struct AgentSettings {
  std::string endpoint;  // coordinator host:port
  int epoch = 0;         // endpoint's place in the job's failover list
  std::string job_id;
  std::string token;
  int nnodes = 1;      // the most nodes
  int min_nnodes = 0;  // elastic: the fewest; 0: nnodes
  Duration last_call_timeout = std::chrono::seconds(30);
  int node_rank = -1;  // -1: let the coordinator assign
  int nproc = 1;
  std::string host;    // advertised address; empty: as the coordinator sees us
  int master_port = 0; // a free port here, MASTER_PORT if we become node 0
  int max_restarts = 0;
  std::string agent_id;            // unique per agent process (see JoinParams::agent_id)
  bool hosts_coordinator = false;  // this process serves the coordinator
  int max_node_failures = 0;       // elastic membership rules (see JobConfig)
  std::string grow = "now";
  std::map<std::string, std::string> job_env;  // this node's NCCL_* (see JobConfig::job_env)
  Duration join_timeout = std::chrono::seconds(600);
  Duration heartbeat_interval = std::chrono::seconds(5);
  /// How long the coordinator may be unreachable before this agent gives up.
  Duration coordinator_timeout = std::chrono::seconds(15);
};

class AgentSession final : public AttemptArbiter {
 public:
  /// calls: the coordinator (not owned; outlives the session). clock: for
  /// the coordinator's silence (not owned). wakeup_fd: an eventfd the event
  /// loop watches; written when the job is stopping elsewhere (not owned).
  /// health: this node's worker heartbeats, forwarded with each agent
  /// heartbeat (not owned; outlives the session).
  /// failover: the job's later endpoints (not owned; null: none).
  AgentSession(AgentSettings settings, CoordinatorCalls& calls, const Clock& clock, int wakeup_fd,
               WorkerHealthBoard& health, CoordinatorFailover* failover = nullptr);
  ~AgentSession() override;

  /// Joins the next generation (0 at first, then the one after each restart
  /// verdict; a newcomer to a running elastic job is given a later one);
  /// throws PlanError(exit_code::kRendezvous) on refusal or timeout. Starts
  /// the heartbeat and watch threads for it.
  Assignment join();
  /// True once the coordinator has said this generation is stopping.
  bool stop_requested() const { return stop_requested_.load(); }
  /// The coordinator's reason for stopping (another node's failure).
  std::string stop_reason() const;
  /// The hang or desync report (JSON) behind the stop, when that was the cause.
  std::string stop_report_json() const;

  /// Preemption of this node: asks the coordinator to stop every rank of the
  /// job at one step (event-loop thread; bounded). nullopt when it could not
  /// be asked. A `pending` answer: the coordinator chooses the step once the
  /// ranks report steps, and job_stop() holds it from the heartbeat that
  /// brings it (the event loop is then woken).
  std::optional<JobStop> request_job_stop(const std::string& reason, Duration stop_timeout);
  /// The job-wide stop, once the coordinator has said there is one (through
  /// request_job_stop, or the heartbeats: another node was preempted; the
  /// event loop is then woken through the eventfd).
  std::optional<JobStop> job_stop() const;

  Verdict conclude(const AttemptSummary& summary) override;

  const Assignment& assignment() const { return assignment_; }
  /// The coordinator's epoch this agent is with (its endpoint's place in the list).
  int epoch() const { return epoch_; }

 private:
  void start_threads(int64_t generation);
  void stop_threads();
  void heartbeat_loop(int64_t generation);
  void watch_loop(int64_t generation, std::shared_ptr<CancelToken> cancel);
  void request_stop(const std::string& reason);
  /// Keeps the job-wide stop heard with a heartbeat and wakes the event loop.
  void note_job_stop(const JobStop& stop);
  NodeOutcome outcome_of(const AttemptSummary& summary) const;
  Verdict await_verdict(int64_t generation);
  /// The coordinator is lost (why): the next endpoint takes the job over, or
  /// the job is over for this node when there is none.
  Verdict fail_over(const std::string& why);
  /// Moves to the endpoint after takeover_.epoch (skipping one); false when none is left.
  bool move_on(const std::string& why);
  /// Joins from now on at takeover.epoch's endpoint (hosting it when failover_ does).
  void move_to(const Takeover& takeover);
  /// How long the coordinator may fail calls like s before it counts as lost.
  Duration loss_limit(const Status& s) const;

  AgentSettings settings_;
  int wakeup_fd_;
  WorkerHealthBoard& health_;
  CoordinatorCalls& calls_;
  const Clock& clock_;
  Assignment assignment_;
  int64_t next_generation_ = 0;  // event-loop thread only
  CoordinatorFailover* failover_;
  int epoch_ = 0;  // written on the event-loop thread while the heartbeat and watch threads are stopped
  std::optional<Takeover> takeover_;  // the failover under way, until a world forms there
  std::atomic<bool> threads_stop_{false};
  std::mutex sleep_mutex_;
  std::condition_variable wake_threads_;  // ends the heartbeat thread's sleep at once
  bool stacks_waiting_ = false;           // under sleep_mutex_: workers' stacks to forward now
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> coordinator_lost_{false};
  mutable std::mutex reason_mutex_;
  std::string stop_reason_;
  std::string stop_report_json_;
  std::optional<JobStop> job_stop_;  // under reason_mutex_
  std::shared_ptr<CancelToken> watch_cancel_;  // ends the watch thread's poll in flight (event-loop thread)
  std::thread heartbeat_thread_;
  std::thread watch_thread_;
};

}  // namespace ddp
