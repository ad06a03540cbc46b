#include "cli/launch_options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "cli/number_checks.h"
#include "cli/option_abbreviations.h"
#include "cli/usage_error.h"

namespace ddp {
namespace {

// torchrun accepts --nproc-per-node and --nproc_per_node, and reads
// PET_NPROC_PER_NODE when neither is given.
std::string spellings(const std::string& dashed) {
  std::string underscored = dashed;
  for (char& c : underscored) {
    if (c == '-') c = '_';
  }
  return underscored == dashed ? "--" + dashed : "--" + dashed + ",--" + underscored;
}

std::string env_name(const std::string& dashed) {
  std::string name = "PET_";
  for (char c : dashed) name += (c == '-') ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

template <typename T>
CLI::Option* add(CLI::App& app, const std::string& dashed, T& value, const std::string& help) {
  return app.add_option(spellings(dashed), value, help)->envname(env_name(dashed));
}

CLI::Option* add_flag(CLI::App& app, const std::string& names, bool& value, const std::string& env,
                      const std::string& help) {
  return app.add_flag(names, value, help)->envname(env);
}

}  // namespace

std::optional<LaunchOptions> parse_launch_options(int argc, const char* const* argv) {
  LaunchOptions o;
  CLI::App app{"ddplaunch: start and supervise one worker process per GPU or CPU slot", "ddplaunch"};
  // Everything from PROGRAM on belongs to PROGRAM.
  app.prefix_command();
  app.set_version_flag("--version", "ddplaunch 0.1.0");
  app.footer("Subcommands (each takes --help): serve, status, top, stacks, diagnose, doctor, attach, logs, stop, "
             "list");

  // ---- torchrun's options (torch/distributed/run.py), in its order
  // Topology flags read no PET_* default here: detect_topology() does, so
  // that it can say where each value came from.
  app.add_option(spellings("nnodes"), o.nnodes, "number of nodes, N or MIN:MAX (default: detected, else 1)");
  add(app, "nproc-per-node", o.nproc_per_node, "workers on this node: N, gpu, cpu or auto")->capture_default_str();
  add(app, "rdzv-backend", o.rdzv_backend, "static or c10d: both are ddplaunch's own coordinator")
      ->check(CLI::IsMember({"static", "c10d", "etcd", "etcd-v2"}))
      ->capture_default_str();
  app.add_option(spellings("rdzv-endpoint"), o.rdzv_endpoint,
                 "HOST[:PORT] of the coordinator (node 0's agent); an elastic job may list more, HOST1:PORT,HOST2:PORT, "
                 "to fail over to the next when the first's node is lost");
  app.add_option(spellings("rdzv-id"), o.run_id,
                 "the id every node of the job shares (TORCHELASTIC_RUN_ID); default: from the scheduler, else "
                 "torchrun's 'none' for multi-node jobs, a fresh one for single-node jobs");
  add(app, "rdzv-conf", o.rdzv_conf, "join_timeout=S,last_call_timeout=S,node_timeout=S,heartbeat_interval=S,...");
  add_flag(app, "--standalone", o.standalone, "PET_STANDALONE", "single-node job on loopback with a free port");
  add(app, "max-restarts", o.max_restarts, "restart the whole group this many times after a failure")
      ->check(non_negative_number())
      ->capture_default_str();
  add(app, "monitor-interval", o.monitor_interval_s, "accepted; supervision is event-driven (no polling)")
      ->check(positive_number());
  add(app, "start-method", o.start_method, "accepted; workers always start as new processes (fork + exec)")
      ->check(CLI::IsMember({"spawn", "fork", "forkserver"}));
  add(app, "event-log-handler", o.event_log_handler, "accepted: null, console or dynamic_rendezvous")
      ->check(CLI::IsMember({"null", "console", "dynamic_rendezvous"}));
  add(app, "role", o.role, "ROLE_NAME of the workers")->capture_default_str();
  add_flag(app, "-m,--module", o.module, "PET_MODULE", "PROGRAM is a Python module, run as python3 -u -m PROGRAM");
  add_flag(app, spellings("no-python"), o.no_python, "PET_NO_PYTHON", "run PROGRAM as is, even a .py file");
  add_flag(app, spellings("run-path"), o.run_path, "PET_RUN_PATH",
           "run the Python file PROGRAM with runpy.run_path (wins over --no-python)");
  add(app, "log-dir", o.log_dir, "where per-rank logs and failure reports go (default ${TMPDIR:-/tmp}/ddplaunch-logs)");
  app.add_option("-r," + spellings("redirects"), o.redirects,
                 "streams sent to log files only: 0 none, 1 stdout, 2 stderr, 3 both, or 0:1,1:2")
      ->envname("PET_REDIRECTS")
      ->capture_default_str();
  app.add_option("-t," + spellings("tee"), o.tee,
                 "streams also copied to the console: 0 none, 1 stdout, 2 stderr, 3 both, or 0:1,1:2")
      ->envname("PET_TEE")
      ->capture_default_str();
  add(app, "local-ranks-filter", o.local_ranks_filter, "only these local ranks reach the console, e.g. 0,2");
  add(app, "duplicate-stdout-filters", o.duplicate_stdout_filters,
      "stdout lines containing any of these (comma list, ',,' for a comma) also go to attempt_<k>/filtered_stdout.log");
  add(app, "duplicate-stderr-filters", o.duplicate_stderr_filters,
      "the same for stderr, into attempt_<k>/filtered_stderr.log");
  app.add_option(spellings("node-rank"), o.node_rank, "rank of this node (default: detected or assigned)")
      ->check(non_negative_number());
  add(app, "master-addr", o.master_addr, "address workers use for MASTER_ADDR")->capture_default_str();
  add(app, "master-port", o.master_port, "MASTER_PORT; 0 picks a free port")->check(CLI::Range(0, 65535));
  add(app, "local-addr", o.local_addr, "address other nodes reach this node at");
  app.add_option(spellings("logs-specs"), o.logs_specs, "a torchrun.logs_specs Python plugin: not supported");
  app.add_option(spellings("numa-binding"), o.numa_binding, "bind each rank to CPUs near its GPU")
      ->check(CLI::IsMember({"node", "socket", "exclusive", "core-complex"}));
  add(app, "signals-to-handle", o.signals_to_handle,
      "signals that stop the job, each forwarded to the workers first")
      ->capture_default_str();
  app.add_option("--shutdown-grace,--shutdown_grace,--shutdown-timeout,--shutdown_timeout", o.shutdown_grace_s,
                 "seconds from the stop signal to SIGKILL when stopping workers")
      ->envname("PET_SHUTDOWN_GRACE")
      ->check(non_negative_number())
      ->capture_default_str();
  app.add_option(spellings("stop-timeout"), o.stop_timeout_s,
                 "on SIGTERM (preemption), seconds for the ranks to stop at a step boundary and exit 0 "
                 "(DDPLAUNCH_STOP_FILE) before they are signalled; then ddplaunch exits 75. 0: signal at once")
      ->envname("DDPLAUNCH_STOP_TIMEOUT")
      ->check(non_negative_number())
      ->capture_default_str();
  app.add_option(spellings("max-node-failures"), o.max_node_failures,
                 "elastic jobs (--nnodes=MIN:MAX): a node whose workers failed this many generations in a row is "
                 "left out while MIN nodes remain (0: never)")
      ->envname("DDPLAUNCH_MAX_NODE_FAILURES")
      ->check(non_negative_number())
      ->capture_default_str();
  app.add_option(spellings("grow"), o.grow,
                 "elastic jobs: when a node that joins a running job gets in: 'now' (the job stops and re-forms "
                 "with it) or 'restart' (at the next restart)")
      ->envname("DDPLAUNCH_GROW")
      ->check(CLI::IsMember({"now", "restart"}))
      ->capture_default_str();
  add_flag(app, spellings("virtual-local-rank"), o.virtual_local_rank, "PET_VIRTUAL_LOCAL_RANK",
           "every worker sees LOCAL_RANK=0 and only its own GPU in CUDA_VISIBLE_DEVICES");
  add(app, "log-line-prefix-template", o.log_line_prefix_template,
      "console prefix, e.g. '[${role_name}${local_rank}]:' (default: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "
      "'[node:rank] ')");

  // ---- torch.distributed.launch's
  bool use_env = false;  // workers always get LOCAL_RANK and the rest in their environment
  app.add_flag(spellings("use-env"), use_env, "accepted: the environment always carries LOCAL_RANK");
  add_flag(app, spellings("legacy-local-rank-arg"), o.legacy_local_rank_arg, "PET_LEGACY_LOCAL_RANK_ARG",
           "also pass --local_rank=N to PROGRAM, as torch.distributed.launch did");

  // ---- ddplaunch's own
  app.add_option("--token", o.token, "job secret shared by every node (default: $DDPLAUNCH_TOKEN, else random)");
  app.add_option("--tls-cert", o.tls_cert, "PEM certificate: serve and connect over TLS");
  app.add_option("--tls-key", o.tls_key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", o.tls_ca, "PEM CA that peers' certificates must be signed by");
  add(app, "heartbeat-interval", o.heartbeat_interval_s, "seconds between the workers' heartbeats (runtime workers)")
      ->check(positive_number())
      ->capture_default_str();
  add(app, "hang-timeout", o.hang_timeout_s,
      "seconds a rank may be silent, or the job make no progress, before it is declared hung (exit 124)")
      ->check(positive_number())
      ->capture_default_str();
  add_flag(app, spellings("no-python-companion"), o.no_python_companion, "DDPLAUNCH_NO_PYTHON_COMPANION",
           "do not inject the Python companion (heartbeats, stacks and error files of Python ranks)");
  app.add_flag("-d,--detach", o.detach,
               "run the job in the background, apart from this terminal and session: prints the job id and returns "
               "(then: ddplaunch attach|logs|stop|list)");
  app.add_option("--sync", o.sync,
                 "DIR=s3://BUCKET/PREFIX, repeatable: node 0's agent uploads every file finished in DIR while the "
                 "job runs, and a job started with DIR missing or empty downloads the prefix first (credentials, "
                 "region and endpoint from the AWS variables or ~/.aws)")
      ->type_name("DIR=s3://BUCKET/PREFIX")
      ->allow_extra_args(false);  // repeatable, one value each: what follows is PROGRAM
  app.add_flag("--sync-delete", o.sync_delete, "also delete from the bucket what is deleted in a --sync DIR");
  app.add_option("--sync-wait", o.sync_wait_s, "at the job's end, seconds to wait for --sync uploads still pending")
      ->check(non_negative_number())
      ->capture_default_str();
  app.add_flag("--preflight", o.preflight, "run `ddplaunch doctor`'s checks first; refuse to start when one fails");
  add(app, "nccl-debug", o.nccl_debug,
      "NCCL_DEBUG level (VERSION, WARN, INFO, TRACE) for every rank, logged to rank_<r>/nccl.log (see diagnose)");
  add(app, "nccl-debug-subsys", o.nccl_debug_subsys, "NCCL_DEBUG_SUBSYS for every rank, e.g. INIT,NET");
  app.add_option(spellings("metrics-port"), o.metrics_port,
                 "serve /metrics (Prometheus text), /status.json and a live page on this TCP port from the "
                 "coordinator (node 0's agent), on its address and with its TLS; multi-node jobs and jobs given "
                 "--token need the token (Authorization: Bearer, or ?token=). 0 picks a free port (logged)")
      ->envname("DDPLAUNCH_METRICS_PORT")
      ->check(CLI::Range(0, 65535));
  app.add_option("--log-level", o.log_level, "ddplaunch's own log level")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();

  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::set<const CLI::Option*> named;
    args = expand_option_abbreviations(app, args, &named);
    // What CLI11 will take from the environment, so that an error can say so.
    for (const CLI::Option* option : app.get_options()) {
      const std::string& variable = option->get_envname();
      if (variable.empty() || named.count(option) != 0) continue;
      const char* value = std::getenv(variable.c_str());
      if (value == nullptr || *value == '\0') continue;
      for (const std::string& name : option->get_lnames()) o.option_env["--" + name] = variable;
    }
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return std::nullopt;
  } catch (const CLI::CallForVersion&) {
    std::puts("ddplaunch 0.1.0");
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(name_option_source(o, e.what()));
  }

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  if (o.command.empty()) throw UsageError("missing PROGRAM: usage: ddplaunch [options] PROGRAM [ARGS...]");
  // prefix_command() stops at the first thing it does not know, which may be
  // a mistyped option rather than the program.
  if (o.command.front().rfind("-", 0) == 0) throw UsageError("unknown option " + o.command.front());
  return o;
}

}  // namespace ddp
