// One rendezvous of N simulated agents (see rendezvous_run.h). The clock runs
// from the first Join sent to the last Barrier reply; connections are opened
// before it starts.
#include "rendezvous_run.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <random>
#include <stdexcept>

namespace ddp::bench {
namespace {

namespace pb = ::ddplaunch::v1;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kNcclIdBytes = 128;
constexpr size_t kMaxErrorsShown = 5;
constexpr size_t kMaxErrorChars = 300;  // a coordinator's timeout message may list every host

std::string random_hex(size_t bytes) {
  std::random_device rd;
  std::string out;
  for (size_t i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

}  // namespace

std::vector<std::unique_ptr<pb::Coordinator::Stub>> connect_channels(const std::string& target, int channels,
                                                                     double timeout_s) {
  std::vector<std::unique_ptr<pb::Coordinator::Stub>> stubs;
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("ddpbench.channel_index", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(deadline)) {
      throw std::runtime_error(fmt::format("cannot connect to the coordinator at {}", target));
    }
    stubs.push_back(pb::Coordinator::NewStub(channel));
  }
  return stubs;
}

RendezvousRun::RendezvousRun(const std::vector<std::unique_ptr<pb::Coordinator::Stub>>& stubs,
                             const RendezvousBenchOptions& o)
    : options_(o),
      job_id_(fmt::format("ddpbench-rdzv-{}-{}", ::getpid(), random_hex(6))),
      token_(random_hex(16)),
      agents_(static_cast<size_t>(o.nodes)) {
  const auto timeout_ms = static_cast<int64_t>(o.timeout_s * 1000);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms + 5000);
  for (size_t i = 0; i < agents_.size(); ++i) {
    auto a = std::make_unique<Agent>();
    a->stub = stubs[i % stubs.size()].get();
    for (grpc::ClientContext* ctx : {&a->join_ctx, &a->id_ctx, &a->barrier_ctx}) ctx->set_deadline(deadline);
    auto set_auth = [this](pb::JobAuth* auth) {
      auth->set_job_id(job_id_);
      auth->set_token(token_);
    };
    set_auth(a->join_req.mutable_auth());
    a->join_req.set_host(fmt::format("sim-{}", i));
    a->join_req.set_nproc(o.nproc_per_node);
    a->join_req.set_node_rank(-1);
    a->join_req.set_nnodes(o.nodes);
    a->join_req.set_generation(0);
    a->join_req.set_master_port(29500);
    a->join_req.set_join_timeout_ms(timeout_ms);
    set_auth(a->id_req.mutable_auth());
    a->id_req.set_generation(0);
    a->id_req.set_comm_key("world");
    set_auth(a->barrier_req.mutable_auth());
    a->barrier_req.set_generation(0);
    a->barrier_req.set_name("start");
    a->barrier_req.set_participants(o.nodes);
    a->barrier_req.set_timeout_ms(timeout_ms);
    agents_[i] = std::move(a);
  }
}

RunResult RendezvousRun::execute() {
  remaining_ = agents_.size();
  start_ = SteadyClock::now();
  for (auto& a : agents_) {
    Agent* agent = a.get();
    agent->stub->async()->Join(&agent->join_ctx, &agent->join_req, &agent->join_reply,
                               [this, agent](grpc::Status s) { on_join(*agent, s); });
  }
  {
    // Every call carries a deadline, so every callback comes.
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return remaining_ == 0; });
  }
  RunResult r;
  auto at = [](const std::atomic<int64_t>& ns) { return static_cast<double>(ns.load()) / 1e9; };
  r.total_s = at(last_barrier_ns_);
  r.join_s = at(last_join_ns_);
  r.first_join_reply_s = at(first_join_ns_);
  r.nccl_id_s = at(last_id_ns_) - r.join_s;
  r.barrier_s = r.total_s - at(last_id_ns_);
  r.errors = verify();
  return r;
}

std::vector<JoinedAgent> RendezvousRun::joined() const {
  std::vector<JoinedAgent> out;
  out.reserve(agents_.size());
  for (const auto& a : agents_) out.push_back({a->join_req.host(), a->join_reply.node_rank(), a->join_reply.rank_start()});
  return out;
}

// Raises `latest` to now (ns since the start); returns now.
int64_t RendezvousRun::mark(std::atomic<int64_t>& latest) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start_).count();
  int64_t seen = latest.load();
  while (seen < now && !latest.compare_exchange_weak(seen, now)) {
  }
  return now;
}

