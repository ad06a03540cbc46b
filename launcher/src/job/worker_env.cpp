#include "job/worker_env.h"

#include <map>

extern char** environ;

namespace ddp {

std::vector<std::string> build_worker_env(const std::vector<std::string>& base, const WorkerIdentity& id) {
  const std::map<std::string, std::string> overrides = {
      {"RANK", std::to_string(id.rank)},
      {"LOCAL_RANK", std::to_string(id.local_rank)},
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
      {"DDPLAUNCH_ATTEMPT", std::to_string(id.restart_count)},
      {"DDPLAUNCH_RANK_LOG_DIR", id.rank_log_dir},
      {"DDPLAUNCH_AGENT_SOCKET", id.agent_socket},
      {"DDPLAUNCH_TOKEN", id.token},
      {"DDPLAUNCH_HEARTBEAT_INTERVAL_MS", std::to_string(id.heartbeat_interval_ms)},
      {"DDPLAUNCH_NODE_RANK", std::to_string(id.group_rank)},
      {"DDPLAUNCH_NNODES", std::to_string(id.group_world_size)},
  };

  std::vector<std::string> env;
  env.reserve(base.size() + overrides.size() + 1);
  bool has_omp = false;
  for (const std::string& entry : base) {
    const std::string name = entry.substr(0, entry.find('='));
    if (overrides.count(name) != 0) continue;
    has_omp = has_omp || name == "OMP_NUM_THREADS";
    env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  // N workers each spawning one OpenMP thread per core would oversubscribe
  // the machine N times over; torchrun sets the same default.
  if (!has_omp) env.emplace_back("OMP_NUM_THREADS=1");
  return env;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

}  // namespace ddp
