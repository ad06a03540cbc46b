#include "job/launch_job.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <system_error>
#include <thread>

#include "agent/agent_session.h"
#include "ddp/common/replace_file.h"
#include "blas/blas_probe_memo.h"
#include "blas/openblas_tuning.h"
#include "agent/local_agent_service.h"
#include "companion/companion_channel.h"
#include "companion/companion_install.h"
#include "exit_codes.h"
#include "job/rank_signal_intent.h"
#include "job/stop_request.h"
#include "job/checkpoint_sync_setup.h"
#include "membership/job_stop.h"
#include "coordinator/coordinator_server.h"
#include "job/endpoint_failover.h"
#include "http/metrics_server.h"
#include "job/event_loop.h"
#include "job/worker_env.h"
#include "net/host_port.h"
#include "net/host_name.h"
#include "numa/cpu_list.h"
#include "output/line_prefix.h"
#include "output/output_router.h"
#include "process/posix_spawner.h"
#include "agent/worker_health_board.h"
#include "job/job_registry.h"
#include "job/log_layout.h"
#include "metrics/resource_monitor.h"
#include "metrics/resources_json.h"
#include "report/failure_report.h"
#include "report/nccl_evidence.h"
#include "report/oom_probe.h"
#include "report/root_cause_summary.h"
#include "stacks/stack_collection.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

// Where the ranks find a stop request (stop_request.h), per attempt.
constexpr const char* kStopRequestFile = "stop_request.json";

fs::path attempt_dir(const LaunchPlan& plan, int attempt) { return attempt_log_dir(plan.job_log_dir, attempt); }

fs::path rank_dir(const LaunchPlan& plan, int attempt, int rank) { return rank_log_dir(plan.job_log_dir, attempt, rank); }

