// ddplaunch: parses the command line, refuses bad input before anything
// starts, then runs the job. See README.md.

#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/attach_command.h"
#include "cli/launch_options.h"
#include "cli/list_command.h"
#include "cli/logs_command.h"
#include "cli/serve_command.h"
#include "cli/stacks_command.h"
#include "cli/status_command.h"
#include "cli/stop_command.h"
#include "cli/top_command.h"
#include "cli/usage_error.h"
#include "detach/background_start.h"
#include "topology/launch_plan.h"
#include "ddp/common/logging.h"
#include "doctor/doctor_command.h"
#include "doctor/preflight.h"
#include "exit_codes.h"
#include "job/event_loop.h"
#include "job/job_registry.h"
#include "job/launch_job.h"
#include "net/grpc_name_resolution.h"
#include "net/host_name.h"
#include "nccl/diagnose_command.h"
#include "process/orphan_sentinel.h"
#include "process/stop_signals.h"

namespace {

// --preflight: the doctor's checks for this launch, printed to stderr.
bool preflight_passes(const ddp::LaunchOptions& o) {
  ddp::PreflightInputs in;
  in.nproc_per_node = o.nproc_per_node;
  in.master_addr = o.master_addr;
  in.master_port = o.master_port;
  in.rdzv_endpoint = o.rdzv_endpoint.substr(0, o.rdzv_endpoint.find(','));  // the first of a failover list
  in.log_dir = o.log_dir;
  const auto start = std::chrono::steady_clock::now();
  const auto results = ddp::run_preflight(in);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "%s", ddp::render_checks_text(results, seconds).c_str());
  if (ddp::worst_level(results) != ddp::CheckLevel::kFail) return true;
  std::fprintf(stderr, "ddplaunch: error: preflight failed (see the fail lines above); nothing was started\n");
  return false;
}

// The same, in a child process: its probes start threads (the CUDA driver's,
// OpenBLAS's pool), which must not exist when --detach forks.
bool preflight_passes_in_child(const ddp::LaunchOptions& o) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(preflight_passes(o) ? 0 : 1);
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) {
    std::fprintf(stderr, "ddplaunch: error: cannot run the preflight checks in a child process: %s\n",
                 std::strerror(errno));
    return false;
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddp;
  // Before any thread or child exists: signals are read through a signalfd,
  // and gRPC resolves names as the system does (setenv needs a single thread).
  block_handled_signals();
  use_system_resolver_for_grpc();
  // A program named like a subcommand can still be run as ./serve.
  if (argc > 1 && std::string(argv[1]) == "serve") return run_serve_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "status") return run_status_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "stacks") return run_stacks_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "top") return run_top_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "diagnose") return run_diagnose_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "doctor") return run_doctor_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "attach") return run_attach_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "logs") return run_logs_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "stop") return run_stop_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "list") return run_list_command(argc - 1, argv + 1);

  LaunchPlan plan;
  bool detach = false;
  try {
    auto options = parse_launch_options(argc, argv);
    if (!options) return exit_code::kSuccess;
    init_logging("ddplaunch", options->log_level);
    // Before ddplaunch binds any port of its own, or the port check finds it taken.
    if (options->preflight &&
        !(options->detach ? preflight_passes_in_child(*options) : preflight_passes(*options))) {
      return exit_code::kUsage;
    }
    plan = resolve_launch_plan(*options, process_getenv());
    detach = options->detach;
    // A detached job ignores SIGHUP (background_start.h): the end of the
    // session that started it must not stop it.
    if (detach) plan.stop_signals.erase(std::remove(plan.stop_signals.begin(), plan.stop_signals.end(), SIGHUP),
                                        plan.stop_signals.end());
    // Still before any thread: the signals that stop this job (--signals-to-handle).
    set_stop_signals(plan.stop_signals);
    block_handled_signals();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddplaunch: error: %s\n", e.what());
    return exit_code::kUsage;
  }

  DetachedRun detached_run;
  Detached detached;
  if (detach && plan.nnodes == 1) {
    // attach, logs and stop name jobs by id: two of one id here would be
    // ambiguous (and share a log folder). The nodes of a multi-node job share
    // theirs, even on one machine.
    for (const JobRecord& running : running_jobs()) {
      if (running.job_id != plan.job_id) continue;
      std::fprintf(stderr, "ddplaunch: error: a job with id %s already runs here (agent pid %d): give this one another "
                   "--rdzv-id\n", plan.job_id.c_str(), running.pid);
      return exit_code::kUsage;
    }
  }
  if (detach) {
    // One console per machine: the nodes of a job may share a log folder (NFS),
    // where appends from several machines would mix.
    detached_run.console = std::filesystem::absolute(plan.job_log_dir /
                                                     (plan.nnodes > 1 ? "console." + this_host_name() + ".log"
                                                                      : "console.log"))
                               .string();
    try {
      detached = detach_from_terminal(detached_run.console);  // still before any thread
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddplaunch: error: %s\n", e.what());
      return exit_code::kInternal;
    }
    if (!detached.in_agent) return report_background_start(detached, plan.job_id, detached_run.console);
    detached_run.registered = [&detached](bool recorded) { notify_registered(detached.ready_fd, recorded); };
  }

  try {
    // Orphaned grandchildren of the workers are re-parented to ddplaunch, so
    // they are reaped here instead of lingering as zombies of init.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    auto sentinel = OrphanSentinel::start();
    return run_launch(plan, sentinel.get(), detach ? &detached_run : nullptr);
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    return exit_code::kInternal;
  }
}
