#include "coordinator/coordinator_client.h"
#include "coordinator/job_stop_proto.h"

#include "health/heartbeat_proto.h"
#include "metrics/resources_proto.h"
#include "stacks/rank_stacks_proto.h"

#include <grpcpp/grpcpp.h>

#include <future>

#include <spdlog/spdlog.h>

#include "coordinator/coordinator_reachability.h"
#include "coordinator/grpc_status.h"
#include "net/host_port.h"

namespace ddp {
namespace {

namespace pb = ::ddplaunch::v1;

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsFiles& tls) {
  if (tls.ca.empty() && !tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca.empty()) options.pem_root_certs = read_file(tls.ca);
  if (tls.enabled()) {
    options.pem_cert_chain = read_file(tls.cert);
    options.pem_private_key = read_file(tls.key);
  }
  return grpc::SslCredentials(options);
}

void set_deadline(grpc::ClientContext& ctx, Duration timeout) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout));
}

int64_t to_ms(Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// What a long rendezvous is waiting for: the other nodes, or the connection
// (and then why it fails, once a diagnosis has finished). A diagnosis that
// runs for long is waiting on a name lookup (the rest is bounded to seconds).
std::string join_wait_reason(grpc_connectivity_state state, const std::string& endpoint,
                             const ConnectionDiagnosis* diagnosis) {
  if (state == GRPC_CHANNEL_READY) return "connected to the coordinator; waiting for the other node(s) to join";
  if (diagnosis == nullptr) return fmt::format("still connecting to the coordinator at {}", endpoint);
  if (const std::string why = diagnosis->latest(); !why.empty()) {
    return fmt::format("cannot reach the coordinator at {}: {}", endpoint, why);
  }
  const auto pending_s = std::chrono::duration_cast<std::chrono::seconds>(diagnosis->running_for()).count();
  if (pending_s >= 4) {
    return fmt::format("still connecting to the coordinator at {}; looking its host up has taken {} s so far (name "
                       "servers that do not answer?)",
                       endpoint, pending_s);
  }
  return fmt::format("still connecting to the coordinator at {}", endpoint);
}

}  // namespace

CoordinatorClient::CoordinatorClient(const std::string& target, const std::string& job_id, const std::string& token,
                                     const TlsFiles& tls)
    : tls_(tls), job_id_(job_id), token_(token) {
  current_ = connect(target, 0);
}

std::shared_ptr<const CoordinatorClient::Connection> CoordinatorClient::connect(const std::string& target,
                                                                                 int epoch) const {
  auto c = std::make_shared<Connection>();
  c->endpoint = target;
  c->epoch = epoch;
  grpc::ChannelArguments args;
  // Keep one connection per agent: thousands of parked calls multiplex on it.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  // Agents often start before node 0's coordinator listens: retry the
  // connection every 100 ms at first instead of gRPC's default 1 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // A name whose address changes (a rescheduled pod) is looked up again at
  // most every second on reconnection, not gRPC's default 30 s.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
  c->channel = grpc::CreateCustomChannel(target, channel_credentials(tls_), args);
  c->stub = pb::Coordinator::NewStub(c->channel);
  std::string why;
  if (const auto endpoint = parse_host_port(target, why); endpoint && endpoint->port) {
    c->diagnosis = std::make_unique<ConnectionDiagnosis>(coordinator_reachability_probe(
        endpoint->host, *endpoint->port, c->channel, !tls_.ca.empty() || tls_.enabled()));
  }
  return c;
}

CoordinatorClient::~CoordinatorClient() = default;

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel, const std::string& job_id,
                                     const std::string& token)
    : job_id_(job_id), token_(token) {
  auto c = std::make_shared<Connection>();
  c->endpoint = "the in-process coordinator";
  c->channel = std::move(channel);
  c->stub = pb::Coordinator::NewStub(c->channel);
  current_ = std::move(c);
}

void CoordinatorClient::retarget(const std::string& target, int epoch) {
  auto next = connect(target, epoch);
  std::lock_guard<std::mutex> lock(mutex_);
  retired_.push_back(std::move(current_));
  current_ = std::move(next);
}

std::shared_ptr<const CoordinatorClient::Connection> CoordinatorClient::connection() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

std::string CoordinatorClient::endpoint() const { return connection()->endpoint; }

pb::Coordinator::Stub& CoordinatorClient::stub() { return *connection()->stub; }

std::shared_ptr<const CoordinatorClient::Connection> CoordinatorClient::authorize(pb::JobAuth* auth) const {
  std::shared_ptr<const Connection> c = connection();
  auth->set_job_id(job_id_);
  auth->set_token(token_);
  auth->set_epoch(c->epoch);
  return c;
}

