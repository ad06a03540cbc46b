#pragma once
// CoordinatorServer: a Coordinator served over gRPC on host:port, with a
// timer thread that ticks it (timeouts, silent nodes). Used embedded in node
// 0's agent and by `ddplaunch serve`.
//
// Ownership: owns the Coordinator, its gRPC server and the timer thread;
// the destructor stops all three. Threading: the accessors are thread-safe.

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "coordinator/coordinator.h"

namespace grpc {
class Channel;
class Server;
}

namespace ddp {

class CoordinatorService;

struct TlsFiles {
  std::string cert;  // PEM; all three empty: plaintext
  std::string key;
  std::string ca;    // clients must present a certificate signed by it (mutual TLS)
  bool enabled() const { return !cert.empty(); }
};

struct ServerAddress {
  /// "127.0.0.1" (loopback only), "0.0.0.0"/"::" (all interfaces), or empty:
  /// no listening socket at all, in-process channels only (tests).
  std::string host;
  int port = 0;      // 0: pick a free one
};

/// The job a launching agent's own coordinator serves (not `ddplaunch serve`,
/// whose jobs are made by their first joiner).
struct HostedJob {
  std::string job_id;
  std::string token;
  JobConfig config;
  std::optional<Takeover> takeover;  // failover: the job continues here
};

class CoordinatorServer {
 public:
  /// Throws std::runtime_error naming host and port when it cannot listen.
  /// `hosted` is registered before the port listens: an agent whose join
  /// reached the coordinator first would otherwise make a job of that id from
  /// its own view, and its join would wait on that job for ever.
  CoordinatorServer(const ServerAddress& address, const TlsFiles& tls, CoordinatorOptions options = {},
                    std::optional<HostedJob> hosted = std::nullopt);
  ~CoordinatorServer();
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  int port() const { return port_; }
  /// A channel to this server that bypasses the network.
  std::shared_ptr<grpc::Channel> in_process_channel();
  Coordinator& coordinator() { return *coordinator_; }
  /// Blocks until shutdown() (from another thread or a signal handler's thread).
  void wait();
  void shutdown();

 private:
  std::unique_ptr<UniqueIdSource> ids_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ticker_done_{false};
  std::mutex ticker_mutex_;
  std::condition_variable ticker_wake_;
  std::thread ticker_;
};

/// Reads a whole file (PEM material); throws std::runtime_error naming it.
std::string read_file(const std::string& path);

}  // namespace ddp
