#pragma once
// ddp::init(): how a worker program joins its job, from the environment.
//
// Under ddplaunch (DDPLAUNCH_AGENT_SOCKET set) it registers with the local
// agent, which tells it rank, world and generation, and the ranks meet through
// the coordinator's store. Started by srun, mpirun or torchrun-style env alone
// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), rank 0 serves a TCP store on
// MASTER_PORT as torch.distributed's env:// does. Anything missing is a clear
// error naming the variable.
//
//   auto group = ddp::init();
//   group->collective().all_reduce(t, ddp::ReduceOp::kSum)->wait();
//
// Ownership: the returned ProcessGroup owns the store and the collective.

#include <memory>
#include <stdexcept>
#include <string>

#include "ddp/common/store.h"
#include "ddp/runtime/collective.h"
#include "ddp/runtime/health.h"

namespace ddp {

/// init() could not work out or reach the job; the message says why.
class InitError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct InitOptions {
  /// "auto" (NCCL for CUDA devices when built with it, else Gloo), "gloo" or "nccl".
  std::string backend = "auto";
  Duration timeout = std::chrono::seconds(300);
  /// With neither the agent's nor torchrun-style variables (RANK, WORLD_SIZE)
  /// set: true makes this process rank 0 of a world of 1 (a program run by
  /// hand); false (default) is an InitError naming the missing variable.
  bool allow_single_process = false;
};

class AgentConnection;
class HeartbeatSender;

class ProcessGroup {
 public:
  ProcessGroup();
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int64_t generation = 0;
  /// "ddplaunch agent" or "environment (MASTER_ADDR:MASTER_PORT)".
  std::string source;

  Collective& collective() { return *collective_; }
  /// The same collective, for owners that share it (DistributedDataParallel).
  const std::shared_ptr<Collective>& shared_collective() const { return collective_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  /// Step, phase and step time, for the heartbeats (health.h). Cheap to update.
  TrainingProgress& progress() { return progress_; }
  /// No more heartbeats from this worker (a test aid: a "silent" rank).
  void stop_heartbeats();

 private:
  friend std::unique_ptr<ProcessGroup> init(const InitOptions&);
  std::shared_ptr<Store> store_;
  std::shared_ptr<Collective> collective_;
  TrainingProgress progress_;
  std::unique_ptr<AgentConnection> agent_;
  std::unique_ptr<HeartbeatSender> heartbeat_;  // last: stops before what it reads goes away
};

std::unique_ptr<ProcessGroup> init(const InitOptions& options = {});

/// The local address this machine uses to reach host (no packet is sent);
/// what Gloo binds to so that peers on other nodes can connect back.
std::string local_address_towards(const std::string& host);

}  // namespace ddp
