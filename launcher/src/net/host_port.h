#pragma once
// HOST[:PORT] as users write endpoints (torchrun's --rdzv-endpoint, MASTER_ADDR,
// `doctor --rdzv-endpoint`): a name or IPv4 address with an optional port,
// "[IPv6]" or "[IPv6]:PORT", or a bare IPv6 address (more than one colon, no
// brackets), which has no port. The one parser of the project; pure.

#include <optional>
#include <string>

namespace ddp {

struct HostPort {
  std::string host;         // without brackets: "fd00::1"
  std::optional<int> port;  // 1-65535 when given (0 only where the caller allowed it)
};

/// Parses text; on malformed input returns nullopt and sets why to a short
/// reason ("empty port", "port 'x' is not a number", "port 70000 is out of
/// range 1-65535", "missing host", "expected [IPv6] or [IPv6]:PORT", ...).
/// Port 0 ("any free port", as torchrun's single-node `localhost:0`) is
/// refused unless any_port is set: an endpoint is usually something other
/// machines dial, and they cannot dial port 0.
std::optional<HostPort> parse_host_port(const std::string& text, std::string& why, bool any_port = false);

/// A name or address that always means this machine: "localhost", 127.x.x.x,
/// "::1". Other names of this machine are not known without asking the system.
bool is_loopback_host(const std::string& host);

/// host:port as a user or gRPC writes it back: IPv6 hosts get brackets
/// ("[fd00::1]:29400"), everything else stays as is ("node1:29400").
std::string format_host_port(const std::string& host, int port);

}  // namespace ddp
