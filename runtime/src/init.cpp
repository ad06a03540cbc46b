#include "ddp/runtime/init.h"

#include "heartbeat_sender.h"
#include "sigterm_guard.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>

#include "ddp/runtime/agent_store.h"
#include "ddp/runtime/gloo_collective.h"
#include "ddp/runtime/tcp_store.h"
#if DDP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include "ddp/runtime/nccl_collective.h"
#endif

namespace ddp {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::optional<std::string>(v) : std::nullopt;
}

std::string required(const char* name) {
  if (auto v = env(name)) return *v;
  throw InitError(fmt::format(
      "ddp::init: {} is not set: start the program with ddplaunch, or set RANK, WORLD_SIZE, MASTER_ADDR and "
      "MASTER_PORT",
      name));
}

int int_env(const char* name, std::optional<int> fallback = std::nullopt) {
  const auto v = fallback && !env(name) ? std::to_string(*fallback) : required(name);
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (*end != '\0' || n < 0) throw InitError(fmt::format("ddp::init: {}='{}' is not a non-negative integer", name, v));
  return static_cast<int>(n);
}

std::unique_ptr<AgentConnection> join_via_agent(ProcessGroup& group, std::shared_ptr<Store>& store,
                                                const InitOptions& options) {
  auto connection = std::make_unique<AgentConnection>(required("DDPLAUNCH_AGENT_SOCKET"), required("DDPLAUNCH_JOB_ID"),
                                                      required("DDPLAUNCH_TOKEN"));
  AgentConnection& agent = *connection;
  const AgentRegistration reg = agent.register_rank(int_env("RANK"), options.timeout);
  group.rank = reg.rank;
  group.world_size = reg.world_size;
  group.local_rank = reg.local_rank;
  group.local_world_size = reg.local_world_size;
  group.node_rank = reg.node_rank;
  group.generation = reg.generation;
  group.source = "ddplaunch agent";
  store = agent.store(reg.generation);
  return connection;
}

void join_via_env(ProcessGroup& group, std::shared_ptr<Store>& store, const InitOptions& options) {
  group.rank = int_env("RANK");
  group.world_size = int_env("WORLD_SIZE");
  if (group.world_size == 0 || group.rank >= group.world_size) {
    throw InitError(fmt::format("ddp::init: RANK={} is outside WORLD_SIZE={}", group.rank, group.world_size));
  }
  group.local_rank = int_env("LOCAL_RANK", 0);
  group.local_world_size = int_env("LOCAL_WORLD_SIZE", 1);
  group.node_rank = int_env("GROUP_RANK", 0);
  group.generation = int_env("TORCHELASTIC_RESTART_COUNT", 0);
  const std::string addr = required("MASTER_ADDR");
  const int port = int_env("MASTER_PORT");
  group.source = fmt::format("environment ({}:{})", addr, port);
  // Generation-scoped keys, so a restarted job never reads a stale address.
  store = make_prefix_store(make_tcp_store(addr, port, group.rank == 0, group.world_size, options.timeout),
                            fmt::format("ddp/{}", group.generation));
}

/// Whether this process uses NCCL: "nccl", or "auto" on a build with NCCL that
/// sees a GPU. Throws InitError for an unknown backend or an NCCL that cannot be.
bool want_nccl(const std::string& backend) {
  if (backend != "auto" && backend != "gloo" && backend != "nccl") {
    throw InitError(fmt::format("ddp::init: unknown backend '{}' (auto, gloo or nccl)", backend));
  }
  if (backend == "gloo") return false;
#if DDP_HAVE_NCCL
  const bool have_gpu = cuda_device_count() > 0;
  if (backend == "nccl" && !have_gpu) {
    throw InitError("ddp::init: backend 'nccl' needs a CUDA device, and this process sees none "
                    "(check the driver and CUDA_VISIBLE_DEVICES); use 'gloo' on CPUs");
  }
  return have_gpu;
#else
  if (backend == "nccl") {
    throw InitError("ddp::init: backend 'nccl' is not available: this build of ddp_runtime has no NCCL "
                    "(CMake found no CUDA toolkit or NCCL); use 'gloo', or rebuild where both are installed");
  }
  return false;
#endif
}

