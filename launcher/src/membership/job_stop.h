#pragma once
// A job-wide stop at a step boundary (preemption): one agent is asked to stop
// (SIGTERM with --stop-timeout), the coordinator chooses one step count for
// every rank of the job, and every agent hands it to its ranks (the stop file,
// job/stop_request.h). Every rank of a lock-step job must stop after the same
// step, or those still going wait in a collective the others never join.
//
// Threading: plain values and a pure function.

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "health/rank_health.h"

namespace ddp {

struct JobStop {
  /// The longest stop_timeout a message may carry (longer ones are cut to it).
  static constexpr int64_t kMaxStopTimeoutMs = int64_t{24} * 3600 * 1000;

  std::optional<int64_t> stop_at_step;  // nullopt: each rank at its next step boundary
  std::string reason;                   // e.g. "SIGTERM to ddplaunch on node 1 (h1)"
  Duration stop_timeout{};              // then the ranks still running are signalled
  // The coordinator has not chosen yet (no rank reported a step count so
  // far); the choice reaches every agent with its heartbeats. Only the
  // answer to the agent that asked for the stop carries it.
  bool pending = false;
};

/// A stop asked for before any rank reported a step count. Choosing "each
/// rank at its next step boundary" then would stop the ranks of a lock-step
/// job after different steps (those still going wait in a collective the
/// others never join), so the choice waits for the first report of steps, or
/// until `deadline` for programs that report none.
struct PendingJobStop {
  JobStop stop;
  SteadyTime deadline{};
};

/// The step count at which every rank should stop: the most any rank has
/// reached by its last report, plus the steps one can complete in `lag` at the
/// fastest step time known (reports are late, and the request takes time to
/// reach every rank), plus one. The fastest step time is the least of the
/// reports' and `fastest_seen` (seconds, 0: none), the fastest any rank
/// reported before: a last report of one slow step (an evaluation, a
/// checkpoint) would let the ranks pass the step before they read it. With
/// no step time at all, two steps of margin. nullopt when no rank reports
/// steps.
std::optional<int64_t> choose_stop_step(const std::vector<RankReport>& reports, Duration lag,
                                        double fastest_seen = 0);

/// The stop decided once a rank reports steps and a step time
/// (choose_stop_step); at the deadline, with steps but no step time, or at
/// the next step boundary when no rank reports steps. nullopt: keep waiting.
/// A report of steps without a step time is of the first step (a rank knows
/// how long a step takes once it completed two), and the steps after it may
/// take milliseconds each: a margin of two steps chosen then is passed
/// before the ranks read it, and they stop after different steps.
std::optional<JobStop> decide_job_stop(const PendingJobStop& pending, const std::vector<RankReport>& reports,
                                       Duration lag, SteadyTime now, double fastest_seen = 0);

}  // namespace ddp
