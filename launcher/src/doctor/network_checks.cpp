// The socket interfaces NCCL and Gloo will use, and the rendezvous port.

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "doctor/preflight.h"
#include "net/host_port.h"
#include "net/system_resolver.h"

namespace ddp {
namespace {

constexpr int kDefaultRdzvPort = 29400;  // torchrun's, as ddplaunch
constexpr int kConnectTimeoutMs = 300;

bool has_usable_address(const NetInterface& i) {
  return std::any_of(i.addresses.begin(), i.addresses.end(), [](const NetAddress& a) { return !a.loopback6; });
}

// The address NCCL would advertise: IPv4 first, never ::1.
std::string first_address(const NetInterface& i) {
  for (const auto& a : i.addresses) {
    if (!a.loopback6) return a.address;
  }
  return "";
}

std::string describe(const NetInterface& i) { return fmt::format("{} ({})", i.name, first_address(i)); }

std::string all_names(const std::vector<NetInterface>& ifs) {
  std::string s;
  for (const auto& i : ifs) s += (s.empty() ? "" : ", ") + i.name;
  return s.empty() ? "none" : s;
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// NCCL_SOCKET_IFNAME set: what it selects.
CheckResult nccl_ifname_check(const std::string& value, const std::vector<NetInterface>& ifs) {
  CheckResult c{"NCCL_SOCKET_IFNAME", CheckLevel::kOk, ""};
  const IfnameFilter f = parse_nccl_ifname(value);
  std::vector<const NetInterface*> chosen;
  for (const auto& i : ifs) {
    if (has_usable_address(i) && f.matches(i.name) != f.exclude) chosen.push_back(&i);
  }
  if (f.exclude) {
    if (chosen.empty()) {
      c.level = CheckLevel::kFail;
      c.reason = fmt::format("'{}' excludes every interface with an address (interfaces here: {})", value, all_names(ifs));
    } else {
      c.reason = fmt::format("'{}': NCCL uses {}", value, describe(*chosen.front()));
    }
    return c;
  }
  // Each listed name: present? addressed?
  std::vector<std::string> missing, unaddressed;
  for (const auto& name : f.names) {
    IfnameFilter one{false, f.exact, {name}};
    bool named = false, addressed = false;
    for (const auto& i : ifs) {
      if (!one.matches(i.name)) continue;
      named = true;
      addressed = addressed || has_usable_address(i);
    }
    if (!named) missing.push_back(name);
    else if (!addressed) unaddressed.push_back(name);
  }
  std::string problems;
  for (const auto& m : missing) {
    problems += fmt::format("{}no interface {}{}", problems.empty() ? "" : "; ", f.exact ? "named " : "", m);
  }
  for (const auto& u : unaddressed) {
    problems += fmt::format("{}{} has no IP address (down?)", problems.empty() ? "" : "; ", u);
  }
  if (chosen.empty()) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("'{}': {} (interfaces here: {}); NCCL will fail with \"no socket interface found\"", value,
                           problems.empty() ? "no interface matches" : problems, all_names(ifs));
  } else if (!problems.empty()) {
    c.level = CheckLevel::kWarn;
    c.reason = fmt::format("'{}': {}; NCCL uses {}", value, problems, describe(*chosen.front()));
  } else {
    c.reason = fmt::format("'{}': NCCL uses {}", value, describe(*chosen.front()));
    if (chosen.size() > 1) {
      std::string more;
      for (size_t k = 1; k < chosen.size(); ++k) more += (more.empty() ? "" : ", ") + chosen[k]->name;
      c.reason += fmt::format(" (also matches {})", more);
    }
  }
  return c;
}

// GLOO_SOCKET_IFNAME: exact names, comma separated.
CheckResult gloo_ifname_check(const std::string& value, const std::vector<NetInterface>& ifs) {
  CheckResult c{"GLOO_SOCKET_IFNAME", CheckLevel::kOk, ""};
  std::string problems, used;
  for (const auto& name : split_commas(value)) {
    auto it = std::find_if(ifs.begin(), ifs.end(), [&](const NetInterface& i) { return i.name == name; });
    if (it == ifs.end()) {
      problems += fmt::format("{}no interface {}", problems.empty() ? "" : "; ", name);
    } else if (!has_usable_address(*it)) {
      problems += fmt::format("{}{} has no IP address (down?)", problems.empty() ? "" : "; ", name);
    } else {
      used += (used.empty() ? "" : ", ") + describe(*it);
    }
  }
  if (split_commas(value).empty()) problems = "empty";
  if (!problems.empty()) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("'{}': {} (interfaces here: {}); Gloo will fail to start", value, problems, all_names(ifs));
  } else {
    c.reason = fmt::format("'{}': Gloo uses {}", value, used);
  }
  return c;
}

// NCCL_SOCKET_IFNAME unset: the interface that reaches the rendezvous host, or
// NCCL's own default choice on a single node.
CheckResult default_interface_check(const std::optional<std::string>& remote_host, int port,
                                    const std::vector<NetInterface>& ifs, const SystemProbe& p) {
  CheckResult c{"NCCL_SOCKET_IFNAME", CheckLevel::kOk, ""};
  if (remote_host && p.route_to) {
    const SocketOutcome route = p.route_to(*remote_host, port);
    if (route.error != 0) {
      c.level = CheckLevel::kWarn;
      c.reason = fmt::format("unset, and no route to {}: {}", *remote_host, route.message);
      return c;
    }
    std::string name = "?";
    for (const auto& i : ifs) {
      for (const auto& a : i.addresses) {
        if (a.address == route.local_address) name = i.name;
      }
    }
    c.reason = fmt::format("unset; {} ({}) reaches {} (NCCL picks its own interface; set NCCL_SOCKET_IFNAME={} to "
                           "pin it)",
                           name, route.local_address, *remote_host, name);
    return c;
  }
  // NCCL without the variable: anything but docker*, lo and virbr*, else lo.
  const IfnameFilter skip = parse_nccl_ifname("^docker,lo,virbr");
  for (const auto& i : ifs) {
    if (has_usable_address(i) && !skip.matches(i.name)) {
      c.reason = fmt::format("unset; NCCL would pick {} (the first interface other than lo, docker*, virbr*)", describe(i));
      return c;
    }
  }
  for (const auto& i : ifs) {
    if (has_usable_address(i) && i.name.rfind("lo", 0) == 0) {
      c.reason = fmt::format("unset; only {} has an address: single-node jobs only", describe(i));
      return c;
    }
  }
  c.level = CheckLevel::kWarn;
  c.reason = fmt::format("unset, and no interface has an IP address (interfaces here: {})", all_names(ifs));
  return c;
}

// The rendezvous host's name: does the system resolve it, to what, and would
// a resolver that asks DNS alone find it too? Every agent must resolve it.
CheckResult rendezvous_host_check(const std::string& host, const SystemProbe& p) {
  CheckResult c{"rendezvous host", CheckLevel::kOk, ""};
  const ResolvedHost system = p.resolve_host(host);
  if (!system.ok()) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("cannot resolve {} through the system ({}): check the name, /etc/hosts and DNS on "
                           "every node",
                           host, system.error);
    return c;
  }
  const std::string addresses = join_addresses(system.addresses);
  if (is_loopback_host(host)) {  // /etc/hosts' own business, never DNS's
    c.reason = fmt::format("{} resolves to {}: this machine only", host, addresses);
    return c;
  }
  const ResolvedHost dns = p.resolve_dns(host);
  if (dns.ok()) {
    const bool agree = std::is_permutation(dns.addresses.begin(), dns.addresses.end(), system.addresses.begin(),
                                           system.addresses.end());
    c.reason = agree ? fmt::format("{} resolves to {} (the system and DNS agree)", host, addresses)
                     : fmt::format("{} resolves to {} through the system; DNS alone says {}", host, addresses,
                                   join_addresses(dns.addresses));
    return c;
  }
  c.reason = fmt::format("{} resolves via the system but not via DNS ({}): {}; ddplaunch resolves names through "
                         "the system, but tools that ask DNS directly will not find it",
                         host, dns.error, addresses);
  // gRPC's c-ares resolver is such a tool; a user's GRPC_DNS_RESOLVER wins over ddplaunch's choice.
  const auto grpc_resolver = p.getenv ? p.getenv("GRPC_DNS_RESOLVER") : std::nullopt;
  if (grpc_resolver && *grpc_resolver != "native") {
    c.level = CheckLevel::kFail;
    c.reason += fmt::format(", and GRPC_DNS_RESOLVER={} in the environment makes ddplaunch's gRPC one of them: "
                            "unset it (or set it to native)",
                            *grpc_resolver);
  }
  return c;
}

