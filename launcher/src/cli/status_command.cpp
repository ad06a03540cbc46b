#include "cli/status_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/job_selection.h"
#include "cli/sync_state_text.h"
#include "output/byte_size.h"

namespace ddp {
namespace {

std::string rank_state(const nlohmann::json& r, double hang_timeout_s) {
  if (!r.value("monitored", false)) return r.value("exited", false) ? "exited" : "no heartbeats";
  if (r.value("exited", false)) return "exited";
  const double age = r.value("heartbeat_age_s", 0.0);
  if (age > hang_timeout_s) return "silent";
  if (age > hang_timeout_s / 2) return "late";
  return r["open_collectives"].empty() ? "running" : "in collective";
}

std::string open_collective(const nlohmann::json& r) {
  if (!r.contains("open_collectives") || r["open_collectives"].empty()) return "-";
  const auto& c = r["open_collectives"].front();
  return fmt::format("{} #{} ({} {}, {:.1f} s)", c.value("op", "?"), c.value("sequence", 0),
                     format_bytes(c.value("bytes", int64_t{0})), c.value("dtype", ""), c.value("age_s", 0.0));
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
  out += fmt::format("{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {}\n", "rank", "host", "pid", "state",
                     "step", "phase", "heartbeat", "step time", "open collective");
  if (!health.contains("ranks")) return out;
  for (const auto& r : health["ranks"]) {
    const bool monitored = r.value("monitored", false);
    out += fmt::format(
        "{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {}\n", r.value("rank", -1),
        monitored ? r.value("host", "") : "-", monitored ? std::to_string(r.value("pid", 0)) : "-",
        rank_state(r, hang_timeout_s), monitored && r.value("step", int64_t{-1}) >= 0 ? std::to_string(r.value("step", int64_t{0})) : "-",
        monitored ? r.value("phase", "") : "-",
        monitored ? fmt::format("{:.1f} s", r.value("heartbeat_age_s", 0.0)) : "-",
        monitored && r.value("step_seconds", 0.0) > 0 ? fmt::format("{:.1f} ms", r.value("step_seconds", 0.0) * 1e3) : "-",
        open_collective(r));
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
    if (status.contains("ranks") && status["ranks"].contains("ranks")) {
      const double timeout = status["ranks"].value("hang_timeout_s", 300.0);
      for (auto& r : status["ranks"]["ranks"]) r["state"] = rank_state(r, timeout);
    }
    std::printf("%s\n", status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("%s", render_status(status).c_str());
  }
  return 0;
}

}  // namespace ddp
