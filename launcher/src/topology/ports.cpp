#include "topology/ports.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

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

int pick_free_port(const std::string& host) {
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
