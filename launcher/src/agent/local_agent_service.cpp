#include "agent/local_agent_service.h"

#include "net/host_name.h"
#include "health/heartbeat_proto.h"
#include "stacks/rank_stacks_proto.h"
#include "process/process_alive.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace ddp {

namespace pb = ::ddplaunch::v1;

class LocalAgentService final : public pb::LocalAgent::CallbackService {
 public:
  LocalAgentService(CoordinatorClient& client, WorkerHealthBoard& health, std::string job_id, std::string token)
      : client_(client), health_(health), job_id_(std::move(job_id)), token_(std::move(token)) {}

  void set_layout(const LocalLayout& layout) {
    std::lock_guard<std::mutex> lock(mutex_);
    layout_ = layout;
  }

  using Ctx = grpc::CallbackServerContext;
  using Reactor = grpc::ServerUnaryReactor;

  Reactor* Register(Ctx* ctx, const pb::RegisterRequest* req, pb::RegisterReply* reply) override {
    Reactor* reactor = ctx->DefaultReactor();
    if (!authorized(req->auth())) return refuse(reactor);
    std::lock_guard<std::mutex> lock(mutex_);
    const Assignment& a = layout_.assignment;
    const int local_rank = req->rank() - a.rank_start;
    if (local_rank < 0 || local_rank >= layout_.nproc) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   fmt::format("rank {} is not on this node (ranks {}..{})", req->rank(), a.rank_start,
                                               a.rank_start + layout_.nproc - 1)));
      return reactor;
    }
    reply->set_rank(req->rank());
    reply->set_local_rank(local_rank);
    reply->set_world_size(a.world_size);
    reply->set_local_world_size(layout_.nproc);
    reply->set_node_rank(a.node_rank);
    reply->set_generation(a.generation);
    reply->set_master_addr(a.master_addr);
    reply->set_master_port(a.master_port);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // Kept on the board until the agent's heartbeat forwards it; the reply
  // carries a pending request for a stack dump.
  Reactor* Heartbeat(Ctx* ctx, const pb::WorkerHeartbeatRequest* req, pb::WorkerHeartbeatReply* reply) override {
    Reactor* reactor = ctx->DefaultReactor();
    if (!authorized(req->auth())) return refuse(reactor);
    int node_rank = 0;
    std::string host;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (req->heartbeat().generation() != layout_.assignment.generation) {
        reactor->Finish(grpc::Status::OK);  // from a previous generation's worker: ignored
        return reactor;
      }
      node_rank = layout_.assignment.node_rank;
      host = layout_.assignment.host.empty() ? this_host_name() : layout_.assignment.host;
    }
    health_.record(from_proto(req->heartbeat(), node_rank, host));
    if (req->has_stacks()) {
      RankStacks stacks = from_proto(req->stacks());
      stacks.rank = req->heartbeat().rank();
      health_.record_stacks(std::move(stacks));
    }
    reply->set_dump_stacks(health_.take_stack_dump_request(req->heartbeat().rank()));
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // The store and ID calls go to the coordinator as they are.
  Reactor* KvSet(Ctx* c, const pb::KvSetRequest* q, pb::KvSetReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvSet(a...); });
  }
  Reactor* KvGet(Ctx* c, const pb::KvGetRequest* q, pb::KvGetReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvGet(a...); });
  }
  Reactor* KvWait(Ctx* c, const pb::KvWaitRequest* q, pb::KvWaitReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvWait(a...); });
  }
  Reactor* KvAdd(Ctx* c, const pb::KvAddRequest* q, pb::KvAddReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvAdd(a...); });
  }
  Reactor* KvCompareSet(Ctx* c, const pb::KvCompareSetRequest* q, pb::KvCompareSetReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvCompareSet(a...); });
  }
  Reactor* KvDeletePrefix(Ctx* c, const pb::KvDeletePrefixRequest* q, pb::KvDeletePrefixReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->KvDeletePrefix(a...); });
  }
  Reactor* Barrier(Ctx* c, const pb::BarrierRequest* q, pb::BarrierReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->Barrier(a...); });
  }
  Reactor* GetNcclId(Ctx* c, const pb::NcclIdRequest* q, pb::NcclIdReply* r) override {
    return relay(c, q, r, [this](auto... a) { client_.stub().async()->GetNcclId(a...); });
  }

 private:
  bool authorized(const pb::JobAuth& auth) const {
    return auth.job_id() == job_id_ && auth.token().size() == token_.size() && auth.token() == token_;
  }

  static Reactor* refuse(Reactor* reactor) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong job id or token"));
    return reactor;
  }

  // Forwards one call asynchronously: the reply goes straight back to the
  // worker when the coordinator answers, with the worker's own deadline.
  template <typename Request, typename Reply, typename AsyncCall>
  Reactor* relay(Ctx* ctx, const Request* request, Reply* reply, AsyncCall call) {
    Reactor* reactor = ctx->DefaultReactor();
    if (!authorized(request->auth())) return refuse(reactor);
    auto* upstream = new grpc::ClientContext;
    upstream->set_deadline(ctx->deadline());
    call(upstream, request, reply, [reactor, upstream](grpc::Status status) {
      delete upstream;
      reactor->Finish(status);
    });
    return reactor;
  }

  CoordinatorClient& client_;
  WorkerHealthBoard& health_;
  const std::string job_id_;
  const std::string token_;
  std::mutex mutex_;
  LocalLayout layout_;
};

std::string agent_socket_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  const std::string dir =
      runtime != nullptr && *runtime != '\0' ? std::string(runtime) + "/ddplaunch" : fmt::format("/tmp/ddplaunch-{}", getuid());
  std::filesystem::create_directories(dir);
  // chmod follows links: only a real folder of ours is made private (the job
  // registry refuses one that is not, job_registry.cpp).
  struct stat st {};
  if (lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid()) chmod(dir.c_str(), 0700);
  return dir;
}

void remove_sockets_of_dead_agents(const std::string& dir) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::path& path = it->path();
    std::error_code type_ec;
    const bool socket = path.extension() == ".sock" && it->is_socket(type_ec);
    const bool announcements = path.extension() == ".ann" && it->is_regular_file(type_ec);
    if (!socket && !announcements) continue;
    // "<pid>.sock", the Python companion's "<pid>.py.sock", and the
    // "<pid>.py.<rank pid>.ann" of a rank whose agent died before mapping it.
    const std::string stem = path.stem().string();
    const std::string pid = stem.substr(0, stem.find('.'));
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!process_alive(std::stoi(pid))) std::filesystem::remove(path, type_ec);
  }
}

LocalAgentServer::LocalAgentServer(const std::string& socket_path, CoordinatorClient& client, WorkerHealthBoard& health,
                                   std::string job_id, std::string token)
    : path_(socket_path),
      service_(std::make_unique<LocalAgentService>(client, health, std::move(job_id), std::move(token))) {
  std::filesystem::remove(path_);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + path_, grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  // Owner only, from the first moment the socket exists.
  const mode_t old_mask = umask(0077);
  server_ = builder.BuildAndStart();
  umask(old_mask);
  if (!server_) throw std::runtime_error(fmt::format("cannot listen on unix:{}", path_));
  chmod(path_.c_str(), 0600);
}

LocalAgentServer::~LocalAgentServer() {
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void LocalAgentServer::set_layout(const LocalLayout& layout) { service_->set_layout(layout); }

}  // namespace ddp
