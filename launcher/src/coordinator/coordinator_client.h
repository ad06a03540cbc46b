#pragma once
// CoordinatorClient: an agent's (or a benchmark's) calls to the coordinator,
// as plain blocking functions returning ddp::Status. Every call carries the
// job id and token and has a deadline.
//
// Threading: thread-safe (gRPC stubs are); one channel, many callers.

#include <functional>
#include <memory>
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

  /// The raw stub, for relaying calls asynchronously (the local agent service).
  ::ddplaunch::v1::Coordinator::Stub& stub() { return *stub_; }
  /// Fills the auth field of a request with this client's job id and token.
  void authorize(::ddplaunch::v1::JobAuth* auth) const;

 private:
  std::string endpoint_;  // host:port as given, for messages
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ConnectionDiagnosis> diagnosis_;  // null for in-process channels
  std::unique_ptr<::ddplaunch::v1::Coordinator::Stub> stub_;
  std::string job_id_;
  std::string token_;
};

}  // namespace ddp
