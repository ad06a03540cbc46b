#include "coordinator/coordinator_job.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <fmt/format.h>

#include <algorithm>

#include "exit_codes.h"
#include "stacks/stack_merge.h"

namespace ddp {

const char* to_string(GenerationState state) {
  switch (state) {
    case GenerationState::kRunning: return "running";
    case GenerationState::kStopping: return "stopping";
    case GenerationState::kRestarting: return "restarting";
    case GenerationState::kFinished: return "finished";
  }
  return "unknown";
}

std::optional<JobConfig::Grow> parse_grow_policy(const std::string& text) {
  if (text == "now") return JobConfig::Grow::kNow;
  if (text == "restart") return JobConfig::Grow::kAtRestart;
  return std::nullopt;
}

const char* to_string(JobConfig::Grow grow) { return grow == JobConfig::Grow::kNow ? "now" : "restart"; }

void CoordinatorJob::Fired::run() {
  for (auto& j : joins) j();
  for (auto& w : waits) w();
  for (auto& [callback, view] : watches) callback(watch_status, view);
  for (auto& [callback, json] : stacks) callback(Status::Ok(), json);
}

namespace {

// The merge of a collection, as JSON with its text for the console.
nlohmann::json merged_stacks(const StackCollection& collection, const std::vector<int>& culprits) {
  const MergedStacks merged = merge_stacks(collection.answers(), collection.world_size(), culprits);
  nlohmann::json j = merged_stacks_to_json(merged);
  j["text"] = format_merged_stacks(merged, collection.world_size());
  return j;
}

HangConfig hang_config(const JobConfig& job) {
  HangConfig c;
  c.hang_timeout = job.hang_timeout;
  c.heartbeat_interval = job.heartbeat_interval;
  return c;
}

}  // namespace

CoordinatorJob::CoordinatorJob(std::string job_id, std::string token, JobConfig config, const Clock& clock,
                               UniqueIdSource& ids, const std::optional<Takeover>& takeover)
    : job_id_(std::move(job_id)),
      token_(std::move(token)),
      config_(config),
      clock_(clock),
      rendezvous_(config.nnodes, config.nproc, config.min_nnodes, config.last_call_timeout),
      store_(ids),
      health_(hang_config(config), config.nnodes * config.nproc, clock),
      created_at_(clock.now()),
      rendezvous_opened_at_(created_at_) {
  if (!takeover) {
    rendezvous_.open(0);
    return;
  }
  // The survivors of the lost coordinator's last world re-join here: all of
  // them complete the world at once, a quorum of them after the last call.
  // Newcomers wait for the next generation (they must not make the quorum).
  takeover_ = true;
  generation_ = takeover->generation;
  restarts_used_ = takeover->restarts_used;
  membership_changes_ = 1;  // the takeover itself (earlier ones were counted by the lost coordinator)
  departed_.push_back(fmt::format("the coordinator of epoch {} was lost; this one (epoch {}) took the job over at "
                                  "generation {}",
                                  takeover->epoch - 1 - takeover->skipped, takeover->epoch, takeover->generation));
  rendezvous_.hold_newcomers(true);
  await_quorum(takeover_quorum(*takeover), takeover->previous_nnodes, takeover->previous_nnodes - 1,
               std::vector<std::string>{});
}

void CoordinatorJob::await_quorum(int needed, int previous_nnodes, int expected_count,
                                  std::optional<std::vector<std::string>> expected) {
  rendezvous_.open(generation_, std::move(expected), expected_count, needed);
  // Each survivor notices the loss within node_timeout, then stops its
  // workers (their shutdown grace: 30 s by default).
  quorum_wait_ = QuorumWait{needed, previous_nnodes,
                            clock_.now() + 2 * config_.node_timeout + config_.last_call_timeout + std::chrono::seconds(30)};
}

Status CoordinatorJob::check_epoch(int epoch) {
  Fired fired;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (epoch > config_.epoch) {
      refused = {StatusCode::kFailedPrecondition,
                 fmt::format("this coordinator (epoch {}) has been replaced by epoch {}", config_.epoch, epoch)};
    }
    if (epoch > config_.epoch && !fenced_) {
      fenced_ = true;
      const std::string why = fmt::format(
          "the coordinator of epoch {} (--rdzv-endpoint entry {}) has taken the job over: this one (epoch {}) ends "
          "its copy",
          epoch, int64_t{epoch} + 1, config_.epoch);  // the caller's number: INT_MAX + 1 must not overflow
      spdlog::warn("job {}: {}", job_id_, why);
      finish_now(exit_code::kNodeLost, why, fired);
    }
  }
  fired.run();
  return refused;
}

void CoordinatorJob::finish_now(int code, const std::string& reason, Fired& fired) {
  rendezvous_.abort({StatusCode::kFailedPrecondition, reason}, fired.joins);
  store_.clear({StatusCode::kAborted, reason}, fired.waits);
  finished_reason_ = reason;
  finished_view_ = view_of(generation_);
  finished_view_.exit_code = code;
  finished_view_.reason = reason;
  set_state(GenerationState::kFinished, fired);
}

