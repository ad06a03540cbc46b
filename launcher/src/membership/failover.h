#pragma once
// Coordinator failover: the rules that keep a job to one copy when its
// coordinator's node is lost and the next endpoint of --rdzv-endpoint
// (HOST1:PORT,HOST2:PORT,...) takes over. Pure functions, unit-tested.
//
// Each endpoint's coordinator has an epoch: its place in the list. Agents
// move only forward through the list, and every call carries the caller's
// epoch; a coordinator that hears a later epoch has been replaced, so it ends
// its copy of the job (the agent hosting a takeover tells the earlier entries
// once its world forms). The rules below are what keeps a partitioned side
// from going on in the meantime.
//
// A partition looks, from each side, like the other side's death. So while a
// later endpoint could still take over (epoch + 1 < endpoints), a side keeps
// the job only with a majority of the nodes of the last generation:
// - the coordinator's own side needs more than half (it re-forms after a node
//   is lost only then, even when MIN would allow fewer);
// - the side that fails over to the next endpoint needs at least half (at
//   exactly half, it wins: the other half holds the old coordinator);
// - a side that had to skip an endpoint (its host was unreachable too) needs
//   more than half, as the coordinator's side does.
// At the last endpoint nobody can take over any more, and the plain elastic
// rules (MIN) apply alone.

#include <cstdint>

namespace ddp {

/// What a coordinator taking over a job is told: everything every agent
/// already knows of it. The job's configuration comes from the agent's own
/// command line.
struct Takeover {
  int epoch = 1;               // the new coordinator's place in the endpoint list
  int skipped = 0;             // endpoints skipped on the way (their hosts were unreachable)
  int64_t generation = 1;      // the first generation formed here: the lost coordinator's last one + 1
  int restarts_used = 0;       // of the job's max_restarts
  int previous_nnodes = 1;     // nodes of the lost coordinator's last generation
};

/// Whether a later endpoint could still take the job over from epoch.
inline bool majority_needed(int epoch, int endpoints) { return epoch + 1 < endpoints; }

/// The coordinator's own side: survivors of a world of world_nnodes keep the job.
inline bool keeps_majority(int survivors, int world_nnodes) { return 2 * survivors > world_nnodes; }

/// The fewest nodes a coordinator taking over must gather before the job goes
/// on there (at least 1).
int takeover_quorum(const Takeover& takeover);

}  // namespace ddp
