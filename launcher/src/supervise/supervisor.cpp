#include "supervise/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <system_error>

#include "exit_codes.h"

namespace ddp {

const char* to_string(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning: return "running";
    case WorkerState::kSucceeded: return "succeeded";
    case WorkerState::kFailed: return "failed";
    case WorkerState::kStopped: return "stopped";
  }
  return "unknown";
}

Verdict LocalArbiter::conclude(const AttemptSummary& s) {
  if (s.drained) return Verdict::finish(exit_code::kRequeue);
  if (s.stop_signal != 0) return Verdict::finish(exit_code::for_signal(s.stop_signal));
  if (s.root_cause == nullptr) return Verdict::finish(exit_code::kSuccess);
  if (s.attempt < max_restarts_) return Verdict::restart_job();
  return Verdict::finish(s.root_cause->exit->shell_code());
}

Supervisor::Supervisor(SupervisorConfig config, ProcessSpawner& spawner, const Clock& clock,
                       SupervisorListener& listener, AttemptArbiter& arbiter)
    : config_(std::move(config)), spawner_(spawner), clock_(clock), listener_(listener), arbiter_(arbiter) {}

void Supervisor::start() { start_attempt(); }

void Supervisor::start_attempt() {
  workers_.clear();
  root_cause_.reset();
  tearing_down_ = false;
  stop_requested_ = false;
  kill_deadline_.reset();
  drain_deadline_.reset();
  draining_ = false;

  std::vector<WorkerSpec> specs;
  try {
    specs = config_.plan_attempt(attempt_);
  } catch (const PlanError& e) {
    exit_code_ = e.exit_code;
    finished_ = true;
    return;
  }
  listener_.on_attempt_started(attempt_);
  for (WorkerSpec& spec : specs) {
    WorkerRecord record;
    record.local_rank = spec.local_rank;
    record.rank = spec.rank;
    SpawnedProcess process;
    try {
      process = spawner_.spawn(spec.request);
    } catch (const std::system_error&) {
      // No process at all (fork failed): count it as this rank failing the way
      // a shell reports an unrunnable command, and tear down the rest.
      record.state = WorkerState::kFailed;
      record.exit = ExitStatus::exited(127);
      record.exit_time = clock_.wall_now();
      workers_.push_back(record);
      root_cause_ = workers_.size() - 1;
      listener_.on_first_failure(attempt_, workers_.back());
      begin_teardown();
      finish_attempt_if_done();
      return;
    }
    record.pid = process.pid;
    workers_.push_back(record);
    listener_.on_worker_started(workers_.back(), process);
  }
  finish_attempt_if_done();  // an attempt with no workers ends at once
}

void Supervisor::on_child_exit(pid_t pid, ExitStatus status) {
  WorkerRecord* worker = find(pid);
  if (worker == nullptr || worker->state != WorkerState::kRunning) return;
  spawner_.release(pid);
  worker->exit = status;
  worker->exit_time = clock_.wall_now();
  if (status.succeeded()) {
    worker->state = WorkerState::kSucceeded;
  } else if (tearing_down_) {
    worker->state = WorkerState::kStopped;
  } else {
    worker->state = WorkerState::kFailed;
    root_cause_ = static_cast<size_t>(worker - workers_.data());
    listener_.on_first_failure(attempt_, *worker);
    begin_teardown();
  }
  finish_attempt_if_done();
}

void Supervisor::on_signal(int signo) {
  if (finished_) return;
  if (stop_signal_ != 0 && tearing_down_) {
    // Asked twice: the user is not willing to wait for the grace period.
    signal_running(SIGKILL);
    return;
  }
  const bool asked_again = draining_;
  stop_signal_ = signo;
  if (tearing_down_) return;
  if (signo == SIGTERM && config_.stop_timeout > Duration::zero() && !asked_again) {
    // Preemption: the workers stop at a step boundary and save their state.
    draining_ = true;
    drain_deadline_ = clock_.now() + config_.stop_timeout;
    listener_.on_stop_requested(attempt_, signo);
    finish_attempt_if_done();
    return;
  }
  draining_ = false;
  drain_deadline_.reset();
  tearing_down_ = true;
  // Forward the very signal, as torchrun does, then SIGKILL after the grace.
  signal_running(signo);
  kill_deadline_ = clock_.now() + config_.shutdown_grace;
  finish_attempt_if_done();
}

void Supervisor::drain(Duration timeout) {
  if (finished_ || tearing_down_ || draining_) return;
  draining_ = true;
  drain_deadline_ = clock_.now() + timeout;
  listener_.on_stop_requested(attempt_, 0);
  finish_attempt_if_done();
}

void Supervisor::stop_attempt() {
  if (finished_ || tearing_down_) return;
  stop_requested_ = true;
  begin_teardown();
  finish_attempt_if_done();
}

void Supervisor::on_tick() {
  if (draining_ && drain_deadline_ && clock_.now() >= *drain_deadline_) {
    draining_ = false;
    drain_deadline_.reset();
    listener_.on_stop_timed_out(attempt_);
    tearing_down_ = true;
    signal_running(SIGTERM);
    kill_deadline_ = clock_.now() + config_.shutdown_grace;
  }
  if (kill_deadline_ && clock_.now() >= *kill_deadline_) {
    signal_running(SIGKILL);
    kill_deadline_.reset();
  }
}

std::optional<SteadyTime> Supervisor::next_deadline() const {
  if (drain_deadline_ && (!kill_deadline_ || *drain_deadline_ < *kill_deadline_)) return drain_deadline_;
  return kill_deadline_;
}

const WorkerRecord* Supervisor::root_cause() const {
  return root_cause_ ? &workers_[*root_cause_] : nullptr;
}

void Supervisor::begin_teardown() {
  if (tearing_down_) return;
  draining_ = false;  // a failure while the workers were stopping on their own
  drain_deadline_.reset();
  tearing_down_ = true;
  signal_running(SIGTERM);
  kill_deadline_ = clock_.now() + config_.shutdown_grace;
}

void Supervisor::signal_running(int signo) {
  if (all_ended()) return;
  listener_.on_signalling_workers(attempt_, signo);
  for (const WorkerRecord& w : workers_) {
    if (w.state == WorkerState::kRunning) spawner_.signal_group(w.pid, signo);
  }
}

bool Supervisor::all_ended() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](const WorkerRecord& w) { return w.state == WorkerState::kRunning; });
}

void Supervisor::finish_attempt_if_done() {
  if (finished_ || !all_ended()) return;
  kill_deadline_.reset();
  drain_deadline_.reset();
  listener_.on_attempt_ended(attempt_, workers_);

  AttemptSummary summary;
  summary.attempt = attempt_;
  summary.root_cause = root_cause();
  summary.stop_signal = stop_signal_;
  summary.stop_requested = stop_requested_;
  summary.drained = draining_ && !root_cause_;
  const Verdict verdict = arbiter_.conclude(summary);
  if (verdict.restart && stop_signal_ == 0) {
    ++attempt_;
    listener_.on_restart(attempt_, verdict);
    start_attempt();
    return;
  }
  exit_code_ = verdict.exit_code;
  finished_ = true;
  listener_.on_finished(attempt_, verdict);
}

WorkerRecord* Supervisor::find(pid_t pid) {
  auto it = std::find_if(workers_.begin(), workers_.end(),
                         [pid](const WorkerRecord& w) { return w.pid == pid; });
  return it == workers_.end() ? nullptr : &*it;
}

}  // namespace ddp
