#include "ddp/runtime/agent_store.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include "ddplaunch/v1/coordinator.grpc.pb.h"

namespace ddp {

namespace pb = ::ddplaunch::v1;

struct AgentConnection::Impl {
  std::unique_ptr<pb::LocalAgent::Stub> stub;
  std::string job_id;
  std::string token;

  void authorize(pb::JobAuth* auth) const {
    auth->set_job_id(job_id);
    auth->set_token(token);
  }
};

namespace {

// Store calls are short; waits carry their own timeout, plus this margin so
// the agent's answer (not the deadline) says what happened.
constexpr auto kCallTimeout = std::chrono::seconds(60);

void set_deadline(grpc::ClientContext& ctx, Duration timeout) {
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::duration_cast<std::chrono::system_clock::duration>(timeout));
}

void check(const grpc::Status& s, const char* what) {
  if (s.ok()) return;
  throw StoreError({static_cast<StatusCode>(s.error_code()), fmt::format("{}: {}", what, s.error_message())});
}

class AgentStore final : public Store {
 public:
  AgentStore(std::shared_ptr<AgentConnection::Impl> agent, int64_t generation)
      : agent_(std::move(agent)), generation_(generation) {}

  void set(const std::string& key, const std::string& value) override {
    pb::KvSetRequest req;
    agent_->authorize(req.mutable_auth());
    req.set_generation(generation_);
    req.set_key(key);
    req.set_value(value);
    pb::KvSetReply reply;
    grpc::ClientContext ctx;
    set_deadline(ctx, kCallTimeout);
    check(agent_->stub->KvSet(&ctx, req, &reply), "store set");
  }

  std::optional<std::string> get(const std::string& key) override {
    pb::KvGetRequest req;
    agent_->authorize(req.mutable_auth());
    req.set_generation(generation_);
    req.set_key(key);
    pb::KvGetReply reply;
    grpc::ClientContext ctx;
    set_deadline(ctx, kCallTimeout);
    check(agent_->stub->KvGet(&ctx, req, &reply), "store get");
    return reply.found() ? std::optional<std::string>(reply.value()) : std::nullopt;
  }

  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    pb::KvWaitRequest req;
    agent_->authorize(req.mutable_auth());
    req.set_generation(generation_);
    for (const auto& k : keys) req.add_keys(k);
    req.set_timeout_ms(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());
    pb::KvWaitReply reply;
    grpc::ClientContext ctx;
    set_deadline(ctx, timeout + std::chrono::seconds(5));
    check(agent_->stub->KvWait(&ctx, req, &reply), "store wait");
  }

  int64_t add(const std::string& key, int64_t delta) override {
    pb::KvAddRequest req;
    agent_->authorize(req.mutable_auth());
    req.set_generation(generation_);
    req.set_key(key);
    req.set_delta(delta);
    pb::KvAddReply reply;
    grpc::ClientContext ctx;
    set_deadline(ctx, kCallTimeout);
    check(agent_->stub->KvAdd(&ctx, req, &reply), "store add");
    return reply.value();
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired) override {
    pb::KvCompareSetRequest req;
    agent_->authorize(req.mutable_auth());
    req.set_generation(generation_);
    req.set_key(key);
    req.set_expect_absent(!expected.has_value());
    if (expected) req.set_expected(*expected);
    req.set_desired(desired);
    pb::KvCompareSetReply reply;
    grpc::ClientContext ctx;
    set_deadline(ctx, kCallTimeout);
    check(agent_->stub->KvCompareSet(&ctx, req, &reply), "store compare-set");
    return reply.swapped();
  }

 private:
  std::shared_ptr<AgentConnection::Impl> agent_;
  int64_t generation_;
};