Status CoordinatorClient::join(const JoinParams& p, int max_restarts, Duration timeout, JoinResult& result,
                               const std::function<bool()>& should_abort) {
  pb::JoinRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_host(p.host);
  req.set_nproc(p.nproc);
  req.set_node_rank(p.node_rank);
  req.set_nnodes(p.nnodes);
  req.set_min_nnodes(p.min_nnodes);
  req.set_last_call_timeout_ms(to_ms(p.last_call_timeout));
  req.set_generation(p.generation);
  req.set_master_port(p.master_port);
  req.set_max_restarts(max_restarts);
  req.set_join_timeout_ms(to_ms(timeout));
  req.set_agent_id(p.agent_id);
  req.set_hosts_coordinator(p.hosts_coordinator);
  req.set_max_node_failures(p.max_node_failures);
  req.set_grow(p.grow);
  req.set_endpoints(p.endpoints);
  req.mutable_job_env()->insert(p.job_env.begin(), p.job_env.end());
  pb::JoinReply reply;
  grpc::ClientContext ctx;
  // The coordinator answers at the join timeout; leave it room to say why.
  set_deadline(ctx, timeout + std::chrono::seconds(5));
  ctx.set_wait_for_ready(true);  // node 0's coordinator may still be starting
  // Asynchronous, so the caller stays responsive (a SIGTERM during a long
  // rendezvous must not wait for the join timeout).
  std::promise<grpc::Status> done;
  auto finished = done.get_future();
  c->stub->async()->Join(&ctx, &req, &reply, [&done](grpc::Status status) { done.set_value(std::move(status)); });
  constexpr auto kProgressEvery = std::chrono::seconds(5);
  // A channel not connected after a second gets a diagnosis, ready for the
  // first progress line; each line starts the next one.
  constexpr auto kDiagnoseAfter = std::chrono::seconds(1);
  const auto started = std::chrono::steady_clock::now();
  auto next_progress = started + kProgressEvery;
  bool diagnosed = false;
  bool ever_connected = false;
  bool gave_up = false;
  int waited_s = 0;
  while (finished.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (should_abort && should_abort()) ctx.TryCancel();
    const auto now = std::chrono::steady_clock::now();
    const grpc_connectivity_state state = c->channel->GetState(/*try_to_connect=*/false);
    ever_connected = ever_connected || state == GRPC_CHANNEL_READY;
    // Nobody to answer at the join timeout: do not wait the coordinator's grace on top.
    if (!ever_connected && !gave_up && now - started >= timeout) {
      gave_up = true;
      ctx.TryCancel();
    }
    if (c->diagnosis && !diagnosed && state != GRPC_CHANNEL_READY && now - started >= kDiagnoseAfter) {
      c->diagnosis->start();
      diagnosed = true;
    }
    if (now >= next_progress) {
      next_progress += kProgressEvery;
      waited_s += static_cast<int>(kProgressEvery.count());
      spdlog::info("rendezvous: still waiting after {} s: {}", waited_s,
                   join_wait_reason(state, c->endpoint, c->diagnosis.get()));
      if (c->diagnosis && state != GRPC_CHANNEL_READY) c->diagnosis->start();
    }
  }
  Status s = from_grpc(finished.get());
  // Never connected: Unavailable (nobody answers there), unlike a coordinator
  // that answered with its own rendezvous timeout (DeadlineExceeded).
  if (gave_up && s.code() == StatusCode::kCancelled) s = {StatusCode::kUnavailable, "Deadline Exceeded"};
  // The coordinator's own refusal stands, though its node may have shut the
  // connection down since (node 0 exits at the rendezvous timeout it sent).
  const bool coordinator_answered = ctx.GetServerTrailingMetadata().count(kCoordinatorAnsweredKey) > 0;
  if (!s.ok() && !coordinator_answered && c->diagnosis && c->channel->GetState(false) != GRPC_CHANNEL_READY &&
      (s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded)) {
    // gRPC's own words ("Deadline Exceeded") name no cause: say what the network says.
    const std::string why = c->diagnosis->finish_within(std::chrono::milliseconds(3000));
    s = {s.code(), why.empty() ? fmt::format("could not reach the coordinator at {} ({}); is node 0 up, and do the "
                                             "TLS settings match?",
                                             c->endpoint, s.message())
                               : fmt::format("cannot reach the coordinator at {}: {}", c->endpoint, why)};
  }
  if (!s.ok()) return s;
  Assignment& a = result.assignment;
  a.node_rank = reply.node_rank();
  a.nnodes = reply.nnodes();
  a.rank_start = reply.rank_start();
  a.world_size = reply.world_size();
  a.generation = reply.generation();
  a.master_addr = reply.master_addr();
  a.master_port = reply.master_port();
  a.restarts_used = reply.restarts_used();
  a.job_env.insert(reply.job_env().begin(), reply.job_env().end());
  result.max_restarts = reply.max_restarts();
  return s;
}

