#include "agent/agent_session.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "exit_codes.h"
#include "process/stop_signals.h"
#include "report/failure_report.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// A signal for ddplaunch waiting in the signalfd (blocked, so still pending).
int pending_stop_signal() {
  sigset_t pending;
  sigpending(&pending);
  for (int s : stop_signals()) {
    if (sigismember(&pending, s)) return s;
  }
  return 0;
}

}  // namespace

AgentSession::AgentSession(AgentSettings settings, CoordinatorCalls& calls, const Clock& clock, int wakeup_fd,
                           WorkerHealthBoard& health, CoordinatorFailover* failover)
    : settings_(std::move(settings)),
      wakeup_fd_(wakeup_fd),
      health_(health),
      calls_(calls),
      clock_(clock),
      failover_(failover),
      epoch_(settings_.epoch) {
  // Stacks go to the coordinator at once: it holds the hung job's report for them.
  health_.set_stacks_listener([this] {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stacks_waiting_ = true;
    }
    wake_threads_.notify_all();
  });
}

AgentSession::~AgentSession() {
  health_.set_stacks_listener({});
  stop_threads();
}

Assignment AgentSession::join() {
  const int64_t generation = next_generation_;
  stop_threads();
  stop_requested_ = false;
  JoinParams p;
  p.host = settings_.host;
  p.nproc = settings_.nproc;
  // A restart keeps the rank this node had; the coordinator also remembers hosts.
  p.node_rank = generation == 0 ? settings_.node_rank : assignment_.node_rank;
  p.nnodes = settings_.nnodes;
  p.min_nnodes = settings_.min_nnodes;
  p.last_call_timeout = settings_.last_call_timeout;
  p.generation = generation;
  p.master_port = settings_.master_port;
  p.job_env = settings_.job_env;
  p.agent_id = settings_.agent_id;
  p.hosts_coordinator = settings_.hosts_coordinator;
  p.max_node_failures = settings_.max_node_failures;
  p.grow = settings_.grow;
  p.endpoints = failover_ != nullptr ? failover_->endpoints() : 1;
  const bool elastic = settings_.min_nnodes > 0 && settings_.min_nnodes < settings_.nnodes;
  spdlog::info("joining job {} generation {} at {} ({} node(s))", settings_.job_id, generation, settings_.endpoint,
               elastic ? fmt::format("{}:{}", settings_.min_nnodes, settings_.nnodes) : std::to_string(settings_.nnodes));
  JoinResult result;
  int signal = 0;
  Status s;
  for (;;) {
    p.hosts_coordinator = settings_.hosts_coordinator;
    // After a failover the new coordinator answers by its takeover deadline
    // (CoordinatorJob): longer silence means nobody hosts that endpoint.
    const Duration timeout = takeover_ ? std::min(settings_.join_timeout,
                                                  3 * settings_.coordinator_timeout + settings_.last_call_timeout)
                                       : settings_.join_timeout;
    s = calls_.join(p, settings_.max_restarts, timeout, result,
                    [&signal] { return (signal = pending_stop_signal()) != 0; });
    const bool unreachable = s.code() == StatusCode::kUnavailable;  // never connected (CoordinatorClient::join)
    if (signal != 0 || s.ok() || !takeover_ || !unreachable || !move_on(s.message())) break;
  }
  if (signal != 0) {
    spdlog::warn("received {} while waiting for the other nodes; giving up", signal_name(signal));
    throw PlanError(exit_code::for_signal(signal), "interrupted");
  }
  if (!s.ok()) {
    // The client has put what it knows about an unreachable coordinator into the message.
    spdlog::error("rendezvous failed: {}", s.message());
    throw PlanError(exit_code::kRendezvous, "rendezvous failed: " + s.message());
  }
  assignment_ = result.assignment;
  takeover_.reset();
  spdlog::info("joined as node {} of {}: ranks {}..{} of {}, MASTER_ADDR={} MASTER_PORT={}", assignment_.node_rank,
               assignment_.nnodes, assignment_.rank_start, assignment_.rank_start + settings_.nproc - 1,
               assignment_.world_size, assignment_.master_addr, assignment_.master_port);
  if (assignment_.generation != generation) {
    spdlog::info("joined the running job at generation {} (restarts used so far: {})", assignment_.generation,
                 assignment_.restarts_used);
  }
  start_threads(assignment_.generation);
  return assignment_;
}

