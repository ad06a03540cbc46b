#pragma once
// CoordinatorClient: an agent's (or a benchmark's) calls to the coordinator,
// as plain blocking functions returning ddp::Status. Every call carries the
// job id and token and has a deadline.
//
// Threading: thread-safe (gRPC stubs are); one channel, many callers;
// retarget() may run while other threads call.

#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <optional>
#include <string>

#include "coordinator/connection_diagnosis.h"
#include "coordinator/coordinator_calls.h"
#include "coordinator/coordinator_job.h"
#include "coordinator/coordinator_server.h"
#include "ddplaunch/v1/coordinator.grpc.pb.h"

namespace ddp {

class CoordinatorClient final : public CoordinatorCalls {
 public:
  /// target: "host:port". tls: client certificate and CA (cert may be empty
  /// for server-only TLS: ca then verifies the coordinator).
  CoordinatorClient(const std::string& target, const std::string& job_id, const std::string& token,
                    const TlsFiles& tls = {});
  /// Over an existing channel (e.g. CoordinatorServer::in_process_channel()).
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel, const std::string& job_id, const std::string& token);
  ~CoordinatorClient() override;

  /// Waits for the world to form. should_abort is polled while waiting (every
  /// 100 ms); when it returns true the join is cancelled (Cancelled). Logs a
  /// progress line every 5 s; while the coordinator cannot be reached, that
  /// line and the final error say why (ConnectionDiagnosis).
  Status join(const JoinParams& params, int max_restarts, Duration timeout, JoinResult& result,
              const std::function<bool()>& should_abort = {}) override;
  /// See CoordinatorCalls::heartbeat.
  Status heartbeat(int node_rank, int64_t generation, Duration timeout, const std::vector<ForwardedReport>& workers,
                   std::vector<int>* dump_ranks, const std::vector<RankStacks>& stacks,
                   std::optional<JobStop>* stop) override;
  Status heartbeat(int node_rank, int64_t generation, Duration timeout) {
    return heartbeat(node_rank, generation, timeout, {}, nullptr, {}, nullptr);
  }
  Status request_stop(int node_rank, int64_t generation, const std::string& reason, Duration stop_timeout,
                      Duration timeout, JobStop& stop) override;
  /// The job's health view as JSON (CoordinatorJob::status_json).
  Status status(Duration timeout, std::string& json);
  /// Every rank's stacks now, merged (CoordinatorJob::collect_stacks); the
  /// ranks get `wait` to answer.
  Status stacks(Duration wait, std::string& json);
  Status report_outcome(int64_t generation, const NodeOutcome& outcome, Duration timeout) override;
  Status watch(int node_rank, int64_t generation, GenerationState known, Duration timeout, GenerationView& view,
               CancelToken* cancel = nullptr) override;
  Status nccl_id(int64_t generation, const std::string& comm_key, Duration timeout, std::string& id);
  Status barrier(int64_t generation, const std::string& name, int participants, Duration timeout);
  Status kv_set(int64_t generation, const std::string& key, const std::string& value, Duration timeout);
  Status kv_get(int64_t generation, const std::string& key, Duration timeout, std::optional<std::string>& value);

  /// Moves every later call to another coordinator (failover to the next
  /// endpoint, whose epoch the calls then carry). Calls in flight finish on
  /// the old connection.
  void retarget(const std::string& target, int epoch);
  /// The coordinator the calls go to now ("host:port").
  std::string endpoint() const;

  /// The current stub, for relaying calls asynchronously (the local agent
  /// service). It stays valid for the client's lifetime, even after retarget().
  ::ddplaunch::v1::Coordinator::Stub& stub();

 private:
  /// One coordinator endpoint: kept until the client dies, so that a call in
  /// flight never outlives its stub.
  struct Connection {
    std::string endpoint;  // host:port as given, for messages
    int epoch = 0;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<ConnectionDiagnosis> diagnosis;  // null for in-process channels
    std::unique_ptr<::ddplaunch::v1::Coordinator::Stub> stub;
  };
  std::shared_ptr<const Connection> connect(const std::string& target, int epoch) const;
  std::shared_ptr<const Connection> connection() const;
  /// Fills the auth field of a request (job id, token, epoch); returns the
  /// connection to send it on.
  std::shared_ptr<const Connection> authorize(::ddplaunch::v1::JobAuth* auth) const;

  TlsFiles tls_;
  std::string job_id_;
  std::string token_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Connection> current_;
  std::vector<std::shared_ptr<const Connection>> retired_;
};

}  // namespace ddp
