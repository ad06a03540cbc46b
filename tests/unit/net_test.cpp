// The network helpers behind rendezvous endpoints: HOST[:PORT] parsing, host
// names resolved as the system resolves them, and the TCP probe that says why
// an endpoint cannot be reached. Sockets are real but stay on loopback; name
// lookups that would need a network use an injected resolver.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <future>

#include "coordinator/connection_diagnosis.h"
#include "net/host_port.h"
#include "net/system_resolver.h"
#include "net/tcp_probe.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// ------------------------------------------------------------ HOST[:PORT]

HostPort parsed(const std::string& text) {
  std::string why;
  const auto hp = parse_host_port(text, why);
  EXPECT_TRUE(hp) << text << ": " << why;
  return hp.value_or(HostPort{});
}

std::string refusal(const std::string& text) {
  std::string why;
  EXPECT_FALSE(parse_host_port(text, why)) << text;
  return why;
}

TEST(HostPort, NamesAndIpv4WithAndWithoutPort) {
  EXPECT_EQ(parsed("node1").host, "node1");
  EXPECT_FALSE(parsed("node1").port);
  EXPECT_EQ(parsed("node1:29400").host, "node1");
  EXPECT_EQ(parsed("node1:29400").port, 29400);
  EXPECT_EQ(parsed("10.0.0.11:1").host, "10.0.0.11");
  EXPECT_EQ(parsed("10.0.0.11:65535").port, 65535);
}

TEST(HostPort, Ipv6BracketedWithPortAndBare) {
  EXPECT_EQ(parsed("[fd00::1]:29400").host, "fd00::1");
  EXPECT_EQ(parsed("[fd00::1]:29400").port, 29400);
  EXPECT_EQ(parsed("[::1]").host, "::1");
  EXPECT_FALSE(parsed("[::1]").port);
  // more than one colon and no brackets: an address without a port
  EXPECT_EQ(parsed("fd00::1").host, "fd00::1");
  EXPECT_FALSE(parsed("fd00::1").port);
}

TEST(HostPort, MalformedEndpointsAreRefusedWithAReason) {
  EXPECT_EQ(refusal(""), "empty endpoint");
  EXPECT_EQ(refusal(":29400"), "missing host");
  EXPECT_EQ(refusal("node1:"), "empty port");
  EXPECT_EQ(refusal("node1:abc"), "port 'abc' is not a number");
  EXPECT_EQ(refusal("node1:-1"), "port '-1' is not a number");
  EXPECT_EQ(refusal("node1:0"), "port 0 is out of range 1-65535");
  EXPECT_EQ(refusal("node1:70000"), "port 70000 is out of range 1-65535");
  EXPECT_EQ(refusal("node1:1234567"), "port '1234567' is not a number");
  EXPECT_EQ(refusal("[::1"), "expected [IPv6] or [IPv6]:PORT");
  EXPECT_EQ(refusal("[]:1"), "expected [IPv6] or [IPv6]:PORT");
  EXPECT_EQ(refusal("[::1]x"), "expected ':PORT' after ']'");
  EXPECT_EQ(refusal("[::1]:"), "empty port");
}

TEST(HostPort, PortZeroOnlyWhereTheCallerBindsIt) {
  std::string why;
  const auto any = parse_host_port("localhost:0", why, /*any_port=*/true);
  ASSERT_TRUE(any) << why;
  EXPECT_EQ(any->port, 0);
  EXPECT_EQ(parse_host_port("[::1]:0", why, true)->port, 0);
  EXPECT_FALSE(parse_host_port("localhost:0", why));
  EXPECT_EQ(why, "port 0 is out of range 1-65535");
  EXPECT_FALSE(parse_host_port("localhost:70000", why, true));
}