// A port that this host should bind (free) or a remote one it should reach.
CheckResult port_check(const std::string& name, const std::string& flag, const std::string& host, int port,
                       const SystemProbe& p) {
  CheckResult c{name, CheckLevel::kOk, ""};
  const std::string where = format_host_port(host, port);
  const SocketOutcome bound = p.bind_port(host, port);
  if (bound.error == 0) {
    c.reason = fmt::format("{} is free on this host ({})", where, flag);
    return c;
  }
  if (bound.error == SocketOutcome::kUnresolved) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("{}: host {} does not resolve: {}", flag, host, bound.message);
    return c;
  }
  if (bound.error == EADDRINUSE) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("port {} is in use on {} ({}): another job or process holds it; pick another port", port,
                           host, flag);
    return c;
  }
  if (bound.error == EACCES) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("{}: binding port {} needs privileges (ports below 1024); pick a port above 1024", where, port);
    return c;
  }
  if (bound.error != EADDRNOTAVAIL) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("{}: cannot bind: {}", where, bound.message);
    return c;
  }
  // Not an address of this host: the coordinator is elsewhere.
  const SocketOutcome conn = p.connect_port(host, port, kConnectTimeoutMs);
  switch (conn.error) {
    case 0:
      c.reason = fmt::format("{} is reachable ({}; something listens there)", where, flag);
      break;
    case ECONNREFUSED:
      c.level = CheckLevel::kWarn;
      c.reason = fmt::format("{} answers but nothing listens on port {} yet ({}): fine before node 0 starts, else its "
                             "coordinator is down",
                             host, port, flag);
      break;
    case ETIMEDOUT:
      c.level = CheckLevel::kFail;
      c.reason = fmt::format("{} is unreachable: no answer within {} ms ({}): a firewall, a wrong address or the host "
                             "is down",
                             where, kConnectTimeoutMs, flag);
      break;
    case SocketOutcome::kUnresolved:
      c.level = CheckLevel::kFail;
      c.reason = fmt::format("{}: host {} does not resolve: {}", flag, host, conn.message);
      break;
    default:
      c.level = CheckLevel::kFail;
      c.reason = fmt::format("{} is unreachable ({}): {}", where, flag, conn.message);
  }
  return c;
}

}  // namespace