void RendezvousRun::start_id(Agent& a) {
  a.stub->async()->GetNcclId(&a.id_ctx, &a.id_req, &a.id_reply, [this, &a](grpc::Status st) { on_id(a, st); });
}

void RendezvousRun::start_barrier(Agent& a) {
  a.stub->async()->Barrier(&a.barrier_ctx, &a.barrier_req, &a.barrier_reply,
                           [this, &a](grpc::Status st) { on_barrier(a, st); });
}

// Starts an agent's next call: at once, or (--phased) for every agent still
// going once the last one has ended this call. A failed agent then finishes;
// it counts last, so the run outlives whatever this callback touches.
void RendezvousRun::advance(Agent& a, const char* rpc, const grpc::Status& s, std::atomic<size_t>& ended,
                            void (RendezvousRun::*start)(Agent&)) {
  if (!s.ok()) {
    a.failure = fmt::format("{} {}: {} ({})", a.join_req.host(), rpc, s.error_message(), static_cast<int>(s.error_code()));
  }
  if (!options_.phased) {
    if (s.ok()) (this->*start)(a);
  } else if (ended.fetch_add(1) + 1 == agents_.size()) {
    for (auto& other : agents_) {
      if (other->failure.empty()) (this->*start)(*other);
    }
  }
  if (!s.ok()) finish_one();
}

void RendezvousRun::on_join(Agent& a, const grpc::Status& s) {
  int64_t unset = 0;
  first_join_ns_.compare_exchange_strong(unset, mark(last_join_ns_));
  advance(a, "Join", s, joins_ended_, &RendezvousRun::start_id);
}

void RendezvousRun::on_id(Agent& a, const grpc::Status& s) {
  mark(last_id_ns_);
  advance(a, "GetNcclId", s, ids_ended_, &RendezvousRun::start_barrier);
}

void RendezvousRun::on_barrier(Agent& a, const grpc::Status& s) {
  mark(last_barrier_ns_);
  if (!s.ok()) {
    a.failure = fmt::format("{} Barrier: {} ({})", a.join_req.host(), s.error_message(), static_cast<int>(s.error_code()));
  }
  finish_one();
}

void RendezvousRun::finish_one() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--remaining_ == 0) done_.notify_all();
}

// Node ranks 0..N-1 once each, rank_start = node_rank * M, world N * M,
// one 128-byte NCCL ID for all.
std::vector<std::string> RendezvousRun::verify() const {
  std::vector<std::string> errors;
  size_t wrong = 0;
  auto add = [&errors, &wrong](std::string e) {
    ++wrong;
    if (e.size() > kMaxErrorChars) e = e.substr(0, kMaxErrorChars) + " ...";
    if (errors.size() < kMaxErrorsShown) errors.push_back(std::move(e));
  };
  const int n = options_.nodes, m = options_.nproc_per_node;
  std::vector<bool> seen(static_cast<size_t>(n), false);
  const std::string* id = nullptr;
  for (const auto& a : agents_) {
    if (!a->failure.empty()) {
      add(a->failure);
      continue;
    }
    const pb::JoinReply& r = a->join_reply;
    const std::string& host = a->join_req.host();
    if (r.node_rank() < 0 || r.node_rank() >= n) {
      add(fmt::format("{}: node rank {} outside 0..{}", host, r.node_rank(), n - 1));
    } else if (seen[static_cast<size_t>(r.node_rank())]) {
      add(fmt::format("{}: node rank {} given twice", host, r.node_rank()));
    } else {
      seen[static_cast<size_t>(r.node_rank())] = true;
    }
    if (r.rank_start() != r.node_rank() * m || r.world_size() != n * m || r.nnodes() != n || r.generation() != 0) {
      add(fmt::format("{}: node rank {} got rank_start {}, world_size {}, nnodes {}, generation {}", host,
                      r.node_rank(), r.rank_start(), r.world_size(), r.nnodes(), r.generation()));
    }
    const std::string& got = a->id_reply.unique_id();
    if (got.size() != kNcclIdBytes) add(fmt::format("{}: NCCL ID of {} bytes, not {}", host, got.size(), kNcclIdBytes));
    if (id == nullptr) id = &got;
    if (got != *id) add(fmt::format("{}: a different NCCL ID than the others", host));
  }
  if (wrong > errors.size()) errors.push_back(fmt::format("... {} problem(s) in all", wrong));
  return errors;
}

}  // namespace ddp::bench
