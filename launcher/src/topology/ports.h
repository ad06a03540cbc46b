#pragma once
// TCP ports for MASTER_PORT: pick a free one, or check that a given one is.

#include <optional>
#include <string>
#include <utility>

namespace ddp {

/// A free port on host for MASTER_PORT, below the kernel's ephemeral range
/// where that leaves room (a random one of 10000..start-1 that binds now),
/// else the one the kernel picks for port 0. Another process could take it
/// before rank 0 listens on it (the launch time and the workers' imports):
/// below the ephemeral range only a process that binds that very port can,
/// where in it every outgoing connection on the machine may, the job's own
/// Gloo connections included. Throws UsageError when host does not resolve
/// to a local address.
int pick_free_port(const std::string& host);

/// The ephemeral port range in the form of
/// /proc/sys/net/ipv4/ip_local_port_range ("32768\t60999"); nullopt when
/// `text` is not two ports, the first not above the second.
std::optional<std::pair<int, int>> parse_port_range(const std::string& text);

/// This machine's ephemeral port range; Linux's default where it cannot be read.
std::pair<int, int> ephemeral_port_range();

/// Whether host:port can be bound here now (host is local and the port free).
bool can_bind(const std::string& host, int port);

/// Throws UsageError naming what the port is for, host and port when the
/// port cannot be bound.
void ensure_port_free(const std::string& host, int port, const std::string& what = "MASTER_PORT");

}  // namespace ddp
