#include "cli/status_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cli/job_selection.h"
#include "cli/rank_table.h"
#include "cli/sync_state_text.h"
#include "health/rank_state.h"

namespace ddp {
namespace {

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
  std::string out = job_line(s) + "\n";
  if (s.contains("failure")) out += fmt::format("failure: {}\n", s["failure"].get<std::string>());
  if (const auto forming = rendezvous_line(s)) return out + *forming + "\n";
  out += render_membership(s);
  if (s.contains("sync")) out += sync_state_lines(s["sync"]);
  const RankTable table = rank_table(s);
  out += table.header + "\n";
  for (const RankRow& row : table.rows) out += row.text + "\n";
  for (const std::string& line : warning_lines(s, 10)) out += line + "\n";
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