void CoordinatorJob::expire_quorum(SteadyTime now, Fired& fired) {
  if (!quorum_wait_ || world_formed_ || state_ == GenerationState::kFinished || now < quorum_wait_->deadline) return;
  if (rendezvous_.form_now(fired.joins)) {
    on_world_formed();
    return;
  }
  finish_now(exit_code::kNodeLost,
             fmt::format("only {} of the {} node(s) of generation {} reached this coordinator (epoch {}), fewer than "
                         "the {} needed to be sure no other copy of the job goes on",
                         rendezvous_.pending(), quorum_wait_->previous_nnodes, generation_ - 1, config_.epoch,
                         quorum_wait_->needed),
             fired);
}

Status CoordinatorJob::refuse_if_orphaned() {
  Fired fired;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!ever_formed_ && !takeover_) refused = orphaned(fired);
  }
  fired.run();
  return refused;
}

Status CoordinatorJob::orphaned(Fired& fired) {
  const std::string why =
      "this coordinator started after its job had already run (its node restarted): it ends its copy, so that the "
      "job's nodes fail over to the next --rdzv-endpoint entry";
  if (state_ != GenerationState::kFinished) {
    spdlog::warn("job {}: {}", job_id_, why);
    finish_now(exit_code::kNodeLost, why, fired);
  }
  return {StatusCode::kUnavailable, why};
}

bool CoordinatorJob::token_matches(const std::string& token) const {
  // Length is not secret (tokens have a fixed format); the contents are.
  if (token.size() != token_.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(token[i] ^ token_[i]);
  return diff == 0;
}

void CoordinatorJob::join(const JoinParams& params, Duration timeout, JoinCallback done) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // The joiner learns how many restarts the job has used when its world forms.
    JoinCallback with_restarts = [this, done = std::move(done)](const Status& s, const Assignment& a) {
      Assignment told = a;
      if (s.ok()) {
        std::lock_guard<std::mutex> job_lock(mutex_);
        told.restarts_used = restarts_used_;
      }
      done(s, told);
    };
    const auto excluded = excluded_.find(Rendezvous::member_key(params));
    if (state_ == GenerationState::kFinished) {
      fired.joins.push_back({std::move(with_restarts), {StatusCode::kFailedPrecondition, "the job has finished"}, {}});
    } else if (excluded != excluded_.end()) {
      fired.joins.push_back({std::move(with_restarts), {StatusCode::kFailedPrecondition, excluded->second}, {}});
    } else {
      const SteadyTime now = clock_.now();
      rendezvous_.join(params, now, now + timeout, std::move(with_restarts), fired.joins);
      if (rendezvous_.complete() && !world_formed_) on_world_formed();
      grow_if_waiting(fired);
    }
  }
  fired.run();
}

void CoordinatorJob::on_world_formed() {
  world_formed_ = true;
  ever_formed_ = true;
  quorum_wait_.reset();
  rendezvous_.hold_newcomers(false);
  world_nnodes_ = rendezvous_.nnodes();
  rendezvous_seconds_ = std::chrono::duration<double>(clock_.now() - rendezvous_opened_at_).count();
  first_outcome_at_.reset();
  state_ = GenerationState::kRunning;
  outcomes_.assign(static_cast<size_t>(world_nnodes_), std::nullopt);
  last_heartbeat_.assign(static_cast<size_t>(world_nnodes_), clock_.now());
  heartbeat_gap_.assign(static_cast<size_t>(world_nnodes_), Duration::zero());
  told_finished_.assign(static_cast<size_t>(world_nnodes_), false);
  root_cause_.reset();
  desync_before_.clear();
  membership_stop_.clear();
  job_stop_.reset();
  pending_stop_.reset();
  health_.reset(rendezvous_.nnodes() * rendezvous_.nproc());
  pending_hang_.reset();
  hang_stacks_.reset();
  hang_report_.clear();
}

