#include "coordinator/coordinator_reachability.h"

#include <fmt/format.h>

#include <chrono>

#include "ddplaunch/v1/coordinator.grpc.pb.h"
#include "net/grpc_name_resolution.h"
#include "net/tcp_probe.h"

namespace ddp {
namespace {

namespace pb = ::ddplaunch::v1;

constexpr auto kConnectTimeout = std::chrono::milliseconds(1000);  // per address
constexpr auto kRpcTimeout = std::chrono::seconds(2);

bool mentions_tls(const std::string& why) {
  for (const char* word : {"andshake", "SSL", "TLS", "ertificate"}) {
    if (why.find(word) != std::string::npos) return true;
  }
  return false;
}

// TCP reaches the port, yet gRPC does not get through: say what gRPC says.
std::string grpc_level_problem(const TcpProbe& tcp, const grpc::Status& s, bool tls) {
  const std::string reachable = describe(tcp);
  const std::string& why = s.error_message();
  if (mentions_tls(why)) {
    return fmt::format("{}, but the TLS handshake fails ({}): do all nodes use matching --tls-cert, --tls-key and "
                       "--tls-ca?",
                       reachable, why);
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::string line = fmt::format("{}, but gRPC has not connected within {} s (its own name lookup or handshake "
                                   "is still pending)",
                                   reachable, kRpcTimeout.count());
    if (const auto forced = grpc_resolver_chosen_by_user(); forced && *forced != "native") {
      line += fmt::format(": GRPC_DNS_RESOLVER={} in the environment makes gRPC look names up its own way; unset "
                          "it so that names resolve as the system resolves them",
                          *forced);
    }
    return line;
  }
  return fmt::format("{}, but gRPC cannot talk to it ({}): {}", reachable, why,
                     tls ? "is that a ddplaunch coordinator serving TLS?"
                         : "is that a ddplaunch coordinator, and does it expect TLS (--tls-*) from this node?");
}

}  // namespace

std::function<std::string()> coordinator_reachability_probe(const std::string& host, int port,
                                                            std::shared_ptr<grpc::Channel> channel, bool tls) {
  return [host, port, channel = std::move(channel), tls]() -> std::string {
    const TcpProbe tcp = probe_tcp(host, port, kConnectTimeout);
    if (!tcp.connected()) return describe(tcp);
    // Fails fast (no wait_for_ready) with gRPC's reason when it cannot connect.
    pb::StatusRequest req;
    pb::StatusReply reply;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + kRpcTimeout);
    const grpc::Status s = pb::Coordinator::NewStub(channel)->GetStatus(&ctx, req, &reply);
    const bool unreached =
        s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    return unreached ? grpc_level_problem(tcp, s, tls) : "";  // answered, if only to refuse: reachable
  };
}

}  // namespace ddp
