#include "net/host_port.h"

#include <arpa/inet.h>
#include <fmt/format.h>

namespace ddp {
namespace {

// Digits only and at most 5 of them, so stoi cannot throw; 0 only where
// the caller allows it (see the header).
std::optional<int> parse_port(const std::string& text, std::string& why, bool any_port) {
  if (text.empty()) {
    why = "empty port";
    return std::nullopt;
  }
  if (text.size() > 5 || text.find_first_not_of("0123456789") != std::string::npos) {
    why = fmt::format("port '{}' is not a number", text);
    return std::nullopt;
  }
  const int port = std::stoi(text);
  if (port == 0 && any_port) return port;
  if (port < 1 || port > 65535) {
    why = fmt::format("port {} is out of range 1-65535", port);
    return std::nullopt;
  }
  return port;
}

}  // namespace

std::optional<HostPort> parse_host_port(const std::string& text, std::string& why, bool any_port) {
  const auto fail = [&why](std::string reason) {
    why = std::move(reason);
    return std::nullopt;
  };
  if (text.empty()) return fail("empty endpoint");
  HostPort hp;
  if (text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close == 1) return fail("expected [IPv6] or [IPv6]:PORT");
    hp.host = text.substr(1, close - 1);
    if (close + 1 == text.size()) return hp;
    if (text[close + 1] != ':') return fail("expected ':PORT' after ']'");
    hp.port = parse_port(text.substr(close + 2), why, any_port);
    if (!hp.port) return std::nullopt;
    return hp;
  }
  const auto colon = text.find(':');
  if (colon == std::string::npos || text.find(':', colon + 1) != std::string::npos) {
    hp.host = text;  // a name, an IPv4 address or a bare IPv6 address: no port
    return hp;
  }
  if (colon == 0) return fail("missing host");
  hp.host = text.substr(0, colon);
  hp.port = parse_port(text.substr(colon + 1), why, any_port);
  if (!hp.port) return std::nullopt;
  return hp;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

std::string format_host_port(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port) : fmt::format("{}:{}", host, port);
}

}  // namespace ddp