// The threads that answered go out with their frames, named by their bare
// comm, which is the same on every rank (the launcher groups ranks by
// identical stacks; the tids are in stacks.log). Those that did not answer
// are named in the note.
void add_stacks(int rank, const ProcessStacks& in, pb::RankStacks& out) {
  out.set_rank(rank);
  out.set_language("c++");
  std::string silent;
  for (const ThreadStackInfo& t : in.threads) {
    if (!t.answered) {
      silent += fmt::format("{}{} (tid {}): {}", silent.empty() ? "" : "; ", t.name, t.tid, t.note);
      continue;
    }
    pb::ThreadStack* thread = out.add_threads();
    thread->set_name(t.name);
    thread->set_main(t.main);
    for (const StackFrameInfo& f : t.frames) {
      pb::StackFrame* frame = thread->add_frames();
      frame->set_function(f.function);
      frame->set_file(f.file);
      frame->set_line(f.line);
    }
  }
  if (!silent.empty()) out.set_note("no stack from " + silent);
}

}  // namespace

AgentConnection::AgentConnection(const std::string& socket_path, std::string job_id, std::string token)
    : impl_(std::make_shared<Impl>()) {
  impl_->stub = pb::LocalAgent::NewStub(grpc::CreateChannel("unix:" + socket_path, grpc::InsecureChannelCredentials()));
  impl_->job_id = std::move(job_id);
  impl_->token = std::move(token);
}

AgentConnection::~AgentConnection() = default;

AgentRegistration AgentConnection::register_rank(int rank, Duration timeout) {
  pb::RegisterRequest req;
  impl_->authorize(req.mutable_auth());
  req.set_rank(rank);
  req.set_pid(static_cast<int32_t>(getpid()));
  pb::RegisterReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  check(impl_->stub->Register(&ctx, req, &reply), "registering with the local agent");
  AgentRegistration r;
  r.rank = reply.rank();
  r.local_rank = reply.local_rank();
  r.world_size = reply.world_size();
  r.local_world_size = reply.local_world_size();
  r.node_rank = reply.node_rank();
  r.generation = reply.generation();
  r.master_addr = reply.master_addr();
  r.master_port = reply.master_port();
  return r;
}

std::shared_ptr<Store> AgentConnection::store(int64_t generation) {
  return std::make_shared<AgentStore>(impl_, generation);
}

std::string AgentConnection::nccl_unique_id(int64_t generation, const std::string& comm_key, Duration timeout) {
  pb::NcclIdRequest req;
  impl_->authorize(req.mutable_auth());
  req.set_generation(generation);
  req.set_comm_key(comm_key);
  pb::NcclIdReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  check(impl_->stub->GetNcclId(&ctx, req, &reply), "getting the NCCL unique id from the local agent");
  return reply.unique_id();
}

bool AgentConnection::send_heartbeat(const WorkerHeartbeatData& hb, Duration timeout) {
  pb::WorkerHeartbeatRequest req;
  impl_->authorize(req.mutable_auth());
  pb::WorkerHeartbeat* out = req.mutable_heartbeat();
  out->set_rank(hb.rank);
  out->set_local_rank(hb.local_rank);
  out->set_pid(hb.pid);
  out->set_generation(hb.generation);
  out->set_step(hb.step);
  out->set_phase(hb.phase);
  out->set_step_seconds(hb.step_seconds);
  out->set_busy_seconds(hb.busy_seconds);
  out->set_activity(hb.activity);
  out->set_last_enqueued(hb.last_enqueued);
  out->set_last_started(hb.last_started);
  out->set_last_completed(hb.last_completed);
  out->set_exiting(hb.exiting);
  const SteadyTime now = std::chrono::steady_clock::now();
  for (const CollectiveRecord& r : hb.recent) {
    pb::CollectiveRecord* c = out->add_recent();
    c->set_sequence(r.sequence);
    c->set_op(r.op);
    c->set_bytes(r.bytes);
    c->set_dtype(r.dtype);
    c->set_state(to_string(r.state));
    c->set_age_ms(std::chrono::duration_cast<std::chrono::milliseconds>(now - r.enqueued).count());
  }
  if (hb.stacks) add_stacks(hb.rank, *hb.stacks, *req.mutable_stacks());
  pb::WorkerHeartbeatReply reply;
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  check(impl_->stub->Heartbeat(&ctx, req, &reply), "heartbeat to the local agent");
  return reply.dump_stacks();
}

}  // namespace ddp