Status CoordinatorJob::heartbeat(int node_rank, int64_t generation, int64_t& current,
                                 std::vector<ForwardedReport> workers, std::vector<int>* dump_ranks,
                                 std::vector<RankStacks> stacks, std::optional<JobStop>* stop) {
  if (node_rank < 0 || node_rank >= config_.nnodes) {
    return {StatusCode::kInvalidArgument, fmt::format("node rank {} outside 0..{}", node_rank, config_.nnodes - 1)};
  }
  // Agents heartbeat only once a world formed: no world here yet means an
  // agent of an earlier incarnation of this coordinator.
  if (Status s = refuse_if_orphaned(); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  current = generation_;
  if (generation != generation_ || !world_formed_ || node_rank >= world_nnodes_) return Status::Ok();
  const auto n = static_cast<size_t>(node_rank);
  heartbeat_gap_[n] = std::max(heartbeat_gap_[n], clock_.now() - last_heartbeat_[n]);
  last_heartbeat_[n] = clock_.now();
  for (ForwardedReport& w : workers) {
    const int rank = w.report.rank;
    if (rank < 0 || rank >= rendezvous_.nnodes() * rendezvous_.nproc()) continue;
    const bool exiting = w.report.exiting;
    health_.on_report(std::move(w.report), w.held);  // kept as it is, not copied
    if (exiting) health_.on_rank_exited(rank);
  }
  decide_pending_stop(clock_.now());
  if (stop) *stop = job_stop_;
  // Requests for stacks reach the node's workers through its agent; the
  // answers come back the same way. Every rank of the node is asked.
  std::vector<StackCollection*> collections;
  if (hang_stacks_) collections.push_back(&*hang_stacks_);
  for (StackRequest& r : stack_requests_) collections.push_back(&r.collection);
  const int nproc = rendezvous_.nproc();
  for (StackCollection* c : collections) {
    for (int rank : c->take_requests(node_rank * nproc, nproc)) {
      if (dump_ranks && std::find(dump_ranks->begin(), dump_ranks->end(), rank) == dump_ranks->end()) {
        dump_ranks->push_back(rank);
      }
    }
    for (const RankStacks& s : stacks) c->on_answer(s);
  }
  return Status::Ok();
}

Status CoordinatorJob::request_stop(int node_rank, int64_t generation, const std::string& reason,
                                    Duration stop_timeout, JobStop& stop) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_ || !world_formed_ || state_ != GenerationState::kRunning) {
    return {StatusCode::kFailedPrecondition, fmt::format("generation {} is not running", generation)};
  }
  if (!job_stop_ && !pending_stop_) {
    PendingJobStop asked;
    asked.stop.reason = reason;
    asked.stop.stop_timeout = stop_timeout;
    // Steps and step times show up with the ranks' next reports, within a
    // heartbeat interval or two of a second step; a program that reports
    // none is told "at the next step boundary" after four.
    asked.deadline = clock_.now() + 4 * config_.heartbeat_interval;
    pending_stop_ = std::move(asked);
    decide_pending_stop(clock_.now());
    if (pending_stop_) {
      spdlog::info("job {}: node {} asks every rank to stop ({}); waiting for the ranks' step counts and step times "
                   "to choose the step",
                   job_id_, node_rank, reason);
    }
  }
  if (job_stop_) {
    stop = *job_stop_;
  } else {
    stop = pending_stop_->stop;
    stop.pending = true;
  }
  return Status::Ok();
}

void CoordinatorJob::set_status_section(const std::string& key, std::function<nlohmann::json()> provide) {
  std::lock_guard<std::mutex> lock(sections_mutex_);
  if (provide) {
    status_sections_[key] = std::move(provide);
  } else {
    status_sections_.erase(key);
  }
}

void CoordinatorJob::decide_pending_stop(SteadyTime now) {
  if (!pending_stop_) return;
  // Reports are up to a heartbeat interval old when they arrive, and the
  // agents hear of the stop with their next heartbeat: four intervals of
  // steps past the furthest rank is beyond any rank's reach.
  std::optional<JobStop> decided = decide_job_stop(*pending_stop_, health_.latest_reports(),
                                                   4 * config_.heartbeat_interval, now, health_.fastest_step_seconds());
  if (!decided) return;
  spdlog::warn("job {}: every rank stops {} ({})", job_id_,
               decided->stop_at_step ? fmt::format("once it has completed step {}", *decided->stop_at_step)
                                     : std::string("at its next step boundary (no rank reports steps)"),
               decided->reason);
  job_stop_ = std::move(decided);
  pending_stop_.reset();
}

void CoordinatorJob::collect_stacks(Duration timeout, StacksCallback done) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (world_formed_ && state_ == GenerationState::kRunning) {
      const int world = rendezvous_.nnodes() * rendezvous_.nproc();
      stack_requests_.push_back({StackCollection(world, clock_.now() + timeout), std::move(done)});
      return;
    }
    why = state_ == GenerationState::kRunning
              ? fmt::format("generation {} is still forming (rendezvous): no rank runs yet", generation_)
              : fmt::format("generation {} is {}: no rank runs", generation_, to_string(state_));
  }
  done({StatusCode::kFailedPrecondition, why}, "");
}

void CoordinatorJob::finish_stack_requests(SteadyTime now, Fired& fired) {
  auto finished = std::stable_partition(stack_requests_.begin(), stack_requests_.end(),
                                        [now](const StackRequest& r) { return !r.collection.done(now); });
  for (auto it = finished; it != stack_requests_.end(); ++it) {
    fired.stacks.emplace_back(std::move(it->done),
                              merged_stacks(it->collection, {}).dump(-1, ' ', false,
                                                                     nlohmann::json::error_handler_t::replace));
  }
  stack_requests_.erase(finished, stack_requests_.end());
}

