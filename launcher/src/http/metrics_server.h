#pragma once
// MetricsServer: the coordinator's read-only HTTP port (--metrics-port, and
// `ddplaunch serve --metrics-port`), beside its gRPC port:
//   /             the live page (status_page.h), which polls /status.json
//   /status.json  what `ddplaunch status --json` prints, for one job
//                 (?job=ID chooses among several, as under `serve`)
//   /metrics      Prometheus text (job_metrics.h) of every job shown
// Only GET (and HEAD). Jobs that need their token (http_auth.h) are shown
// to a request that presents it; otherwise the answer is 401. It listens on
// the coordinator's address with the coordinator's TLS files (a client
// certificate is then required when a CA is given, as for gRPC).
//
// Built on Debian's cpp-httplib (libcpp-httplib-dev, OpenSSL enabled).
//
// Ownership: owns the HTTP server and the thread that accepts connections;
// the requests run on a pool of kHandlerThreads threads of its own. The
// destructor stops accepting and joins them all: no handler runs after it
// returns. Destroy it before whatever the JobSource reads (the coordinator).
// Threading: the handlers call the JobSource concurrently (a job's
// status_json() takes that job's mutex for the time of a snapshot); the
// accessors are thread-safe. The token is never logged.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/coordinator_server.h"
#include "http/served_jobs.h"

namespace httplib {
class Server;
}

namespace ddp {

struct MetricsServerConfig {
  std::string host = "127.0.0.1";  // the coordinator's listening address
  int port = 0;                    // 0: a free one (see port())
  TlsFiles tls;                    // the coordinator's; none: plain HTTP
  /// Show a job only to requests that present its token.
  bool token_required = false;
  /// What the option is called in errors ("--metrics-port").
  std::string option = "--metrics-port";
};

class MetricsServer {
 public:
  static constexpr int kHandlerThreads = 4;

  /// Binds and starts serving. Throws std::runtime_error naming the option,
  /// host and port when it cannot listen, or the TLS files when they do not load.
  MetricsServer(const MetricsServerConfig& config, JobSource jobs);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  /// "http://HOST:PORT/" (https with TLS); an all-interfaces host reads as this machine's loopback.
  std::string url() const;

 private:
  void route();

  const MetricsServerConfig config_;
  const JobSource jobs_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::atomic<bool> accepting_ended_{false};
  std::thread acceptor_;
};

}  // namespace ddp