Status CoordinatorClient::heartbeat(int node_rank, int64_t generation, Duration timeout,
                                     const std::vector<ForwardedReport>& workers, std::vector<int>* dump_ranks,
                                     const std::vector<RankStacks>& stacks, std::optional<JobStop>* stop) {
  pb::AgentHeartbeatRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_node_rank(node_rank);
  req.set_generation(generation);
  add_forwarded(workers, req);  // heartbeats, and each rank's resource sample
  for (const RankStacks& s : stacks) to_proto(s, *req.add_stacks());
  pb::AgentHeartbeatReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const Status s = from_grpc(c->stub->AgentHeartbeat(&ctx, req, &reply));
  if (dump_ranks) dump_ranks->assign(reply.dump_stack_ranks().begin(), reply.dump_stack_ranks().end());
  if (stop && s.ok() && reply.has_stop()) *stop = from_proto(reply.stop());
  return s;
}

Status CoordinatorClient::request_stop(int node_rank, int64_t generation, const std::string& reason,
                                       Duration stop_timeout, Duration timeout, JobStop& stop) {
  pb::StopRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_node_rank(node_rank);
  req.set_generation(generation);
  req.set_reason(reason);
  req.set_stop_timeout_ms(to_ms(stop_timeout));
  pb::StopReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const Status s = from_grpc(c->stub->RequestStop(&ctx, req, &reply));
  if (s.ok()) stop = from_proto(reply.stop());
  return s;
}

Status CoordinatorClient::status(Duration timeout, std::string& json) {
  pb::StatusRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  pb::StatusReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const Status s = from_grpc(c->stub->GetStatus(&ctx, req, &reply));
  json = reply.json();
  return s;
}

Status CoordinatorClient::stacks(Duration wait, std::string& json) {
  pb::StacksRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_timeout_ms(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
  pb::StacksReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, wait + std::chrono::seconds(5));
  const Status s = from_grpc(c->stub->GetStacks(&ctx, req, &reply));
  json = reply.json();
  return s;
}

Status CoordinatorClient::report_outcome(int64_t generation, const NodeOutcome& o, Duration timeout) {
  pb::OutcomeRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_node_rank(o.node_rank);
  req.set_generation(generation);
  req.set_success(o.success);
  req.set_stopped(o.stopped);
  req.set_exit_code(o.exit_code);
  req.set_failed_rank(o.failed_rank);
  req.set_failed_at_unix_ms(o.failed_at_unix_ms);
  req.set_description(o.description);
  req.set_leaving(o.leaving);
  pb::OutcomeReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  return from_grpc(c->stub->ReportOutcome(&ctx, req, &reply));
}

Status CoordinatorClient::watch(int node_rank, int64_t generation, GenerationState known, Duration timeout,
                                GenerationView& view, CancelToken* cancel) {
  pb::WatchRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_node_rank(node_rank);
  req.set_generation(generation);
  req.set_known_state(to_pb(known));
  pb::WatchReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  if (cancel && !cancel->arm([&ctx] { ctx.TryCancel(); })) return {StatusCode::kCancelled, "cancelled"};
  const Status s = from_grpc(c->stub->Watch(&ctx, req, &reply));
  if (cancel) cancel->disarm();
  view.generation = reply.generation();
  view.state = from_pb(reply.state());
  view.exit_code = reply.exit_code();
  view.reason = reply.reason();
  view.failed_node = reply.failed_node();
  view.failed_rank = reply.failed_rank();
  view.report_json = reply.report_json();
  view.membership_change = reply.membership_change();
  return s;
}

Status CoordinatorClient::nccl_id(int64_t generation, const std::string& comm_key, Duration timeout, std::string& id) {
  pb::NcclIdRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_generation(generation);
  req.set_comm_key(comm_key);
  pb::NcclIdReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const Status s = from_grpc(c->stub->GetNcclId(&ctx, req, &reply));
  id = reply.unique_id();
  return s;
}

Status CoordinatorClient::barrier(int64_t generation, const std::string& name, int participants, Duration timeout) {
  pb::BarrierRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_generation(generation);
  req.set_name(name);
  req.set_participants(participants);
  req.set_timeout_ms(to_ms(timeout));
  pb::BarrierReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout + std::chrono::seconds(5));
  return from_grpc(c->stub->Barrier(&ctx, req, &reply));
}

Status CoordinatorClient::kv_set(int64_t generation, const std::string& key, const std::string& value,
                                 Duration timeout) {
  pb::KvSetRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_generation(generation);
  req.set_key(key);
  req.set_value(value);
  pb::KvSetReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  return from_grpc(c->stub->KvSet(&ctx, req, &reply));
}

Status CoordinatorClient::kv_get(int64_t generation, const std::string& key, Duration timeout,
                                 std::optional<std::string>& value) {
  pb::KvGetRequest req;
  const std::shared_ptr<const Connection> c = authorize(req.mutable_auth());
  req.set_generation(generation);
  req.set_key(key);
  pb::KvGetReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const Status s = from_grpc(c->stub->KvGet(&ctx, req, &reply));
  value = reply.found() ? std::optional<std::string>(reply.value()) : std::nullopt;
  return s;
}

}  // namespace ddp
