#pragma once
// The `ddplaunch [options] PROGRAM [ARGS...]` command line: every torchrun 2.x
// option in its dash and underscore spellings, with its PET_* environment
// default, argparse-style abbreviations (option_abbreviations.h), and
// ddplaunch's own options. parse_launch_options() only parses and checks
// syntax; resolve_launch_plan() (topology/launch_plan.h) resolves the values.

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct LaunchOptions {
  std::string nproc_per_node = "1";  // N | gpu | cpu | auto
  std::string nnodes;    // N or MIN:MAX; empty: detected (PET_NNODES, Slurm, ...)
  int node_rank = -1;    // -1: detected, or assigned by the coordinator
  std::string rdzv_backend = "static";  // static | c10d: both mean ddplaunch's coordinator
  std::string rdzv_endpoint;  // HOST[:PORT] of the coordinator; empty: detected
  std::string rdzv_conf;      // key=value,... (join_timeout, last_call_timeout, node_timeout, ...)
  std::string token;          // job secret; empty: DDPLAUNCH_TOKEN, else generated
  std::string local_addr;     // address other nodes reach this one at; empty: as the coordinator sees it
  std::string tls_cert, tls_key, tls_ca;
  bool standalone = false;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  int max_restarts = 0;
  std::string log_dir;  // empty: ${TMPDIR:-/tmp}/ddplaunch-logs
  std::string run_id;   // --rdzv-id; empty: detected, else torchrun's default
  std::string tee = "0";
  std::string redirects = "0";
  std::string local_ranks_filter;  // empty: every local rank on the console
  std::string role = "default";
  double shutdown_grace_s = 5.0;
  std::vector<std::string> sync;      // --sync DIR=s3://BUCKET/PREFIX, repeatable
  bool sync_delete = false;           // mirror deletions in DIR
  double sync_wait_s = 300;           // at the end, seconds to wait for pending uploads
  double stop_timeout_s = 0;          // SIGTERM: seconds for the ranks to stop at a step boundary first
  int max_node_failures = 3;          // elastic: a node failing this many generations in a row leaves (0: never)
  std::string grow = "now";           // elastic: when a waiting node gets in: now | restart
  bool preflight = false;             // run the doctor checks first; refuse to start on a failure
  bool detach = false;                // -d: run in the background, outliving the terminal (detach/)
  double heartbeat_interval_s = 1.0;  // workers' heartbeats to their agent
  double hang_timeout_s = 300.0;      // silent rank / no progress before a hang is declared
  std::string nccl_debug;             // VERSION, WARN, INFO, TRACE: NCCL_DEBUG into rank_<r>/nccl.log
  std::string nccl_debug_subsys;      // NCCL_DEBUG_SUBSYS
  int metrics_port = -1;              // the coordinator's HTTP port (/metrics, /status.json, /); -1: none, 0: free
  bool module = false;     // -m: PROGRAM is a Python module
  bool no_python = false;  // run PROGRAM as is, even a .py file
  bool run_path = false;   // run PROGRAM (a Python file) with runpy.run_path
  bool virtual_local_rank = false;    // LOCAL_RANK=0 and only the rank's own GPU visible
  bool legacy_local_rank_arg = false; // pass --local_rank=N to PROGRAM, as torch.distributed.launch did
  bool no_python_companion = false;   // do not inject the Python companion into Python ranks
  std::string log_line_prefix_template;  // empty: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "[node:rank] "
  std::string duplicate_stdout_filters;  // comma list (",," a comma): lines copied to filtered_stdout.log
  std::string duplicate_stderr_filters;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::string numa_binding;  // node | socket | exclusive | core-complex (GPU machines)
  // torchrun options with nothing to do under ddplaunch (see the README's table)
  double monitor_interval_s = 0.1;
  std::string start_method = "spawn";
  std::string event_log_handler = "null";
  std::string logs_specs;  // a torchrun plugin: refused when given
  std::string log_level = "info";
  std::vector<std::string> command;  // PROGRAM ARGS...
  /// The options that took their value from the environment (PET_TEE, ...),
  /// not the command line: each long spelling ("--tee") -> the variable.
  std::map<std::string, std::string> option_env;
};

/// Parses argv (argv[0] included). Returns nullopt when --help or --version
/// was answered (exit 0). Throws UsageError on bad input.
std::optional<LaunchOptions> parse_launch_options(int argc, const char* const* argv);

/// A usage error's message about `o`, with the variable named when the first
/// option it names took its value from one ("... (--tee is set by PET_TEE)").
std::string name_option_source(const LaunchOptions& o, const std::string& message);

}  // namespace ddp
