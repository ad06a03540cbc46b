#include "health/subgroup_waits.h"

#include <algorithm>

namespace ddp {
namespace {

bool is_open(const CollectiveSeen& c) { return c.state == "enqueued" || c.state == "started"; }

const SubgroupProgress* find_group(const RankReport& r, const std::string& name) {
  for (const SubgroupProgress& g : r.subgroups) {
    if (g.group == name) return &g;
  }
  return nullptr;
}

}  // namespace

std::optional<SubgroupWait> find_subgroup_wait(const std::vector<SubgroupMember>& members,
                                               const std::vector<int>& among) {
  for (int rank : among) {
    if (rank < 0 || static_cast<size_t>(rank) >= members.size() || !members[static_cast<size_t>(rank)].report) continue;
    for (const SubgroupProgress& g : members[static_cast<size_t>(rank)].report->subgroups) {
      if (!g.open || !is_open(*g.open)) continue;
      const uint64_t k = g.open->sequence;
      SubgroupWait w;
      for (int m : g.ranks) {
        if (m < 0 || static_cast<size_t>(m) >= members.size()) continue;
        const SubgroupMember& member = members[static_cast<size_t>(m)];
        if (!member.report) continue;  // no heartbeats: nothing known, never blamed
        const SubgroupProgress* seen = find_group(*member.report, g.group);
        if (seen && seen->open && seen->open->sequence == k && is_open(*seen->open)) {
          w.waiting.push_back(m);
          w.waited = std::max(w.waited, seen->open->age + member.since_report);
        } else if (!seen || seen->last_enqueued < k) {
          w.missing.push_back(m);
        }
      }
      if (w.missing.empty()) continue;
      w.group = g.group;
      w.group_ranks = g.ranks;
      w.collective = *g.open;
      return w;
    }
  }
  return std::nullopt;
}

}  // namespace ddp
