#include "topology/launch_plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <random>
#include <sstream>

#include "cli/torchrun_only_options.h"
#include "numa/machine_topology.h"
#include "numa/numa_binding.h"
#include "process/stop_signals.h"
#include "topology/host_resources.h"
#include "topology/ports.h"
#include "topology/scheduler_detect.h"
#include "cli/program_command.h"
#include "cli/usage_error.h"

namespace ddp {
namespace {

std::pair<int, std::string> resolve_nproc(const std::string& spec, const GetEnv& getenv) {
  if (spec == "gpu" || spec == "auto") {
    const int gpus = visible_cuda_devices(getenv("CUDA_VISIBLE_DEVICES"));
    if (gpus > 0) return {gpus, fmt::format("{}: {} visible CUDA device(s)", spec, gpus)};
    const int cpus = usable_cpus();
    return {cpus, fmt::format("{}: no CUDA device visible, one worker per CPU ({})", spec, cpus)};
  }
  if (spec == "xpu") {
    throw UsageError("--nproc-per-node=xpu: ddplaunch counts NVIDIA GPUs (gpu) and CPUs (cpu); give the number of "
                     "XPUs instead");
  }
  if (spec == "cpu") {
    const int cpus = usable_cpus();
    return {cpus, fmt::format("cpu: {} usable CPU(s)", cpus)};
  }
  int n = 0;
  if (!parse_int(spec, n) || n == 0) {
    throw UsageError(fmt::format("--nproc-per-node must be a positive integer or gpu, cpu or auto; got '{}'", spec));
  }
  return {n, "--nproc-per-node"};
}


// At most about 31 years: beyond Duration's range (292 years) the conversion
// is undefined, and "inf" or "1e300" is a typo, not a timeout.
constexpr double kMaxConfSeconds = 1e9;

Duration seconds_value(const std::string& key, const std::string& value) {
  char* end = nullptr;
  const double s = std::strtod(value.c_str(), &end);
  const auto refuse = [&] {
    throw UsageError(fmt::format("--rdzv-conf {}={}: not a positive number of seconds (at most 1e9)", key, value));
  };
  if (value.empty() || *end != '\0' || !(s > 0) || !(s <= kMaxConfSeconds)) refuse();
  const auto d = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
  if (d <= Duration::zero()) refuse();  // "1e-12" rounds to no time at all
  return d;
}

// A command-line option in seconds (--hang-timeout, --stop-timeout, ...):
// zero or more, at most kMaxConfSeconds, so the conversion stays defined.
Duration option_seconds(const char* option, double s) {
  if (!(s >= 0) || s > kMaxConfSeconds) {
    throw UsageError(fmt::format("--{} {}: expected a number of seconds from 0 to 1e9", option, s));
  }
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}

// The same for an option that must be more than no time (--heartbeat-interval,
// --hang-timeout): "1e-12" rounds to zero, which would make a busy loop.
Duration positive_option_seconds(const char* option, double s) {
  const Duration d = option_seconds(option, s);
  if (d <= Duration::zero()) {
    throw UsageError(fmt::format("--{} {}: expected a number of seconds above 0 (at least 1e-9) and at most 1e9",
                                 option, s));
  }
  return d;
}

// key=value,... in torchrun's format. Keys only torchrun uses are accepted and
// ignored so its command lines keep working; anything else is a typo.
void apply_rdzv_conf(const std::string& conf, LaunchPlan& plan) {
  std::stringstream items(conf);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw UsageError(fmt::format("--rdzv-conf: '{}' is not key=value", item));
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (key == "join_timeout" || key == "timeout") {
      plan.join_timeout = seconds_value(key, value);
    } else if (key == "last_call_timeout") {
      plan.last_call_timeout = seconds_value(key, value);
    } else if (key == "node_timeout") {
      plan.node_timeout = seconds_value(key, value);
    } else if (key == "heartbeat_interval") {
      plan.agent_heartbeat_interval = seconds_value(key, value);
    } else if (key == "is_host") {
      if (value != "true" && value != "false" && value != "1" && value != "0") {
        throw UsageError(fmt::format("--rdzv-conf is_host={}: not true or false", value));
      }
      plan.is_host = value == "true" || value == "1";
    } else if (key != "close_timeout" && key != "read_timeout" && key != "keep_alive_interval" &&
               key != "keep_alive_max_attempt" && key != "use_libuv" && key != "store_type" && key != "rank") {
      throw UsageError(fmt::format("--rdzv-conf: unknown key '{}' (known: join_timeout, last_call_timeout, "
                                   "node_timeout, heartbeat_interval, is_host)",
                                   key));
    }
  }
}

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

// --rdzv-endpoint HOST1:PORT,HOST2:PORT,...: the list, each entry checked later.
std::vector<std::string> split_endpoint_list(const std::string& text) {
  std::vector<std::string> listed;
  std::stringstream in(text);
  for (std::string entry; std::getline(in, entry, ',');) {
    if (entry.empty()) throw UsageError(fmt::format("--rdzv-endpoint '{}': an empty entry in the list", text));
    listed.push_back(entry);
  }
  if (listed.empty() || text.back() == ',') {
    throw UsageError(fmt::format("--rdzv-endpoint '{}': an empty entry in the list", text));
  }
  return listed;
}

// The endpoints after the first; a port left out is the first's.
std::vector<HostPort> later_endpoints(const std::vector<std::string>& listed, const LaunchPlan& plan) {
  std::vector<HostPort> later;
  for (size_t i = 1; i < listed.size(); ++i) {
    std::string why;
    std::optional<HostPort> e = parse_host_port(listed[i], why);
    if (!e) throw UsageError(fmt::format("--rdzv-endpoint entry '{}': {}", listed[i], why));
    if (!e->port) e->port = plan.rdzv_port;
    const bool repeated = (e->host == plan.rdzv_host && *e->port == plan.rdzv_port) ||
                          std::any_of(later.begin(), later.end(), [&](const HostPort& o) {
                            return o.host == e->host && o.port == e->port;
                          });
    if (repeated) throw UsageError(fmt::format("--rdzv-endpoint entry '{}' is listed twice", listed[i]));
    later.push_back(*e);
  }
  return later;
}

void resolve_topology(const LaunchOptions& o, const GetEnv& getenv, LaunchPlan& plan) {
  TopologyFlags flags;
  if (!o.nnodes.empty()) {
    const NodeCount count = parse_node_count(o.nnodes, "--nnodes");
    flags.nnodes = count.max;
    if (count.min != count.max) flags.min_nnodes = count.min;
  }
  if (o.node_rank >= 0) flags.node_rank = o.node_rank;
  std::vector<std::string> listed;
  if (!o.rdzv_endpoint.empty()) {
    listed = split_endpoint_list(o.rdzv_endpoint);
    flags.rdzv_endpoint = listed.front();
  }
  if (!o.run_id.empty()) flags.rdzv_id = o.run_id;
  const DetectedTopology topo = detect_topology(flags, getenv);
  require_complete_topology(topo);
  plan.topology_source = topo.source;
  plan.topology_notes = topo.notes;
  plan.nnodes = topo.nnodes.value_or(1);
  plan.min_nnodes = topo.min_nnodes.value_or(plan.nnodes);
  plan.node_rank = topo.node_rank.value_or(plan.nnodes == 1 ? 0 : -1);
  if (topo.job_id) plan.job_id = *topo.job_id;
  if (listed.size() > 1 && plan.min_nnodes >= plan.nnodes) {
    throw UsageError(fmt::format("--rdzv-endpoint lists {} endpoints: failing over to a later one needs an elastic "
                                 "job (--nnodes=MIN:MAX with MIN < MAX), since it goes on without the lost "
                                 "coordinator's node",
                                 listed.size()));
  }
  if (plan.nnodes == 1) return;  // the coordinator stays on loopback

  plan.rdzv_host = *topo.rdzv_host;
  plan.rdzv_port = *topo.rdzv_port;
  plan.later_endpoints = later_endpoints(listed, plan);
  // Who hosts the coordinator: --rdzv-conf is_host=true|false says so;
  // otherwise node 0, or without a node rank the agent that can bind the
  // endpoint (its host is this machine and the port is free). A node 0 that
  // finds the port taken uses the coordinator already there (`ddplaunch serve`).
  const bool can_host = can_bind(plan.rdzv_host, plan.rdzv_port);
  plan.host_coordinator = plan.is_host.value_or(plan.node_rank <= 0 && can_host);
  if (plan.is_host.value_or(false)) ensure_port_free(plan.rdzv_host, plan.rdzv_port, "the rendezvous endpoint");
}

std::string generate_job_id() {
  std::random_device rd;
  return fmt::format("ddp-{}-{:06x}", static_cast<long>(::time(nullptr)), rd() & 0xffffff);
}

// torchrun's default run id: nodes started by hand with the same command line
// agree on it without being told.
constexpr const char* kDefaultMultiNodeJobId = "none";

// The job id when nobody gave one. A single node needs to agree with nobody,
// so it gets a fresh id; several nodes need the same one, so they get
// torchrun's default, and only the log folder is made unique.
void default_job_id(LaunchPlan& plan) {
  if (!plan.job_id.empty()) return;
  if (plan.nnodes == 1) {
    plan.job_id = generate_job_id();
    return;
  }
  plan.job_id = kDefaultMultiNodeJobId;
  plan.job_id_defaulted = true;
}

std::string log_folder_name(const LaunchPlan& plan) {
  if (!plan.job_id_defaulted) return plan.job_id;
  char stamp[32];
  const std::time_t now = ::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return fmt::format("{}-{}-{}", plan.job_id, stamp, random_hex(3));
}

// -m, .py under python3, --run-path, --no-python (torchrun's rules), and
// where --legacy-local-rank-arg puts "--local_rank=N": right after the program.
void resolve_program(const LaunchOptions& o, const GetEnv& getenv, LaunchPlan& plan) {
  plan.program = o.command.front();
  plan.argv = resolve_command({o.command, o.module, o.no_python, getenv("PYTHON_EXEC"), getenv("PATH"), o.run_path});
  if (o.legacy_local_rank_arg) {
    plan.local_rank_arg_at = static_cast<int>(plan.argv.size() - (o.command.size() - 1));
  }
  plan.virtual_local_rank = o.virtual_local_rank;
}

// --numa-binding: each local rank's CPUs, worked out now so that a machine that
// cannot honour it refuses the launch before anything starts.
void resolve_numa_binding(const LaunchOptions& o, const GetEnv& getenv, LaunchPlan& plan) {
  if (o.numa_binding.empty()) return;
  try {
    const MachineTopology machine = read_machine_topology(allowed_cpus());
    const std::vector<int> visible = visible_gpus(machine, getenv("CUDA_VISIBLE_DEVICES"));
    plan.rank_cpus = numa_cpus_per_local_rank(*parse_numa_mode(o.numa_binding), machine, visible, plan.nproc);
    plan.numa_binding = o.numa_binding;
  } catch (const NumaBindingError& e) {
    throw UsageError(e.what());
  }
}

// torchrun's console and log-file options beyond --tee and --redirects.
void resolve_output(const LaunchOptions& o, const GetEnv& getenv, LaunchPlan& plan) {
  plan.log_line_prefix_template = !o.log_line_prefix_template.empty()
                                      ? o.log_line_prefix_template
                                      : getenv("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE").value_or("");
  plan.duplicate_stdout_filters = parse_duplicate_filters(o.duplicate_stdout_filters);
  plan.duplicate_stderr_filters = parse_duplicate_filters(o.duplicate_stderr_filters);
  std::string why;
  const auto signals = parse_signal_list(o.signals_to_handle, why);
  if (!signals) throw UsageError(fmt::format("--signals-to-handle '{}': {}", o.signals_to_handle, why));
  if (signals->empty()) {
    throw UsageError(fmt::format("--signals-to-handle '{}': names no signal (torchrun's default is "
                                 "SIGTERM,SIGINT,SIGHUP,SIGQUIT)",
                                 o.signals_to_handle));
  }
  plan.stop_signals = *signals;
}

// The job id names the log folder and the registry's file: a name a
// directory can have, on one line (console lines, `ddplaunch list`).
constexpr size_t kMaxJobIdLength = 200;

// origin: where the id came from, "--rdzv-id" or a variable, for the message.
void check_job_id(const std::string& id, const std::string& origin) {
  if (id.find('/') != std::string::npos || id == "." || id == "..") {
    throw UsageError(fmt::format("{} '{}' cannot be used as a directory name", origin, id));
  }
  if (std::any_of(id.begin(), id.end(), [](char c) { return std::iscntrl(static_cast<unsigned char>(c)) != 0; })) {
    throw UsageError(fmt::format("{} '{}' holds a control character", origin, id));
  }
  if (id.size() > kMaxJobIdLength) {
    throw UsageError(fmt::format("{} '{}...' is {} characters long, more than the {} a job id may have", origin,
                                 id.substr(0, 32), id.size(), kMaxJobIdLength));
  }
}

// Where the job id came from: the flag, torchrun's variable, else a scheduler.
std::string job_id_origin(const LaunchOptions& o, const GetEnv& getenv) {
  if (!o.run_id.empty()) return "--rdzv-id";
  if (!getenv("PET_RDZV_ID").value_or("").empty()) return "PET_RDZV_ID";
  return "the job id";
}

// The job's log folder is made when it starts; a file where one of its
// folders should be is refused now, before anything starts. Nothing is
// created here (a refused command line writes nothing).
void check_log_dir(const std::filesystem::path& dir, const std::string& what) {
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty(); p = p.parent_path()) {
    const auto st = std::filesystem::status(p, ec);
    if (std::filesystem::exists(st)) {
      if (!std::filesystem::is_directory(st)) {
        throw UsageError(fmt::format("{}: '{}' is not a folder", what, p.string()));
      }
      return;
    }
    if (p == p.parent_path()) return;
  }
}

