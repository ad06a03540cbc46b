#pragma once
// CoordinatorJob: everything the coordinator knows and decides about one job:
// its rendezvous, its KV store and NCCL IDs per generation, each node's
// heartbeats and outcomes, and the verdict after a generation ends (the
// rules of membership/generation_end.h: a membership change, a restart while
// the budget lasts, or the end with the root cause's exit code). Plain C++:
// the gRPC service is a thin adapter over it, and tests call it directly
// with a FakeClock.
//
// Threading: thread-safe; one mutex per job. Every callback runs on the
// calling thread after the mutex is released (never under it), possibly on
// the thread of another caller whose call completed the wait.

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/kv_store.h"
#include "coordinator/generation_store.h"
#include "coordinator/rendezvous.h"
#include "coordinator/watch_registry.h"
#include "coordinator/unique_id_source.h"
#include "ddp/common/clock.h"
#include "ddp/common/status.h"
#include "health/hang_detector.h"
#include "health/rank_health.h"
#include "membership/failover.h"
#include "membership/generation_end.h"
#include "membership/job_stop.h"
#include "membership/node_outcome.h"
#include "stacks/stack_collection.h"

namespace ddp {

struct JobConfig {
  int nnodes = 1;  // the most nodes
  int nproc = 1;
  int max_restarts = 0;
  /// A node whose agent sent no heartbeat for this long has failed.
  Duration node_timeout = std::chrono::seconds(15);
  /// Workers' heartbeat interval, and how long a rank may be silent or the
  /// job make no progress before it is declared hung.
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration hang_timeout = std::chrono::seconds(300);
  /// NCCL_* variables of the launching node: every node's workers get those
  /// their own node does not set.
  std::map<std::string, std::string> job_env{};
  /// Elastic (torchrun's --nnodes=MIN:MAX): the fewest nodes (0: nnodes), and
  /// how long the rendezvous waits for more once that many joined.
  int min_nnodes = 0;
  Duration last_call_timeout = std::chrono::seconds(30);
  /// Elastic: a node whose own workers failed this many generations in a row
  /// leaves the job (0: never). See generation_end.h.
  int max_node_failures = 0;
  /// Elastic: when a node waiting to join a running job gets in.
  enum class Grow { kNow, kAtRestart } grow = Grow::kNow;
  /// Coordinator failover (membership/failover.h): this coordinator's place
  /// in the job's endpoint list, and the list's length.
  int epoch = 0;
  int endpoints = 1;
};

/// "now" or "restart" (the option's spellings); nullopt for anything else.
std::optional<JobConfig::Grow> parse_grow_policy(const std::string& text);
const char* to_string(JobConfig::Grow grow);

/// A worker heartbeat as an agent forwards it: held for `held` at the agent.
struct ForwardedReport {
  RankReport report;
  Duration held{};
};

/// The merged stacks of every rank (JSON, see StacksReply), or why not.
using StacksCallback = std::function<void(const Status&, const std::string& json)>;

class CoordinatorJob {
 public:
  /// takeover: this coordinator continues a job whose coordinator was lost
  /// (its first generation, restarts used and quorum); nullopt: a new job.
  CoordinatorJob(std::string job_id, std::string token, JobConfig config, const Clock& clock, UniqueIdSource& ids,
                 const std::optional<Takeover>& takeover = std::nullopt);

  const std::string& id() const { return job_id_; }
  const JobConfig& config() const { return config_; }
  /// Constant-time comparison, so timing reveals nothing of the token.
  bool token_matches(const std::string& token) const;
  /// Every call's epoch (membership/failover.h). A later one than this
  /// coordinator's means it was replaced: the job ends here at once
  /// (kNodeLost; its own agents hear it as the verdict and no world forms
  /// here again) and the call is refused.
  Status check_epoch(int epoch);

