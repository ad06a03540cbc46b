#include "nccl/nccl_warning.h"

namespace ddp::nccl {
namespace {

using sv = std::string_view;

bool contains(sv s, sv p) { return s.find(p) != sv::npos; }

/// The peer named after `after` in s: "10.0.0.2<1234>" -> "10.0.0.2".
sv peer_after(sv s, sv after) {
  size_t p = s.find(after);
  if (p == sv::npos) return {};
  s.remove_prefix(p + after.size());
  while (!s.empty() && s[0] == ' ') s.remove_prefix(1);
  size_t e = s.find_first_of("< ,)");
  sv peer = s.substr(0, e);
  return peer;
}

int number_after(sv s, sv after) {
  size_t p = s.find(after);
  if (p == sv::npos) return -1;
  s.remove_prefix(p + after.size());
  int v = 0;
  size_t i = 0;
  while (i < s.size() && i < 9 && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
  return i == 0 ? -1 : v;
}

}  // namespace

WarningInfo classify_warning(std::string_view m) {
  WarningInfo w;
  if (contains(m, "no socket interface found") || contains(m, "No usable listening interface") ||
      contains(m, "no interface found") || contains(m, "No socket interface")) {
    w.cls = WarningClass::kInterfaceNotFound;
  } else if (contains(m, "Got completion from peer")) {
    w.cls = WarningClass::kIbCompletion;
    w.peer = peer_after(m, "from peer ");
    w.status = number_after(m, "with error ");
    if (w.status < 0) w.status = number_after(m, "status=");
  } else if (contains(m, "closed by remote peer") || contains(m, "Connection reset by peer")) {
    w.cls = WarningClass::kConnectionClosed;
    w.peer = peer_after(m, "remote peer ");
  } else if (contains(m, "Connect to ") && contains(m, "failed")) {
    w.cls = WarningClass::kConnectFailed;
    w.peer = peer_after(m, "Connect to ");
  } else if (contains(m, "Connection refused") || contains(m, "connect failed")) {
    w.cls = WarningClass::kConnectFailed;
  } else if (contains(m, "imeout") || contains(m, "timed out") || contains(m, "Timed out")) {
    w.cls = WarningClass::kTimeout;
  } else if (contains(m, "Cuda failure") || contains(m, "CUDA failure") || contains(m, "Cuda error")) {
    w.cls = WarningClass::kCuda;
  } else if (contains(m, "Proxy Call") || contains(m, "Proxy Service") || contains(m, "[Service thread]")) {
    w.cls = WarningClass::kProxy;
  } else if (contains(m, "Call to ") || contains(m, "system error")) {
    w.cls = WarningClass::kSystem;
  }
  return w;
}

std::string_view warning_class_name(WarningClass cls) {
  switch (cls) {
    case WarningClass::kInterfaceNotFound: return "interface_not_found";
    case WarningClass::kIbCompletion: return "ib_completion_error";
    case WarningClass::kConnectionClosed: return "connection_closed_by_peer";
    case WarningClass::kConnectFailed: return "connect_failed";
    case WarningClass::kTimeout: return "timeout";
    case WarningClass::kCuda: return "cuda_failure";
    case WarningClass::kProxy: return "proxy_failure";
    case WarningClass::kSystem: return "system_error";
    case WarningClass::kVersionMismatch: return "version_mismatch";
    case WarningClass::kOther: return "other";
  }
  return "other";
}

std::string_view warning_hint(WarningClass cls) {
  switch (cls) {
    case WarningClass::kInterfaceNotFound:
      return "NCCL found no usable network interface: set NCCL_SOCKET_IFNAME to an interface that exists and is up "
             "on every node (see `ip -br addr`), e.g. NCCL_SOCKET_IFNAME=eth0, or exclude with NCCL_SOCKET_IFNAME=^lo,docker";
    case WarningClass::kIbCompletion:
      return "InfiniBand/RoCE work completion error (status 12 = retry counter exceeded: the peer's HCA stopped "
             "answering): check the link to that peer (ibstat, cable, switch port counters) and raise NCCL_IB_TIMEOUT "
             "(e.g. 22) / NCCL_IB_RETRY_CNT on a congested fabric";
    case WarningClass::kConnectionClosed:
      return "the peer closed the connection: that peer most likely died first - read its log for the first error, "
             "this rank's failure is a consequence";
    case WarningClass::kConnectFailed:
      return "could not connect to a peer: check that the chosen interface (NCCL_SOCKET_IFNAME) is reachable between "
             "the nodes and that no firewall blocks NCCL's ports";
    case WarningClass::kTimeout:
      return "a network operation timed out: a peer is slow, hung or unreachable; compare with the other ranks' logs";
    case WarningClass::kCuda:
      return "a CUDA call inside NCCL failed: check the driver/runtime versions (nvidia-smi) and the device's health";
    case WarningClass::kProxy:
      return "NCCL's proxy thread failed; usually a consequence of an earlier network error on this or a peer rank";
    case WarningClass::kSystem:
      return "a system call inside NCCL failed (sockets, shared memory, /dev/shm size, ulimits)";
    case WarningClass::kVersionMismatch:
      return "ranks use different NCCL versions: every rank of a job must load the same libnccl (check LD_LIBRARY_PATH "
             "and the container images)";
    case WarningClass::kOther:
      return {};
  }
  return {};
}

}  // namespace ddp::nccl