LaunchPlan resolve(const LaunchOptions& o, const GetEnv& getenv) {
  LaunchPlan plan;
  std::tie(plan.nproc, plan.nproc_reason) = resolve_nproc(o.nproc_per_node, getenv);
  apply_rdzv_conf(o.rdzv_conf, plan);
  resolve_topology(o, getenv, plan);
  plan.tls_cert = o.tls_cert;
  plan.tls_key = o.tls_key;
  plan.tls_ca = o.tls_ca;
  if (plan.tls_cert.empty() != plan.tls_key.empty()) throw UsageError("--tls-cert and --tls-key go together");
  plan.local_addr = o.local_addr;

  resolve_program(o, getenv, plan);
  resolve_output(o, getenv, plan);
  plan.option_notes = check_torchrun_only_options(o, visible_cuda_devices(getenv("CUDA_VISIBLE_DEVICES")));
  resolve_numa_binding(o, getenv, plan);

  plan.redirects = StreamSelection::parse("redirects", o.redirects, plan.nproc);
  StreamSelection::parse("tee", o.tee, plan.nproc);  // checked only: every stream reaches its file anyway
  plan.console_local_ranks = parse_local_ranks_filter(o.local_ranks_filter, plan.nproc);

  if (o.max_restarts < 0) throw UsageError("--max-restarts must be >= 0");
  plan.max_restarts = o.max_restarts;
  plan.role = o.role;
  plan.shutdown_grace = option_seconds("shutdown-grace", o.shutdown_grace_s);
  plan.stop_timeout = option_seconds("stop-timeout", o.stop_timeout_s);
  for (const std::string& spec : o.sync) {
    std::string why;
    std::optional<SyncTarget> target = parse_sync_target(spec, why);
    if (!target) throw UsageError(fmt::format("--sync {}: {}", spec, why));
    plan.sync.targets.push_back(std::move(*target));
  }
  if (o.sync_delete && o.sync.empty()) throw UsageError("--sync-delete needs a --sync DIR=s3://BUCKET/PREFIX");
  plan.sync.mirror_deletions = o.sync_delete;
  plan.sync.final_wait = option_seconds("sync-wait", o.sync_wait_s);
  plan.max_node_failures = o.max_node_failures;
  plan.grow = o.grow;
  plan.heartbeat_interval = positive_option_seconds("heartbeat-interval", o.heartbeat_interval_s);
  plan.hang_timeout = positive_option_seconds("hang-timeout", o.hang_timeout_s);
  plan.python_companion = !o.no_python_companion;
  if (!o.nccl_debug.empty()) {
    std::string level = o.nccl_debug;
    std::transform(level.begin(), level.end(), level.begin(), [](unsigned char c) { return std::toupper(c); });
    if (level != "VERSION" && level != "WARN" && level != "INFO" && level != "TRACE") {
      throw UsageError(fmt::format("--nccl-debug '{}': expected VERSION, WARN, INFO or TRACE", o.nccl_debug));
    }
    plan.nccl_debug = level;
  }
  plan.nccl_debug_subsys = o.nccl_debug_subsys;
  if (plan.hang_timeout <= plan.heartbeat_interval) {
    throw UsageError(fmt::format("--hang-timeout {} s must be longer than --heartbeat-interval {} s", o.hang_timeout_s,
                                 o.heartbeat_interval_s));
  }

  // --standalone: everything on loopback with a port of our choosing.
  plan.master_addr = o.standalone ? "127.0.0.1" : o.master_addr;
  if (plan.master_addr.empty()) throw UsageError("--master-addr is empty: give the address workers reach rank 0 at");
  // Multi-node: node 0's workers listen on MASTER_PORT on every interface.
  const std::string port_host = plan.nnodes > 1 ? "0.0.0.0" : plan.master_addr;
  if (o.standalone || o.master_port == 0) {
    plan.master_port = pick_free_port(port_host);
  } else {
    ensure_port_free(port_host, o.master_port);
    plan.master_port = o.master_port;
  }

  // --metrics-port: a busy port refuses the launch here, before anything starts.
  plan.metrics_port = o.metrics_port;
  if (plan.metrics_port > 0 && plan.host_coordinator) {
    if (plan.metrics_port == plan.master_port || (plan.nnodes > 1 && plan.metrics_port == plan.rdzv_port)) {
      throw UsageError(fmt::format("--metrics-port {} is also the job's {}", plan.metrics_port,
                                   plan.metrics_port == plan.master_port ? "MASTER_PORT" : "rendezvous port"));
    }
    ensure_port_free(coordinator_listen_host(plan), plan.metrics_port, "--metrics-port");
  }

  default_job_id(plan);
  plan.token = !o.token.empty() ? o.token : getenv("DDPLAUNCH_TOKEN").value_or("");
  if (plan.token.empty()) {
    // Single node: a fresh secret nobody else needs. Multi-node: every agent
    // must present the same one, which only the user can arrange; fall back
    // to the job id so torchrun command lines still run, and say so.
    plan.token_generated = true;
    plan.token = plan.nnodes == 1 ? random_hex(16) : plan.job_id;
  }
  check_job_id(plan.job_id, job_id_origin(o, getenv));
  const std::filesystem::path log_dir =
      !o.log_dir.empty() ? std::filesystem::path(o.log_dir)
                         : std::filesystem::path(getenv("TMPDIR").value_or("/tmp")) / "ddplaunch-logs";
  plan.job_log_dir = log_dir / log_folder_name(plan);
  check_log_dir(plan.job_log_dir, o.log_dir.empty() ? "the default log folder (${TMPDIR:-/tmp}/ddplaunch-logs)"
                                                    : "--log-dir '" + o.log_dir + "'");
  return plan;
}

}  // namespace

GetEnv process_getenv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

LaunchPlan resolve_launch_plan(const LaunchOptions& o, const GetEnv& getenv) {
  try {
    return resolve(o, getenv);
  } catch (const UsageError& e) {
    throw UsageError(name_option_source(o, e.what()));
  }
}

}  // namespace ddp
