#pragma once
// What a node reports when its workers have ended (or what the coordinator
// records for a node that went silent).

#include <cstdint>
#include <string>

namespace ddp {

struct NodeOutcome {
  int node_rank = 0;
  bool success = false;
  bool stopped = false;  // ended on the coordinator's order, not by a failure of its own
  /// The node's agent is going away (it was signalled): it will not join the
  /// next generation, so an elastic job goes on without it.
  bool leaving = false;
  int exit_code = 0;
  int failed_rank = -1;
  /// When the failing rank's exit was seen, in milliseconds since the Unix
  /// epoch on its node's clock; 0: unknown. Outcomes arrive as each agent
  /// finishes stopping its node, not in the order their ranks failed, so the
  /// coordinator orders failures by this.
  int64_t failed_at_unix_ms = 0;
  std::string description;
};

/// Whether `a` is a failure seen before failure `b` (both times known).
inline bool failed_earlier(const NodeOutcome& a, const NodeOutcome& b) {
  return a.failed_at_unix_ms > 0 && b.failed_at_unix_ms > 0 && a.failed_at_unix_ms < b.failed_at_unix_ms;
}

}  // namespace ddp