void CoordinatorJob::check_health(SteadyTime now, Fired& fired) {
  if (!world_formed_ || state_ != GenerationState::kRunning) return;
  decide_pending_stop(now);
  // Warnings only: each once, on the console; status and /metrics list them too.
  for (const TroubleWarning& w : health_.take_warnings()) spdlog::warn("{}: {}", to_string(w.kind), w.line());
  if (!pending_hang_) {
    std::optional<HangVerdict> verdict = health_.check();
    if (!verdict) return;
    ++hang_verdicts_[to_string(verdict->kind)];
    // Report first, then ask every rank for its stacks before anything is stopped.
    spdlog::error("{} detected: {}", to_string(verdict->kind), verdict->summary);
    spdlog::info("asking every rank for its stacks before stopping the job");
    hang_stacks_.emplace(health_.world_size(), now + stack_collection_timeout(config_.heartbeat_interval));
    pending_hang_ = std::move(verdict);
    return;
  }
  if (!hang_stacks_->done(now)) return;
  HangVerdict& v = *pending_hang_;
  nlohmann::json stacks = merged_stacks(*hang_stacks_, v.culprits);
  std::string text = stacks["text"].get<std::string>();
  while (!text.empty() && text.back() == '\n') text.pop_back();
  spdlog::error("stacks of the {} ranks, grouped by identical stack:\n{}", hang_stacks_->world_size(), text);
  v.details["stacks"] = std::move(stacks);
  hang_stacks_.reset();
  NodeOutcome cause;
  cause.exit_code = exit_code::kHang;
  cause.failed_rank = v.culprits.empty() ? -1 : v.culprits.front();
  cause.node_rank = cause.failed_rank >= 0 ? cause.failed_rank / std::max(config_.nproc, 1) : -1;
  cause.description = fmt::format("{}: {}", to_string(v.kind), v.summary);
  hang_report_ = v.details.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  set_root_cause(std::move(cause));
  pending_hang_.reset();
  set_state(GenerationState::kStopping, fired);
}

std::string CoordinatorJob::status_json() const {
  std::unique_lock<std::mutex> lock(mutex_);
  nlohmann::json j;
  j["job_id"] = job_id_;
  j["generation"] = generation_;
  // While the generation's world forms no rank runs yet, and the world size
  // is the most it may have.
  const bool forming = !world_formed_ && state_ == GenerationState::kRunning;
  j["state"] = forming ? "rendezvous" : to_string(state_);
  if (forming) {
    j["rendezvous"] = rendezvous_.waiting_summary(clock_.now())
                          .value_or(fmt::format("no node joined generation {} yet", generation_));
  }
  j["restarts_used"] = restarts_used_;
  j["max_restarts"] = config_.max_restarts;
  j["elapsed_s"] = std::chrono::duration<double>(clock_.now() - created_at_).count();
  j["nnodes"] = rendezvous_.nnodes();
  j["world_size"] = rendezvous_.nnodes() * config_.nproc;
  if (rendezvous_.elastic()) j["nnodes_range"] = {rendezvous_.min_nnodes(), rendezvous_.max_nnodes()};
  j["hosts"] = rendezvous_.hosts();
  if (world_formed_ && rendezvous_seconds_) j["rendezvous_s"] = *rendezvous_seconds_;
  if (teardown_seconds_) j["teardown_s"] = *teardown_seconds_;
  for (HangKind kind : {HangKind::kSilentRank, HangKind::kStuckCollective, HangKind::kDesync}) {
    const auto given = hang_verdicts_.find(to_string(kind));
    j["hang_verdicts"][to_string(kind)] = given == hang_verdicts_.end() ? 0 : given->second;
  }
  // Copied now, formatted after the unlock: at 16,384 ranks the formatting
  // would hold up heartbeats behind every scrape (health_view.h).
  HealthView health = health_.view();
  if (forming) {
    // The health board still holds the ended generation's ranks until the
    // new world forms (on_world_formed resets it): none of them runs now.
    // Its warnings stay, as the job's history.
    health.ranks.clear();
    health.since_progress.reset();
  }
  if (root_cause_) j["failure"] = root_cause_->description;
  nlohmann::json membership = nlohmann::json::array();
  for (size_t r = 0; r < rendezvous_.hosts().size(); ++r) {
    membership.push_back({{"node", r}, {"host", rendezvous_.hosts()[r]}});
  }
  j["membership"] = std::move(membership);
  j["membership_changes"] = membership_changes_;
  j["waiting_nodes"] = rendezvous_.waiting();
  j["departed"] = departed_;
  if (config_.endpoints > 1) j["coordinator_epoch"] = {config_.epoch, config_.endpoints};
  if (!membership_stop_.empty()) j["stopping_for"] = membership_stop_;
  if (job_stop_) {
    j["stop_requested"] = {{"reason", job_stop_->reason}};
    if (job_stop_->stop_at_step) j["stop_requested"]["stop_at_step"] = *job_stop_->stop_at_step;
  } else if (pending_stop_) {
    j["stop_requested"] = {{"reason", pending_stop_->stop.reason}, {"step_not_chosen_yet", true}};
  }
  lock.unlock();
  j["ranks"] = health_view_json(health);
  std::lock_guard<std::mutex> sections_lock(sections_mutex_);
  for (const auto& [key, provide] : status_sections_) j[key] = provide();
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status CoordinatorJob::report_outcome(int64_t generation, const NodeOutcome& outcome) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation != generation_ || !world_formed_) {
      return {StatusCode::kFailedPrecondition, fmt::format("generation {} is not running", generation)};
    }
    if (outcome.node_rank < 0 || outcome.node_rank >= world_nnodes_) {
      return {StatusCode::kInvalidArgument, fmt::format("node rank {} outside 0..{}", outcome.node_rank,
                                                        world_nnodes_ - 1)};
    }
    if (!outcomes_[static_cast<size_t>(outcome.node_rank)]) record_outcome(outcome, fired);
  }
  fired.run();
  return Status::Ok();
}