std::string AgentSession::stop_reason() const {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return stop_reason_;
}

std::string AgentSession::stop_report_json() const {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return stop_report_json_;
}

void AgentSession::start_threads(int64_t generation) {
  threads_stop_ = false;
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    job_stop_.reset();  // a stop belongs to one generation
  }
  health_.clear();  // the previous generation's workers are gone
  watch_cancel_ = std::make_shared<CancelToken>();
  heartbeat_thread_ = std::thread([this, generation] { heartbeat_loop(generation); });
  watch_thread_ = std::thread([this, generation, cancel = watch_cancel_] { watch_loop(generation, cancel); });
}

void AgentSession::stop_threads() {
  {
    std::lock_guard<std::mutex> lock(sleep_mutex_);
    threads_stop_ = true;
  }
  wake_threads_.notify_all();
  if (watch_cancel_) watch_cancel_->cancel();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (watch_thread_.joinable()) watch_thread_.join();
}

void AgentSession::request_stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    stop_reason_ = reason;
  }
  if (!stop_requested_.exchange(true)) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wakeup_fd_, &one, sizeof one);
  }
}

void AgentSession::heartbeat_loop(int64_t generation) {
  auto last_ok = clock_.now();
  while (!threads_stop_.load()) {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stacks_waiting_ = false;
    }
    std::vector<int> dump_ranks;
    std::optional<JobStop> stop;
    // Each rank's process and GPUs, sampled at the heartbeat's cadence (a
    // no-op without a sampler), ride with the heartbeats.
    health_.sample_resources();
    const Status s = calls_.heartbeat(assignment_.node_rank, generation,
                                       std::min<Duration>(settings_.heartbeat_interval, 5s),
                                       health_.latest_with_resources(), &dump_ranks, health_.take_stacks(), &stop);
    if (!dump_ranks.empty()) health_.request_stack_dumps(dump_ranks);
    if (stop) note_job_stop(*stop);
    const auto now = clock_.now();
    if (s.ok()) {
      last_ok = now;
    } else if (now - last_ok > loss_limit(s)) {
      coordinator_lost_ = true;
      request_stop(fmt::format("the coordinator at {} has been unreachable for {:.0f} s ({})", settings_.endpoint,
                               std::chrono::duration<double>(now - last_ok).count(), s.message()));
      return;
    }
    std::unique_lock<std::mutex> lock(sleep_mutex_);
    wake_threads_.wait_for(lock, settings_.heartbeat_interval,
                           [this] { return threads_stop_.load() || stacks_waiting_; });
  }
}

void AgentSession::watch_loop(int64_t generation, std::shared_ptr<CancelToken> cancel) {
  while (!threads_stop_.load()) {
    GenerationView view;
    const Status s =
        calls_.watch(assignment_.node_rank, generation, GenerationState::kRunning, 30s, view, cancel.get());
    if (threads_stop_.load() || cancel->cancelled()) return;
    if (!s.ok()) {
      // The heartbeat thread judges reachability; just poll again shortly.
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      wake_threads_.wait_for(lock, 200ms, [this] { return threads_stop_.load(); });
      continue;
    }
    if (view.state != GenerationState::kRunning) {
      {
        std::lock_guard<std::mutex> lock(reason_mutex_);
        stop_report_json_ = view.report_json;
      }
      request_stop(view.reason.empty() ? std::string("the job is stopping") : view.reason);
      return;
    }
  }
}

