#include "cli/list_command.h"

#include <CLI/CLI.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "cli/job_selection.h"
#include "cli/sync_state_text.h"
#include "job/log_layout.h"

namespace ddp {
namespace {

// --sync's last state, which the job's uploading agent keeps in its folder; null without.
nlohmann::json sync_state(const JobRecord& j) {
  if (j.log_dir.empty()) return nullptr;
  std::ifstream in(std::filesystem::path(j.log_dir) / kSyncStateFile);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::string local_time(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  return fmt::format("{:%Y-%m-%d %H:%M:%S}", tm);
}

// A secret-free view of a record (no token, no TLS key path).
nlohmann::json to_json(const JobRecord& j) {
  return {{"job_id", j.job_id},
          {"state", to_string(j.state)},
          {"pid", j.pid},
          {"started_unix_s", j.started_unix_s},
          {"ended_unix_s", j.running() ? nlohmann::json() : nlohmann::json(j.ended_unix_s)},
          {"ranks", j.world_size},
          {"local_ranks", j.local_ranks},
          {"node_rank", j.node_rank >= 0 ? nlohmann::json(j.node_rank) : nlohmann::json()},
          {"restarts", j.restarts},
          {"exit_code", j.exit_code ? nlohmann::json(*j.exit_code) : nlohmann::json()},
          {"detached", !j.console.empty()},
          {"log_dir", j.log_dir},
          {"console", j.console.empty() ? nlohmann::json() : nlohmann::json(j.console)},
          {"coordinator", j.running() ? nlohmann::json(j.endpoint) : nlohmann::json()},
          {"sync", sync_state(j)}};
}

std::string render_table(const std::vector<JobRecord>& jobs) {
  // NODE: which node of the job this machine's agent was (two agents of one
  // job here are two rows).
  std::string out = fmt::format("{:<28} {:<10} {:<19} {:>5} {:>4} {:>8} {:>4}  {:<10} {:<24} {}\n", "JOB", "STATE",
                                "STARTED", "RANKS", "NODE", "RESTARTS", "EXIT", "MODE", "SYNC", "LOGS");
  for (const JobRecord& j : jobs) {
    out += fmt::format("{:<28} {:<10} {:<19} {:>5} {:>4} {:>8} {:>4}  {:<10} {:<24} {}\n", j.job_id, to_string(j.state),
                       local_time(j.started_unix_s), j.world_size > 0 ? std::to_string(j.world_size) : "-",
                       j.node_rank >= 0 ? std::to_string(j.node_rank) : "-", j.restarts,
                       j.exit_code ? std::to_string(*j.exit_code) : "-",
                       j.console.empty() ? "foreground" : "detached", sync_state_cell(sync_state(j)), j.log_dir);
  }
  return out;
}

}  // namespace

int run_list_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch list: this user's running and recent jobs on this machine", "ddplaunch list"};
  bool json = false;
  app.add_flag("--json", json, "a JSON array instead of the table");
  if (const auto done = parse_command_line(app, "list", argc, argv)) return *done;
  const std::vector<JobRecord> jobs = all_jobs();
  if (json) {
    nlohmann::json array = nlohmann::json::array();
    for (const JobRecord& j : jobs) array.push_back(to_json(j));
    std::printf("%s\n", array.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else if (jobs.empty()) {
    std::printf("no ddplaunch jobs of this user on this machine\n");
  } else {
    std::printf("%s", render_table(jobs).c_str());
  }
  return 0;
}

}  // namespace ddp