void CoordinatorJob::record_outcome(const NodeOutcome& outcome, Fired& fired) {
  outcomes_[static_cast<size_t>(outcome.node_rank)] = outcome;
  if (!first_outcome_at_) first_outcome_at_ = clock_.now();
  // A node whose ranks stopped at the agreed step (preemption) is no failure:
  // the others must reach that step too, and write their checkpoints, before
  // the job ends with it (generation_end.h).
  const bool drained = outcome.exit_code == exit_code::kRequeue && (job_stop_ || pending_stop_);
  const bool failed = !outcome.success && !outcome.stopped && !drained;
  if (failed && !root_cause_) {
    set_root_cause(outcome);
    // Ranks that disagreed on a collective just before one failed: the
    // failure is likely its consequence (Gloo aborts on mismatched sizes).
    if (!pending_hang_ && state_ == GenerationState::kRunning) {
      if (std::optional<HangVerdict> v = health_.check_at_once(); v && v->kind == HangKind::kDesync) {
        desync_before_ = "; before that, " + v->summary;
        root_cause_->description += desync_before_;
        hang_report_ = v->details.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
      }
    }
    if (state_ == GenerationState::kRunning) set_state(GenerationState::kStopping, fired);
  } else if (failed && failed_earlier(outcome, *root_cause_)) {
    // A rank whose peer died fails in its collective within milliseconds,
    // and its node may finish stopping, and report, before the peer's node
    // does. The failure seen first is the cause (failure.json and every
    // console name it); root_cause_at_ stays when a failure was first known.
    const std::string& later = root_cause_->description;
    NodeOutcome cause = outcome;
    cause.description += fmt::format(
        "; reported after {}, seen {:.2f} s later and taken as its consequence",
        later.substr(0, later.size() - desync_before_.size()),
        static_cast<double>(root_cause_->failed_at_unix_ms - outcome.failed_at_unix_ms) / 1000.0);
    cause.description += desync_before_;
    root_cause_ = std::move(cause);
  }
  conclude_if_all_reported(fired);
}

void CoordinatorJob::set_root_cause(NodeOutcome cause) {
  root_cause_ = std::move(cause);
  root_cause_at_ = clock_.now();
}

bool CoordinatorJob::silent_before_root_cause(int node) const {
  if (!root_cause_ || root_cause_->exit_code == exit_code::kNodeLost || root_cause_->node_rank == node) return false;
  return last_heartbeat_[static_cast<size_t>(node)] <= root_cause_at_;
}

void CoordinatorJob::conclude_if_all_reported(Fired& fired) {
  if (std::any_of(outcomes_.begin(), outcomes_.end(), [](const auto& o) { return !o.has_value(); })) return;
  const Status over{StatusCode::kAborted, fmt::format("generation {} has ended", generation_)};
  store_.clear(over, fired.waits);
  end_generation(fired);
}

