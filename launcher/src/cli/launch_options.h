#pragma once
// The `ddplaunch [options] PROGRAM [ARGS...]` command line, in torchrun's
// spellings (dash and underscore forms) with PET_* environment defaults.
// parse_launch_options() only parses; resolve_launch_plan() (launch_plan.h)
// checks and resolves the values.

#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct LaunchOptions {
  std::string nproc_per_node = "1";  // N | gpu | cpu | auto
  std::string nnodes;    // N or MIN:MAX; empty: detected (PET_NNODES, Slurm, ...)
  int node_rank = -1;    // -1: detected, or assigned by the coordinator
  std::string rdzv_endpoint;  // HOST[:PORT] of the coordinator; empty: detected
  std::string rdzv_conf;      // key=value,... (join_timeout, node_timeout, heartbeat_interval)
  std::string token;          // job secret; empty: DDPLAUNCH_TOKEN, else generated
  std::string local_addr;     // address other nodes reach this one at; empty: as the coordinator sees it
  std::string tls_cert, tls_key, tls_ca;
  bool standalone = false;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  int max_restarts = 0;
  std::string log_dir;  // empty: ${TMPDIR:-/tmp}/ddplaunch-logs
  std::string run_id;   // empty: generated
  std::string tee = "0";
  std::string redirects = "0";
  std::string local_ranks_filter;  // empty: every local rank on the console
  std::string role = "default";
  double shutdown_grace_s = 5.0;
  bool preflight = false;             // run the doctor checks first; refuse to start on a failure
  double heartbeat_interval_s = 1.0;  // workers' heartbeats to their agent
  double hang_timeout_s = 300.0;      // silent rank / no progress before a hang is declared
  std::string nccl_debug;             // VERSION, WARN, INFO, TRACE: NCCL_DEBUG into rank_<r>/nccl.log
  std::string nccl_debug_subsys;      // NCCL_DEBUG_SUBSYS
  bool module = false;     // -m: PROGRAM is a Python module
  bool no_python = false;  // run PROGRAM as is, even a .py file
  std::string log_level = "info";
  std::vector<std::string> command;  // PROGRAM ARGS...
};

/// Parses argv (argv[0] included). Returns nullopt when --help or --version
/// was answered (exit 0). Throws UsageError on bad input.
std::optional<LaunchOptions> parse_launch_options(int argc, const char* const* argv);

}  // namespace ddp
