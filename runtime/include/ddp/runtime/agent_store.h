#pragma once
// AgentStore: the job's KV store as a worker reaches it under ddplaunch:
// through its node's agent on the Unix socket in DDPLAUNCH_AGENT_SOCKET, which
// relays to the coordinator. Keys live in the current generation's store, so
// a restarted job starts from an empty one.
//
// Threading: thread-safe (one gRPC channel, blocking calls).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/store.h"
#include "ddp/runtime/flight_recorder.h"
#include "ddp/runtime/health.h"

namespace ddp {

/// What the agent told this worker at registration.
struct AgentRegistration {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int64_t generation = 0;
  std::string master_addr;
  int master_port = 0;
};

/// One heartbeat of this worker (see health.h).
struct WorkerHeartbeatData {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  int64_t generation = 0;
  int64_t step = -1;
  std::string phase = "unknown";
  double step_seconds = 0;
  double busy_seconds = 0;
  uint64_t last_enqueued = 0;
  uint64_t last_started = 0;
  uint64_t last_completed = 0;
  std::vector<CollectiveRecord> recent;  // oldest first
  bool exiting = false;                  // the last heartbeat: this worker is leaving
  uint64_t activity = 0;                 // TrainingProgress::activity()
  /// Every thread's stack, set in the first heartbeat after the launcher
  /// asked for them (dump_all_thread_stacks()); sent as RankStacks with this
  /// heartbeat's rank. Plain data owned by this struct: the sender keeps its
  /// own copy until a heartbeat carrying it got through.
  std::optional<ProcessStacks> stacks;
};

class AgentConnection {
 public:
  /// socket_path: DDPLAUNCH_AGENT_SOCKET; job_id/token: DDPLAUNCH_JOB_ID/TOKEN.
  AgentConnection(const std::string& socket_path, std::string job_id, std::string token);
  ~AgentConnection();

  /// Registers rank with the agent; throws StoreError when refused or unreachable.
  AgentRegistration register_rank(int rank, Duration timeout);
  /// The job's store for generation (from the registration).
  std::shared_ptr<Store> store(int64_t generation);
  /// The NCCL unique id (128 bytes) the coordinator hands out for
  /// (generation, comm_key): the same bytes for every rank that asks. Throws
  /// StoreError when refused, unreachable or past timeout.
  std::string nccl_unique_id(int64_t generation, const std::string& comm_key, Duration timeout);

  /// Sends one heartbeat (with heartbeat.stacks when set); returns true when
  /// the launcher asks this worker to dump its threads' stacks. Throws
  /// StoreError when refused or unreachable.
  bool send_heartbeat(const WorkerHeartbeatData& heartbeat, Duration timeout);

  struct Impl;  // the gRPC stub and credentials (shared with the stores it made)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp
