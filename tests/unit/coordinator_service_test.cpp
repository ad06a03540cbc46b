// The gRPC adapters end to end over in-process channels (no network): what a
// client sends reaches the coordinator's logic and comes back, refusals carry
// the right status codes, and the local agent service relays to it.

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <limits>
#include <thread>

#include "agent/local_agent_service.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/grpc_status.h"
#include "coordinator/job_stop_proto.h"
#include "health/heartbeat_proto.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
namespace pb = ::ddplaunch::v1;

class CoordinatorServiceTest : public ::testing::Test {
 protected:
  CoordinatorServiceTest() : server(ServerAddress{"", 0}, TlsFiles{}) {
    server.coordinator().create_job("job", "secret", {2, 4, 0});
  }
  std::unique_ptr<CoordinatorClient> client(const std::string& token = "secret", const std::string& job = "job") {
    return std::make_unique<CoordinatorClient>(server.in_process_channel(), job, token);
  }
  static JoinParams params(int node_rank, int nnodes = 2, int nproc = 4) {
    JoinParams p;
    p.host = "host" + std::to_string(node_rank);
    p.nproc = nproc;
    p.node_rank = node_rank;
    p.nnodes = nnodes;
    p.master_port = 5000 + node_rank;
    return p;
  }
  CoordinatorServer server;
};

// An agent's join can reach node 0's coordinator the moment its port
// listens: the hosted job must exist by then, or the joiner makes a job of
// its own that nobody else joins.
TEST(CoordinatorServerHostedJob, ExistsBeforeTheFirstJoinCanArrive) {
  CoordinatorServer hosting(ServerAddress{"127.0.0.1", 0}, TlsFiles{}, {}, HostedJob{"own", "secret", {2, 4, 0}, std::nullopt});
  std::shared_ptr<CoordinatorJob> job;
  EXPECT_TRUE(hosting.coordinator().find("own", "secret", job).ok());
  // A joiner cannot make a job of that id from its own view any more.
  const Status wrong = hosting.coordinator().find_for_join("own", "other", JobConfig{1, 1, 0}, job);
  EXPECT_EQ(wrong.code(), StatusCode::kUnauthenticated) << wrong.message();
}

TEST_F(CoordinatorServiceTest, CreatingAJobAJoinerAlreadyMadeIsRefused) {
  std::shared_ptr<CoordinatorJob> job;
  ASSERT_TRUE(server.coordinator().find_for_join("early", "t", JobConfig{2, 1, 0}, job).ok());
  EXPECT_THROW(server.coordinator().create_job("early", "t", JobConfig{2, 1, 0}), std::logic_error);
  std::shared_ptr<CoordinatorJob> same;
  ASSERT_TRUE(server.coordinator().find("early", "t", same).ok());
  EXPECT_EQ(same, job) << "the joiner's job is kept";
}

TEST_F(CoordinatorServiceTest, TwoAgentsJoinAndShareOneNcclId) {
  auto a = client();
  auto b = client();
  auto joined_b = std::async(std::launch::async, [&] {
    JoinResult r;
    EXPECT_TRUE(b->join(params(1), 0, 10s, r).ok());
    return r;
  });
  JoinResult ra;
  ASSERT_TRUE(a->join(params(0), 0, 10s, ra).ok());
  const JoinResult rb = joined_b.get();
  EXPECT_EQ(ra.assignment.rank_start, 0);
  EXPECT_EQ(rb.assignment.rank_start, 4);
  EXPECT_EQ(rb.assignment.world_size, 8);
  EXPECT_EQ(rb.assignment.master_addr, "host0");
  EXPECT_EQ(rb.assignment.master_port, 5000);

  std::string id_a, id_b;
  ASSERT_TRUE(a->nccl_id(0, "world", 5s, id_a).ok());
  ASSERT_TRUE(b->nccl_id(0, "world", 5s, id_b).ok());
  EXPECT_EQ(id_a.size(), 128u);
  EXPECT_EQ(id_a, id_b);
  std::string other;
  ASSERT_TRUE(a->nccl_id(0, "pipeline", 5s, other).ok());
  EXPECT_NE(other, id_a);
}

