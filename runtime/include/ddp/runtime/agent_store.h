#pragma once
// AgentStore: the job's KV store as a worker reaches it under ddplaunch:
// through its node's agent on the Unix socket in DDPLAUNCH_AGENT_SOCKET, which
// relays to the coordinator. Keys live in the current generation's store, so
// a restarted job starts from an empty one.
//
// Threading: thread-safe (one gRPC channel, blocking calls).

#include <memory>
#include <string>

#include "ddp/common/store.h"

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

  struct Impl;  // the gRPC stub and credentials (shared with the stores it made)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace ddp
