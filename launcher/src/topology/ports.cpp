#include "topology/ports.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "cli/usage_error.h"
#include "net/tcp_bind.h"

namespace ddp {
namespace {

// The bound port, or -errno; a host that does not resolve is a usage error.
int try_bind(const std::string& host, int port) {
  const BindOutcome bound = try_tcp_bind(host, port);
  if (!bound.resolve_error.empty()) {
    throw UsageError(fmt::format("--master-addr '{}' does not resolve: {}", host, bound.resolve_error));
  }
  return bound.ok() ? bound.port : -bound.error;
}

}  // namespace

std::optional<std::pair<int, int>> parse_port_range(const std::string& text) {
  std::istringstream in(text);
  int first = 0;
  int last = 0;
  std::string rest;
  if (!(in >> first >> last) || (in >> rest) || first < 1 || last > 65535 || first > last) return std::nullopt;
  return std::make_pair(first, last);
}

std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  std::stringstream text;
  text << in.rdbuf();
  return parse_port_range(text.str()).value_or(std::make_pair(32768, 60999));
}

int pick_free_port(const std::string& host) {
  constexpr int kLowest = 10000;  // below: the well-known and registered services more often
  constexpr int kTries = 32;
  const int start = ephemeral_port_range().first;
  if (start > kLowest + kTries) {
    std::random_device seed;
    std::mt19937 gen(seed());
    std::uniform_int_distribution<int> candidate(kLowest, start - 1);
    for (int i = 0; i < kTries; ++i) {
      const int port = candidate(gen);
      if (try_bind(host, port) == port) return port;
    }
  }
  const int port = try_bind(host, 0);
  if (port < 0) throw UsageError(fmt::format("cannot bind any port on {}: {}", host, std::strerror(-port)));
  return port;
}

bool can_bind(const std::string& host, int port) {
  try {
    return try_bind(host, port) >= 0;
  } catch (const UsageError&) {
    return false;  // does not resolve: not us
  }
}

void ensure_port_free(const std::string& host, int port, const std::string& what) {
  const int rc = try_bind(host, port);
  if (rc < 0) throw UsageError(fmt::format("cannot use {}:{} as {}: {}", host, port, what, std::strerror(-rc)));
}

}  // namespace ddp
