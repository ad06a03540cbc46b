#pragma once
// What a node reports when its workers have ended (or what the coordinator
// records for a node that went silent).

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
  std::string description;
};

}  // namespace ddp
