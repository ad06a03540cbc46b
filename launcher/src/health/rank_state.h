#pragma once
// A rank's state in words, from its object in the coordinator's status JSON
// (CoordinatorJob::status_json, "ranks"."ranks"): what `ddplaunch status`
// prints and what `status --json` and the metrics port's /status.json carry.
// Pure.

#include <string>

#include <nlohmann/json.hpp>

namespace ddp {

/// running, in collective, late (no heartbeat for half the hang timeout),
/// silent (for all of it), exited, or no heartbeats (not monitored).
std::string rank_state(const nlohmann::json& rank, double hang_timeout_s);

/// Adds "state" to every rank of a status document; a document without
/// ranks is left as it is.
void add_rank_states(nlohmann::json& status);

}  // namespace ddp
