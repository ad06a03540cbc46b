#pragma once
// Which member of a process group other than the default one (dist.new_group)
// holds up a collective on it: the hang detector's second look when the rank
// it would blame is itself waiting in a subgroup collective. Python ranks
// report their subgroups' counts (RankReport::subgroups); every member calls
// a group's collectives in the same order, so a member whose count is below
// the collective's number never entered it.
// Threading: free functions over the caller's data, no shared state.

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "health/rank_health.h"

namespace ddp {

/// What the search sees of one rank.
struct SubgroupMember {
  const RankReport* report = nullptr;  // its last report; null: it sent no heartbeat
  Duration since_report{};             // how long ago that report was made (an exited rank's last one counts)
};

/// A subgroup collective some members wait in and others never entered.
struct SubgroupWait {
  std::string group;
  std::vector<int> group_ranks;  // the group's members, ascending
  CollectiveSeen collective;     // its sequence counts that group's collectives
  std::vector<int> waiting;      // members with it open, ascending
  std::vector<int> missing;      // members that never entered it, ascending
  Duration waited{};             // the longest wait in it so far
};

/// Looks at the subgroup collectives held open by the ranks in `among`
/// (ascending) and returns the first that a member never entered: a member
/// that reported the group with a count below the collective's number, or
/// never reported the group while it reports heartbeats (members that send
/// none are not blamed). `members` is indexed by rank. nullopt: none found.
std::optional<SubgroupWait> find_subgroup_wait(const std::vector<SubgroupMember>& members,
                                               const std::vector<int>& among);

}  // namespace ddp
