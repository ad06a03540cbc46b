#pragma once
// The stop request ddplaunch leaves for its ranks when it is asked to stop
// (SIGTERM with --stop-timeout: Slurm's --signal, a Kubernetes eviction): a
// small JSON file at DDPLAUNCH_STOP_FILE, which the ranks look for at each
// step boundary (the runtime's TrainingProgress::stop_requested(), the Python
// companion's ddplaunch.should_stop(), or any program's own check):
//   {"stop_at_step": S, "reason": "...", "requested_at": "2026-...Z"}
// S counts completed steps: a rank stops once it has completed S of them
// (S null: at its next step boundary). All ranks of a lock-step job must stop
// at the same step, or those still going wait in a collective the others
// never join; S is chosen beyond any step a rank can have reached when it
// reads the file (membership/job_stop.h: by the coordinator, for every node).
//
// Threading: free functions, no shared state.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp {

struct StopRequest {
  std::optional<int64_t> stop_at_step;
  std::string reason;
  WallTime requested_at{};
};

std::string stop_request_json(const StopRequest& request);

/// Writes the request to `path` whole (a temporary file renamed into place),
/// so a rank never reads half of it. Throws std::runtime_error.
void write_stop_request(const std::filesystem::path& path, const StopRequest& request);

}  // namespace ddp
