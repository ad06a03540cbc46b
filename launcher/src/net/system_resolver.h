#pragma once
// Host names resolved the way the rest of the system resolves them: through
// getaddrinfo, so /etc/hosts, NIS, LDAP, systemd-resolved, ... in the order
// nsswitch.conf gives. This is how ddplaunch looks a name up wherever it does
// so itself (port checks, connection diagnosis, doctor); gRPC is pointed at the
// same resolver (grpc_name_resolution.h).
//
// Threading: every function is thread-safe and blocking (a lookup may wait
// for a slow name server).

#include <functional>
#include <string>
#include <vector>

namespace ddp {

struct ResolvedHost {
  /// Numeric addresses ("10.0.0.11", "fd00::1"), each once, in the order
  /// getaddrinfo gave them: the order a connection tries them.
  std::vector<std::string> addresses;
  /// Empty when the name resolved; else the resolver's own words
  /// ("Name or service not known", "Temporary failure in name resolution").
  std::string error;
  bool ok() const { return error.empty(); }
};

/// A host name lookup; injectable so callers can be tested without a network.
using HostResolver = std::function<ResolvedHost(const std::string& host)>;

/// getaddrinfo (AF_UNSPEC, TCP): the system's answer for host. A numeric
/// address resolves to itself without any lookup.
ResolvedHost resolve_host(const std::string& host);

/// DNS alone, as resolvers that bypass nsswitch do: the name servers and
/// search domains of resolv.conf, A and AAAA records, one try of about a
/// second per server. Used to tell a user that a name only /etc/hosts (or NIS,
/// LDAP) knows would not resolve for such tools.
ResolvedHost resolve_host_via_dns(const std::string& host);

/// Whether host is an IPv4 or IPv6 address rather than a name.
bool is_numeric_address(const std::string& host);

/// "10.0.0.11", "10.0.0.11, fd00::1": addresses for a message.
std::string join_addresses(const std::vector<std::string>& addresses);

}  // namespace ddp
