#pragma once
// What one worker's heartbeat says about it, as the coordinator's health view
// keeps it: rank and where it runs, training progress (step, phase, last step
// time) and the tail of its collective flight record; with it, the agent's
// latest sample of the rank's process and GPUs (metrics/rank_resources.h).
// Plain data, no gRPC: the service adapter converts the protocol messages
// into these.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "metrics/rank_resources.h"

namespace ddp {

enum class WorkerPhase { kUnknown = 0, kData, kForward, kBackward, kOptimizer, kCheckpoint, kCollective, kOther };
const char* to_string(WorkerPhase phase);

/// A collective in a rank's recent flight record.
struct CollectiveSeen {
  uint64_t sequence = 0;
  std::string op;      // "all_reduce", "broadcast", ...; empty or "unknown": not observed
  int64_t bytes = 0;   // 0: unknown (a DDP bucket seen only by its sequence number)
  std::string dtype;   // "float32", ...; empty: unknown
  std::string state;   // "enqueued", "started", "completed", "failed"
  Duration age{};      // since it was enqueued, as of the heartbeat
};

/// Whether `op` names what the rank called: a Python rank reports a sequence
/// number it saw pass without seeing the call (an unwrapped collective) as
/// "unknown", and such an entry matches any op.
inline bool collective_op_known(const std::string& op) { return !op.empty() && op != "unknown"; }

/// A point-to-point call the rank has in flight (send, recv, isend, irecv,
/// batch_isend_irecv: the Python companion's point_to_point.py): the peer it
/// waits for. A blocking call is in flight until it returns, an asynchronous
/// one until its Work completes.
struct PeerWait {
  std::string op;       // "send", "recv", "isend" or "irecv"
  int peer = -1;        // the peer's global rank; -1: any (a recv without src)
  int64_t bytes = 0;    // of its tensor
  Duration age{};       // how long it had been in flight when the report was made
};

/// A Python rank's count of the collectives it called on one process group
/// other than the default one (dist.new_group): torch's own counter of that
/// group where the companion saw it made, else the companion's count of the
/// calls; every member calls them in the same order, so the numbers match
/// across members. Not part of the default group's sequence.
struct SubgroupProgress {
  std::string group;         // torch's name for the group, alike on every member
  std::vector<int> ranks;    // its members' global ranks, ascending; empty: not known yet
  uint64_t last_enqueued = 0;
  uint64_t last_completed = 0;
  /// The oldest of its collectives the rank has open; where none is, the
  /// last one if it failed (state "failed": a rank whose collective raised
  /// on a mismatch is still compared with the others).
  std::optional<CollectiveSeen> open;
  /// Its last calls on the group, oldest first: a call whose signature
  /// differs across members may still complete (Gloo reduces 4 bytes of
  /// int32 against 4 of float32), and only these then show it.
  std::vector<CollectiveSeen> recent;
};

struct RankReport {
  int rank = -1;
  int node_rank = -1;
  int local_rank = -1;
  std::string host;
  int pid = 0;
  int64_t step = -1;               // -1: the program does not report steps
  WorkerPhase phase = WorkerPhase::kUnknown;
  double step_seconds = 0;         // the last finished step's duration, 0: unknown
  double busy_seconds = 0;         // ... less its waits for other ranks, 0: unknown
  /// Of busy_seconds, the time in spans where waits for other ranks hide
  /// among the work (DDP's forward and backward, seen by the Python
  /// companion): the straggler rule takes the least of it across ranks as
  /// the work (trouble_warnings.h). 0: none.
  double sync_seconds = 0;
  uint64_t last_enqueued = 0;      // flight-record sequence numbers
  uint64_t last_started = 0;
  uint64_t last_completed = 0;
  std::vector<CollectiveSeen> recent;  // the last few collectives, oldest first
  std::vector<SubgroupProgress> subgroups;  // the groups it used last (Python ranks only)
  std::vector<PeerWait> peer_waits;          // its point-to-point calls in flight, oldest first (Python ranks only)
  uint64_t peer_calls_done = 0;    // ... and those completed so far: a change is progress
                                   // (a script whose ranks only send and receive)
  bool exiting = false;            // its last heartbeat: the worker is leaving
  uint64_t activity = 0;           // phases gone through so far: a change says it works
                                   // (an evaluation loop: no step, no collective)
  uint64_t announced = 0;          // Python companion: collectives it had announced when this
                                   // report was made (collective_announcements.h)
  /// The agent's latest sample of the rank's process and GPUs, where it took one.
  std::optional<RankResources> resources;
  /// Not a heartbeat: only `resources` (and rank, pid) mean anything. How
  /// an agent forwards the sample of a rank that sends no heartbeats (a
  /// plain script); the health view must not count it as one.
  bool resources_only = false;
};

/// The collectives a rank has open (issued, not completed), ascending. When
/// the flight-record tail shows none although last_enqueued is above
/// last_completed, the next one is open with its details unknown.
std::vector<CollectiveSeen> open_collectives(const RankReport& r);

/// The collectives the rank finished on its subgroups, all together: a
/// change is progress.
uint64_t subgroup_completed(const RankReport& r);

/// Where the heartbeat found the rank: kCollective when it had a collective
/// open (it waits for its peers or the network), else its phase.
WorkerPhase activity_of(const RankReport& r);

}  // namespace ddp