void CoordinatorJob::end_generation(Fired& fired) {
  if (first_outcome_at_) teardown_seconds_ = std::chrono::duration<double>(clock_.now() - *first_outcome_at_).count();
  const std::vector<std::string>& members = rendezvous_.members();
  std::vector<NodeEnd> nodes(static_cast<size_t>(world_nnodes_));
  for (size_t r = 0; r < nodes.size(); ++r) {
    NodeEnd& n = nodes[r];
    n.member = members[r];
    n.host = rendezvous_.hosts()[r];
    n.hosts_coordinator = rendezvous_.hosts_coordinator(static_cast<int>(r));
    n.outcome = *outcomes_[r];
    const auto streak = failure_streaks_.find(n.member);
    n.failure_streak = streak == failure_streaks_.end() ? 0 : streak->second;
  }
  MembershipRules rules;
  rules.min_nnodes = rendezvous_.min_nnodes();
  rules.max_nnodes = rendezvous_.max_nnodes();
  rules.max_restarts = config_.max_restarts;
  rules.restarts_used = restarts_used_;
  rules.max_node_failures = config_.max_node_failures;
  rules.grow_requested = !membership_stop_.empty();
  rules.majority_needed = majority_needed(config_.epoch, config_.endpoints);
  const GenerationEnd end = decide_generation_end(nodes, root_cause_, rules);

  std::vector<bool> departs(nodes.size(), false);
  excluded_last_.clear();
  for (size_t r = 0; r < nodes.size(); ++r) failure_streaks_[nodes[r].member] = end.failure_streaks[r];
  for (const Departure& d : end.departures) {
    const auto r = static_cast<size_t>(d.node_rank);
    departs[r] = true;
    spdlog::warn("job {}: node {} ({}) {}: {}", job_id_, d.node_rank, nodes[r].host, to_string(d.why), d.description);
    constexpr size_t kDepartedKept = 32;  // a bounded history for `status`
    if (departed_.size() == kDepartedKept) departed_.erase(departed_.begin());
    departed_.push_back(d.description);
    if (d.why == Departure::Why::kExcluded) {
      excluded_[nodes[r].member] = d.description;
      excluded_last_[d.node_rank] = d;
    }
  }
  if (!end.restart) {
    if (rules.majority_needed && end.exit_code == exit_code::kNodeLost) finished_reason_ = end.reason;
    finished_view_ = view_of(generation_);
    finished_view_.exit_code = end.exit_code;
    set_state(GenerationState::kFinished, fired);
    return;
  }
  if (end.counts_as_restart) ++restarts_used_;
  if (end.membership_change) ++membership_changes_;
  last_restart_view_ = view_of(generation_);
  last_restart_view_.state = GenerationState::kRestarting;
  last_restart_view_.reason = end.reason;
  last_restart_view_.membership_change = end.membership_change;
  spdlog::warn("job {}: generation {} ended: {}", job_id_, generation_, end.reason);
  std::vector<std::string> expected;
  for (size_t r = 0; r < nodes.size(); ++r) {
    if (!departs[r]) expected.push_back(nodes[r].member);
  }
  // The next generation starts clean: new world, empty store, new IDs.
  ++generation_;
  rendezvous_opened_at_ = clock_.now();
  root_cause_.reset();
  desync_before_.clear();
  membership_stop_.clear();
  state_ = GenerationState::kRunning;
  world_formed_ = false;
  if (rules.majority_needed) {
    // A partition after this verdict must not let a minority re-form here;
    // nodes that left or were excluded run nowhere else and do not vote.
    const int voting = voters(end, static_cast<int>(nodes.size()));
    await_quorum(voting / 2 + 1, voting, 0, std::move(expected));
  } else {
    rendezvous_.open(generation_, std::move(expected));
  }
  release_watches(fired);  // the ended generation's watchers hear last_restart_view_
}

void CoordinatorJob::grow_if_waiting(Fired& fired) {
  if (config_.grow != JobConfig::Grow::kNow || !world_formed_ || state_ != GenerationState::kRunning ||
      rendezvous_.waiting() == 0 || world_nnodes_ >= rendezvous_.max_nnodes() || !membership_stop_.empty()) {
    return;
  }
  membership_stop_ = fmt::format(
      "{} node(s) waiting to join: stopping generation {} to re-form with {} node(s) (a membership change: the "
      "restart budget is untouched)",
      rendezvous_.waiting(), generation_, std::min(world_nnodes_ + rendezvous_.waiting(), rendezvous_.max_nnodes()));
  spdlog::warn("job {}: {}", job_id_, membership_stop_);
  set_state(GenerationState::kStopping, fired);
}

void CoordinatorJob::set_state(GenerationState state, Fired& fired) {
  state_ = state;
  if (state == GenerationState::kFinished) {
    // Nothing parked on a finished job can complete: answer it now, not at
    // its own deadline, which may come after the coordinator has forgotten
    // the job (and with it the call). A KV wait made before a rendezvous
    // timed out, a newcomer waiting for a generation that will not come.
    const std::string why = "the job has finished";
    rendezvous_.abort({StatusCode::kFailedPrecondition, why}, fired.joins);
    store_.clear({StatusCode::kAborted, why}, fired.waits);
  }
  release_watches(fired);
}

GenerationView CoordinatorJob::view_of(int64_t generation) const {
  GenerationView v;
  v.generation = generation;
  // An earlier generation is over, and the job has moved on to a later one.
  // last_restart_view_ says how once a generation ended here (its state is
  // then kRestarting); before that there is none: not before the first
  // restart (a watch of generation -1), nor for the generation a takeover
  // continues from, which ended at the lost coordinator.
  if (generation == generation_ - 1 && last_restart_view_.state == GenerationState::kRestarting) {
    return last_restart_view_;
  }
  v.state = generation < generation_ ? GenerationState::kRestarting : state_;
  if (generation == generation_ && !root_cause_) v.reason = membership_stop_;
  if (state_ == GenerationState::kFinished && generation == generation_) v.exit_code = finished_view_.exit_code;
  if (root_cause_ && generation == generation_) {
    v.reason = root_cause_->description;
    v.failed_node = root_cause_->node_rank;
    v.failed_rank = root_cause_->failed_rank;
    v.report_json = hang_report_;
  }
  if (state_ == GenerationState::kFinished && generation == generation_ && !finished_reason_.empty()) {
    v.reason = finished_reason_;
  }
  return v;
}

