#pragma once
// HangVerdict: what the hang detector found wrong with a job (a silent
// rank, a stuck collective, a desync), as the coordinator reports it on the
// console, in failure.json and in /metrics. Plain data.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp {

enum class HangKind { kSilentRank, kStuckCollective, kDesync };
/// "silent_rank", "stuck_collective", "desync".
const char* to_string(HangKind kind);

struct HangVerdict {
  HangKind kind = HangKind::kStuckCollective;
  std::vector<int> culprits;  // ranks to blame (never entered collective k / silent / desynced), ascending
  std::vector<int> waiting;   // ranks waiting in collective k, ascending
  uint64_t sequence = 0;      // the collective k (0: none)
  std::string op;             // its op where known
  /// Set where k is a collective of a process group other than the default
  /// one (numbered within that group): its name and members.
  std::string group;
  std::vector<int> group_ranks;
  /// ONE line for the console, e.g. "rank 2 (host h, pid 123, step 41, phase
  /// backward) never entered all_reduce #57 (4.0 MiB float32) that ranks
  /// 0,1,3 have waited in for 3.1 s".
  std::string summary;
  /// {"kind", "sequence", "op", "culprits", "waiting", "summary",
  ///  "hang_timeout_s", "seconds_since_progress", "ranks": [per rank: rank,
  ///  monitored, and for monitored ranks node, local_rank, host, pid, step,
  ///  phase, step_seconds, heartbeat_age_s, last_enqueued, last_started,
  ///  last_completed, open_collectives [{sequence, op, bytes, dtype, state,
  ///  age_s}], exited, role ("culprit"/"waiting"/"other"); unmonitored ranks
  ///  carry "note": "no runtime heartbeats: supervised by process state only";
  ///  every rank the agents sampled has "resources" (metrics/resources_json.h)],
  ///  "group" and "group_ranks" where the collective is a subgroup's,
  ///  "resource_notes": what the samples before the verdict show, e.g. "rank 3's
  ///  GPU 0 was at 0% for the 40 s before the hang" (ResourceHistory; absent
  ///  when nothing stands out), "warnings": the warnings given before it
  ///  (TroubleWarnings::recent_json(); absent when none)}
  nlohmann::json details;
};

}  // namespace ddp