  void join(const JoinParams& params, Duration timeout, JoinCallback done);
  /// Returns the job's current generation through current. workers: the
  /// latest heartbeat of each of the node's workers, for the health view;
  /// dump_ranks gets the node's ranks asked to dump their stacks; stacks:
  /// the answers of the node's workers since its last heartbeat.
  /// stop: the job-wide stop at a step boundary, once one was requested in
  /// this generation (request_stop).
  Status heartbeat(int node_rank, int64_t generation, int64_t& current,
                   std::vector<ForwardedReport> workers = {}, std::vector<int>* dump_ranks = nullptr,
                   std::vector<RankStacks> stacks = {}, std::optional<JobStop>* stop = nullptr);
  /// Preemption: node_rank's agent was asked to stop. Every rank of the job
  /// is to stop after one step, chosen from the ranks' latest reports; every
  /// agent hears it with its next heartbeat. A second request in the same
  /// generation gets the first one's answer. The ranks exit 0 there, the
  /// agents report kRequeue, and the job finishes with it.
  Status request_stop(int node_rank, int64_t generation, const std::string& reason, Duration stop_timeout,
                      JobStop& stop);
  /// Asks every rank for its stacks (delivered with the agents' heartbeats)
  /// and answers with their merge once all have answered or timeout passed.
  /// The job goes on running. Fails at once when no generation is running.
  void collect_stacks(Duration timeout, StacksCallback done);
  /// The health view for `ddplaunch status` (JSON): job, generation, state,
  /// restarts used, elapsed, and per rank its last heartbeat; once known,
  /// "rendezvous_s" (how long the current generation's world took to form,
  /// from the opening of its rendezvous) and "teardown_s" (how long the last
  /// generation that ended took, from the first node's report that its ranks
  /// ended to the last node's); "hang_verdicts": {kind: how many verdicts of
  /// that kind every generation so far gave}, every kind listed.
  std::string status_json() const;
  /// Adds what `provide` returns as status_json()'s `key`, e.g. the agent's
  /// checkpoint sync. `provide` is called from gRPC threads without this
  /// job's lock held, and must outlive the job or be removed (empty function).
  void set_status_section(const std::string& key, std::function<nlohmann::json()> provide);
  Status report_outcome(int64_t generation, const NodeOutcome& outcome);
  /// Answers as soon as generation's state differs from known, or with the
  /// unchanged state once timeout passes (the caller polls again).
  /// node_rank says who asks (-1: an observer), so the job knows which
  /// nodes have heard that it finished.
  void watch(int node_rank, int64_t generation, GenerationState known, Duration timeout, WatchCallback done);
  /// True while the job has finished but some node of its world has not yet
  /// been told (the hosting agent stays up until then, so no agent loses its
  /// coordinator before hearing the verdict). False when no world formed.
  /// except_node: the asking agent's own node, which knows the verdict.
  bool verdict_undelivered(int except_node) const;

  Status kv_set(int64_t generation, const std::string& key, std::string value);
  Status kv_get(int64_t generation, const std::string& key, std::optional<std::string>& value);
  Status kv_add(int64_t generation, const std::string& key, int64_t delta, int64_t& result);
  Status kv_compare_set(int64_t generation, const std::string& key, const std::optional<std::string>& expected,
                        std::string desired, bool& swapped, std::string& current);
  Status kv_delete_prefix(int64_t generation, const std::string& prefix, int64_t& deleted);
  void kv_wait(int64_t generation, std::vector<std::string> keys, Duration timeout, WaitCallback done);
  /// Completes once participants callers have entered the barrier name.
  /// A name is good for one barrier per generation.
  void barrier(int64_t generation, const std::string& name, int participants, Duration timeout, WaitCallback done);
  /// The same bytes for every caller of (generation, comm_key).
  Status nccl_id(int64_t generation, const std::string& comm_key, std::string& id);

  /// Expires waits and joins, declares silent nodes failed, and runs hang
  /// detection (a verdict first asks every rank for its stacks, then, once
  /// all have answered or stack_collection_timeout() passed, merges them into
  /// the report and stops the generation). Call often
  /// (the coordinator's timer thread does, every 100 ms).
  void tick();
  /// Answers every parked call with status (the coordinator shuts down).
  void abort_all(const Status& status);

  bool finished() const;
  GenerationView current_view() const;

 private:
  // Everything below runs with mutex_ held; what it completes goes to Fired.
  struct Fired {
    FiredWaits waits;
    FiredJoins joins;
    std::vector<std::pair<WatchCallback, GenerationView>> watches;
    Status watch_status;  // what the watches are answered with
    std::vector<std::pair<StacksCallback, std::string>> stacks;
    void run();
  };
  Status check_generation(int64_t generation) const;
  GenerationView view_of(int64_t generation) const;
  void record_outcome(const NodeOutcome& outcome, Fired& fired);
  void set_root_cause(NodeOutcome cause);
  /// Whether `node`, now found silent, had sent its last heartbeat before the
  /// recorded root cause arrived: its loss then explains that failure better.
  bool silent_before_root_cause(int node) const;
  void conclude_if_all_reported(Fired& fired);
  void set_state(GenerationState state, Fired& fired);
  /// Answers the parked watches whose generation's state moved on.
  void release_watches(Fired& fired);
  void answer_watches(std::vector<ParkedWatch> taken, Fired& fired);
  /// The view a watcher gets; notes who has heard that the job finished.
  GenerationView answer(int node_rank, int64_t generation, bool asked_after_outcome);
  bool has_reported(int node_rank) const;
  void on_world_formed();
  /// Elastic jobs with the "now" policy: a newcomer waits, so the running
  /// generation stops to re-form with it.
  void grow_if_waiting(Fired& fired);
  /// Every node reported: the decision of generation_end.h, carried out.
  void end_generation(Fired& fired);
  void check_health(SteadyTime now, Fired& fired);
  /// A node silent for node_timeout (sooner while the generation stops) is lost.
  void declare_silent_nodes(SteadyTime now, Fired& fired);
  /// Answers the stack collections asked for by `ddplaunch stacks` that are done.
  void finish_stack_requests(SteadyTime now, Fired& fired);
  /// Chooses the step of a pending stop once a rank reports steps, or at its
  /// deadline. Under mutex_.
  void decide_pending_stop(SteadyTime now);
  /// Every 5 s while joins wait: who joined, who is missing (to the log).
  void report_waiting_joins(SteadyTime now);
  /// Ends the job at once with exit code and reason (nothing more forms).
  void finish_now(int exit_code, const std::string& reason, Fired& fired);
  /// Opens the next generation needing `needed` of the previous world's
  /// nodes (majority rules, membership/failover.h), by a deadline.
  void await_quorum(int needed, int previous_nnodes, int expected_count,
                    std::optional<std::vector<std::string>> expected);
  /// At the quorum's deadline: the world forms with the nodes present when
  /// they are enough, else the job ends here (kNodeLost).
  void expire_quorum(SteadyTime now, Fired& fired);
  /// An agent of an earlier incarnation of this job calls a coordinator that
  /// never formed a world: this coordinator restarted (its node came back
  /// before the job failed over). It ends, so that no second copy forms
  /// here, and the caller hears Unavailable (its coordinator is gone).
  Status orphaned(Fired& fired);
  /// orphaned() when no world ever formed here (takes the lock).
  Status refuse_if_orphaned();

