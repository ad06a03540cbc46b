#include "health/rank_state.h"

namespace ddp {

std::string rank_state(const nlohmann::json& r, double hang_timeout_s) {
  if (!r.value("monitored", false)) return r.value("exited", false) ? "exited" : "no heartbeats";
  if (r.value("exited", false)) return "exited";
  const double age = r.value("heartbeat_age_s", 0.0);
  if (age > hang_timeout_s) return "silent";
  if (age > hang_timeout_s / 2) return "late";
  const bool in_collective =
      r.contains("open_collectives") && r["open_collectives"].is_array() && !r["open_collectives"].empty();
  return in_collective ? "in collective" : "running";
}

void add_rank_states(nlohmann::json& status) {
  if (!status.is_object() || !status.contains("ranks") || !status["ranks"].is_object()) return;
  nlohmann::json& ranks = status["ranks"];
  if (!ranks.contains("ranks") || !ranks["ranks"].is_array()) return;
  const double timeout = ranks.value("hang_timeout_s", 300.0);
  for (auto& r : ranks["ranks"]) {
    if (r.is_object()) r["state"] = rank_state(r, timeout);
  }
}

}  // namespace ddp
