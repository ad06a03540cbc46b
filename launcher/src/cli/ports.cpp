#include "cli/ports.h"

#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cli/usage_error.h"

namespace ddp {
namespace {

// Binds host:port the way a worker's TCP store would (SO_REUSEADDR, so a port
// in TIME_WAIT from the last attempt counts as free). Returns the bound port,
// or -errno.
int try_bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    throw UsageError(fmt::format("--master-addr '{}' does not resolve: {}", host, gai_strerror(rc)));
  }
  int result = -EADDRNOTAVAIL;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      result = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      close(fd);
      break;
    }
    result = -errno;
    close(fd);
  }
  freeaddrinfo(found);
  return result;
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