TEST(HostPort, LoopbackHosts) {
  for (const char* host : {"localhost", "127.0.0.1", "127.1.2.3", "::1"}) EXPECT_TRUE(is_loopback_host(host)) << host;
  for (const char* host : {"node0", "10.0.0.1", "127.example.com", "fd00::1", "0.0.0.0", ""}) {
    EXPECT_FALSE(is_loopback_host(host)) << host;
  }
}

TEST(HostPort, FormatPutsIpv6InBrackets) {
  EXPECT_EQ(format_host_port("node1", 29400), "node1:29400");
  EXPECT_EQ(format_host_port("10.0.0.11", 80), "10.0.0.11:80");
  EXPECT_EQ(format_host_port("fd00::1", 29400), "[fd00::1]:29400");
  // what format writes, parse reads back
  EXPECT_EQ(parsed(format_host_port("fd00::1", 29400)).host, "fd00::1");
}

// --------------------------------------------------------------- resolving

TEST(SystemResolver, NumericAddressesResolveToThemselves) {
  EXPECT_THAT(resolve_host("127.0.0.1").addresses, ElementsAre("127.0.0.1"));
  EXPECT_THAT(resolve_host("::1").addresses, ElementsAre("::1"));
  EXPECT_THAT(resolve_host("fd00::11").addresses, ElementsAre("fd00::11"));
  EXPECT_TRUE(resolve_host("10.0.0.11").ok());
}

TEST(SystemResolver, LocalhostResolvesThroughTheHostsFile) {
  const ResolvedHost r = resolve_host("localhost");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.addresses.empty());
  for (const auto& a : r.addresses) EXPECT_TRUE(a == "127.0.0.1" || a == "::1") << a;
}

TEST(SystemResolver, ANameNoResolverCanAskForFailsWithTheResolversWords) {
  // an empty label cannot be put in a query, so this fails without any lookup
  const ResolvedHost r = resolve_host("node..cluster");
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_FALSE(r.error.empty());
}

TEST(SystemResolver, NumericAddressDetection) {
  EXPECT_TRUE(is_numeric_address("10.0.0.11"));
  EXPECT_TRUE(is_numeric_address("fd00::1"));
  EXPECT_TRUE(is_numeric_address("::1"));
  EXPECT_FALSE(is_numeric_address("node1"));
  EXPECT_FALSE(is_numeric_address("10.0.0"));
  EXPECT_FALSE(is_numeric_address("[fd00::1]"));
  EXPECT_EQ(join_addresses({"10.0.0.11", "fd00::1"}), "10.0.0.11, fd00::1");
}

// --------------------------------------------------------------- TCP probe

