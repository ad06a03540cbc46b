#pragma once
// The AgentHeartbeatRequest one simulated agent of `ddpbench heartbeats`
// sends: what a real agent of a training job sends each interval. One
// WorkerHeartbeat per local rank, each with the 16 newest collectives the
// runtime's heartbeat carries (runtime/src/heartbeat_sender.cpp), and, with
// resources, one RankResources per rank as the agent's sampler fills it
// (/proc figures and GPUs with every NVML field a healthy GPU reports).
// Every rank looks alike (busy GPUs, steps moving on), so the coordinator's
// health rules find nothing to warn about: the load is the steady state.
//
// Threading: none; its owner must not change it while a call sends it.

#include <cstdint>
#include <string>

#include "ddplaunch/v1/coordinator.pb.h"

namespace ddp::bench {

struct PayloadShape {
  int nproc = 8;           // local ranks of the agent
  int gpus_per_rank = 1;   // GPU samples per rank (with resources)
  bool resources = true;   // false: heartbeats as before RankResources existed
};

class AgentPayload {
 public:
  AgentPayload(const std::string& job_id, const std::string& token, const std::string& host, int node_rank,
               int rank_start, const PayloadShape& shape);

  /// The request of the agent's beat-th heartbeat (0, 1, ...): steps,
  /// collectives and counters moved on, ages changed. Fields are rewritten
  /// in place, so a beat costs no allocation.
  const ::ddplaunch::v1::AgentHeartbeatRequest& at_beat(int64_t beat);

 private:
  ::ddplaunch::v1::AgentHeartbeatRequest req_;
};

}  // namespace ddp::bench
