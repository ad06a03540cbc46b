#pragma once
// LocalAgentServer: what an agent serves its own workers on a Unix-domain
// socket (mode 0600 in a 0700 directory): registration, heartbeats (kept on
// the WorkerHealthBoard for the agent's own heartbeat to forward), and the
// job's KV store, barriers and NCCL IDs, relayed to the coordinator without
// blocking a thread. Workers thus never open control connections across the network.
//
// Ownership: owns its gRPC server and socket file (removed on destruction).
// Threading: gRPC threads call the service; set_layout() may be called from
// the event loop between generations.

#include <memory>
#include <mutex>
#include <string>

#include "agent/worker_health_board.h"
#include "coordinator/coordinator_client.h"

namespace grpc {
class Server;
}

namespace ddp {

/// What Register answers: the current generation's layout of this node.
struct LocalLayout {
  Assignment assignment;
  int nproc = 1;
};

class LocalAgentService;

class LocalAgentServer {
 public:
  /// Listens on socket_path; throws std::runtime_error when it cannot.
  /// health: where worker heartbeats go (not owned; outlives the server).
  LocalAgentServer(const std::string& socket_path, CoordinatorClient& client, WorkerHealthBoard& health,
                   std::string job_id, std::string token);
  ~LocalAgentServer();
  LocalAgentServer(const LocalAgentServer&) = delete;
  LocalAgentServer& operator=(const LocalAgentServer&) = delete;

  void set_layout(const LocalLayout& layout);
  const std::string& socket_path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<LocalAgentService> service_;
  std::unique_ptr<grpc::Server> server_;
};

/// A private per-user directory for agent sockets: $XDG_RUNTIME_DIR or
/// /tmp/ddplaunch-<uid>, created 0700.
std::string agent_socket_dir();

/// Removes the agent sockets (<pid>.sock, <pid>.py.sock) and unmapped
/// collective announcement files (<pid>.py.<rank pid>.ann) in `dir` whose
/// agent process is gone: an agent killed with SIGKILL cannot remove its
/// own, and they would pile up until reboot. Other files are left alone.
/// Best effort, never throws.
void remove_sockets_of_dead_agents(const std::string& dir);

}  // namespace ddp
