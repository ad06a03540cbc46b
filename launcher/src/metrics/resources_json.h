#pragma once
// The JSON form of a rank's resource sample, as `ddplaunch status --json`
// shows it under each rank's "resources" (and failure.json and the hang
// report keep it). These names are the interface other views read (the
// coordinator's HTTP metrics among them): keep them stable.
//
//   {"pid", "age_s", "sampled_at" (ISO-8601 UTC), "process_gone",
//    "cpu_percent", "rss_bytes", "threads", "voluntary_ctx_switches",
//    "nonvoluntary_ctx_switches", "written_bytes", "dirtied_bytes",
//    "gpus": [{"index", "uuid", "util_percent", "mem_used_bytes",
//              "mem_total_bytes", "rank_mem_bytes", "temperature_c",
//              "power_w", "sm_clock_mhz", "throttle_reasons": [...],
//              "xid_errors", "last_xid", "ecc_errors"}]}
//
// A figure that was not measured is left out (never written as 0); "gpus" is
// always there (empty: no GPU seen for the rank, or no NVML).

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "metrics/rank_resources.h"

namespace ddp {

/// r as of `now` (a wall time, for "sampled_at"), r.age old then.
nlohmann::json resources_to_json(const RankResources& r, WallTime now);

}  // namespace ddp
