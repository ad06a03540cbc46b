#include "net/tcp_probe.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <map>


namespace ddp {
namespace {

// "n1 (10.0.0.11)", or just the address when the user gave an address.
std::string named(const std::string& host, const std::vector<std::string>& addresses) {
  if (addresses.size() == 1 && addresses.front() == host) return host;
  return fmt::format("{} ({})", host, join_addresses(addresses));
}

// What one kind of failure means, for the addresses that had it.
std::string failure_words(const std::string& who, int error, const TcpProbe& p) {
  switch (error) {
    case ECONNREFUSED:
      return fmt::format("{} refused the connection on port {} (nothing listens there)", who, p.port);
    case ETIMEDOUT:
      return fmt::format("{} did not answer on port {} within {} ms (a firewall, a wrong address or the host is down)",
                         who, p.port, p.timeout.count());
    case EHOSTUNREACH:
    case ENETUNREACH:
      return fmt::format("no route to {} ({})", who, std::strerror(error));
    default:
      return fmt::format("connecting to {} on port {} failed: {}", who, p.port, std::strerror(error));
  }
}

}  // namespace

int connect_with_timeout(const std::string& address, int port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return EINVAL;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, found->ai_protocol);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = poll(&p, 1, static_cast<int>(timeout.count()));
      err = ready == 0 ? ETIMEDOUT : 0;
      socklen_t len = sizeof err;
      if (ready > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return err;
}

TcpProbe probe_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, const HostResolver& resolve) {
  TcpProbe probe{host, port, timeout, "", {}};
  const ResolvedHost resolved = resolve(host);
  if (!resolved.ok()) {
    probe.resolve_error = resolved.error;
    return probe;
  }
  for (const std::string& address : resolved.addresses) {
    probe.tried.push_back({address, connect_with_timeout(address, port, timeout)});
    if (probe.tried.back().error == 0) break;
  }
  return probe;
}

std::string describe(const TcpProbe& p) {
  if (!p.resolve_error.empty()) return fmt::format("cannot resolve {} ({})", p.host, p.resolve_error);
  if (p.tried.empty()) return fmt::format("{} resolves to no address", p.host);
  if (p.connected()) {
    return fmt::format("{} accepts connections on port {}", named(p.host, {p.tried.back().address}), p.port);
  }
  // Addresses grouped by what happened to them, in the order first seen.
  std::vector<int> order;
  std::map<int, std::vector<std::string>> by_error;
  for (const AddressOutcome& a : p.tried) {
    if (by_error[a.error].empty()) order.push_back(a.error);
    by_error[a.error].push_back(a.address);
  }
  std::string line;
  for (const int error : order) {
    if (!line.empty()) line += "; ";
    line += failure_words(named(p.host, by_error[error]), error, p);
  }
  return line;
}

}  // namespace ddp