TEST_F(CoordinatorServiceTest, KvSetThenGetAndWrongGenerationIsRefused) {
  auto a = client();
  auto b = client();
  auto joined = std::async(std::launch::async, [&] {
    JoinResult r;
    return b->join(params(1), 0, 10s, r).ok();
  });
  JoinResult r;
  ASSERT_TRUE(a->join(params(0), 0, 10s, r).ok());
  ASSERT_TRUE(joined.get());
  ASSERT_TRUE(a->kv_set(0, "addr/0", std::string("\0\1binary", 8), 5s).ok());
  std::optional<std::string> v;
  ASSERT_TRUE(b->kv_get(0, "addr/0", 5s, v).ok());
  EXPECT_EQ(v, std::string("\0\1binary", 8));
  EXPECT_EQ(b->kv_get(3, "addr/0", 5s, v).code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorServiceTest, WrongTokenIsUnauthenticatedAndUnknownJobNotFound) {
  JoinResult r;
  const Status wrong = client("guess")->join(params(0), 0, 2s, r);
  EXPECT_EQ(wrong.code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(wrong.message().find("secret"), std::string::npos);  // never echoes the token
  EXPECT_EQ(client("secret", "other")->heartbeat(0, 0, 2s).code(), StatusCode::kNotFound);
}

// The coordinator marks its own refusals, so a joiner keeps "rendezvous timed
// out" even when node 0 has exited (and its port refuses) by the time the
// joiner reads the answer: a closed connection alone would look unreachable.
TEST_F(CoordinatorServiceTest, ItsRefusalsCarryTheCoordinatorsMark) {
  auto stub = pb::Coordinator::NewStub(server.in_process_channel());
  const auto join = [&stub](const std::string& token, int64_t timeout_ms, grpc::ClientContext& ctx,
                            const std::string& job = "job") {
    pb::JoinRequest req;
    req.mutable_auth()->set_job_id(job);
    req.mutable_auth()->set_token(token);
    req.set_host("host0");
    req.set_nproc(4);
    req.set_node_rank(0);
    req.set_nnodes(2);
    req.set_join_timeout_ms(timeout_ms);
    pb::JoinReply reply;
    return stub->Join(&ctx, req, &reply);
  };
  const auto marked = [](const grpc::ClientContext& ctx) {
    return ctx.GetServerTrailingMetadata().count(kCoordinatorAnsweredKey) == 1;
  };
  grpc::ClientContext timed_out_ctx;
  const grpc::Status timed_out = join("secret", 200, timed_out_ctx);  // node 1 never comes
  EXPECT_EQ(timed_out.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(timed_out.error_message().find("rendezvous timed out"), std::string::npos) << timed_out.error_message();
  EXPECT_TRUE(marked(timed_out_ctx));
  grpc::ClientContext refused_ctx;
  EXPECT_EQ(join("guess", 200, refused_ctx).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(marked(refused_ctx));
  // gRPC's own deadline, with no answer from the coordinator, is not marked.
  server.coordinator().create_job("quiet", "secret", {2, 4, 0});
  grpc::ClientContext expired_ctx;
  expired_ctx.set_deadline(std::chrono::system_clock::now() + 100ms);
  EXPECT_EQ(join("secret", 10'000, expired_ctx, "quiet").error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_FALSE(marked(expired_ctx));
}

TEST_F(CoordinatorServiceTest, MismatchedAgentIsRefusedAndTheJobGoesOn) {
  JoinResult r;
  const Status mismatch = client()->join(params(0, /*nnodes=*/3), 0, 2s, r);
  EXPECT_EQ(mismatch.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.message().find("mismatch"), std::string::npos);
  const Status nproc = client()->join(params(0, 2, /*nproc=*/2), 0, 2s, r);
  EXPECT_NE(nproc.message().find("nproc mismatch"), std::string::npos);
  // The right agents still form the job.
  auto b = client();
  auto joined = std::async(std::launch::async, [&] {
    JoinResult rb;
    return b->join(params(1), 0, 10s, rb).ok();
  });
  EXPECT_TRUE(client()->join(params(0), 0, 10s, r).ok());
  EXPECT_TRUE(joined.get());
}

TEST_F(CoordinatorServiceTest, OversizedValueIsRefused) {
  auto a = client();
  // A generous deadline: under ThreadSanitizer, moving a megabyte through
  // gRPC's and protobuf's instrumented inline code takes some 10 s of CPU.
  EXPECT_EQ(a->kv_set(0, "big", std::string((1 << 20) + 1, 'x'), 120s).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a->kv_set(0, std::string(5000, 'k'), "v", 120s).code(), StatusCode::kResourceExhausted);
}

TEST_F(CoordinatorServiceTest, FailureOnOneNodeIsSeenByTheOthersWatch) {
  auto a = client();
  auto b = client();
  auto joined = std::async(std::launch::async, [&] {
    JoinResult r;
    return b->join(params(1), 0, 10s, r).ok();
  });
  JoinResult r;
  ASSERT_TRUE(a->join(params(0), 0, 10s, r).ok());
  ASSERT_TRUE(joined.get());
  auto watched = std::async(std::launch::async, [&] {
    GenerationView v;
    EXPECT_TRUE(a->watch(0, 0, GenerationState::kRunning, 10s, v).ok());
    return v;
  });
  NodeOutcome failed;
  failed.node_rank = 1;
  failed.exit_code = 3;
  failed.failed_rank = 6;
  failed.description = "rank 6 failed: exit code 3";
  ASSERT_TRUE(b->report_outcome(0, failed, 5s).ok());
  const GenerationView v = watched.get();
  EXPECT_EQ(v.state, GenerationState::kStopping);
  EXPECT_EQ(v.failed_rank, 6);
  EXPECT_EQ(v.reason, "rank 6 failed: exit code 3");
}

TEST_F(CoordinatorServiceTest, LocalAgentServiceRegistersAndRelaysOnAPrivateSocket) {
  const auto dir = std::filesystem::temp_directory_path() / ("ddp_local_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto upstream = client();
  const std::string path = (dir / "agent.sock").string();
  {
    WorkerHealthBoard health(SystemClock::instance());
    LocalAgentServer local(path, *upstream, health, "job", "secret");
    Assignment a;
    a.node_rank = 1;
    a.rank_start = 4;
    a.world_size = 8;
    a.nnodes = 2;
    local.set_layout({a, 4});
    struct stat st{};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);

    auto stub = pb::LocalAgent::NewStub(grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
    pb::RegisterRequest reg;
    reg.mutable_auth()->set_job_id("job");
    reg.mutable_auth()->set_token("secret");
    reg.set_rank(6);
    pb::RegisterReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 5s);
    ASSERT_TRUE(stub->Register(&ctx, reg, &reply).ok());
    EXPECT_EQ(reply.local_rank(), 2);
    EXPECT_EQ(reply.world_size(), 8);

    // A relayed KV set lands in the coordinator's store.
    pb::KvSetRequest set;
    *set.mutable_auth() = reg.auth();
    set.set_key("k");
    set.set_value("v");
    pb::KvSetReply set_reply;
    grpc::ClientContext ctx2;
    ctx2.set_deadline(std::chrono::system_clock::now() + 5s);
    ASSERT_TRUE(stub->KvSet(&ctx2, set, &set_reply).ok());
    std::optional<std::string> v;
    ASSERT_TRUE(upstream->kv_get(0, "k", 5s, v).ok());
    EXPECT_EQ(v, "v");

    // A worker with the wrong token is turned away.
    reg.mutable_auth()->set_token("nope");
    grpc::ClientContext ctx3;
    ctx3.set_deadline(std::chrono::system_clock::now() + 5s);
    EXPECT_EQ(stub->Register(&ctx3, reg, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_FALSE(std::filesystem::exists(path));  // removed with the server
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ddp

namespace ddp {
namespace {

TEST(PeerHost, TakesTheAddressOutOfGrpcPeerStrings) {
  EXPECT_EQ(peer_host("ipv4:10.0.0.2:5000"), "10.0.0.2");
  EXPECT_EQ(peer_host("ipv6:%5B::1%5D:5000"), "::1");
  EXPECT_EQ(peer_host("ipv6:[fe80::1]:80"), "fe80::1");
}

// Found by coordinator_rpc_fuzz: counts of milliseconds from the wire (a
// collective's age, a heartbeat's time held, a call's wait) became
// Duration's nanoseconds unchecked, and past 2^63 ns that overflowed.
TEST(ProtocolDurations, AgesAndWaitsFromTheWireAreClampedNotOverflowed) {
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  pb::WorkerHeartbeat hb;
  hb.set_rank(1);
  hb.add_recent()->set_age_ms(kHuge);
  hb.add_recent()->set_age_ms(-5);
  hb.add_recent()->set_age_ms(1500);
  const RankReport r = from_proto(hb, 0, "h");
  ASSERT_EQ(r.recent.size(), 3u);
  EXPECT_EQ(r.recent[0].age, std::chrono::milliseconds(kMaxHeartbeatAgeMs));
  EXPECT_EQ(r.recent[1].age, Duration::zero());
  EXPECT_EQ(r.recent[2].age, 1500ms);
  EXPECT_EQ(heartbeat_age(kHuge), std::chrono::milliseconds(kMaxHeartbeatAgeMs));
  EXPECT_EQ(call_wait(kHuge), std::chrono::milliseconds(CoordinatorLimits::kMaxWaitMs));
  EXPECT_EQ(call_wait(-1), Duration::zero());
  EXPECT_EQ(call_wait(30000), 30s);
}

// An agent takes a JobStop from the coordinator's replies: values a broken
// or hostile peer sends are bounded before they meet the clock.
TEST(JobStopProto, ValuesFromTheWireAreBounded) {
  pb::JobStop wire;
  wire.set_at_next_boundary(false);
  wire.set_stop_at_step(-5);
  wire.set_stop_timeout_ms(std::numeric_limits<int64_t>::max());
  JobStop stop = from_proto(wire);
  EXPECT_EQ(stop.stop_at_step, 0);
  EXPECT_EQ(stop.stop_timeout, std::chrono::milliseconds(JobStop::kMaxStopTimeoutMs));
  wire.set_stop_timeout_ms(-1);
  EXPECT_EQ(from_proto(wire).stop_timeout, Duration::zero());
  wire.set_stop_timeout_ms(1500);
  wire.set_stop_at_step(42);
  stop = from_proto(wire);
  EXPECT_EQ(stop.stop_timeout, 1500ms);
  EXPECT_EQ(stop.stop_at_step, 42);
}

}  // namespace
}  // namespace ddp
