#include "net/system_resolver.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <resolv.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace ddp {
namespace {

std::string numeric_address(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = sa->sa_family == AF_INET6
                        ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr)
                        : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  inet_ntop(sa->sa_family, raw, text, sizeof text);
  return text;
}

void add_once(std::vector<std::string>& addresses, std::string address) {
  if (std::find(addresses.begin(), addresses.end(), address) == addresses.end()) addresses.push_back(std::move(address));
}

// One DNS query through the search list; appends the answers of type `type`.
// Returns the resolver's h_errno when nothing came back.
int query_dns(res_state state, const std::string& host, int type, std::vector<std::string>& addresses) {
  unsigned char answer[4096];
  const int length = res_nsearch(state, host.c_str(), ns_c_in, type, answer, sizeof answer);
  if (length < 0) return state->res_h_errno;
  ns_msg message;
  if (ns_initparse(answer, length, &message) != 0) return NO_RECOVERY;
  for (int i = 0; i < ns_msg_count(message, ns_s_an); ++i) {
    ns_rr record;
    if (ns_parserr(&message, ns_s_an, i, &record) != 0 || ns_rr_type(record) != type) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const int family = type == ns_t_aaaa ? AF_INET6 : AF_INET;
    const size_t size = type == ns_t_aaaa ? sizeof(in6_addr) : sizeof(in_addr);
    if (ns_rr_rdlen(record) == size && inet_ntop(family, ns_rr_rdata(record), text, sizeof text) != nullptr) {
      add_once(addresses, text);
    }
  }
  return NETDB_SUCCESS;
}

}  // namespace

ResolvedHost resolve_host(const std::string& host) {
  ResolvedHost out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0) {
    out.error = rc == EAI_SYSTEM ? std::strerror(errno) : gai_strerror(rc);
    return out;
  }
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) add_once(out.addresses, numeric_address(ai->ai_addr));
  freeaddrinfo(found);
  return out;
}

ResolvedHost resolve_host_via_dns(const std::string& host) {
  ResolvedHost out;
  struct __res_state state {};
  if (res_ninit(&state) != 0) {
    out.error = "cannot read the DNS configuration (resolv.conf)";
    return out;
  }
  state.retrans = 1;  // seconds per server and try: a diagnosis, not a job
  state.retry = 1;
  const int a_error = query_dns(&state, host, ns_t_a, out.addresses);
  const int aaaa_error = query_dns(&state, host, ns_t_aaaa, out.addresses);
  res_nclose(&state);
  if (out.addresses.empty()) {
    const int error = a_error != NETDB_SUCCESS ? a_error : aaaa_error;
    switch (error) {
      case HOST_NOT_FOUND:
        out.error = "DNS does not know the name";
        break;
      case TRY_AGAIN:
        out.error = "no DNS server answered";
        break;
      case NO_DATA:
        out.error = "DNS has no address record for the name";
        break;
      default:
        out.error = fmt::format("DNS lookup failed ({})", hstrerror(error));
    }
  }
  return out;
}

bool is_numeric_address(const std::string& host) {
  in6_addr v6{};
  in_addr v4{};
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

std::string join_addresses(const std::vector<std::string>& addresses) {
  return fmt::format("{}", fmt::join(addresses, ", "));
}

}  // namespace ddp
