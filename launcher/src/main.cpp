// ddplaunch: parses the command line, refuses bad input before anything
// starts, then runs the job. See README.md.

#include <spdlog/spdlog.h>
#include <sys/prctl.h>

#include <cstdio>
#include <exception>
#include <string>

#include "cli/launch_options.h"
#include "cli/launch_plan.h"
#include "cli/serve_command.h"
#include "cli/status_command.h"
#include "cli/usage_error.h"
#include "ddp/common/logging.h"
#include "exit_codes.h"
#include "job/event_loop.h"
#include "job/launch_job.h"
#include "nccl/diagnose_command.h"
#include "process/orphan_sentinel.h"

int main(int argc, char** argv) {
  using namespace ddp;
  // Before any thread or child exists: signals are read through a signalfd.
  block_handled_signals();
  // A program named like a subcommand can still be run as ./serve.
  if (argc > 1 && std::string(argv[1]) == "serve") return run_serve_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "status") return run_status_command(argc - 1, argv + 1);
  if (argc > 1 && std::string(argv[1]) == "diagnose") return run_diagnose_command(argc - 1, argv + 1);

  LaunchPlan plan;
  try {
    auto options = parse_launch_options(argc, argv);
    if (!options) return exit_code::kSuccess;
    init_logging("ddplaunch", options->log_level);
    plan = resolve_launch_plan(*options, process_getenv());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddplaunch: error: %s\n", e.what());
    return exit_code::kUsage;
  }

  try {
    // Orphaned grandchildren of the workers are re-parented to ddplaunch, so
    // they are reaped here instead of lingering as zombies of init.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    auto sentinel = OrphanSentinel::start();
    return run_launch(plan, sentinel.get());
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    return exit_code::kInternal;
  }
}
