#pragma once
// Supervisor: the decisions of a single-node job, free of any I/O of its own.
// It starts one group of workers per attempt through a ProcessSpawner, learns
// of exits and signals from its caller (the event loop), tears the group down
// at the first failure, restarts it while the budget lasts, and settles the
// exit code. Deadlines come from a Clock, so unit tests run it with a fake
// spawner and a fake clock.
//
// Threading: not thread-safe; one thread (the event loop) calls everything.

#include <sys/types.h>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "process/exit_status.h"
#include "process/process_spawner.h"

namespace ddp {

/// One worker to start in an attempt.
struct WorkerSpec {
  int local_rank = 0;
  int rank = 0;
  SpawnRequest request;
};

enum class WorkerState {
  kRunning,
  kSucceeded,  // exited 0
  kFailed,     // exited non-zero or by a signal, on its own
  kStopped,    // ended after ddplaunch asked it to stop
};
const char* to_string(WorkerState state);

struct WorkerRecord {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  WorkerState state = WorkerState::kRunning;
  std::optional<ExitStatus> exit;
  WallTime exit_time{};
};

/// What follows an ended attempt.
struct Verdict {
  bool restart = false;
  int exit_code = 0;  // when not restarting
  std::string reason;             // why the attempt ended, as the coordinator says it (may be empty)
  bool membership_change = false; // a restart with other nodes: no restart was used
  // Where the coordinator places the attempt's root cause; -1: not said (a
  // single-node job, or no failure); kCoordinator: the coordinator was lost.
  // Another node's (or the coordinator) means this node's own failures, if
  // any, were its consequence.
  static constexpr int kCoordinator = -2;
  int failed_node = -1;
  int failed_rank = -1;

  static Verdict finish(int code, std::string why = {}) { return {false, code, std::move(why), false}; }
  static Verdict restart_job(std::string why = {}, bool membership = false) {
    return {true, 0, std::move(why), membership};
  }
  Verdict& caused_on(int node, int rank) {
    failed_node = node;
    failed_rank = rank;
    return *this;
  }
};

/// What the listener hears. Default implementations ignore the event.
class SupervisorListener {
 public:
  virtual ~SupervisorListener() = default;
  virtual void on_attempt_started(int /*attempt*/) {}
  /// A worker started; its output pipes now belong to the listener.
  virtual void on_worker_started(const WorkerRecord&, const SpawnedProcess&) {}
  /// The first failure of an attempt (the root cause), before teardown starts.
  virtual void on_first_failure(int /*attempt*/, const WorkerRecord&) {}
  /// The attempt's group has fully ended; failed() tells how.
  virtual void on_attempt_ended(int /*attempt*/, const std::vector<WorkerRecord>&) {}
  virtual void on_restart(int /*next_attempt*/, const Verdict& /*why*/) {}
  /// The job is over with the verdict's exit code (after the last attempt).
  virtual void on_finished(int /*attempt*/, const Verdict& /*verdict*/) {}
  /// ddplaunch was asked to stop (SIGTERM with a stop_timeout): the workers
  /// are to stop at a step boundary on their own and exit 0; nobody is
  /// signalled yet.
  /// signo 0: the request came from another node (Supervisor::drain).
  virtual void on_stop_requested(int /*attempt*/, int /*signo*/) {}
  /// They did not all end within stop_timeout: they are signalled now.
  virtual void on_stop_timed_out(int /*attempt*/) {}
  /// The running workers are about to be sent signo by ddplaunch itself
  /// (teardown, a forwarded signal, SIGKILL after the grace).
  virtual void on_signalling_workers(int /*attempt*/, int /*signo*/) {}
};

/// How an attempt ended, for the arbiter.
struct AttemptSummary {
  int attempt = 0;
  const WorkerRecord* root_cause = nullptr;  // the first local failure, if any
  int stop_signal = 0;                       // a signal ddplaunch received, if any
  bool stop_requested = false;               // stop_attempt() ended it (a failure elsewhere)
  bool drained = false;                      // asked to stop, every worker ended on its own with 0
};

/// Decides what follows an ended attempt: a restart, or ddplaunch's exit
/// code. May block (a multi-node agent asks the coordinator).
class AttemptArbiter {
 public:
  virtual ~AttemptArbiter() = default;
  virtual Verdict conclude(const AttemptSummary& summary) = 0;
};

/// The single-process decision: restart after a local failure while
/// max_restarts lasts; a signal ends the job with 128+N.
class LocalArbiter final : public AttemptArbiter {
 public:
  explicit LocalArbiter(int max_restarts) : max_restarts_(max_restarts) {}
  Verdict conclude(const AttemptSummary& summary) override;

