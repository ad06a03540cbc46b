#include "cli/status_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/job_selection.h"
#include "cli/sync_state_text.h"
#include "health/rank_state.h"
#include "output/byte_size.h"

namespace ddp {
namespace {

std::string open_collective(const nlohmann::json& r) {
  if (!r.contains("open_collectives") || r["open_collectives"].empty()) return "-";
  const auto& c = r["open_collectives"].front();
  return fmt::format("{} #{} ({} {}, {:.1f} s)", c.value("op", "?"), c.value("sequence", 0),
                     format_bytes(c.value("bytes", int64_t{0})), c.value("dtype", ""), c.value("age_s", 0.0));
}

// The agent's last sample of a rank's process (metrics/resources_json.h):
// CPU% and RSS, "-" where none was taken or its process is gone.
std::string cpu_column(const nlohmann::json& r) {
  if (!r.contains("resources")) return "-";
  const auto& res = r["resources"];
  if (res.value("process_gone", false) || !res.contains("cpu_percent")) return "-";
  return fmt::format("{:.0f}%", res["cpu_percent"].get<double>());
}

std::string rss_column(const nlohmann::json& r) {
  if (!r.contains("resources") || !r["resources"].contains("rss_bytes")) return "-";
  return format_bytes(r["resources"]["rss_bytes"].get<int64_t>());
}

// A rank without heartbeats still has the pid its agent samples.
std::string sampled_pid(const nlohmann::json& r) {
  if (!r.contains("resources") || !r["resources"].contains("pid")) return "-";
  return std::to_string(r["resources"]["pid"].get<int>());
}

bool has_gpus(const nlohmann::json& r) {
  return r.contains("resources") && r["resources"].contains("gpus") && !r["resources"]["gpus"].empty();
}

// Each GPU's utilisation ("97%,12%" for a rank on two), and their memory in use of their total.
std::string gpu_util_column(const nlohmann::json& r) {
  if (!has_gpus(r)) return "-";
  std::vector<std::string> parts;
  for (const auto& g : r["resources"]["gpus"]) {
    parts.push_back(g.contains("util_percent") ? fmt::format("{:.0f}%", g["util_percent"].get<double>()) : "?");
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

std::string gpu_mem_column(const nlohmann::json& r) {
  if (!has_gpus(r)) return "-";
  int64_t used = 0;
  int64_t total = 0;
  for (const auto& g : r["resources"]["gpus"]) {
    used += g.value("mem_used_bytes", int64_t{0});
    total += g.value("mem_total_bytes", int64_t{0});
  }
  return total > 0 ? fmt::format("{}/{}", format_bytes(used), format_bytes(total)) : "?";
}

// Elastic jobs: the nodes of this generation, changes so far, who left and who waits.
std::string render_membership(const nlohmann::json& s) {
  if (!s.contains("nnodes_range") || !s.contains("membership")) return "";
  std::vector<std::string> nodes;
  for (const auto& m : s["membership"]) nodes.push_back(fmt::format("{}={}", m.value("node", 0), m.value("host", "?")));
  std::string out = fmt::format("membership: nodes {} (of {}..{}), {} membership change(s), {} node(s) waiting to "
                                "join\n",
                                nodes.empty() ? std::string("-") : fmt::format("{}", fmt::join(nodes, " ")),
                                s["nnodes_range"][0].get<int>(), s["nnodes_range"][1].get<int>(),
                                s.value("membership_changes", 0), s.value("waiting_nodes", 0));
  if (s.contains("departed")) {
    for (const auto& d : s["departed"]) out += fmt::format("  left: {}\n", d.get<std::string>());
  }
  if (s.contains("coordinator_epoch")) {
    const int epoch = s["coordinator_epoch"][0].get<int>();
    out += fmt::format("coordinator: --rdzv-endpoint entry {} of {}{}\n", epoch + 1,
                       s["coordinator_epoch"][1].get<int>(), epoch > 0 ? " (took the job over)" : "");
  }
  return out;
}

}  // namespace

std::string render_status(const nlohmann::json& s) {
  const nlohmann::json& health = s.contains("ranks") ? s["ranks"] : nlohmann::json::object();
  const double hang_timeout_s = health.value("hang_timeout_s", 300.0);
  std::string out = fmt::format(
      "job {}: generation {} ({}), restarts {}/{}, elapsed {:.1f} s, {} rank(s) on {} node(s)\n", s.value("job_id", "?"),
      s.value("generation", 0), s.value("state", "?"), s.value("restarts_used", 0), s.value("max_restarts", 0),
      s.value("elapsed_s", 0.0), s.value("world_size", 0), s.value("nnodes", 0));
  if (s.contains("failure")) out += fmt::format("failure: {}\n", s["failure"].get<std::string>());
  out += render_membership(s);
  if (s.contains("sync")) out += sync_state_lines(s["sync"]);
  // The resource columns sit before the open collective, the free-form last
  // column; the GPU ones only when some rank has a GPU sample.
  bool gpus = false;
  if (health.contains("ranks")) {
    for (const auto& r : health["ranks"]) gpus = gpus || has_gpus(r);
  }
  const auto gpu_columns = [gpus](const std::string& util, const std::string& mem) {
    return gpus ? fmt::format("{:>9}  {:>19}  ", util, mem) : std::string();
  };
  out += fmt::format("{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {:>5}  {:>10}  {}{}\n", "rank", "host",
                     "pid", "state", "step", "phase", "heartbeat", "step time", "cpu", "rss",
                     gpu_columns("gpu util", "gpu mem"), "open collective");
  if (!health.contains("ranks")) return out;
  for (const auto& r : health["ranks"]) {
    const bool monitored = r.value("monitored", false);
    out += fmt::format(
        "{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {:>5}  {:>10}  {}{}\n", r.value("rank", -1),
        monitored ? r.value("host", "") : "-", monitored ? std::to_string(r.value("pid", 0)) : sampled_pid(r),
        rank_state(r, hang_timeout_s), monitored && r.value("step", int64_t{-1}) >= 0 ? std::to_string(r.value("step", int64_t{0})) : "-",
        monitored ? r.value("phase", "") : "-",
        monitored ? fmt::format("{:.1f} s", r.value("heartbeat_age_s", 0.0)) : "-",
        monitored && r.value("step_seconds", 0.0) > 0 ? fmt::format("{:.1f} ms", r.value("step_seconds", 0.0) * 1e3) : "-",
        cpu_column(r), rss_column(r), gpu_columns(gpu_util_column(r), gpu_mem_column(r)), open_collective(r));
  }
  return out;
}

int run_status_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch status: the live view of a running job", "ddplaunch status"};
  JobCommandLine line;
  if (const auto done = parse_job_command_line(app, "status", "the table", line, argc, argv)) return *done;
  JobRecord job;
  std::string text;
  if (const int failed = ask_running_job(
          "status", line.job_id,
          [](CoordinatorClient& client, std::string& reply) { return client.status(std::chrono::seconds(5), reply); },
          &job, &text)) {
    return failed;
  }
  nlohmann::json status = nlohmann::json::parse(text, nullptr, false);
  if (line.json) {
    // Each rank's state as the table words it (running, in collective, late, silent, exited, no heartbeats).
    add_rank_states(status);
    std::printf("%s\n", status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", render_status(status).c_str());
  }
  return 0;
}

}  // namespace ddp
