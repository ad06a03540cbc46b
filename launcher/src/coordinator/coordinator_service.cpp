#include "coordinator/coordinator_service.h"

#include "coordinator/job_stop_proto.h"
#include "health/heartbeat_proto.h"
#include "metrics/resources_proto.h"
#include "stacks/rank_stacks_proto.h"

#include <fmt/format.h>

#include <algorithm>
#include <spdlog/spdlog.h>

#include "coordinator/grpc_status.h"

namespace ddp {
namespace {

using Limits = CoordinatorLimits;

Duration millis(int64_t ms) { return call_wait(ms); }

Status too_big(const char* what, size_t size, size_t limit) {
  return {StatusCode::kResourceExhausted, fmt::format("{} of {} bytes exceeds the limit of {}", what, size, limit)};
}

Status check_key(const std::string& key) {
  return key.size() > Limits::kMaxKeyBytes ? too_big("key", key.size(), Limits::kMaxKeyBytes) : Status::Ok();
}

}  // namespace

std::string peer_host(const std::string& peer) {
  // "ipv4:1.2.3.4:5", "ipv6:%5B::1%5D:5" (gRPC percent-encodes the brackets), "unix:/path"
  const auto colon = peer.find(':');
  std::string rest = colon == std::string::npos ? peer : peer.substr(colon + 1);
  for (const auto& [encoded, plain] : {std::pair<std::string, char>{"%5B", '['}, {"%5D", ']'}}) {
    for (auto at = rest.find(encoded); at != std::string::npos; at = rest.find(encoded)) rest.replace(at, 3, 1, plain);
  }
  if (!rest.empty() && rest.front() == '[') return rest.substr(1, rest.find(']') - 1);
  const auto port = rest.rfind(':');
  return port == std::string::npos ? rest : rest.substr(0, port);
}

void CoordinatorService::finish(Ctx* ctx, Reactor* reactor, const Status& status, const char* rpc) {
  if (!status.ok() && status.code() != StatusCode::kDeadlineExceeded) {
    spdlog::warn("coordinator: {} from {} refused: {}", rpc, ctx->peer(), status.message());
  }
  if (!status.ok()) ctx->AddTrailingMetadata(kCoordinatorAnsweredKey, "1");
  reactor->Finish(to_grpc(status));
}

std::shared_ptr<CoordinatorJob> CoordinatorService::job_for(Ctx* ctx, Reactor* reactor, const pb::JobAuth& auth,
                                                            const char* rpc) {
  std::shared_ptr<CoordinatorJob> job;
  const Status s = coordinator_.find(auth.job_id(), auth.token(), job, auth.epoch());
  if (!s.ok()) finish(ctx, reactor, s, rpc);
  return job;
}

CoordinatorService::Reactor* CoordinatorService::Join(Ctx* ctx, const pb::JoinRequest* req, pb::JoinReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (req->host().size() > Limits::kMaxIdBytes) {
    finish(ctx, reactor, too_big("host", req->host().size(), Limits::kMaxIdBytes), "Join");
    return reactor;
  }
  if (req->nnodes() < 1 || req->nnodes() > Limits::kMaxNodes || req->nproc() < 1 || req->nproc() > Limits::kMaxNproc ||
      req->min_nnodes() < 0 || req->min_nnodes() > req->nnodes() || req->last_call_timeout_ms() < 0) {
    finish(ctx, reactor, {StatusCode::kInvalidArgument,
                          fmt::format("nnodes {} / nproc {} out of range", req->nnodes(), req->nproc())}, "Join");
    return reactor;
  }
  JobConfig view;
  view.nnodes = req->nnodes();
  view.min_nnodes = req->min_nnodes();
  if (req->last_call_timeout_ms() > 0) view.last_call_timeout = millis(req->last_call_timeout_ms());
  view.nproc = req->nproc();
  view.max_restarts = req->max_restarts();
  view.job_env.insert(req->job_env().begin(), req->job_env().end());
  view.max_node_failures = std::max(req->max_node_failures(), 0);
  // A standalone coordinator listed in a failover list follows its rules too.
  view.epoch = std::max(req->auth().epoch(), 0);
  view.endpoints = std::max(req->endpoints(), 1);
  if (!req->grow().empty()) {
    const std::optional<JobConfig::Grow> grow = parse_grow_policy(req->grow());
    if (!grow) {
      finish(ctx, reactor, {StatusCode::kInvalidArgument, "grow must be 'now' or 'restart'"}, "Join");
      return reactor;
    }
    view.grow = *grow;
  }
  std::shared_ptr<CoordinatorJob> job;
  if (Status s = coordinator_.find_for_join(req->auth().job_id(), req->auth().token(), view, job, req->auth().epoch()); !s.ok()) {
    finish(ctx, reactor, s, "Join");
    return reactor;
  }
  JoinParams params;
  params.host = req->host().empty() ? peer_host(ctx->peer()) : req->host();
  params.nproc = req->nproc();
  params.node_rank = req->node_rank();
  params.nnodes = req->nnodes();
  params.min_nnodes = req->min_nnodes();
  params.generation = req->generation();
  params.master_port = req->master_port();
  params.agent_id = req->agent_id().substr(0, Limits::kMaxIdBytes);
  params.hosts_coordinator = req->hosts_coordinator();
  const int max_restarts = job->config().max_restarts;
  reply->mutable_job_env()->insert(job->config().job_env.begin(), job->config().job_env.end());
  job->join(params, millis(req->join_timeout_ms()),
            [this, ctx, reactor, reply, max_restarts](const Status& s, const Assignment& a) {
              if (s.ok()) {
                reply->set_node_rank(a.node_rank);
                reply->set_nnodes(a.nnodes);
                reply->set_rank_start(a.rank_start);
                reply->set_world_size(a.world_size);
                reply->set_generation(a.generation);
                reply->set_master_addr(a.master_addr);
                reply->set_master_port(a.master_port);
                reply->set_max_restarts(max_restarts);
                reply->set_restarts_used(a.restarts_used);
              }
              finish(ctx, reactor, s, "Join");
            });
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::AgentHeartbeat(Ctx* ctx, const pb::AgentHeartbeatRequest* req,
                                                                pb::AgentHeartbeatReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "AgentHeartbeat")) {
    int64_t current = 0;
    // Heartbeats, and each rank's resource sample (resources_only for a rank without heartbeats).
    std::vector<ForwardedReport> workers = forwarded_reports(*req);
    std::vector<RankStacks> stacks;
    stacks.reserve(static_cast<size_t>(req->stacks_size()));
    for (const auto& s : req->stacks()) stacks.push_back(from_proto(s));
    std::vector<int> dump;
    std::optional<JobStop> stop;
    const Status s =
        job->heartbeat(req->node_rank(), req->generation(), current, std::move(workers), &dump, std::move(stacks),
                       &stop);
    reply->set_generation(current);
    if (stop) to_proto(*stop, *reply->mutable_stop());
    for (int r : dump) reply->add_dump_stack_ranks(r);
    finish(ctx, reactor, s, "AgentHeartbeat");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::ReportOutcome(Ctx* ctx, const pb::OutcomeRequest* req,
                                                               pb::OutcomeReply*) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "ReportOutcome")) {
    NodeOutcome o;
    o.node_rank = req->node_rank();
    o.success = req->success();
    o.stopped = req->stopped();
    o.exit_code = req->exit_code();
    o.failed_rank = req->failed_rank();
    o.failed_at_unix_ms = std::max<int64_t>(req->failed_at_unix_ms(), 0);
    o.description = req->description().substr(0, Limits::kMaxKeyBytes);
    o.leaving = req->leaving();
    finish(ctx, reactor, job->report_outcome(req->generation(), o), "ReportOutcome");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::GetStatus(Ctx* ctx, const pb::StatusRequest* req,
                                                           pb::StatusReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "GetStatus")) {
    reply->set_json(job->status_json());
    finish(ctx, reactor, Status::Ok(), "GetStatus");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::GetStacks(Ctx* ctx, const pb::StacksRequest* req,
                                                           pb::StacksReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "GetStacks")) {
    // The ranks' answers ride the agents' heartbeats; 60 s is more than any sensible interval.
    const auto wait = std::chrono::milliseconds(std::clamp<int64_t>(req->timeout_ms(), 100, 60000));
    job->collect_stacks(wait, [this, ctx, reactor, reply](const Status& s, const std::string& json) {
      reply->set_json(json);
      finish(ctx, reactor, s, "GetStacks");
    });
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::RequestStop(Ctx* ctx, const pb::StopRequest* req,
                                                             pb::StopReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "RequestStop")) {
    JobStop stop;
    const Status s = job->request_stop(req->node_rank(), req->generation(),
                                       req->reason().substr(0, Limits::kMaxKeyBytes),
                                       std::chrono::milliseconds(bounded_stop_timeout_ms(req->stop_timeout_ms())),
                                       stop);
    if (s.ok()) to_proto(stop, *reply->mutable_stop());
    finish(ctx, reactor, s, "RequestStop");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::Watch(Ctx* ctx, const pb::WatchRequest* req, pb::WatchReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "Watch")) {
    // Answer before the caller's own deadline, so it sees a reply, not an error.
    Duration wait = std::chrono::seconds(30);
    const auto left = ctx->deadline() - std::chrono::system_clock::now();
    if (left < wait + std::chrono::milliseconds(200)) wait = std::max<Duration>(Duration::zero(), left - std::chrono::milliseconds(200));
    job->watch(req->node_rank(), req->generation(), from_pb(req->known_state()), wait,
               [this, ctx, reactor, reply](const Status& s, const GenerationView& v) {
                 reply->set_generation(v.generation);
                 reply->set_state(to_pb(v.state));
                 reply->set_exit_code(v.exit_code);
                 reply->set_reason(v.reason);
                 reply->set_failed_node(v.failed_node);
                 reply->set_failed_rank(v.failed_rank);
                 reply->set_report_json(v.report_json);
                 reply->set_membership_change(v.membership_change);
                 finish(ctx, reactor, s, "Watch");
               });
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvSet(Ctx* ctx, const pb::KvSetRequest* req, pb::KvSetReply*) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvSet")) {
    Status s = check_key(req->key());
    if (s.ok() && req->value().size() > Limits::kMaxValueBytes) s = too_big("value", req->value().size(), Limits::kMaxValueBytes);
    if (s.ok()) s = job->kv_set(req->generation(), req->key(), req->value());
    finish(ctx, reactor, s, "KvSet");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvGet(Ctx* ctx, const pb::KvGetRequest* req, pb::KvGetReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvGet")) {
    std::optional<std::string> value;
    Status s = check_key(req->key());
    if (s.ok()) s = job->kv_get(req->generation(), req->key(), value);
    reply->set_found(value.has_value());
    if (value) reply->set_value(*value);
    finish(ctx, reactor, s, "KvGet");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvWait(Ctx* ctx, const pb::KvWaitRequest* req, pb::KvWaitReply*) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvWait")) {
    if (req->keys_size() > static_cast<int>(Limits::kMaxKeysPerWait)) {
      finish(ctx, reactor, {StatusCode::kResourceExhausted, "too many keys in one wait"}, "KvWait");
      return reactor;
    }
    std::vector<std::string> keys(req->keys().begin(), req->keys().end());
    job->kv_wait(req->generation(), std::move(keys), millis(req->timeout_ms()),
                 [this, ctx, reactor](const Status& s) { finish(ctx, reactor, s, "KvWait"); });
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvAdd(Ctx* ctx, const pb::KvAddRequest* req, pb::KvAddReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvAdd")) {
    int64_t value = 0;
    Status s = check_key(req->key());
    if (s.ok()) s = job->kv_add(req->generation(), req->key(), req->delta(), value);
    reply->set_value(value);
    finish(ctx, reactor, s, "KvAdd");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvCompareSet(Ctx* ctx, const pb::KvCompareSetRequest* req,
                                                              pb::KvCompareSetReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvCompareSet")) {
    Status s = check_key(req->key());
    if (s.ok() && req->desired().size() > Limits::kMaxValueBytes) s = too_big("value", req->desired().size(), Limits::kMaxValueBytes);
    bool swapped = false;
    std::string current;
    if (s.ok()) {
      const std::optional<std::string> expected =
          req->expect_absent() ? std::nullopt : std::optional<std::string>(req->expected());
      s = job->kv_compare_set(req->generation(), req->key(), expected, req->desired(), swapped, current);
    }
    reply->set_swapped(swapped);
    reply->set_current(current);
    finish(ctx, reactor, s, "KvCompareSet");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::KvDeletePrefix(Ctx* ctx, const pb::KvDeletePrefixRequest* req,
                                                                pb::KvDeletePrefixReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "KvDeletePrefix")) {
    int64_t deleted = 0;
    Status s = check_key(req->prefix());
    if (s.ok()) s = job->kv_delete_prefix(req->generation(), req->prefix(), deleted);
    reply->set_deleted(deleted);
    finish(ctx, reactor, s, "KvDeletePrefix");
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::Barrier(Ctx* ctx, const pb::BarrierRequest* req, pb::BarrierReply*) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "Barrier")) {
    if (Status s = check_key(req->name()); !s.ok()) {
      finish(ctx, reactor, s, "Barrier");
      return reactor;
    }
    job->barrier(req->generation(), req->name(), req->participants(), millis(req->timeout_ms()),
                 [this, ctx, reactor](const Status& s) { finish(ctx, reactor, s, "Barrier"); });
  }
  return reactor;
}

CoordinatorService::Reactor* CoordinatorService::GetNcclId(Ctx* ctx, const pb::NcclIdRequest* req,
                                                           pb::NcclIdReply* reply) {
  Reactor* reactor = ctx->DefaultReactor();
  if (auto job = job_for(ctx, reactor, req->auth(), "GetNcclId")) {
    std::string id;
    Status s = req->comm_key().size() > Limits::kMaxIdBytes
                   ? too_big("communicator key", req->comm_key().size(), Limits::kMaxIdBytes)
                   : job->nccl_id(req->generation(), req->comm_key(), id);
    reply->set_unique_id(id);
    finish(ctx, reactor, s, "GetNcclId");
  }
  return reactor;
}

}  // namespace ddp