// A listening TCP socket on 127.0.0.1 (or a port that was just freed).
class Listener {
 public:
  explicit Listener(bool listening) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    if (listening) {
      EXPECT_EQ(listen(fd_, 4), 0);
    } else {
      close(fd_);
      fd_ = -1;
    }
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

HostResolver resolves_to(std::vector<std::string> addresses) {
  return [addresses](const std::string&) { return ResolvedHost{addresses, ""}; };
}

TEST(TcpProbe, ConnectsToAListeningPort) {
  Listener open(true);
  const TcpProbe p = probe_tcp("127.0.0.1", open.port(), 1000ms);
  EXPECT_TRUE(p.connected());
  EXPECT_EQ(describe(p), "127.0.0.1 accepts connections on port " + std::to_string(open.port()));
}

TEST(TcpProbe, AClosedPortIsRefused) {
  Listener closed(false);
  const TcpProbe p = probe_tcp("127.0.0.1", closed.port(), 1000ms);
  EXPECT_FALSE(p.connected());
  ASSERT_EQ(p.tried.size(), 1u);
  EXPECT_EQ(p.tried[0].error, ECONNREFUSED);
  EXPECT_EQ(describe(p),
            "127.0.0.1 refused the connection on port " + std::to_string(closed.port()) + " (nothing listens there)");
}

TEST(TcpProbe, ANameThatDoesNotResolveSaysSo) {
  const TcpProbe p = probe_tcp("n1", 29400, 1000ms, [](const std::string&) {
    return ResolvedHost{{}, "Name or service not known"};
  });
  EXPECT_FALSE(p.connected());
  EXPECT_TRUE(p.tried.empty());
  EXPECT_EQ(describe(p), "cannot resolve n1 (Name or service not known)");
}

TEST(TcpProbe, EveryAddressOfANameIsTriedInOrderUntilOneAccepts) {
  Listener open(true);
  // 127.0.0.2 is loopback too, but nothing listens there on this port
  const TcpProbe p = probe_tcp("n1", open.port(), 1000ms, resolves_to({"127.0.0.2", "127.0.0.1"}));
  ASSERT_EQ(p.tried.size(), 2u);
  EXPECT_EQ(p.tried[0].error, ECONNREFUSED);
  EXPECT_TRUE(p.connected());
  EXPECT_EQ(describe(p), "n1 (127.0.0.1) accepts connections on port " + std::to_string(open.port()));
}

TEST(TcpProbe, AddressesThatAllRefuseAreNamedTogether) {
  Listener closed(false);
  const TcpProbe p = probe_tcp("n1", closed.port(), 1000ms, resolves_to({"127.0.0.2", "127.0.0.1"}));
  EXPECT_EQ(describe(p), "n1 (127.0.0.2, 127.0.0.1) refused the connection on port " + std::to_string(closed.port()) +
                             " (nothing listens there)");
}

TEST(TcpProbe, TimeoutsAndMissingRoutesAreWordedForTheUser) {
  TcpProbe p{"n1", 29400, 1000ms, "", {{"10.0.0.11", ETIMEDOUT}}};
  EXPECT_EQ(describe(p),
            "n1 (10.0.0.11) did not answer on port 29400 within 1000 ms (a firewall, a wrong address or the host is "
            "down)");
  p.tried = {{"10.0.0.11", EHOSTUNREACH}};
  EXPECT_EQ(describe(p), "no route to n1 (10.0.0.11) (No route to host)");
  // different fates, each named
  p.tried = {{"fd00::11", ENETUNREACH}, {"10.0.0.11", ECONNREFUSED}};
  EXPECT_EQ(describe(p),
            "no route to n1 (fd00::11) (Network is unreachable); n1 (10.0.0.11) refused the connection on port 29400 "
            "(nothing listens there)");
  // a numeric endpoint is not repeated in brackets
  p.host = "10.0.0.11";
  p.tried = {{"10.0.0.11", ECONNREFUSED}};
  EXPECT_EQ(describe(p), "10.0.0.11 refused the connection on port 29400 (nothing listens there)");
}

// ----------------------------------------------------- ConnectionDiagnosis

TEST(ConnectionDiagnosis, RunsInTheBackgroundOneAtATime) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto calls = std::make_shared<std::atomic<int>>(0);
  ConnectionDiagnosis d([released, calls] {
    const int call = ++*calls;
    released.wait();
    return "diagnosis " + std::to_string(call);
  });
  EXPECT_EQ(d.latest(), "");
  EXPECT_EQ(d.running_for(), std::chrono::steady_clock::duration::zero());
  d.start();
  d.start();  // one is running: no second
  EXPECT_EQ(d.latest(), "");
  EXPECT_EQ(d.finish_within(1ms), "");  // still blocked
  release.set_value();
  // waits for the running one, or (if it finished just now) for a fresh one
  const std::string first = d.finish_within(10s);
  EXPECT_EQ(first, "diagnosis " + std::to_string(calls->load()));
  EXPECT_EQ(d.latest(), first);
  // none running now: a fresh diagnosis, and its answer
  const int before = calls->load();
  EXPECT_EQ(d.finish_within(10s), "diagnosis " + std::to_string(before + 1));
  EXPECT_EQ(d.running_for(), std::chrono::steady_clock::duration::zero());
}

}  // namespace
}  // namespace ddp