void AgentSession::note_job_stop(const JobStop& stop) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (job_stop_) return;
    job_stop_ = stop;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wakeup_fd_, &one, sizeof one);
}

std::optional<JobStop> AgentSession::job_stop() const {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return job_stop_;
}

std::optional<JobStop> AgentSession::request_job_stop(const std::string& reason, Duration stop_timeout) {
  JobStop stop;
  const Status s = calls_.request_stop(assignment_.node_rank, assignment_.generation, reason, stop_timeout, 3s, stop);
  if (!s.ok()) {
    spdlog::warn("could not ask the coordinator to stop the whole job ({}): this node's ranks choose the step alone",
                 s.message());
    return std::nullopt;
  }
  if (stop.pending) return stop;  // the choice comes with a heartbeat (note_job_stop)
  std::lock_guard<std::mutex> lock(reason_mutex_);
  if (!job_stop_) job_stop_ = stop;
  return stop;
}

NodeOutcome AgentSession::outcome_of(const AttemptSummary& summary) const {
  NodeOutcome o;
  o.node_rank = assignment_.node_rank;
  o.leaving = summary.stop_signal != 0;
  if (summary.root_cause != nullptr) {
    const WorkerRecord& w = *summary.root_cause;
    o.exit_code = w.exit->shell_code();
    o.failed_rank = w.rank;
    o.failed_at_unix_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(w.exit_time.time_since_epoch()).count();
    o.description = fmt::format("rank {} (node {}, local rank {}, pid {}) failed: {}", w.rank, assignment_.node_rank,
                                w.local_rank, w.pid, w.exit->describe());
  } else if (summary.drained) {
    o.exit_code = exit_code::kRequeue;
    o.description = summary.stop_signal != 0
                        ? fmt::format("ddplaunch on node {} received {}: every rank stopped at a step boundary",
                                      assignment_.node_rank, signal_name(summary.stop_signal))
                        : fmt::format("the ranks of node {} stopped at a step boundary: {}", assignment_.node_rank,
                                      job_stop() ? job_stop()->reason : std::string("the job was asked to stop"));
  } else if (summary.stop_signal != 0) {
    o.exit_code = exit_code::for_signal(summary.stop_signal);
    o.description = fmt::format("ddplaunch on node {} received {}", assignment_.node_rank,
                                signal_name(summary.stop_signal));
  } else if (summary.stop_requested) {
    o.stopped = true;
  } else {
    o.success = true;
  }
  return o;
}

Verdict AgentSession::conclude(const AttemptSummary& summary) {
  const int64_t generation = assignment_.generation;
  stop_threads();
  if (coordinator_lost_) {
    coordinator_lost_ = false;
    return fail_over(stop_reason());
  }
  const NodeOutcome outcome = outcome_of(summary);
  if (!outcome.success && !outcome.stopped) {
    // What the workers said last (a collective they entered just before
    // failing, say) reaches the coordinator before the failure does.
    [[maybe_unused]] const Status flushed =
        calls_.heartbeat(assignment_.node_rank, generation, 2s, health_.latest_with_resources(), nullptr,
                         health_.take_stacks(), nullptr);
  }
  Status s;
  for (int attempt = 0; attempt < 5; ++attempt) {
    s = calls_.report_outcome(generation, outcome, 5s);
    if (s.ok() || s.code() != StatusCode::kUnavailable) break;
    std::this_thread::sleep_for(200ms);
  }
  if (!s.ok()) spdlog::warn("could not report this node's outcome: {}", s.message());
  if (summary.stop_signal != 0 && !summary.drained) return Verdict::finish(exit_code::for_signal(summary.stop_signal));
  return await_verdict(generation);
}

