#pragma once
// The per-rank table of a coordinator's status document
// (CoordinatorJob::status_json): one row per rank with host, pid, state,
// step, phase, heartbeat age, step time, CPU%, RSS (GPU utilisation and
// memory once some rank has a GPU sample) and open collective, and the
// job's last warnings. `ddplaunch status` prints them under its job lines;
// `ddplaunch top` refreshes them, cut to the terminal's height.
//
// Threading: pure.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp {

struct RankRow {
  int rank = -1;
  std::string state;  // rank_state(): running, in collective, late, silent, exited, no heartbeats
  bool warned = false;  // a trouble warning was given about it in this generation
  std::string text;     // the row, without a newline
};

struct RankTable {
  std::string header;         // the column names, without a newline
  std::vector<RankRow> rows;  // in the document's order (by rank); none when it has no ranks
};

/// The table of status["ranks"]["ranks"].
/// None while the world forms (state "rendezvous").
RankTable rank_table(const nlohmann::json& status);

/// The health view's last warnings (status["ranks"]["warnings"]), at most
/// `shown` of them, newest last: "warnings (N given in this generation, the
/// last K here):" then "  KIND: SUMMARY; look at: HINT (A s ago)" each,
/// without newlines. None when no warning was given.
std::vector<std::string> warning_lines(const nlohmann::json& status, size_t shown);

/// "job ID: generation G (STATE), restarts U/M, elapsed E s, W rank(s) on N
/// node(s)", without a newline: the first line of `status` and of `top`.
/// While an elastic world forms (state "rendezvous"), W and N are ranges.
std::string job_line(const nlohmann::json& status);

/// While the generation's world forms (state "rendezvous"): "rendezvous: WHO
/// JOINED; no rank runs until the world has formed", without a newline; the
/// rank table then has no rows. nullopt otherwise.
std::optional<std::string> rendezvous_line(const nlohmann::json& status);

}  // namespace ddp