/// Writes an attempt's failure.json whole: the agents of a job whose nodes
/// share the log folder write it at the same moment, and readers (people,
/// scripts) must never find two reports mixed or one half written.
void write_failure_report(const fs::path& path, const nlohmann::json& report) {
  std::error_code ec;
  if (!replace_file(path, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", ec)) {
    spdlog::warn("cannot write {}: {}", path.string(), ec.message());
  }
}

int open_log(const fs::path& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
}

// The NCCL_* this node's workers got (the first one's: they differ only in
// NCCL_DEBUG_FILE), for the record: attempt_<k>/nccl_env.node<n>.json.
void record_nccl_env(const LaunchPlan& plan, const Assignment& layout, int attempt,
                     const std::vector<WorkerSpec>& specs) {
  if (specs.empty()) return;
  nlohmann::json nccl = nlohmann::json::object();
  for (const std::string& entry : specs.front().request.env) {
    const size_t eq = entry.find('=');
    if (entry.rfind("NCCL_", 0) == 0 && eq != std::string::npos) nccl[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  const fs::path path = attempt_dir(plan, attempt) / fmt::format("nccl_env.node{}.json", layout.node_rank);
  std::ofstream(path) << nccl.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
}

// The program's argv; with --legacy-local-rank-arg, "--local_rank=N" right
// after the program, where torch.distributed.launch put it.
std::vector<std::string> worker_argv(const LaunchPlan& plan, int local_rank) {
  std::vector<std::string> argv = plan.argv;
  if (plan.local_rank_arg_at >= 0) {
    argv.insert(argv.begin() + plan.local_rank_arg_at, fmt::format("--local_rank={}", local_rank));
  }
  return argv;
}

// The Python companion, when it is injected: its folder and channel socket.
struct CompanionSetup {
  std::string dir;
  std::string socket;
};

std::vector<WorkerSpec> plan_workers(const LaunchPlan& plan, const Assignment& layout,
                                     const std::vector<std::string>& base_env,
                                     const std::map<std::string, std::string>& node_defaults,
                                     const std::string& agent_socket, const CompanionSetup& companion,
                                     const RankSignalIntent& signal_intent, int attempt) {
  std::vector<WorkerSpec> specs;
  for (int local_rank = 0; local_rank < plan.nproc; ++local_rank) {
    const int rank = layout.rank_start + local_rank;
    const fs::path dir = rank_dir(plan, attempt, rank);
    fs::create_directories(dir);
    WorkerIdentity id;
    id.rank = rank;
    id.local_rank = local_rank;
    id.world_size = layout.world_size;
    id.local_world_size = plan.nproc;
    id.group_rank = layout.node_rank;
    id.group_world_size = layout.nnodes;
    id.role = plan.role;
    id.master_addr = layout.master_addr;
    id.master_port = layout.master_port;
    id.restart_count = layout.restarts_used;
    id.generation = layout.generation;
    id.max_restarts = plan.max_restarts;
    id.job_id = plan.job_id;
    id.error_file = (dir / "error.json").string();
    id.rank_log_dir = dir.string();
    id.stop_file = (attempt_dir(plan, attempt) / kStopRequestFile).string();
    id.agent_socket = agent_socket;
    id.token = plan.token;
    id.heartbeat_interval_ms = std::chrono::duration_cast<std::chrono::milliseconds>(plan.heartbeat_interval).count();
    if (!plan.nccl_debug.empty()) id.nccl_forced["NCCL_DEBUG"] = plan.nccl_debug;
    if (!plan.nccl_debug_subsys.empty()) id.nccl_forced["NCCL_DEBUG_SUBSYS"] = plan.nccl_debug_subsys;
    id.job_env = layout.job_env;
    id.node_defaults = node_defaults;
    id.nccl_debug_file = (dir / "nccl.log").string();
    id.virtual_local_rank = plan.virtual_local_rank;
    id.companion_dir = companion.dir;
    id.companion_socket = companion.socket;
    id.signal_intent_file = signal_intent.path().string();
    std::vector<int> cpus;
    if (!plan.rank_cpus.empty()) {
      const auto& own = plan.rank_cpus[static_cast<size_t>(local_rank)];
      cpus.assign(own.begin(), own.end());
    }
    specs.push_back(
        {local_rank, rank, {worker_argv(plan, local_rank), build_worker_env(base_env, id), std::move(cpus)}});
  }
  record_nccl_env(plan, layout, attempt, specs);
  return specs;
}

// What every worker of this node gets unless the environment says otherwise,
// beyond OMP_NUM_THREADS (worker_env.h), and the log lines that say why.
struct NodeDefaults {
  std::map<std::string, std::string> env;
  std::vector<std::string> notes;
};

// Decided once: this node's CPU and libraries do not change between attempts.
// What libblas.so.3 is comes from the memo in `runtime_dir` after the first
// launch (blas_probe_memo.h). Runs on its own thread, so it does not log: the
// notes are logged in order by the thread that plans the first attempt.
NodeDefaults worker_defaults_of_this_node(const std::vector<std::string>& base_env, const std::string& runtime_dir) {
  NodeDefaults defaults;
  const SystemProbe probe = remember_blas_probe(real_system_probe(), runtime_dir + "/libblas-probe.json");
  if (const auto blas = tune_openblas_for_workers(base_env, probe)) {
    defaults.notes.push_back(blas->reason);
    defaults.env["OPENBLAS_CORETYPE"] = blas->coretype;
  }
  return defaults;
}

// Wires the supervisor's events to the outside world: log files, console,
// failure reports.
class JobListener final : public SupervisorListener {
 public:
  JobListener(const LaunchPlan& plan, OutputRouter& router, EventLoop& loop, WorkerHealthBoard& health,
              AgentSession& session, RankSignalIntent& signal_intent)
      : plan_(plan),
        router_(router),
        loop_(loop),
        health_(health),
        session_(session),
        signal_intent_(signal_intent),
        oom_(OomProbe::for_current_process()),
        host_(this_host_name()) {}

  void on_attempt_started(int attempt) override {
    attempt_ = attempt;
    // A request left by an earlier run of the same job (a requeued Slurm
    // job keeps its id and log folder) must not stop this one.
    std::error_code ec;
    fs::remove(attempt_dir(plan_, attempt) / kStopRequestFile, ec);
    signal_intent_.clear();
    closing_summary_.clear();
    local_failures_.clear();
    router_.reset_tails();
    copy_filtered_lines(StreamKind::kStdout, plan_.duplicate_stdout_filters, "filtered_stdout.log");
    copy_filtered_lines(StreamKind::kStderr, plan_.duplicate_stderr_filters, "filtered_stderr.log");
    failures_ = nlohmann::json::array();
    oom_kills_at_start_ = oom_.kills();
    spdlog::info("job {} attempt {}: starting {} worker(s): {}", plan_.job_id, attempt, plan_.nproc,
                 fmt::join(plan_.argv, " "));
  }

  void on_worker_started(const WorkerRecord& worker, const SpawnedProcess& process) override {
    health_.set_worker_pid(worker.rank, process.pid);
    const fs::path dir = rank_dir(plan_, attempt_, worker.rank);
    const bool shown =
        plan_.console_local_ranks.empty() || plan_.console_local_ranks.count(worker.local_rank) != 0;
    route(process.stdout_fd, worker, StreamKind::kStdout, dir / "stdout.log",
          shown && !plan_.redirects.selects_stdout(worker.local_rank));
    route(process.stderr_fd, worker, StreamKind::kStderr, dir / "stderr.log",
          shown && !plan_.redirects.selects_stderr(worker.local_rank));
  }

  void on_first_failure(int attempt, const WorkerRecord& worker) override {
    FailureEvidence evidence;
    evidence.stderr_tail = router_.stderr_tail(worker.local_rank);
    evidence.error_file = read_error_file(rank_dir(plan_, attempt, worker.rank) / "error.json");
    evidence.fatal_stack = read_fatal_stack(rank_dir(plan_, attempt, worker.rank) / kFatalStackFileName);
    evidence.likely_oom = worker.exit && worker.exit->signal == SIGKILL && oom_kills_at_start_ &&
                          oom_.kills().value_or(0) > *oom_kills_at_start_;
    failures_.push_back(failure_to_json(worker, evidence));
    spdlog::error("{}  stopping the other workers", format_failure(node_rank_, worker, evidence));
  }

  void on_attempt_ended(int attempt, const std::vector<WorkerRecord>& workers) override {
    for (const WorkerRecord& w : workers) remove_if_empty(rank_dir(plan_, attempt, w.rank) / kFatalStackFileName);
    const auto root = std::find_if(workers.begin(), workers.end(),
                                   [](const WorkerRecord& w) { return w.state == WorkerState::kFailed; });
    if (root == workers.end() && !stop_report_.empty()) {
      write_hang_report(attempt);
      return;
    }
    if (root == workers.end()) return;
    std::vector<RankFailure> others;
    for (const WorkerRecord& w : workers) {
      if (w.state == WorkerState::kFailed && &w != &*root) others.push_back(rank_failure(attempt, w));
    }
    local_failures_ = {rank_failure(attempt, *root)};
    local_failures_.insert(local_failures_.end(), others.begin(), others.end());
    closing_summary_ = format_root_cause_summary(plan_.program, local_failures_.front(), others);
    const fs::path path = attempt_dir(plan_, attempt) / "failure.json";
    nlohmann::json report = attempt_report_to_json(plan_.job_id, attempt, *root, failures_, workers);
    add_resources(report, root->rank);
    add_nccl_evidence(attempt, report);
    write_failure_report(path, report);
    spdlog::error("job {} attempt {} failed; report: {}", plan_.job_id, attempt, path.string());
  }

  void on_finished(int attempt, const Verdict& verdict) override {
    if (verdict.exit_code == 0 || verdict.exit_code == exit_code::kRequeue || verdict.reason.empty()) return;
    record_verdict(attempt, verdict);
    if (caused_elsewhere(verdict) && !local_failures_.empty()) {
      closing_summary_ = format_remote_root_cause_summary(plan_.program, where(verdict), verdict.reason,
                                                          local_failures_);
    }
  }

  void on_restart(int next_attempt, const Verdict& why) override {
    if (!why.reason.empty()) record_verdict(next_attempt - 1, why);
    if (why.membership_change) {
      spdlog::warn("re-forming the job with the nodes it has now (attempt {}; a membership change uses no restart)",
                   next_attempt);
    } else {
      spdlog::warn("restarting the job as attempt {} of at most {}", next_attempt, plan_.max_restarts);
    }
  }

  void on_stop_requested(int attempt, int signo) override {
    // Every rank of the job stops after the same step: the coordinator
    // chooses it for all nodes (this node asks when it was signalled; the
    // others heard it with their heartbeats). Without the coordinator this
    // node's ranks choose alone.
    signal_intent_.stopping();  // first: Slurm's SIGTERM may be reaching the ranks as well
    std::optional<JobStop> job =
        signo != 0 ? session_.request_job_stop(fmt::format("{} to ddplaunch on node {} ({})", signal_name(signo),
                                                           node_rank_, host_),
                                               plan_.stop_timeout)
                   : session_.job_stop();
    if (job && job->pending) {
      stop_timeout_ = job->stop_timeout;
      awaiting_job_stop_ = attempt;
      spdlog::warn("{}: the coordinator chooses the step at which every rank stops once the ranks report their "
                   "steps (they have {:.0f} s, then they are signalled)",
                   job->reason, std::chrono::duration<double>(stop_timeout_).count());
      return;  // hand_over_job_stop writes the request when the choice arrives
    }
    StopRequest request;
    if (job) {
      request.stop_at_step = job->stop_at_step;
      request.reason = job->reason;
      stop_timeout_ = job->stop_timeout;
    } else {
      std::vector<RankReport> reports;
      for (const ForwardedReport& f : health_.latest()) reports.push_back(f.report);
      request.stop_at_step = choose_stop_step(reports, 2 * plan_.heartbeat_interval);
      request.reason = fmt::format("{} to ddplaunch on {}", signal_name(signo), host_);
      stop_timeout_ = plan_.stop_timeout;
    }
    request.requested_at = std::chrono::system_clock::now();
    const fs::path path = attempt_dir(plan_, attempt) / kStopRequestFile;
    try {
      write_stop_request(path, request);
    } catch (const std::exception& e) {
      spdlog::error("cannot ask the ranks to stop: {}", e.what());
      return;  // the stop timeout then signals them as for any stop
    }
    spdlog::warn("{}: asking the ranks to stop {} and exit (they have {:.0f} s, then they are signalled); "
                 "request in {}",
                 request.reason,
                 request.stop_at_step ? fmt::format("once they have completed step {}", *request.stop_at_step)
                                      : std::string("at their next step boundary"),
                 std::chrono::duration<double>(stop_timeout_).count(), path.string());
  }

  /// The coordinator's choice of a stop arrived (event-loop thread): hands it
  /// to this node's ranks if on_stop_requested left it pending.
  void hand_over_job_stop(int attempt) {
    if (awaiting_job_stop_ != attempt) return;
    awaiting_job_stop_.reset();
    on_stop_requested(attempt, 0);
  }

  void on_signalling_workers(int /*attempt*/, int /*signo*/) override { signal_intent_.terminating(); }

  void on_stop_timed_out(int /*attempt*/) override {
    spdlog::warn("the ranks did not all stop within the stop timeout of {:.0f} s: stopping them",
                 std::chrono::duration<double>(stop_timeout_).count());
  }

  /// torchrun's "Root Cause" block for the last attempt, when one of this
  /// node's workers failed it; empty otherwise.
  const std::string& closing_summary() const { return closing_summary_; }

  /// This node's rank in the job, once the coordinator has said it.
  void set_node_rank(int node_rank) { node_rank_ = node_rank; }
  /// The coordinator stopped the attempt for a hang or desync: its report
  /// (JSON) goes into this attempt's failure.json.
  void set_stop_report(std::string report_json) { stop_report_ = std::move(report_json); }

 private:
  RankFailure rank_failure(int attempt, const WorkerRecord& w) const {
    RankFailure f;
    f.time = w.exit_time;
    f.host = host_;
    f.rank = w.rank;
    f.local_rank = w.local_rank;
    f.pid = w.pid;
    f.exit_code = w.exit ? w.exit->code : 0;
    f.signal = w.exit ? w.exit->signal : 0;
    const fs::path error_file = rank_dir(plan_, attempt, w.rank) / "error.json";
    f.error_file_contents = read_error_file(error_file);
    if (f.error_file_contents) f.error_file = error_file.string();
    f.fatal_stack = read_fatal_stack(rank_dir(plan_, attempt, w.rank) / kFatalStackFileName);
    return f;
  }

  // The companion opens its fatal-signal stack file at start; a rank
  // stopped by a signal it does not catch (SIGTERM, SIGKILL) leaves it empty.
  static void remove_if_empty(const fs::path& path) {
    std::error_code ec;
    if (fs::file_size(path, ec) == 0 && !ec) fs::remove(path, ec);
  }

  // The last resource sample of every local rank (CPU, memory, GPUs; see
  // metrics/resources_json.h) as "resources": [{"rank", ...}], and the
  // failed rank's also beside its root cause. Samples are taken at the
  // heartbeat interval: "age_s" says how long before this report.
  void add_resources(nlohmann::json& report, int failed_rank) const {
    nlohmann::json all = nlohmann::json::array();
    const WallTime now = std::chrono::system_clock::now();
    for (const auto& [rank, r] : health_.resources()) {
      nlohmann::json one = {{"rank", rank}};
      one.update(resources_to_json(r, now));
      if (rank == failed_rank && report.contains("root_cause") && report["root_cause"].is_object()) {
        report["root_cause"]["resources"] = resources_to_json(r, now);
      }
      all.push_back(std::move(one));
    }
    if (!all.empty()) report["resources"] = std::move(all);
  }

  // What the ranks' NCCL logs say, when they wrote any.
  void add_nccl_evidence(int attempt, nlohmann::json& report) const {
    const auto nccl = nccl_evidence(attempt_dir(plan_, attempt));
    if (!nccl) return;
    report["nccl"] = nccl->json;
    if (!nccl->summary.empty()) spdlog::error("{}", nccl->summary);
  }

  // PyTorch's NCCL flight recorder, where the Python companion had it dumped
  // and converted (rank_<r>/nccl_flight_recorder.json): its summary line.
  void add_nccl_flight_records(int attempt, nlohmann::json& report) const {
    nlohmann::json records = nlohmann::json::array();
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(attempt_dir(plan_, attempt), ec)) {
      const fs::path path = entry.path() / "nccl_flight_recorder.json";
      const std::string name = entry.path().filename().string();
      if (name.rfind("rank_", 0) != 0 || !fs::is_regular_file(path, ec)) continue;
      std::ifstream in(path);
      const nlohmann::json dump = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      records.push_back({{"rank", std::atoi(name.c_str() + 5)},
                         {"path", path.string()},
                         {"summary", dump.is_object() ? dump.value("summary", "") : "unreadable"}});
    }
    if (!records.empty()) report["nccl_flight_recorder"] = std::move(records);
  }

  // The coordinator's word on why the attempt ended (a node lost, say) goes
  // into its failure.json, beside what this node saw.
  void record_verdict(int attempt, const Verdict& why) const {
    const fs::path path = attempt_dir(plan_, attempt) / "failure.json";
    nlohmann::json report = nlohmann::json::object();
    if (std::ifstream in(path); in) {
      report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (!report.is_object()) report = nlohmann::json::object();
    }
    if (!report.contains("job_id")) report["job_id"] = plan_.job_id;
    if (!report.contains("attempt")) report["attempt"] = attempt;
    report["verdict"] = {{"reason", why.reason}, {"membership_change", why.membership_change}};
    if (why.failed_node >= 0) report["verdict"]["failed_node"] = why.failed_node;
    if (why.failed_rank >= 0) report["verdict"]["failed_rank"] = why.failed_rank;
    if (caused_elsewhere(why)) {
      // The coordinator judged another node's failure (or silence) first:
      // this node's own failures followed it and are kept apart from it.
      if (report.contains("root_cause") && !report["root_cause"].is_null()) {
        report["first_local_failure"] = report["root_cause"];
      }
      const auto or_null = [](int v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(); };
      report["root_cause"] = {{"node", or_null(why.failed_node)},
                              {"rank", or_null(why.failed_rank)},
                              {"where", where(why)},
                              {"description", why.reason}};
    }
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    write_failure_report(path, report);
  }

  bool caused_elsewhere(const Verdict& verdict) const {
    if (verdict.failed_node == Verdict::kCoordinator) return true;
    return verdict.failed_node >= 0 && node_rank_ >= 0 && verdict.failed_node != node_rank_;
  }
  static std::string where(const Verdict& verdict) {
    return verdict.failed_node == Verdict::kCoordinator ? std::string("the coordinator")
                                                        : fmt::format("node {}", verdict.failed_node);
  }

  void write_hang_report(int attempt) {
    nlohmann::json report = {{"job_id", plan_.job_id}, {"attempt", attempt}, {"node_rank", node_rank_}};
    report["hang"] = nlohmann::json::parse(stop_report_, nullptr, /*allow_exceptions=*/false);
    stop_report_.clear();
    if (report["hang"].is_object() && report["hang"].contains("resource_notes")) {
      for (const auto& note : report["hang"]["resource_notes"]) {
        if (note.is_string()) spdlog::error("  {}", note.get<std::string>());
      }
    }
    add_resources(report, -1);
    add_nccl_flight_records(attempt, report);
    add_nccl_evidence(attempt, report);
    const fs::path path = attempt_dir(plan_, attempt) / "failure.json";
    write_failure_report(path, report);
    spdlog::error("job {} attempt {} stopped by the coordinator; report: {}", plan_.job_id, attempt, path.string());
  }

  void route(int pipe_fd, const WorkerRecord& worker, StreamKind kind, const fs::path& file, bool to_console) {
    if (pipe_fd < 0) return;
    StreamRoute r{worker.rank, worker.local_rank, kind, to_console, open_log(file), std::nullopt};
    if (!plan_.log_line_prefix_template.empty()) {
      r.prefix = expand_line_prefix(plan_.log_line_prefix_template,
                                    {worker.rank, worker.local_rank, plan_.role, host_});
    }
    router_.add(pipe_fd, r);
    loop_.watch_output(pipe_fd);
  }

  // torchrun's --duplicate-*-filters: matching lines of every rank, one file per attempt.
  void copy_filtered_lines(StreamKind kind, const std::vector<std::string>& filters, const char* name) {
    if (filters.empty()) return;
    fs::create_directories(attempt_dir(plan_, attempt_));
    router_.set_filtered_copy(kind, filters, open_log(attempt_dir(plan_, attempt_) / name));
  }

  const LaunchPlan& plan_;
  OutputRouter& router_;
  EventLoop& loop_;
  WorkerHealthBoard& health_;  // who to describe when a rank cannot send its stacks
  AgentSession& session_;      // the job-wide stop at a step boundary
  RankSignalIntent& signal_intent_;  // what a SIGTERM means to the ranks
  Duration stop_timeout_{};    // of the stop now under way
  std::optional<int> awaiting_job_stop_;  // the attempt whose stop step the coordinator has yet to choose
  OomProbe oom_;
  std::optional<uint64_t> oom_kills_at_start_;
  nlohmann::json failures_ = nlohmann::json::array();
  std::string stop_report_;
  std::string closing_summary_;
  std::vector<RankFailure> local_failures_;  // this attempt's failed workers, the first first
  const std::string host_;  // this machine's name, for prefixes and the root-cause block
  int attempt_ = 0;  // the attempt now running
  int node_rank_ = 0;
};

// The coordinator lives in this process: leaving at once could cut off agents
// that have not yet heard the job's verdict. Wait until each has (bounded).
void linger_until_every_node_heard(CoordinatorServer& server, const LaunchPlan& plan, int own_node) {
  std::shared_ptr<CoordinatorJob> job;
  if (!server.coordinator().find(plan.job_id, plan.token, job).ok()) return;
  const auto give_up = std::chrono::steady_clock::now() + plan.node_timeout;
  while (job->verdict_undelivered(own_node) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// NCCL_* of this node (its own NCCL_DEBUG_FILE aside: a path is per node and
// rank), with --nccl-debug / --nccl-debug-subsys on top: what the job's other
// nodes' workers get where their own environment is silent.
std::map<std::string, std::string> launching_nccl_env(const LaunchPlan& plan, const std::vector<std::string>& env) {
  std::map<std::string, std::string> nccl;
  for (const std::string& entry : env) {
    const size_t eq = entry.find('=');
    if (entry.rfind("NCCL_", 0) != 0 || eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    if (name != "NCCL_DEBUG_FILE") nccl[name] = entry.substr(eq + 1);
  }
  if (!plan.nccl_debug.empty()) nccl["NCCL_DEBUG"] = plan.nccl_debug;
  if (!plan.nccl_debug_subsys.empty()) nccl["NCCL_DEBUG_SUBSYS"] = plan.nccl_debug_subsys;
  return nccl;
}

CoordinatorOptions coordinator_options(const LaunchPlan& plan) {
  CoordinatorOptions options;
  options.node_timeout = plan.node_timeout;
  return options;
}

// The job as this agent hosts it: at the first endpoint, or at a later one
// when it takes the job over (EndpointFailover).
HostedJob hosted_job(const LaunchPlan& plan) {
  HostedJob job{plan.job_id, plan.token, {}, std::nullopt};
  job.config.nnodes = plan.nnodes;
  job.config.min_nnodes = plan.min_nnodes;
  job.config.last_call_timeout = plan.last_call_timeout;
  job.config.nproc = plan.nproc;
  job.config.max_restarts = plan.max_restarts;
  job.config.node_timeout = plan.node_timeout;
  job.config.heartbeat_interval = plan.heartbeat_interval;
  job.config.hang_timeout = plan.hang_timeout;
  job.config.max_node_failures = plan.max_node_failures;
  job.config.grow = parse_grow_policy(plan.grow).value_or(JobConfig::Grow::kNow);
  job.config.job_env = launching_nccl_env(plan, current_environment());
  job.config.endpoints = 1 + static_cast<int>(plan.later_endpoints.size());
  return job;
}

// The job's endpoints in failover order.
std::vector<HostPort> endpoint_list(const LaunchPlan& plan) {
  std::vector<HostPort> endpoints{{plan.rdzv_host, plan.rdzv_port}};
  endpoints.insert(endpoints.end(), plan.later_endpoints.begin(), plan.later_endpoints.end());
  return endpoints;
}

// Node 0 (and every single-node job) hosts the coordinator. Returns null when
// another agent won the port (agents started at the same moment may all have
// seen it free); unless told to host, this agent then joins the winner's.
std::unique_ptr<CoordinatorServer> host_coordinator(const LaunchPlan& plan, const TlsFiles& tls) {
  if (!plan.host_coordinator) return nullptr;
  // Single-node jobs stay on loopback; multi-node listening is explicit.
  const std::string listen_host = coordinator_listen_host(plan);
  std::unique_ptr<CoordinatorServer> server;
  try {
    server = std::make_unique<CoordinatorServer>(ServerAddress{listen_host, plan.rdzv_port}, tls,
                                                 coordinator_options(plan), hosted_job(plan));
  } catch (const std::runtime_error& e) {
    if (plan.nnodes == 1 || plan.is_host.value_or(false)) throw;
    spdlog::info("another agent hosts the coordinator at {}:{} ({})", plan.rdzv_host, plan.rdzv_port, e.what());
    return nullptr;
  }
  spdlog::info("coordinator listening on {}:{} (NCCL IDs: {})", listen_host, server->port(),
               server->coordinator().ids().describe());
  return server;
}

// --metrics-port: /metrics, /status.json and the live page of the job, from
// the agent that hosts its coordinator, where the coordinator listens and with
// its TLS. Declared after the coordinator, so destroyed before it.
std::unique_ptr<MetricsServer> serve_metrics(const LaunchPlan& plan, const TlsFiles& tls,
                                             CoordinatorServer* coordinator) {
  if (plan.metrics_port < 0) return nullptr;
  if (coordinator == nullptr) {
    spdlog::info("--metrics-port: this agent does not host the job's coordinator; the one that does serves it");
    return nullptr;
  }
  MetricsServerConfig config;
  config.host = coordinator_listen_host(plan);
  config.port = plan.metrics_port;
  config.tls = tls;
  // A single-node job with a generated token stays open on loopback; every
  // other job shows itself only to who presents its token.
  config.token_required = plan.nnodes > 1 || !plan.token_generated;
  auto server = std::make_unique<MetricsServer>(config, coordinator_jobs(coordinator->coordinator()));
  const std::string url = server->url();
  spdlog::info("metrics: {}metrics (Prometheus), {}status.json and the live page {}{}", url, url, url,
               config.token_required ? " (send the job's token: Authorization: Bearer, or ?token=)" : "");
  return server;
}

// --metrics-port where this agent took the job's coordinator over. Not
// fatal when the port is taken on this machine (it was checked only where
// the job started): the job goes on without it, and says so.
std::unique_ptr<MetricsServer> serve_metrics_after_takeover(const LaunchPlan& plan, const TlsFiles& tls,
                                                            CoordinatorServer* coordinator) {
  try {
    return serve_metrics(plan, tls, coordinator);
  } catch (const std::exception& e) {
    spdlog::warn("--metrics-port {}: not served after the takeover: {}", plan.metrics_port, e.what());
    return nullptr;
  }
}

// "2", or an elastic job's "1:2".
std::string node_count(const LaunchPlan& plan) {
  return plan.min_nnodes < plan.nnodes ? fmt::format("{}:{}", plan.min_nnodes, plan.nnodes)
                                       : std::to_string(plan.nnodes);
}

AgentSettings agent_settings(const LaunchPlan& plan, const std::string& endpoint) {
  AgentSettings settings;
  settings.endpoint = endpoint;
  settings.job_id = plan.job_id;
  settings.token = plan.token;
  settings.nnodes = plan.nnodes;
  settings.min_nnodes = plan.min_nnodes;
  settings.last_call_timeout = plan.last_call_timeout;
  settings.node_rank = plan.node_rank;
  settings.nproc = plan.nproc;
  // Single node: MASTER_ADDR is what the user asked for (default 127.0.0.1).
  settings.host = plan.nnodes == 1 ? plan.master_addr : plan.local_addr;
  settings.master_port = plan.master_port;
  settings.max_restarts = plan.max_restarts;
  settings.agent_id = fmt::format("{}:{}:{:08x}", this_host_name(), getpid(), std::random_device{}());
  settings.max_node_failures = plan.max_node_failures;
  settings.grow = plan.grow;
  settings.job_env = launching_nccl_env(plan, current_environment());
  settings.join_timeout = plan.join_timeout;
  // Worker heartbeats reach the coordinator with the agent's own.
  settings.heartbeat_interval = std::min(plan.agent_heartbeat_interval, plan.heartbeat_interval);
  settings.coordinator_timeout = plan.node_timeout;
  return settings;
}

// Owns the eventfd through which the agent's threads wake the event loop.
class WakeupFd {
 public:
  WakeupFd() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  }
  ~WakeupFd() { close(fd_); }
  WakeupFd(const WakeupFd&) = delete;
  WakeupFd& operator=(const WakeupFd&) = delete;
  int fd() const { return fd_; }
  void drain() const {
    uint64_t count = 0;
    [[maybe_unused]] ssize_t n = read(fd_, &count, sizeof count);
  }

 private:
  int fd_;
};

// This agent's entry in the job registry, as it starts.
JobRecord job_record(const LaunchPlan& plan, const std::string& endpoint, const DetachedRun* detached) {
  JobRecord record;
  record.job_id = plan.job_id;
  record.endpoint = endpoint;
  record.token = plan.token;
  record.tls_cert = plan.tls_cert;
  record.tls_key = plan.tls_key;
  record.tls_ca = plan.tls_ca;
  record.pid = static_cast<int>(getpid());
  const auto& signals = plan.stop_signals;
  record.stop_signal = std::find(signals.begin(), signals.end(), SIGTERM) != signals.end() || signals.empty()
                           ? SIGTERM
                           : signals.front();
  // Absolute: attach and logs run from other folders (another SSH session).
  record.log_dir = fs::absolute(plan.job_log_dir).string();
  record.console = detached != nullptr ? detached->console : "";
  record.local_ranks = plan.nproc;
  return record;
}

}  // namespace

int run_launch(const LaunchPlan& plan, OrphanSentinel* sentinel, const DetachedRun* detached) {
  const std::vector<std::string> base_env = current_environment();
  const std::string runtime_dir = agent_socket_dir();
  // Probed while the coordinator starts and the nodes meet (the first launch
  // loads OpenBLAS: milliseconds), needed only once the first workers are planned.
  std::shared_future<NodeDefaults> node_defaults =
      std::async(std::launch::async, worker_defaults_of_this_node, base_env, runtime_dir).share();
  const TlsFiles tls{plan.tls_cert, plan.tls_key, plan.tls_ca};
  spdlog::info("job {}: {} node(s) ({}), {} worker(s) here ({}), logs in {}", plan.job_id, node_count(plan),
               plan.topology_source, plan.nproc, plan.nproc_reason, plan.job_log_dir.string());
  for (const auto& note : plan.topology_notes) spdlog::info("  {}", note);
  if (plan.min_nnodes < plan.nnodes) {
    spdlog::info("  elastic: starts with {} to {} node(s), the rendezvous waits {:.0f} s (last_call_timeout) for "
                 "more once {} have joined",
                 plan.min_nnodes, plan.nnodes, std::chrono::duration<double>(plan.last_call_timeout).count(),
                 plan.min_nnodes);
  }
  for (const auto& note : plan.option_notes) spdlog::debug("{}", note);
  for (size_t r = 0; r < plan.rank_cpus.size(); ++r) {
    spdlog::info("  --numa-binding={}: local rank {} runs on CPUs {}", plan.numa_binding, r,
                 format_cpu_list(plan.rank_cpus[r]));
  }
  if (plan.token_generated && plan.nnodes > 1) {
    const std::string where = format_host_port(plan.rdzv_host, plan.rdzv_port);
    if (plan.job_id_defaulted) {
      spdlog::warn("no --token, DDPLAUNCH_TOKEN or --rdzv-id: the job is open to anyone who can reach {} (its id and "
                   "token are torchrun's default '{}'); pass --token or set DDPLAUNCH_TOKEN on every node",
                   where, plan.job_id);
    } else {
      spdlog::warn("no --token or DDPLAUNCH_TOKEN: the job id serves as the token, so anyone who knows it and can "
                   "reach {} can join",
                   where);
    }
  }

  // A node (re)started after its job failed over must not host a second copy
  // at the first endpoint: it joins where the job runs now.
  const int start_epoch =
      plan.later_endpoints.empty()
          ? 0
          : find_taken_over_job(endpoint_list(plan), plan.job_id, plan.token, tls, std::chrono::milliseconds(500))
                .value_or(0);
  const std::unique_ptr<CoordinatorServer> coordinator = start_epoch > 0 ? nullptr : host_coordinator(plan, tls);
  const std::unique_ptr<MetricsServer> metrics = serve_metrics(plan, tls, coordinator.get());
  CoordinatorClient coordinator_client(plan.nnodes == 1 ? fmt::format("127.0.0.1:{}", coordinator->port())
                                                        : format_host_port(plan.rdzv_host, plan.rdzv_port),
                                       plan.job_id, plan.token, tls);
  EndpointFailover failover(endpoint_list(plan), hosted_job(plan), tls, coordinator_options(plan), coordinator_client);
  // --metrics-port from this agent once it took the job's coordinator over
  // (declared after `failover`, which owns that coordinator).
  std::unique_ptr<MetricsServer> taken_over_metrics;
  if (start_epoch > 0) coordinator_client.retarget(failover.endpoint(start_epoch), start_epoch);
  const std::string endpoint = coordinator_client.endpoint();
  JobRegistration registered(job_record(plan, endpoint, detached));
  if (detached != nullptr && detached->registered) detached->registered(registered.written());
  // --sync: an empty DIR is filled from the bucket before any worker starts
  // (on every node); the agent hosting the coordinator uploads while the job runs.
  const std::unique_ptr<CheckpointSync> sync = start_checkpoint_sync(plan, coordinator != nullptr);
  std::shared_ptr<CoordinatorJob> hosted_sync_status;
  if (sync && coordinator && coordinator->coordinator().find(plan.job_id, plan.token, hosted_sync_status).ok()) {
    hosted_sync_status->set_status_section("sync", [&sync] { return sync->state_json(); });
  }
  const WakeupFd wakeup;
  WorkerHealthBoard health(SystemClock::instance(), stack_answer_timeout(plan.heartbeat_interval));
  // Each rank's CPU, memory and GPUs, sampled with every agent heartbeat;
  // declared before the session, whose heartbeat thread calls it.
  const std::unique_ptr<ResourceMonitor> resource_monitor = ResourceMonitor::for_this_machine();
  health.set_resource_sampler(
      [&monitor = *resource_monitor](const std::map<int, int>& pids) { return monitor.sample(pids); });
  AgentSettings settings = agent_settings(plan, endpoint);
  settings.hosts_coordinator = coordinator != nullptr;
  settings.epoch = start_epoch;
  AgentSession session(std::move(settings), coordinator_client, SystemClock::instance(), wakeup.fd(), health,
                       plan.later_endpoints.empty() ? nullptr : &failover);
  remove_sockets_of_dead_agents(runtime_dir);
  const std::string socket_path = fmt::format("{}/{}.sock", runtime_dir, getpid());
  LocalAgentServer local(socket_path, coordinator_client, health, plan.job_id, plan.token);
  CompanionSetup companion_setup;
  std::unique_ptr<CompanionChannel> companion;
  if (plan.python_companion) {
    std::string looked_in;
    companion_setup.dir = find_python_companion(&looked_in);
    if (companion_setup.dir.empty()) {
      spdlog::warn("the Python companion is not installed (looked in {}): Python ranks are supervised by process "
                   "state only",
                   looked_in);
    } else {
      companion_setup.socket = fmt::format("{}/{}.py.sock", runtime_dir, getpid());
      companion = std::make_unique<CompanionChannel>(companion_setup.socket, health, plan.job_id, plan.token);
    }
  }

  OutputRouter router(std::max(plan.node_rank, 0), STDOUT_FILENO, STDERR_FILENO);
  EventLoop loop(router, SystemClock::instance());
  // With --stop-timeout the ranks keep a SIGTERM from outside (Slurm's) and
  // ask this file what it means (rank_signal_intent.h).
  RankSignalIntent signal_intent(plan.stop_timeout > Duration::zero()
                                     ? fs::path(fmt::format("{}/{}.signal_intent", runtime_dir, getpid()))
                                     : fs::path());
  JobListener listener(plan, router, loop, health, session, signal_intent);
  PosixSpawner spawner(sentinel);
  SupervisorConfig config;
  config.shutdown_grace = plan.shutdown_grace;
  config.stop_timeout = plan.stop_timeout;
  bool defaults_told = false;
  config.plan_attempt = [&](int attempt) {
    const Assignment layout = session.join();
    if (session.epoch() > 0) {
      registered.update_endpoint(failover.endpoint(session.epoch()));
      failover.fence_earlier(session.epoch(), std::chrono::milliseconds(500));
      if (CoordinatorServer* hosting = failover.hosting(session.epoch()); hosting && !taken_over_metrics) {
        taken_over_metrics = serve_metrics_after_takeover(plan, tls, hosting);
      }
    }
    registered.update_attempt(attempt, layout.world_size, plan.nproc, layout.node_rank);
    router.set_node_rank(layout.node_rank);
    listener.set_node_rank(layout.node_rank);
    local.set_layout({layout, plan.nproc});
    if (companion) companion->set_layout({layout, plan.nproc});
    const NodeDefaults& defaults = node_defaults.get();
    if (!defaults_told) {
      for (const auto& note : defaults.notes) spdlog::info("{}", note);
      defaults_told = true;
    }
    return plan_workers(plan, layout, base_env, defaults.env, socket_path, companion_setup, signal_intent, attempt);
  };
  Supervisor supervisor(std::move(config), spawner, SystemClock::instance(), listener, session);
  loop.watch_wakeup(wakeup.fd(), [&](Supervisor& s) {
    wakeup.drain();
    if (session.stop_requested()) {
      spdlog::error("stopping this node's workers: {}", session.stop_reason());
      listener.set_stop_report(session.stop_report_json());
      s.stop_attempt();
    } else if (const std::optional<JobStop> stop = session.job_stop()) {
      s.drain(stop->stop_timeout);  // another node was preempted (no-op when already stopping)
      listener.hand_over_job_stop(s.attempt());  // this node was, and waited for the step
    }
  });

  const int code = loop.run(supervisor);
  // A user who stopped ddplaunch with a signal wants it gone now; but a stop
  // at a step boundary (Slurm's SIGTERM to every process of a preempted
  // job) is graceful, and the other nodes must hear its verdict (75) before
  // the coordinator goes, or they end as if it had been lost (125).
  CoordinatorServer* hosting = session.epoch() == 0 ? coordinator.get() : failover.hosting(session.epoch());
  if (hosting != nullptr && (supervisor.stop_signal() == 0 || code == exit_code::kRequeue)) {
    linger_until_every_node_heard(*hosting, plan, session.assignment().node_rank);
  }
  if (code == 0) spdlog::info("job {}: all worker(s) succeeded", plan.job_id);
  // What the record keeps for `stop` and `attach`: the console's closing lines.
  std::string summary;
  if (sync) {
    summary += finish_checkpoint_sync(*sync, plan, supervisor.attempt());
    if (hosted_sync_status) hosted_sync_status->set_status_section("sync", {});
  }
  if (code == exit_code::kRequeue) {
    summary = fmt::format(
        "job {}: every rank stopped at a step boundary on request; exit code {} (start the job again to continue "
        "from what it saved)",
        plan.job_id, code);
    spdlog::warn("{}", summary);
    summary += "\n";
  }
  if (code != 0 && !listener.closing_summary().empty()) {
    std::fprintf(stderr, "%s", listener.closing_summary().c_str());
    std::fflush(stderr);
    summary += listener.closing_summary();
  }
  // After the console's last line: `attach` and `stop` take this as the end.
  registered.finish(code, supervisor.stop_signal() != 0, summary);
  return code;
}

}  // namespace ddp
