#include "health/rank_health.h"

#include <algorithm>

namespace ddp {

const char* to_string(WorkerPhase phase) {
  switch (phase) {
    case WorkerPhase::kUnknown: return "unknown";
    case WorkerPhase::kData: return "data";
    case WorkerPhase::kForward: return "forward";
    case WorkerPhase::kBackward: return "backward";
    case WorkerPhase::kOptimizer: return "optimizer";
    case WorkerPhase::kCheckpoint: return "checkpoint";
    case WorkerPhase::kCollective: return "collective";
    case WorkerPhase::kOther: return "other";
  }
  return "unknown";
}

namespace {
bool is_open_state(const std::string& state) { return state == "enqueued" || state == "started"; }
}  // namespace

std::vector<CollectiveSeen> open_collectives(const RankReport& r) {
  std::vector<CollectiveSeen> out;
  for (const CollectiveSeen& c : r.recent) {
    if (c.sequence > r.last_completed && is_open_state(c.state)) out.push_back(c);
  }
  if (out.empty() && r.last_enqueued > r.last_completed) {
    CollectiveSeen c;
    c.sequence = r.last_completed + 1;
    c.state = r.last_started > r.last_completed ? "started" : "enqueued";
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(),
            [](const CollectiveSeen& a, const CollectiveSeen& b) { return a.sequence < b.sequence; });
  return out;
}

uint64_t subgroup_completed(const RankReport& r) {
  uint64_t total = 0;
  for (const SubgroupProgress& g : r.subgroups) total += g.last_completed;
  return total;
}

WorkerPhase activity_of(const RankReport& r) {
  return r.phase == WorkerPhase::kCollective || !open_collectives(r).empty() ? WorkerPhase::kCollective : r.phase;
}

}  // namespace ddp