bool IfnameFilter::matches(const std::string& ifname) const {
  for (const auto& n : names) {
    if (exact ? ifname == n : ifname.compare(0, n.size(), n) == 0) return true;
  }
  return false;
}

IfnameFilter parse_nccl_ifname(const std::string& value) {
  IfnameFilter f;
  std::string rest = value;
  if (!rest.empty() && rest[0] == '^') {
    f.exclude = true;
    rest.erase(0, 1);
  }
  if (!rest.empty() && rest[0] == '=') {
    f.exact = true;
    rest.erase(0, 1);
  }
  for (auto& item : split_commas(rest)) {
    // NCCL allows NAME:PORT entries (for IB devices); the name is what counts.
    if (const auto colon = item.find(':'); colon != std::string::npos) item.resize(colon);
    if (!item.empty()) f.names.push_back(item);
  }
  return f;
}

std::string rdzv_endpoint_error(const std::string& endpoint) {
  std::string why;
  return parse_host_port(endpoint, why) ? "" : why;
}

std::vector<CheckResult> network_checks(const PreflightInputs& in, const SystemProbe& p) {
  std::vector<CheckResult> out;
  const std::vector<NetInterface> ifs = p.interfaces ? p.interfaces() : std::vector<NetInterface>{};
  std::optional<HostPort> rdzv;
  if (!in.rdzv_endpoint.empty()) {
    std::string why;
    rdzv = parse_host_port(in.rdzv_endpoint, why);
    if (!rdzv) {
      out.push_back({"rendezvous port", CheckLevel::kFail, fmt::format("--rdzv-endpoint '{}': {}", in.rdzv_endpoint, why)});
    } else if (!rdzv->port) {
      rdzv->port = kDefaultRdzvPort;
    }
  }

  // Interfaces.
  const auto nccl_if = p.getenv ? p.getenv("NCCL_SOCKET_IFNAME") : std::nullopt;
  if (nccl_if && !nccl_if->empty()) {
    out.push_back(nccl_ifname_check(*nccl_if, ifs));
  } else {
    std::optional<std::string> remote;
    int port = kDefaultRdzvPort;
    if (rdzv && !is_loopback_host(rdzv->host)) {
      remote = rdzv->host;
      port = *rdzv->port;
    } else if (in.master_port > 0 && !in.master_addr.empty() && !is_loopback_host(in.master_addr)) {
      remote = in.master_addr;
      port = in.master_port;
    }
    out.push_back(default_interface_check(remote, port, ifs, p));
  }
  if (const auto gloo_if = p.getenv ? p.getenv("GLOO_SOCKET_IFNAME") : std::nullopt) {
    out.push_back(gloo_ifname_check(*gloo_if, ifs));
  }

  // Ports.
  if (in.master_port > 0) {
    out.push_back(port_check("master port", "--master-port", in.master_addr.empty() ? "127.0.0.1" : in.master_addr,
                             in.master_port, p));
  }
  if (rdzv && !is_numeric_address(rdzv->host) && p.resolve_host && p.resolve_dns) {
    out.push_back(rendezvous_host_check(rdzv->host, p));
  }
  if (rdzv) out.push_back(port_check("rendezvous port", "--rdzv-endpoint", rdzv->host, *rdzv->port, p));
  if (in.master_port <= 0 && in.rdzv_endpoint.empty()) {
    out.push_back({"rendezvous port", CheckLevel::kOk,
                   "none given (--master-port, --rdzv-endpoint): ddplaunch picks a free port at launch"});
  }
  return out;
}

}  // namespace ddp
