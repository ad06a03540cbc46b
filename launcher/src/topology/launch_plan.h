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
#include "net/host_port.h"
#include "sync/sync_target.h"

namespace ddp {

struct LaunchPlan {
  int nproc = 1;
  std::string nproc_reason;  // how nproc was chosen, for the start-up line
  int node_rank = -1;        // -1: the coordinator assigns it
  int nnodes = 1;            // the most nodes (MAX of --nnodes=MIN:MAX)
  int min_nnodes = 1;        // the fewest the job starts with (MIN; = nnodes unless elastic)
  std::string topology_source;  // "single node", "slurm", ...
  std::vector<std::string> topology_notes;
  // The coordinator: single-node jobs host it on loopback with a free port;
  // multi-node jobs meet at rdzv_host:rdzv_port, hosted by node 0's agent.
  bool host_coordinator = true;
  std::optional<bool> is_host;  // --rdzv-conf is_host=...
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 0;
  /// --rdzv-endpoint HOST1:PORT,HOST2:PORT,...: the endpoints after the first,
  /// in order, where the job fails over (membership/failover.h); each with its port.
  std::vector<HostPort> later_endpoints;
  std::string token;
  bool token_generated = false;
  std::string tls_cert, tls_key, tls_ca;
  std::string local_addr;
  Duration join_timeout = std::chrono::seconds(600);
  /// Elastic jobs: how long the rendezvous waits for more nodes once MIN have joined.
  Duration last_call_timeout = std::chrono::seconds(30);
  Duration node_timeout = std::chrono::seconds(15);
  Duration agent_heartbeat_interval = std::chrono::seconds(5);
  std::string master_addr;
  int master_port = 0;
  int max_restarts = 0;
  std::string job_id;          // what every node of the job agrees on (TORCHELASTIC_RUN_ID)
  bool job_id_defaulted = false;  // torchrun's default id: nobody named the job
  std::filesystem::path job_log_dir;  // <log-dir>/<job_id>, or <log-dir>/<job_id>-<time>-<random> when defaulted
  StreamSelection redirects;          // streams kept off the console
  std::set<int> console_local_ranks;  // empty: all
  std::string role;
  /// Console prefix template (torchrun's TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE); empty: "[node:rank] ".
  std::string log_line_prefix_template;
  /// --duplicate-stdout-filters / --duplicate-stderr-filters, split.
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  Duration shutdown_grace{};
  SyncSettings sync;  // --sync: checkpoint folders mirrored to object storage
  /// SIGTERM: how long the ranks get to stop at a step boundary (0: none).
  Duration stop_timeout{};
  int max_node_failures = 3;  // elastic: see JobConfig::max_node_failures
  std::string grow = "now";   // elastic: see JobConfig::grow
  Duration heartbeat_interval = std::chrono::seconds(1);
  Duration hang_timeout = std::chrono::seconds(300);
  /// --nccl-debug (upper case) and --nccl-debug-subsys; empty: not given.
  /// They win over NCCL_DEBUG / NCCL_DEBUG_SUBSYS in the environment.
  std::string nccl_debug;
  std::string nccl_debug_subsys;
  std::string program;            // PROGRAM as the user gave it (for messages)
  std::vector<std::string> argv;  // what each worker executes
  /// --legacy-local-rank-arg: where in argv "--local_rank=N" goes (after the
  /// program, before its arguments); -1: not passed.
  int local_rank_arg_at = -1;
  bool virtual_local_rank = false;
  /// --numa-binding: the CPUs of each local rank (empty: no binding).
  std::string numa_binding;
  std::vector<std::set<int>> rank_cpus;
  /// The signals that stop the job (--signals-to-handle).
  std::vector<int> stop_signals;
  /// Inject the Python companion into the workers (--no-python-companion: no).
  bool python_companion = true;
  /// --metrics-port: the coordinator's HTTP port (http/metrics_server.h); -1: none.
  int metrics_port = -1;
  /// Why some torchrun options change nothing here, for the debug log.
  std::vector<std::string> option_notes;
};

/// Where this agent's coordinator listens: single-node jobs stay on
/// loopback; multi-node listening is explicit (every interface).
inline std::string coordinator_listen_host(const LaunchPlan& plan) {
  return plan.nnodes == 1 ? "127.0.0.1" : "0.0.0.0";
}

/// Reads an environment variable; injectable for tests.
using GetEnv = std::function<std::optional<std::string>(const char* name)>;
GetEnv process_getenv();

/// Throws UsageError with a one-line message on any bad value.
LaunchPlan resolve_launch_plan(const LaunchOptions& options, const GetEnv& getenv);

}  // namespace ddp
