#pragma once
// CoordinatorService: the gRPC face of a Coordinator. Thin: it checks the
// caller (job id and token) and the sizes of what it sent, translates
// messages to plain calls on CoordinatorJob and back. Uses gRPC's callback
// API, so a parked join or wait holds no thread.
//
// Threading: gRPC calls it on its own threads; the Coordinator is thread-safe.

#include "coordinator/arena_messages.h"
#include "coordinator/coordinator.h"
#include "ddplaunch/v1/coordinator.grpc.pb.h"

namespace ddp {

namespace pb = ::ddplaunch::v1;

class CoordinatorService final : public pb::Coordinator::CallbackService {
 public:
  explicit CoordinatorService(Coordinator& coordinator) : coordinator_(coordinator) {
    SetMessageAllocatorFor_AgentHeartbeat(&heartbeat_messages_);
  }

  using Ctx = grpc::CallbackServerContext;
  using Reactor = grpc::ServerUnaryReactor;

  Reactor* Join(Ctx* ctx, const pb::JoinRequest* req, pb::JoinReply* reply) override;
  Reactor* AgentHeartbeat(Ctx* ctx, const pb::AgentHeartbeatRequest* req, pb::AgentHeartbeatReply* reply) override;
  Reactor* ReportOutcome(Ctx* ctx, const pb::OutcomeRequest* req, pb::OutcomeReply* reply) override;
  Reactor* Watch(Ctx* ctx, const pb::WatchRequest* req, pb::WatchReply* reply) override;
  Reactor* KvSet(Ctx* ctx, const pb::KvSetRequest* req, pb::KvSetReply* reply) override;
  Reactor* KvGet(Ctx* ctx, const pb::KvGetRequest* req, pb::KvGetReply* reply) override;
  Reactor* KvWait(Ctx* ctx, const pb::KvWaitRequest* req, pb::KvWaitReply* reply) override;
  Reactor* KvAdd(Ctx* ctx, const pb::KvAddRequest* req, pb::KvAddReply* reply) override;
  Reactor* KvCompareSet(Ctx* ctx, const pb::KvCompareSetRequest* req, pb::KvCompareSetReply* reply) override;
  Reactor* KvDeletePrefix(Ctx* ctx, const pb::KvDeletePrefixRequest* req, pb::KvDeletePrefixReply* reply) override;
  Reactor* Barrier(Ctx* ctx, const pb::BarrierRequest* req, pb::BarrierReply* reply) override;
  Reactor* GetNcclId(Ctx* ctx, const pb::NcclIdRequest* req, pb::NcclIdReply* reply) override;
  Reactor* GetStatus(Ctx* ctx, const pb::StatusRequest* req, pb::StatusReply* reply) override;
  Reactor* GetStacks(Ctx* ctx, const pb::StacksRequest* req, pb::StacksReply* reply) override;
  Reactor* RequestStop(Ctx* ctx, const pb::StopRequest* req, pb::StopReply* reply) override;

 private:
  /// The caller's job, or null after finishing the call with the refusal.
  std::shared_ptr<CoordinatorJob> job_for(Ctx* ctx, Reactor* reactor, const pb::JobAuth& auth, const char* rpc);
  /// Finishes the call with status, logging refusals (never the token).
  void finish(Ctx* ctx, Reactor* reactor, const Status& status, const char* rpc);

  Coordinator& coordinator_;
  // Heartbeats, the one call every agent makes every interval, are parsed on an arena.
  ArenaMessages<pb::AgentHeartbeatRequest, pb::AgentHeartbeatReply> heartbeat_messages_;
};

/// The host part of a gRPC peer string ("ipv4:10.0.0.2:5000" -> "10.0.0.2").
std::string peer_host(const std::string& peer);

}  // namespace ddp
