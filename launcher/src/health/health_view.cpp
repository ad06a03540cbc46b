#include "health/health_view.h"

#include "metrics/resources_json.h"

namespace ddp {

namespace {

constexpr const char* kUnmonitoredNote = "no runtime heartbeats: supervised by process state only";

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

nlohmann::json rank_view_json(const RankView& rank, WallTime wall_now) {
  nlohmann::json j;
  j["rank"] = rank.rank;
  j["monitored"] = rank.monitored;
  if (rank.resources) {
    RankResources as_now = *rank.resources;
    as_now.age = rank.resources_age;
    j["resources"] = resources_to_json(as_now, wall_now);
  }
  if (!rank.warnings.empty()) j["warnings"] = given_json(rank.warnings);
  if (!rank.monitored || !rank.report) {
    j["note"] = kUnmonitoredNote;
    if (rank.exited) j["exited"] = true;
    return j;
  }
  const RankReport& r = *rank.report;
  j["node"] = r.node_rank;
  j["local_rank"] = r.local_rank;
  j["host"] = r.host;
  j["pid"] = r.pid;
  j["step"] = r.step;
  j["phase"] = to_string(r.phase);
  j["step_seconds"] = r.step_seconds;
  j["heartbeat_age_s"] = seconds(rank.heartbeat_age);
  j["last_enqueued"] = r.last_enqueued;
  j["last_started"] = r.last_started;
  j["last_completed"] = r.last_completed;
  j["exited"] = rank.exited;
  const auto collective_json = [&rank](const CollectiveSeen& c) {
    return nlohmann::json{{"sequence", c.sequence}, {"op", c.op},       {"bytes", c.bytes},
                          {"dtype", c.dtype},       {"state", c.state}, {"age_s", seconds(c.age + rank.heartbeat_age)}};
  };
  nlohmann::json open = nlohmann::json::array();
  for (const CollectiveSeen& c : open_collectives(r)) open.push_back(collective_json(c));
  nlohmann::json groups = nlohmann::json::array();
  for (const SubgroupProgress& g : r.subgroups) {
    groups.push_back({{"group", g.group},
                      {"ranks", g.ranks},
                      {"last_enqueued", g.last_enqueued},
                      {"last_completed", g.last_completed}});
    if (!g.open) continue;
    nlohmann::json c = collective_json(*g.open);
    c["group"] = g.group;
    c["group_ranks"] = g.ranks;
    open.push_back(std::move(c));
  }
  j["open_collectives"] = std::move(open);
  if (!groups.empty()) j["subgroups"] = std::move(groups);
  if (!r.peer_waits.empty()) {
    nlohmann::json waits = nlohmann::json::array();
    for (const PeerWait& w : r.peer_waits) {
      waits.push_back({{"op", w.op}, {"peer", w.peer}, {"bytes", w.bytes}, {"age_s", seconds(w.age + rank.heartbeat_age)}});
    }
    j["peer_waits"] = std::move(waits);
  }
  return j;
}

nlohmann::json health_view_json(const HealthView& view) {
  nlohmann::json j;
  int monitored = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankView& rank : view.ranks) {
    if (rank.monitored) ++monitored;
    ranks.push_back(rank_view_json(rank, view.wall_now));
  }
  j["world_size"] = view.ranks.size();
  j["monitored_ranks"] = monitored;
  j["hang_timeout_s"] = seconds(view.hang_timeout);
  j["seconds_since_progress"] = view.since_progress ? nlohmann::json(seconds(*view.since_progress)) : nlohmann::json();
  j["ranks"] = std::move(ranks);
  j["warnings"] = warnings_json(view.recent, view.now);
  j["warnings_total"] = view.warnings_total;
  return j;
}

}  // namespace ddp