 private:
  int max_restarts_;
};

/// Thrown by plan_attempt when an attempt cannot start (e.g. rendezvous
/// failed); the supervisor then finishes with exit_code.
struct PlanError : std::runtime_error {
  PlanError(int code, const std::string& message) : std::runtime_error(message), exit_code(code) {}
  int exit_code;
};

struct SupervisorConfig {
  Duration shutdown_grace = std::chrono::seconds(5);
  /// On SIGTERM, how long the workers get to stop at a step boundary on
  /// their own (on_stop_requested) before they are signalled as for any
  /// other stop. Zero: signalled at once.
  Duration stop_timeout = Duration::zero();
  /// Builds the workers of an attempt (the attempt number shows in their
  /// env). May block, and may throw PlanError.
  std::function<std::vector<WorkerSpec>(int attempt)> plan_attempt;
};

class Supervisor {
 public:
  Supervisor(SupervisorConfig config, ProcessSpawner& spawner, const Clock& clock, SupervisorListener& listener,
             AttemptArbiter& arbiter);

  /// Starts attempt 0.
  void start();
  /// A reaped child. Pids the supervisor does not know are ignored.
  void on_child_exit(pid_t pid, ExitStatus status);
  /// ddplaunch received signo: stop the job (a second signal forces SIGKILL).
  /// SIGTERM with a stop_timeout first lets the workers stop on their own;
  /// a second signal meanwhile stops them at once.
  void on_signal(int signo);
  /// Tears the attempt down without a local failure (the job failed
  /// elsewhere); the arbiter then decides what follows.
  void stop_attempt();
  /// The job was asked to stop elsewhere (preemption of another node): as
  /// SIGTERM with a stop timeout, the workers get `timeout` to stop on their
  /// own (on_stop_requested with signo 0) before they are signalled.
  void drain(Duration timeout);
  /// Lets deadlines fire (SIGKILL after the grace period). Call after waking.
  void on_tick();
  /// When on_tick() next has something to do; nullopt when nothing is pending.
  std::optional<SteadyTime> next_deadline() const;

  bool finished() const { return finished_; }
  /// Valid once finished(): 0, the root-cause rank's shell code, or 128+N.
  int exit_code() const { return exit_code_; }
  int attempt() const { return attempt_; }
  /// The signal that stopped the job, 0 if none.
  int stop_signal() const { return stop_signal_; }
  const std::vector<WorkerRecord>& workers() const { return workers_; }
  /// The root cause of the current attempt's failure, if any.
  const WorkerRecord* root_cause() const;

 private:
  void start_attempt();
  void begin_teardown();
  void signal_running(int signo);
  void finish_attempt_if_done();
  bool all_ended() const;
  WorkerRecord* find(pid_t pid);

  SupervisorConfig config_;
  ProcessSpawner& spawner_;
  const Clock& clock_;
  SupervisorListener& listener_;
  AttemptArbiter& arbiter_;

  int attempt_ = 0;
  std::vector<WorkerRecord> workers_;
  std::optional<size_t> root_cause_;     // index into workers_
  bool tearing_down_ = false;
  std::optional<SteadyTime> kill_deadline_;
  std::optional<SteadyTime> drain_deadline_;  // while the workers stop on their own
  bool draining_ = false;                     // asked to stop; nobody signalled yet
  int stop_signal_ = 0;                  // signal that asked ddplaunch to stop
  bool stop_requested_ = false;          // stop_attempt() was called this attempt
  bool finished_ = false;
  int exit_code_ = 0;
};

}  // namespace ddp