Verdict AgentSession::await_verdict(int64_t generation) {
  auto last_ok = clock_.now();
  GenerationState known = GenerationState::kRunning;
  for (;;) {
    if (const int sig = pending_stop_signal()) return Verdict::finish(exit_code::for_signal(sig));
    GenerationView view;
    const Status s = calls_.watch(assignment_.node_rank, generation, known, 1s, view, nullptr);
    const auto now = clock_.now();
    if (!s.ok()) {
      if (now - last_ok > loss_limit(s)) {
        return fail_over(fmt::format("lost the coordinator at {} while waiting for the job's verdict: {}",
                                     settings_.endpoint, s.message()));
      }
      std::this_thread::sleep_for(100ms);
      continue;
    }
    last_ok = now;
    known = view.state;
    if (view.state == GenerationState::kRestarting) {
      if (!view.reason.empty()) {
        spdlog::warn("generation {} {}: {}", generation, view.membership_change ? "ends" : "failed", view.reason);
      }
      next_generation_ = generation + 1;
      return Verdict::restart_job(view.reason, view.membership_change).caused_on(view.failed_node, view.failed_rank);
    }
    if (view.state == GenerationState::kFinished) {
      // A job stopped at a step boundary on request (75) did not fail: its agents say so themselves.
      if (view.exit_code != 0 && view.exit_code != exit_code::kRequeue) {
        spdlog::error("job {} failed: {}", settings_.job_id, view.reason);
      }
      return Verdict::finish(view.exit_code, view.reason).caused_on(view.failed_node, view.failed_rank);
    }
  }
}

Duration AgentSession::loss_limit(const Status& s) const {
  // A refused connection means the coordinator's host answered and nothing
  // listens there (its agent died while the machine stays up; or a firewall
  // rejects). With an endpoint to fail over to, waiting the whole timeout
  // gains nothing: the majority rules (membership/failover.h) keep a wrong
  // guess safe. A standalone coordinator that restarts is waited for: it has
  // no failover list. gRPC gives the cause only in its message.
  const bool refused = s.code() == StatusCode::kUnavailable &&
                       s.message().find("Connection refused") != std::string::npos;
  if (!refused || failover_ == nullptr || epoch_ + 1 >= failover_->endpoints()) return settings_.coordinator_timeout;
  return std::min<Duration>(settings_.coordinator_timeout,
                            std::max<Duration>(3 * settings_.heartbeat_interval, std::chrono::seconds(1)));
}

Verdict AgentSession::fail_over(const std::string& why) {
  if (failover_ == nullptr || epoch_ + 1 >= failover_->endpoints()) {
    spdlog::error("{}; giving up", why);
    return Verdict::finish(exit_code::kRendezvous, why).caused_on(Verdict::kCoordinator, -1);
  }
  Takeover t;
  t.epoch = epoch_ + 1;
  t.generation = assignment_.generation + 1;
  t.restarts_used = assignment_.restarts_used;
  t.previous_nnodes = assignment_.nnodes;
  move_to(t);
  next_generation_ = t.generation;
  std::string reason =
      fmt::format("{}; failing over to the next coordinator endpoint {} (epoch {}{}), where the surviving nodes "
                  "re-join as generation {} (a membership change: the restart budget is untouched)",
                  why, settings_.endpoint, epoch_, settings_.hosts_coordinator ? ", hosted by this agent" : "",
                  t.generation);
  spdlog::warn("{}", reason);
  return Verdict::restart_job(std::move(reason), /*membership=*/true);
}

bool AgentSession::move_on(const std::string& why) {
  if (failover_ == nullptr || epoch_ + 1 >= failover_->endpoints()) return false;
  Takeover t = *takeover_;
  ++t.skipped;
  t.epoch = epoch_ + 1;
  spdlog::warn("cannot reach the coordinator at {} ({}); moving on to {} (epoch {})", settings_.endpoint, why,
               failover_->endpoint(t.epoch), t.epoch);
  move_to(t);
  return true;
}

void AgentSession::move_to(const Takeover& takeover) {
  takeover_ = takeover;
  settings_.hosts_coordinator = failover_->move_to(takeover);
  epoch_ = takeover.epoch;
  settings_.endpoint = failover_->endpoint(epoch_);
}

}  // namespace ddp