#if DDP_HAVE_NCCL
/// Binds this rank's GPU (LOCAL_RANK modulo the visible devices) and builds the
/// NCCL communicator from the id the coordinator hands out (under the agent) or
/// that rank 0 made and put in the store (key "nccl/world").
std::unique_ptr<Collective> make_nccl_world(const ProcessGroup& group, const std::shared_ptr<Store>& store,
                                            AgentConnection* agent, const InitOptions& options) {
  const int devices = cuda_device_count();
  const int device = group.local_rank % devices;
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    throw InitError(fmt::format("ddp::init: cudaSetDevice({}) for local rank {} failed: {}", device, group.local_rank,
                                cudaGetErrorString(e)));
  }
  std::string id;
  try {
    if (agent != nullptr) {
      id = agent->nccl_unique_id(group.generation, "world", options.timeout);
    } else {
      const std::string key = "nccl/world";
      if (group.rank == 0) store->set(key, nccl_new_unique_id());
      store->wait({key}, options.timeout);
      id = store->get(key).value_or("");
    }
  } catch (const StoreError& err) {
    throw InitError(fmt::format("ddp::init: could not get the NCCL unique id ({}): {}", group.source, err.what()));
  }
  NcclOptions nccl;
  nccl.timeout = options.timeout;
  return make_nccl_collective(id, group.rank, group.world_size, device, nccl);
}
#endif

}  // namespace

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || found == nullptr) return "127.0.0.1";
  std::string result = "127.0.0.1";
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  // connect() on a datagram socket only picks the route and source address.
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char text[INET6_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      const void* raw = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (inet_ntop(local.ss_family, raw, text, sizeof text) != nullptr) result = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return result;
}

std::unique_ptr<ProcessGroup> init(const InitOptions& options) {
  const bool nccl = want_nccl(options.backend);  // refuses an impossible backend before joining
  // With --stop-timeout, a SIGTERM Slurm sends to every process must not end
  // this worker before the step boundary ddplaunch asks for (sigterm_guard.h).
  install_sigterm_guard_from_environment();
  auto group = std::make_unique<ProcessGroup>();
  std::unique_ptr<AgentConnection> agent;
  if (env("DDPLAUNCH_AGENT_SOCKET")) {
    agent = join_via_agent(*group, group->store_, options);
  } else if (options.allow_single_process && !env("RANK") && !env("WORLD_SIZE")) {
    group->store_ = make_in_memory_store();
    group->source = "single process (no launcher environment)";
  } else {
    join_via_env(*group, group->store_, options);
  }
  if (nccl) {
#if DDP_HAVE_NCCL
    group->collective_ = make_nccl_world(*group, group->store_, agent.get(), options);
#endif
  } else {
    GlooOptions gloo;
    gloo.interface_or_host = local_address_towards(env("MASTER_ADDR").value_or("127.0.0.1"));
    gloo.timeout = options.timeout;
    // DDP_GLOO_SHM=0: Gloo's TCP ring even within one host (for comparison runs).
    gloo.shared_memory = env("DDP_GLOO_SHM").value_or("1") != "0";
    group->collective_ =
        make_gloo_collective(make_prefix_store(group->store_, "gloo"), group->rank, group->world_size, gloo);
  }
  if (agent) {
    // Under ddplaunch: heartbeats to the agent from a thread of their own.
    AgentRegistration who;
    who.rank = group->rank;
    who.local_rank = group->local_rank;
    who.generation = group->generation;
    const auto interval = std::chrono::milliseconds(int_env("DDPLAUNCH_HEARTBEAT_INTERVAL_MS", 1000));
    group->agent_ = std::move(agent);
    group->heartbeat_ = std::make_unique<HeartbeatSender>(*group->agent_, who, group->progress_, *group->collective_,
                                                          std::max(interval, std::chrono::milliseconds(10)));
  }
  return group;
}

ProcessGroup::ProcessGroup() = default;
ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::stop_heartbeats() {
  if (heartbeat_) heartbeat_->stop();
}

}  // namespace ddp
