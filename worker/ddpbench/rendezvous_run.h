#pragma once
// One rendezvous of N simulated agents on a fresh job: what `ddpbench
// rendezvous` times, and how `ddpbench heartbeats` forms the world whose
// heartbeats it then sends. Each agent: Join -> GetNcclId("world") ->
// Barrier("start"), over a few shared gRPC channels with the callback API,
// so all N are in flight at once without N threads.
//
// Ownership: a run borrows the stubs and the options; both must outlive it.
// Threading: execute() blocks its caller; the calls' callbacks run on gRPC's
// threads and end before execute() returns (every call has a deadline).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddplaunch/v1/coordinator.grpc.pb.h"
#include "rendezvous_bench.h"

namespace ddp::bench {

struct RunResult {
  double total_s = 0, join_s = 0, nccl_id_s = 0, barrier_s = 0;
  double first_join_reply_s = 0;  // about when the world formed
  std::vector<std::string> errors;  // empty: the world was correct
  int64_t peak_rss_bytes = -1;  // the coordinator's VmHWM during the run; -1: unknown
};

/// One agent of a formed world, as its Join reply placed it.
struct JoinedAgent {
  std::string host;
  int node_rank = -1;
  int rank_start = -1;
};

/// `channels` connected stubs to `target` (HOST:PORT). Distinct channel
/// arguments give distinct TCP connections; all are connected (within
/// timeout_s, else std::runtime_error) before any clock starts.
std::vector<std::unique_ptr<::ddplaunch::v1::Coordinator::Stub>> connect_channels(const std::string& target,
                                                                                  int channels, double timeout_s);

class RendezvousRun {
 public:
  /// Agent i uses stubs[i % stubs.size()]; the job id and token are fresh.
  RendezvousRun(const std::vector<std::unique_ptr<::ddplaunch::v1::Coordinator::Stub>>& stubs,
                const RendezvousBenchOptions& options);
  RendezvousRun(const RendezvousRun&) = delete;
  RendezvousRun& operator=(const RendezvousRun&) = delete;

  /// Runs the rendezvous once; the result's errors say whether the world was right.
  RunResult execute();

  const std::string& job_id() const { return job_id_; }
  const std::string& token() const { return token_; }
  /// Every agent's place, in agent order; meaningful after an execute() without errors.
  std::vector<JoinedAgent> joined() const;

 private:
  // One simulated agent: its three calls, each with its own context.
  struct Agent {
    ::ddplaunch::v1::Coordinator::Stub* stub = nullptr;
    grpc::ClientContext join_ctx, id_ctx, barrier_ctx;
    ::ddplaunch::v1::JoinRequest join_req;
    ::ddplaunch::v1::JoinReply join_reply;
    ::ddplaunch::v1::NcclIdRequest id_req;
    ::ddplaunch::v1::NcclIdReply id_reply;
    ::ddplaunch::v1::BarrierRequest barrier_req;
    ::ddplaunch::v1::BarrierReply barrier_reply;
    std::string failure;  // empty: all three calls succeeded
  };

  int64_t mark(std::atomic<int64_t>& latest);
  void start_id(Agent& a);
  void start_barrier(Agent& a);
  void advance(Agent& a, const char* rpc, const grpc::Status& s, std::atomic<size_t>& ended,
               void (RendezvousRun::*start)(Agent&));
  void on_join(Agent& a, const grpc::Status& s);
  void on_id(Agent& a, const grpc::Status& s);
  void on_barrier(Agent& a, const grpc::Status& s);
  void finish_one();
  std::vector<std::string> verify() const;

  const RendezvousBenchOptions& options_;
  std::string job_id_, token_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<size_t> joins_ended_{0}, ids_ended_{0};  // for --phased
  std::atomic<int64_t> first_join_ns_{0}, last_join_ns_{0}, last_id_ns_{0}, last_barrier_ns_{0};
  std::mutex mutex_;
  std::condition_variable done_;
  size_t remaining_ = 0;
};

}  // namespace ddp::bench
