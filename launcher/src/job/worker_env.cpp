#include "job/worker_env.h"

#include <map>
#include <optional>
#include <sstream>

#include "net/grpc_name_resolution.h"

extern char** environ;

namespace ddp {

namespace {

// The device local_rank would use: its entry of CUDA_VISIBLE_DEVICES, else its index.
std::string own_cuda_device(const std::vector<std::string>& base, int local_rank) {
  const std::string prefix = "CUDA_VISIBLE_DEVICES=";
  for (const std::string& entry : base) {
    if (entry.rfind(prefix, 0) != 0) continue;
    std::stringstream list(entry.substr(prefix.size()));
    int index = 0;
    for (std::string device; std::getline(list, device, ',');) {
      if (index++ == local_rank) return device;
    }
  }
  return std::to_string(local_rank);
}

std::optional<std::string> value_in(const std::vector<std::string>& env, const std::string& name) {
  const std::string prefix = name + "=";
  for (const std::string& entry : env) {
    if (entry.rfind(prefix, 0) == 0) return entry.substr(prefix.size());
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> build_worker_env(const std::vector<std::string>& base, const WorkerIdentity& id) {
  std::map<std::string, std::string> overrides = {
      {"RANK", std::to_string(id.rank)},
      {"LOCAL_RANK", std::to_string(id.virtual_local_rank ? 0 : id.local_rank)},
      {"WORLD_SIZE", std::to_string(id.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(id.local_world_size)},
      {"GROUP_RANK", std::to_string(id.group_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(id.group_world_size)},
      // One role per job: role ranks are the global ranks.
      {"ROLE_RANK", std::to_string(id.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(id.world_size)},
      {"ROLE_NAME", id.role},
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", std::to_string(id.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(id.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(id.max_restarts)},
      {"TORCHELASTIC_RUN_ID", id.job_id},
      {"TORCHELASTIC_ERROR_FILE", id.error_file},
      // The workers' rank 0 hosts the TCP store itself (as torchrun's
      // static rendezvous does without an agent store).
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"DDPLAUNCH_JOB_ID", id.job_id},
      {"DDPLAUNCH_ATTEMPT", std::to_string(id.generation)},
      {"DDPLAUNCH_RANK_LOG_DIR", id.rank_log_dir},
      {"DDPLAUNCH_STOP_FILE", id.stop_file},
      {"DDPLAUNCH_AGENT_SOCKET", id.agent_socket},
      {"DDPLAUNCH_TOKEN", id.token},
      {"DDPLAUNCH_HEARTBEAT_INTERVAL_MS", std::to_string(id.heartbeat_interval_ms)},
      {"DDPLAUNCH_NODE_RANK", std::to_string(id.group_rank)},
      {"DDPLAUNCH_NNODES", std::to_string(id.group_world_size)},
  };

  if (!id.signal_intent_file.empty()) overrides["DDPLAUNCH_SIGNAL_INTENT_FILE"] = id.signal_intent_file;
  if (id.virtual_local_rank) overrides["CUDA_VISIBLE_DEVICES"] = own_cuda_device(base, id.local_rank);
  std::map<std::string, std::string> companion_defaults;
  if (!id.companion_dir.empty()) {
    const std::optional<std::string> user_path = value_in(base, "PYTHONPATH");
    overrides["PYTHONPATH"] = user_path && !user_path->empty() ? id.companion_dir + ":" + *user_path : id.companion_dir;
    overrides["DDPLAUNCH_COMPANION_PATH"] = id.companion_dir;
    overrides["DDPLAUNCH_COMPANION_SOCKET"] = id.companion_socket;
    // PyTorch >= 2.2 with NCCL: a trace of the last collectives, dumped on a
    // watchdog timeout or when the companion writes to the pipe (torch adds
    // the rank to both names). Older versions ignore these.
    companion_defaults = {
        {"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
        {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", id.rank_log_dir + "/nccl_trace_rank_"},
        {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE", id.rank_log_dir + "/nccl_trace_pipe_rank_"},
    };
  }
  std::map<std::string, std::string> forced = id.nccl_forced;
  forced.insert(overrides.begin(), overrides.end());

  std::vector<std::string> env;
  env.reserve(base.size() + forced.size() + id.job_env.size() + 2);
  std::map<std::string, std::string> kept;  // the node's own, by name
  for (const std::string& entry : base) {
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (forced.count(name) != 0) continue;
    kept[name] = eq == std::string::npos ? std::string() : entry.substr(eq + 1);
    env.push_back(entry);
  }
  for (const auto& [name, value] : forced) env.push_back(name + "=" + value);
  for (const auto& [name, value] : id.job_env) {
    if (forced.count(name) == 0 && kept.count(name) == 0) env.push_back(name + "=" + value);
  }
  for (const auto& [name, value] : id.node_defaults) {
    if (forced.count(name) == 0 && kept.count(name) == 0 && id.job_env.count(name) == 0) {
      env.push_back(name + "=" + value);
    }
  }
  for (const auto& [name, value] : companion_defaults) {
    if (forced.count(name) == 0 && kept.count(name) == 0) env.push_back(name + "=" + value);
  }
  // NCCL's log goes to the rank's own file, not the console.
  const bool nccl_logs = forced.count("NCCL_DEBUG") != 0 || kept.count("NCCL_DEBUG") != 0 || id.job_env.count("NCCL_DEBUG") != 0;
  if (nccl_logs && !id.nccl_debug_file.empty() && kept.count("NCCL_DEBUG_FILE") == 0) {
    env.push_back("NCCL_DEBUG_FILE=" + id.nccl_debug_file);
  }
  // N workers each spawning one OpenMP thread per core would oversubscribe
  // the machine N times over; torchrun sets the same default.
  if (kept.count("OMP_NUM_THREADS") == 0 && id.local_world_size > 1) env.emplace_back("OMP_NUM_THREADS=1");
  // A failed or timed-out NCCL collective ends the process instead of hanging it (torchrun's default).
  if (kept.count("TORCH_NCCL_ASYNC_ERROR_HANDLING") == 0) env.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return without_own_grpc_settings(std::move(env));
}

}  // namespace ddp
