#pragma once
// Why a TCP endpoint cannot be reached, in words a user can act on: the name
// does not resolve, the host refused the port, there is no route, or nothing
// answered in time. The agent runs it while its rendezvous waits for the
// coordinator; `ddplaunch doctor` runs it for --rdzv-endpoint.
//
// Threading: probe_tcp is blocking and thread-safe; the rest is pure.

#include <chrono>
#include <string>
#include <vector>

#include "net/system_resolver.h"

namespace ddp {

/// One address of the host and what a connection to it did.
struct AddressOutcome {
  std::string address;  // numeric
  int error = 0;        // 0: connected; else errno (ECONNREFUSED, EHOSTUNREACH, ETIMEDOUT, ...)
};

struct TcpProbe {
  std::string host;
  int port = 0;
  std::chrono::milliseconds timeout{0};  // per address
  std::string resolve_error;             // set when the name did not resolve
  /// Tried in resolution order until one connected (that one last).
  std::vector<AddressOutcome> tried;

  bool connected() const { return !tried.empty() && tried.back().error == 0; }
};

/// Resolves host with `resolve` and connects to its addresses in turn, each
/// bounded by timeout, stopping at the first that accepts. The connection is
/// closed at once.
TcpProbe probe_tcp(const std::string& host, int port, std::chrono::milliseconds timeout,
                   const HostResolver& resolve = resolve_host);

/// TCP connect to one numeric address with a timeout; 0 or an errno value.
int connect_with_timeout(const std::string& address, int port, std::chrono::milliseconds timeout);

/// One line on what stopped the connection, e.g. "cannot resolve n1 (Name or
/// service not known)", "n1 (10.0.0.11) refused the connection on port 29400",
/// "no route to n1 (10.0.0.11)", "n1 (10.0.0.11) did not answer on port 29400
/// within 1000 ms"; several addresses that fared differently are each named.
/// For a connected probe: "n1 (10.0.0.11) accepts connections on port 29400".
std::string describe(const TcpProbe& probe);

}  // namespace ddp
