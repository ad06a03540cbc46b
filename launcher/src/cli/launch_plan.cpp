#include "cli/launch_plan.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <random>

#include "cli/host_resources.h"
#include "cli/ports.h"
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

int resolve_nnodes(const std::string& spec) {
  // torchrun takes N or MIN:MAX; elastic ranges arrive with multi-node support.
  const auto colon = spec.find(':');
  int min = 0;
  int max = 0;
  bool ok = false;
  if (colon == std::string::npos) {
    ok = parse_int(spec, min);
    max = min;
  } else {
    ok = parse_int(spec.substr(0, colon), min) && parse_int(spec.substr(colon + 1), max);
  }
  if (!ok || min == 0 || max < min) throw UsageError(fmt::format("--nnodes must be N or MIN:MAX; got '{}'", spec));
  if (max != 1) throw UsageError(fmt::format("--nnodes={}: this ddplaunch runs single-node jobs only", spec));
  return 1;
}

std::string generate_job_id() {
  std::random_device rd;
  return fmt::format("ddp-{}-{:06x}", static_cast<long>(::time(nullptr)), rd() & 0xffffff);
}

}  // namespace

GetEnv process_getenv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
}

LaunchPlan resolve_launch_plan(const LaunchOptions& o, const GetEnv& getenv) {
  LaunchPlan plan;
  std::tie(plan.nproc, plan.nproc_reason) = resolve_nproc(o.nproc_per_node, getenv);
  plan.nnodes = resolve_nnodes(o.nnodes);
  if (o.node_rank != 0) throw UsageError(fmt::format("--node-rank={} but the job has a single node", o.node_rank));

  plan.argv = resolve_command({o.command, o.module, o.no_python, getenv("PYTHON_EXEC"), getenv("PATH")});

  plan.redirects = StreamSelection::parse("redirects", o.redirects, plan.nproc);
  StreamSelection::parse("tee", o.tee, plan.nproc);  // checked only: every stream reaches its file anyway
  plan.console_local_ranks = parse_local_ranks_filter(o.local_ranks_filter, plan.nproc);

  if (o.max_restarts < 0) throw UsageError("--max-restarts must be >= 0");
  plan.max_restarts = o.max_restarts;
  plan.role = o.role;
  plan.shutdown_grace = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(o.shutdown_grace_s));

  // --standalone: everything on loopback with a port of our choosing.
  plan.master_addr = o.standalone ? "127.0.0.1" : o.master_addr;
  if (o.standalone || o.master_port == 0) {
    plan.master_port = pick_free_port(plan.master_addr);
  } else {
    ensure_port_free(plan.master_addr, o.master_port);
    plan.master_port = o.master_port;
  }

  plan.job_id = o.run_id.empty() ? generate_job_id() : o.run_id;
  if (plan.job_id.find('/') != std::string::npos || plan.job_id == "." || plan.job_id == "..") {
    throw UsageError(fmt::format("--rdzv-id '{}' cannot be used as a directory name", plan.job_id));
  }
  const std::filesystem::path log_dir =
      !o.log_dir.empty() ? std::filesystem::path(o.log_dir)
                         : std::filesystem::path(getenv("TMPDIR").value_or("/tmp")) / "ddplaunch-logs";
  plan.job_log_dir = log_dir / plan.job_id;
  return plan;
}

}  // namespace ddp
