#pragma once
// TCP ports for MASTER_PORT: pick a free one, or check that a given one is.

#include <string>

namespace ddp {

/// Binds port 0 on host and returns the port the kernel chose. Another process
/// could take it before the workers do; the window is the launch time.
/// Throws UsageError when host does not resolve to a local address.
int pick_free_port(const std::string& host);

/// Whether host:port can be bound here now (host is local and the port free).
bool can_bind(const std::string& host, int port);

/// Throws UsageError naming what the port is for, host and port when the
/// port cannot be bound.
void ensure_port_free(const std::string& host, int port, const std::string& what = "MASTER_PORT");

}  // namespace ddp
