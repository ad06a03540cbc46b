#include "job/launch_job.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <fstream>

#include "job/event_loop.h"
#include "job/worker_env.h"
#include "output/output_router.h"
#include "process/posix_spawner.h"
#include "report/failure_report.h"
#include "report/oom_probe.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

fs::path attempt_dir(const LaunchPlan& plan, int attempt) {
  return plan.job_log_dir / fmt::format("attempt_{}", attempt);
}

fs::path rank_dir(const LaunchPlan& plan, int attempt, int rank) {
  return attempt_dir(plan, attempt) / fmt::format("rank_{}", rank);
}

int open_log(const fs::path& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
}

std::vector<WorkerSpec> plan_workers(const LaunchPlan& plan, const std::vector<std::string>& base_env, int attempt) {
  std::vector<WorkerSpec> specs;
  for (int local_rank = 0; local_rank < plan.nproc; ++local_rank) {
    const int rank = plan.node_rank * plan.nproc + local_rank;
    const fs::path dir = rank_dir(plan, attempt, rank);
    fs::create_directories(dir);
    WorkerIdentity id;
    id.rank = rank;
    id.local_rank = local_rank;
    id.world_size = plan.nnodes * plan.nproc;
    id.local_world_size = plan.nproc;
    id.group_rank = plan.node_rank;
    id.group_world_size = plan.nnodes;
    id.role = plan.role;
    id.master_addr = plan.master_addr;
    id.master_port = plan.master_port;
    id.restart_count = attempt;
    id.max_restarts = plan.max_restarts;
    id.job_id = plan.job_id;
    id.error_file = (dir / "error.json").string();
    id.rank_log_dir = dir.string();
    specs.push_back({local_rank, rank, {plan.argv, build_worker_env(base_env, id)}});
  }
  return specs;
}

// Wires the supervisor's events to the outside world: log files, console,
// failure reports.
class JobListener final : public SupervisorListener {
 public:
  JobListener(const LaunchPlan& plan, OutputRouter& router, EventLoop& loop)
      : plan_(plan), router_(router), loop_(loop), oom_(OomProbe::for_current_process()) {}

  void on_attempt_started(int attempt) override {
    attempt_ = attempt;
    router_.reset_tails();
    failures_ = nlohmann::json::array();
    oom_kills_at_start_ = oom_.kills();
    spdlog::info("job {} attempt {}: starting {} worker(s): {}", plan_.job_id, attempt, plan_.nproc,
                 fmt::join(plan_.argv, " "));
  }

  void on_worker_started(const WorkerRecord& worker, const SpawnedProcess& process) override {
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
    evidence.likely_oom = worker.exit && worker.exit->signal == SIGKILL && oom_kills_at_start_ &&
                          oom_.kills().value_or(0) > *oom_kills_at_start_;
    failures_.push_back(failure_to_json(worker, evidence));
    spdlog::error("{}  stopping the other workers", format_failure(plan_.node_rank, worker, evidence));
  }

  void on_attempt_ended(int attempt, const std::vector<WorkerRecord>& workers) override {
    const auto root = std::find_if(workers.begin(), workers.end(),
                                   [](const WorkerRecord& w) { return w.state == WorkerState::kFailed; });
    if (root == workers.end()) return;
    const fs::path path = attempt_dir(plan_, attempt) / "failure.json";
    std::ofstream(path) << attempt_report_to_json(plan_.job_id, attempt, *root, failures_, workers).dump(2) << '\n';
    spdlog::error("job {} attempt {} failed; report: {}", plan_.job_id, attempt, path.string());
  }

  void on_restart(int next_attempt, int restarts_left) override {
    spdlog::warn("restarting the group as attempt {} ({} restart(s) left after this one)", next_attempt,
                 restarts_left);
  }

 private:
  void route(int pipe_fd, const WorkerRecord& worker, StreamKind kind, const fs::path& file, bool to_console) {
    if (pipe_fd < 0) return;
    router_.add(pipe_fd, {worker.rank, worker.local_rank, kind, to_console, open_log(file)});
    loop_.watch_output(pipe_fd);
  }

  const LaunchPlan& plan_;
  OutputRouter& router_;
  EventLoop& loop_;
  OomProbe oom_;
  std::optional<uint64_t> oom_kills_at_start_;
  nlohmann::json failures_ = nlohmann::json::array();
  int attempt_ = 0;  // the attempt now running
};

}  // namespace

int run_launch(const LaunchPlan& plan, OrphanSentinel* sentinel) {
  const std::vector<std::string> base_env = current_environment();
  spdlog::info("job {}: {} worker(s) ({}), MASTER_ADDR={} MASTER_PORT={}, logs in {}", plan.job_id, plan.nproc,
               plan.nproc_reason, plan.master_addr, plan.master_port, plan.job_log_dir.string());

  OutputRouter router(plan.node_rank, STDOUT_FILENO, STDERR_FILENO);
  EventLoop loop(router, SystemClock::instance());
  JobListener listener(plan, router, loop);
  PosixSpawner spawner(sentinel);
  SupervisorConfig config;
  config.max_restarts = plan.max_restarts;
  config.shutdown_grace = plan.shutdown_grace;
  config.plan_attempt = [&](int attempt) { return plan_workers(plan, base_env, attempt); };
  Supervisor supervisor(std::move(config), spawner, SystemClock::instance(), listener);

  const int code = loop.run(supervisor);
  if (code == 0) spdlog::info("job {}: all {} worker(s) succeeded", plan.job_id, plan.nproc);
  return code;
}

}  // namespace ddp
