#include "cli/sync_state_text.h"

#include <fmt/format.h>

#include "output/byte_size.h"

namespace ddp {
namespace {

bool well_formed(const nlohmann::json& state) {
  return state.is_object() && state.contains("targets") && state["targets"].is_array();
}

}  // namespace

std::string sync_state_lines(const nlohmann::json& state) {
  if (!well_formed(state)) return "";
  std::string out;
  for (const auto& t : state["targets"]) {
    if (!t.is_object()) continue;
    std::string speed;
    if (t.contains("bytes_per_second") && t["bytes_per_second"].is_number()) {
      speed = fmt::format(" at {}/s", format_bytes(static_cast<int64_t>(t["bytes_per_second"].get<double>())));
    }
    out += fmt::format("sync {}: {} uploaded ({}{}), {} pending", t.value("target", "?"), t.value("uploaded", 0),
                       format_bytes(t.value("uploaded_bytes", int64_t{0})), speed, t.value("pending", 0));
    const nlohmann::json failing = t.value("failing", nlohmann::json::array());
    if (failing.is_array() && !failing.empty()) {
      const nlohmann::json& first = failing.front();
      out += fmt::format(", {} failing ({}: {})", failing.size(), first.value("path", "?"),
                         first.value("last_error", ""));
    }
    if (t.value("deleted", 0) > 0) out += fmt::format(", {} deleted", t.value("deleted", 0));
    out += '\n';
  }
  return out;
}

std::string sync_state_cell(const nlohmann::json& state) {
  if (!well_formed(state) || state["targets"].empty()) return "-";
  int uploaded = 0;
  int pending = 0;
  size_t failing = 0;
  for (const auto& t : state["targets"]) {
    if (!t.is_object()) continue;
    uploaded += t.value("uploaded", 0);
    pending += t.value("pending", 0);
    const nlohmann::json f = t.value("failing", nlohmann::json::array());
    if (f.is_array()) failing += f.size();
  }
  std::string cell = fmt::format("{} up, {} pending", uploaded, pending);
  if (failing > 0) cell += fmt::format(", {} failing", failing);
  return cell;
}

}  // namespace ddp