  const std::string job_id_;
  const std::string token_;
  const JobConfig config_;
  const Clock& clock_;

  mutable std::mutex mutex_;
  Rendezvous rendezvous_;
  int64_t generation_ = 0;
  GenerationState state_ = GenerationState::kRunning;
  bool world_formed_ = false;
  int restarts_used_ = 0;
  GenerationStore store_;  // the running generation's KV store, barriers and NCCL IDs
  std::vector<std::optional<NodeOutcome>> outcomes_;  // by node rank
  std::vector<SteadyTime> last_heartbeat_;            // by node rank
  std::vector<Duration> heartbeat_gap_;               // by node rank: the longest gap between its heartbeats
  std::optional<NodeOutcome> root_cause_;
  SteadyTime root_cause_at_{};  // when root_cause_ was recorded
  std::string desync_before_;   // "; before that, <desync>" ending root_cause_'s description, or empty
  std::string membership_stop_;  // why a healthy generation stops (a newcomer), else empty
  std::optional<JobStop> job_stop_;  // preemption: where every rank stops (this generation)
  std::optional<PendingJobStop> pending_stop_;
  std::map<std::string, std::function<nlohmann::json()>> status_sections_;  // under sections_mutex_
  mutable std::mutex sections_mutex_;  // separate: providers run without mutex_ held  // asked for, not chosen yet: no rank reported steps
  // Membership across generations.
  std::map<std::string, int> failure_streaks_;       // by member key
  std::map<std::string, std::string> excluded_;      // member key -> why
  std::map<int, Departure> excluded_last_;           // by node rank of the generation before generation_
  GenerationView last_restart_view_;                 // of the generation before generation_
  int membership_changes_ = 0;
  std::vector<std::string> departed_;                // every node that left, in words (newest last, bounded)
  GenerationView finished_view_;
  std::string finished_reason_;  // when the job ended for a reason no node reported (no majority, fenced)
  bool fenced_ = false;          // a later epoch took over (check_epoch)
  bool takeover_ = false;   // this coordinator took the job over (failover)
  bool ever_formed_ = false;  // a world formed here at least once
  struct QuorumWait {
    int needed = 0;           // nodes of the previous world
    int previous_nnodes = 0;
    SteadyTime deadline;
  };
  std::optional<QuorumWait> quorum_wait_;  // until the generation's world forms
  WatchRegistry watches_;
  std::vector<bool> told_finished_;  // by node rank
  int world_nnodes_ = 0;             // nodes of the formed world (an elastic one may have fewer than nnodes)

  // Worker health (this generation).
  HangDetector health_;
  std::optional<HangVerdict> pending_hang_;  // reported, stacks asked for, not yet stopped
  std::optional<StackCollection> hang_stacks_;  // with pending_hang_
  struct StackRequest {  // one `ddplaunch stacks`
    StackCollection collection;
    StacksCallback done;
  };
  std::vector<StackRequest> stack_requests_;
  std::optional<SteadyTime> next_rendezvous_report_;  // while joins wait: when to say so next
  std::string hang_report_;
  SteadyTime created_at_;
  SteadyTime rendezvous_opened_at_;            // when the current generation's rendezvous opened
  std::optional<SteadyTime> first_outcome_at_;  // when a node of the current world first reported its end
  std::optional<double> rendezvous_seconds_;    // the current world's rendezvous took this long
  std::optional<double> teardown_seconds_;      // the last generation that ended took this long to end on every node
  std::map<std::string, uint64_t> hang_verdicts_;  // by HangKind's name, over every generation
};

}  // namespace ddp
