#pragma once
// HealthView: the health view of every rank, copied out of HangDetector
// under CoordinatorJob's mutex and turned into JSON after the mutex is
// released. `ddplaunch status`, /status.json and /metrics ask for it; at
// 16,384 ranks building their JSON takes tens of milliseconds, and doing
// that under the job's mutex held up every heartbeat behind a scrape.
//
// The copy is cheap: a rank's last report and last resource sample are
// immutable once received and shared (shared_ptr<const>), so copying a rank
// costs two reference counts and a few scalars. Nothing else refers to the
// detector: a HealthView can be formatted on any thread, any time later.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "health/rank_health.h"
#include "health/trouble_warnings.h"
#include "metrics/rank_resources.h"

namespace ddp {

/// One rank as the health view shows it.
struct RankView {
  int rank = -1;
  bool monitored = false;  // sent a heartbeat in this generation
  bool exited = false;
  std::shared_ptr<const RankReport> report;  // its last heartbeat; null when not monitored
  Duration heartbeat_age{};                  // since that heartbeat was made
  std::shared_ptr<const RankResources> resources;  // its last sample; null when none
  Duration resources_age{};                        // since that sample was taken
  std::vector<GivenWarning> warnings;              // kinds given about it (mostly none)
};

struct HealthView {
  SteadyTime now{};     // when the copy was made
  WallTime wall_now{};  // ... on the wall clock, for the samples' times
  Duration hang_timeout{};
  std::optional<Duration> since_progress;  // none until some rank sent a heartbeat
  std::vector<RankView> ranks;             // by rank
  std::vector<TroubleWarning> recent;      // TroubleWarnings::recent(), oldest first
  uint64_t warnings_total = 0;
};

/// One rank's entry: {"rank", "monitored", "resources" (when sampled),
/// "warnings" (when any), then for unmonitored ranks "note" (and "exited"
/// once exited), for monitored ones "node", "local_rank", "host", "pid",
/// "step", "phase", "step_seconds", "heartbeat_age_s", "last_enqueued",
/// "last_started", "last_completed", "exited", "open_collectives" (the
/// default group's, then one per subgroup with "group" and "group_ranks"),
/// "subgroups" (when any: [{"group", "ranks", "last_enqueued",
/// "last_completed"}]), "peer_waits" (when any: [{"op", "peer", "bytes",
/// "age_s"}], the sends and receives it has in flight)}.
nlohmann::json rank_view_json(const RankView& rank, WallTime wall_now);

/// The whole view, as HangDetector::snapshot() documents it.
nlohmann::json health_view_json(const HealthView& view);

}  // namespace ddp