void CoordinatorJob::release_watches(Fired& fired) {
  answer_watches(watches_.take_if([this](const ParkedWatch& w) { return view_of(w.generation).state != w.known; }),
                 fired);
}

void CoordinatorJob::answer_watches(std::vector<ParkedWatch> taken, Fired& fired) {
  for (ParkedWatch& w : taken) {
    fired.watches.emplace_back(std::move(w.done), answer(w.node_rank, w.generation, w.after_outcome));
  }
}

GenerationView CoordinatorJob::answer(int node_rank, int64_t generation, bool asked_after_outcome) {
  GenerationView view = view_of(generation);
  // An excluded node hears that the job is over for it.
  if (generation == generation_ - 1) {
    if (auto it = excluded_last_.find(node_rank); it != excluded_last_.end()) {
      view.state = GenerationState::kFinished;
      view.exit_code = it->second.exit_code;
      view.reason = it->second.description;
      view.membership_change = false;
      return view;
    }
  }
  // Only a watch made after the node reported is its agent waiting for the
  // verdict; an earlier one may belong to a poll the agent has abandoned.
  if (view.state == GenerationState::kFinished && asked_after_outcome) {
    told_finished_[static_cast<size_t>(node_rank)] = true;
  }
  return view;
}

bool CoordinatorJob::has_reported(int node_rank) const {
  return node_rank >= 0 && static_cast<size_t>(node_rank) < outcomes_.size() &&
         outcomes_[static_cast<size_t>(node_rank)].has_value();
}

void CoordinatorJob::watch(int node_rank, int64_t generation, GenerationState known, Duration timeout,
                           WatchCallback done) {
  if (node_rank >= 0) {  // an agent (observers are -1): it watches only once a world formed
    if (Status s = refuse_if_orphaned(); !s.ok()) {
      done(s, {});
      return;
    }
  }
  GenerationView view;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (view_of(generation).state == known) {
      watches_.park({node_rank, generation, known, has_reported(node_rank), clock_.now() + timeout, std::move(done)});
      return;
    }
    view = answer(node_rank, generation, has_reported(node_rank));
  }
  done(Status::Ok(), view);
}

bool CoordinatorJob::verdict_undelivered(int except_node) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ != GenerationState::kFinished || !world_formed_) return false;
  for (size_t node = 0; node < told_finished_.size(); ++node) {
    if (!told_finished_[node] && static_cast<int>(node) != except_node) return true;
  }
  return false;
}

Status CoordinatorJob::check_generation(int64_t generation) const {
  if (generation == generation_ && state_ != GenerationState::kFinished) return Status::Ok();
  return {StatusCode::kFailedPrecondition,
          fmt::format("generation {} is over (the job is at generation {}, {})", generation, generation_,
                      to_string(state_))};
}

Status CoordinatorJob::kv_set(int64_t generation, const std::string& key, std::string value) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status s = check_generation(generation); !s.ok()) return s;
    store_.kv().set(key, std::move(value), fired.waits);
  }
  fired.run();
  return Status::Ok();
}

Status CoordinatorJob::kv_get(int64_t generation, const std::string& key, std::optional<std::string>& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Status s = check_generation(generation); !s.ok()) return s;
  value = store_.kv().get(key);
  return Status::Ok();
}

Status CoordinatorJob::kv_add(int64_t generation, const std::string& key, int64_t delta, int64_t& result) {
  Fired fired;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status s = check_generation(generation); !s.ok()) return s;
    status = store_.kv().add(key, delta, result, fired.waits);
  }
  fired.run();
  return status;
}

Status CoordinatorJob::kv_compare_set(int64_t generation, const std::string& key,
                                      const std::optional<std::string>& expected, std::string desired, bool& swapped,
                                      std::string& current) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status s = check_generation(generation); !s.ok()) return s;
    swapped = store_.kv().compare_set(key, expected, std::move(desired), current, fired.waits);
  }
  fired.run();
  return Status::Ok();
}

Status CoordinatorJob::kv_delete_prefix(int64_t generation, const std::string& prefix, int64_t& deleted) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Status s = check_generation(generation); !s.ok()) return s;
  deleted = store_.kv().delete_prefix(prefix);
  return Status::Ok();
}

