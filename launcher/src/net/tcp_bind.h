#pragma once
// Whether host:port can be bound here now, the way a worker's TCP store binds
// it (SO_REUSEADDR: a port in TIME_WAIT from the last attempt counts as
// free). Used to pick MASTER_PORT, to check a given one, and by doctor.
//
// Threading: blocking (a name lookup) and thread-safe.

#include <string>

namespace ddp {

struct BindOutcome {
  int port = 0;   // the bound port (the kernel's choice for port 0)
  int error = 0;  // 0, or errno: EADDRINUSE (taken), EADDRNOTAVAIL (not an address of this host), ...
  std::string resolve_error;  // set when host does not resolve (error is then 0)
  bool ok() const { return error == 0 && resolve_error.empty(); }
};

/// Binds (and releases) the first address of host that accepts. Among the
/// failures, an address of this host that is busy wins over one that is not
/// this host's, so "in use" is what a user hears about.
BindOutcome try_tcp_bind(const std::string& host, int port);

}  // namespace ddp
