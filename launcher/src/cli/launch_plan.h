#pragma once
// LaunchPlan: the checked, resolved form of LaunchOptions. Everything a usage
// error can come from is decided here, before any process starts.

#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/launch_options.h"
#include "cli/stream_selection.h"
#include "ddp/common/clock.h"

namespace ddp {

struct LaunchPlan {
  int nproc = 1;
  std::string nproc_reason;  // how nproc was chosen, for the start-up line
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  int max_restarts = 0;
  std::string job_id;
  std::filesystem::path job_log_dir;  // <log-dir>/<job_id>
  StreamSelection redirects;          // streams kept off the console
  std::set<int> console_local_ranks;  // empty: all
  std::string role;
  Duration shutdown_grace{};
  std::vector<std::string> argv;  // what each worker executes
};

/// Reads an environment variable; injectable for tests.
using GetEnv = std::function<std::optional<std::string>(const char* name)>;
GetEnv process_getenv();

/// Throws UsageError with a one-line message on any bad value.
LaunchPlan resolve_launch_plan(const LaunchOptions& options, const GetEnv& getenv);

}  // namespace ddp
