#include "cli/rank_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "health/peer_waits.h"
#include "health/rank_state.h"
#include "output/byte_size.h"

namespace ddp {
namespace {

// A rank in no collective may wait in a send or receive (a pipeline's stage):
// "recv from 0 (2.0 KiB, 5.2 s)".
std::string peer_wait(const nlohmann::json& r) {
  if (!r.contains("peer_waits") || r["peer_waits"].empty()) return "-";
  const auto& w = r["peer_waits"].front();
  const std::string op = w.value("op", "?");
  const int peer = w.value("peer", -1);
  const int64_t bytes = w.value("bytes", int64_t{0});
  return fmt::format("{} {} {} ({}{:.1f} s)", op, peer_direction(op), peer < 0 ? std::string("any") : std::to_string(peer),
                     bytes > 0 ? format_bytes(bytes) + ", " : std::string(), w.value("age_s", 0.0));
}

std::string open_collective(const nlohmann::json& r) {
  if (!r.contains("open_collectives") || r["open_collectives"].empty()) return peer_wait(r);
  const auto& c = r["open_collectives"].front();
  const std::string group = c.contains("group") ? " group " + c.value("group", std::string()) : std::string();
  // Size and dtype where the rank knew them: a DDP bucket all-reduce seen
  // only through the group's counter (torch 1.13) has neither.
  std::string what;
  if (const auto bytes = c.value("bytes", int64_t{0}); bytes > 0) what = format_bytes(bytes);
  if (const auto dtype = c.value("dtype", std::string()); !dtype.empty()) what += (what.empty() ? "" : " ") + dtype;
  return fmt::format("{} #{}{} ({}{:.1f} s)", c.value("op", "?"), c.value("sequence", 0), group,
                     what.empty() ? what : what + ", ", c.value("age_s", 0.0));
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

// The generation's world is still forming: no rank runs yet.
bool forming(const nlohmann::json& s) { return s.value("state", "") == "rendezvous"; }

}  // namespace

std::string job_line(const nlohmann::json& s) {
  std::string world = fmt::format("{} rank(s) on {} node(s)", s.value("world_size", 0), s.value("nnodes", 0));
  const nlohmann::json range = s.value("nnodes_range", nlohmann::json());
  if (forming(s) && range.is_array() && range.size() == 2 && s.value("nnodes", 0) > 0) {
    // An elastic world still forming has as many nodes as will have joined.
    const int per_node = s.value("world_size", 0) / s.value("nnodes", 1);
    const int fewest = range[0].get<int>();
    const int most = range[1].get<int>();
    world = fmt::format("{}..{} rank(s) on {}..{} node(s)", fewest * per_node, most * per_node, fewest, most);
  }
  return fmt::format("job {}: generation {} ({}), restarts {}/{}, elapsed {:.1f} s, {}", s.value("job_id", "?"),
                     s.value("generation", 0), s.value("state", "?"), s.value("restarts_used", 0),
                     s.value("max_restarts", 0), s.value("elapsed_s", 0.0), world);
}

std::optional<std::string> rendezvous_line(const nlohmann::json& s) {
  if (!forming(s)) return std::nullopt;
  return fmt::format("rendezvous: {}; no rank runs until the world has formed", s.value("rendezvous", "waiting"));
}

RankTable rank_table(const nlohmann::json& s) {
  const nlohmann::json& health = s.contains("ranks") ? s["ranks"] : nlohmann::json::object();
  const double hang_timeout_s = health.value("hang_timeout_s", 300.0);
  // The resource columns sit before the open collective, the free-form last
  // column; the GPU ones only when some rank has a GPU sample.
  bool gpus = false;
  if (health.contains("ranks")) {
    for (const auto& r : health["ranks"]) gpus = gpus || has_gpus(r);
  }
  const auto gpu_columns = [gpus](const std::string& util, const std::string& mem) {
    return gpus ? fmt::format("{:>9}  {:>19}  ", util, mem) : std::string();
  };
  RankTable table;
  table.header = fmt::format("{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {:>5}  {:>10}  {}{}", "rank",
                             "host", "pid", "state", "step", "phase", "heartbeat", "step time", "cpu", "rss",
                             gpu_columns("gpu util", "gpu mem"), "open collective");
  if (!health.contains("ranks") || forming(s)) return table;  // forming: no rank runs yet
  for (const auto& r : health["ranks"]) {
    const bool monitored = r.value("monitored", false);
    RankRow row;
    row.rank = r.value("rank", -1);
    row.state = rank_state(r, hang_timeout_s);
    row.warned = r.contains("warnings") && !r["warnings"].empty();
    row.text = fmt::format(
        "{:>5}  {:<16} {:>8}  {:<13} {:>8}  {:<10} {:>9}  {:>10}  {:>5}  {:>10}  {}{}", row.rank,
        monitored ? r.value("host", "") : "-", monitored ? std::to_string(r.value("pid", 0)) : sampled_pid(r),
        row.state, monitored && r.value("step", int64_t{-1}) >= 0 ? std::to_string(r.value("step", int64_t{0})) : "-",
        monitored ? r.value("phase", "") : "-",
        monitored ? fmt::format("{:.1f} s", r.value("heartbeat_age_s", 0.0)) : "-",
        monitored && r.value("step_seconds", 0.0) > 0 ? fmt::format("{:.1f} ms", r.value("step_seconds", 0.0) * 1e3) : "-",
        cpu_column(r), rss_column(r), gpu_columns(gpu_util_column(r), gpu_mem_column(r)), open_collective(r));
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::vector<std::string> warning_lines(const nlohmann::json& s, size_t shown) {
  if (!s.contains("ranks") || !s["ranks"].is_object()) return {};
  const nlohmann::json& health = s["ranks"];
  if (!health.contains("warnings") || !health["warnings"].is_array() || health["warnings"].empty()) return {};
  const nlohmann::json& list = health["warnings"];
  const uint64_t total = health.value("warnings_total", static_cast<uint64_t>(list.size()));
  std::vector<std::string> lines{fmt::format("warnings ({} given in this generation{}):", total,
                                             total > shown ? fmt::format(", the last {} here", shown) : std::string())};
  for (size_t i = list.size() > shown ? list.size() - shown : 0; i < list.size(); ++i) {
    const nlohmann::json& w = list[i];
    lines.push_back(fmt::format("  {}: {}; look at: {} ({:.0f} s ago)", w.value("kind", "?"), w.value("summary", ""),
                                w.value("look_at", "-"), w.value("age_s", 0.0)));
  }
  return lines;
}

}  // namespace ddp