void CoordinatorJob::kv_wait(int64_t generation, std::vector<std::string> keys, Duration timeout, WaitCallback done) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status s = check_generation(generation); !s.ok()) {
      fired.waits.push_back({std::move(done), s});
    } else {
      store_.kv().wait(std::move(keys), clock_.now() + timeout, std::move(done), fired.waits);
    }
  }
  fired.run();
}

void CoordinatorJob::barrier(int64_t generation, const std::string& name, int participants, Duration timeout,
                             WaitCallback done) {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Status s = check_generation(generation); !s.ok()) {
      fired.waits.push_back({std::move(done), s});
    } else {
      store_.barrier(name, participants, clock_.now() + timeout, std::move(done), fired.waits);
    }
  }
  fired.run();
}

Status CoordinatorJob::nccl_id(int64_t generation, const std::string& comm_key, std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Status s = check_generation(generation); !s.ok()) return s;
  id = store_.nccl_id(comm_key);
  return Status::Ok();
}

void CoordinatorJob::report_waiting_joins(SteadyTime now) {
  constexpr auto kEvery = std::chrono::seconds(5);
  const std::optional<std::string> waiting = rendezvous_.waiting_summary(now);
  if (!waiting) {
    next_rendezvous_report_.reset();
  } else if (!next_rendezvous_report_) {
    next_rendezvous_report_ = now + kEvery;  // a rendezvous that forms at once says nothing
  } else if (now >= *next_rendezvous_report_) {
    *next_rendezvous_report_ += kEvery;
    spdlog::info("rendezvous of job {}: {}", job_id_, *waiting);
  }
}

void CoordinatorJob::tick() {
  Fired fired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const SteadyTime now = clock_.now();
    store_.kv().expire(now, fired.waits);
    report_waiting_joins(now);
    if (rendezvous_.close_last_call(now, fired.joins) && !world_formed_) on_world_formed();
    expire_quorum(now, fired);
    if (rendezvous_.expire(now, fired.joins)) {
      // The world cannot form: the job is over (its agents exit with a
      // rendezvous failure), and a standalone coordinator may forget it.
      finished_view_ = view_of(generation_);
      finished_view_.exit_code = exit_code::kRendezvous;
      finished_view_.reason = "rendezvous timed out";
      set_state(GenerationState::kFinished, fired);
    }
    check_health(now, fired);
    grow_if_waiting(fired);
    finish_stack_requests(now, fired);
    declare_silent_nodes(now, fired);
    answer_watches(watches_.take_expired(now), fired);
  }
  fired.run();
}

void CoordinatorJob::declare_silent_nodes(SteadyTime now, Fired& fired) {
  if (!world_formed_ || (state_ != GenerationState::kRunning && state_ != GenerationState::kStopping)) return;
  for (int node = 0; node < world_nnodes_; ++node) {
    const auto n = static_cast<size_t>(node);
    if (outcomes_[n]) continue;
    // While the generation stops, a live agent keeps heartbeating through its
    // teardown: one silent for three of its longest heartbeat gaps is gone,
    // and the survivors need not wait the whole node_timeout to re-form.
    Duration limit = config_.node_timeout;
    if (state_ == GenerationState::kStopping && heartbeat_gap_[n] > Duration::zero()) {
      limit = std::clamp<Duration>(3 * heartbeat_gap_[n], std::chrono::seconds(1), config_.node_timeout);
    }
    if (now - last_heartbeat_[n] < limit) continue;
    NodeOutcome lost;
    lost.node_rank = node;
    lost.exit_code = exit_code::kNodeLost;
    lost.description = fmt::format("node {} ({}) went silent: no agent heartbeat for {:.1f} s", node,
                                   rendezvous_.hosts()[n],
                                   std::chrono::duration<double>(now - last_heartbeat_[n]).count());
    if (silent_before_root_cause(node)) {
      // A node's agent died (or its link did) and its ranks vanished: the
      // peers' collectives fail at once and their agents report that within
      // milliseconds, while the silence takes a few heartbeats to be sure of.
      // The silence began first, so it is the cause and the failure its
      // consequence (failure.json and every console say so).
      NodeOutcome cause = lost;
      cause.description += fmt::format("; it went silent before the failure reported first, which is taken as its "
                                       "consequence: {}",
                                       root_cause_->description);
      set_root_cause(std::move(cause));
    }
    record_outcome(lost, fired);
  }
}

void CoordinatorJob::abort_all(const Status& status) {
  Fired fired;
  std::vector<StackRequest> aborted_stacks;
  fired.watch_status = status;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    store_.clear(status, fired.waits);
    rendezvous_.abort(status, fired.joins);
    for (ParkedWatch& w : watches_.take_all()) fired.watches.emplace_back(std::move(w.done), view_of(w.generation));
    aborted_stacks.swap(stack_requests_);
  }
  fired.run();
  for (StackRequest& r : aborted_stacks) r.done(status, "");
}

bool CoordinatorJob::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_ == GenerationState::kFinished;
}

GenerationView CoordinatorJob::current_view() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return view_of(generation_);
}

}  // namespace ddp
