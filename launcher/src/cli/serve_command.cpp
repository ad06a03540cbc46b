#include "cli/serve_command.h"

#include <CLI/CLI.hpp>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <thread>

#include "cli/number_checks.h"
#include "cli/usage_error.h"
#include "coordinator/coordinator_server.h"
#include "ddp/common/logging.h"
#include "exit_codes.h"
#include "http/metrics_server.h"
#include "process/stop_signals.h"

namespace ddp {

int run_serve_command(int argc, const char* const* argv) {
  ServerAddress address{"127.0.0.1", 29400};
  TlsFiles tls;
  double node_timeout_s = 15;
  std::string log_level = "info";
  int metrics_port = -1;
  CLI::App app{"ddplaunch serve: a standalone coordinator for many jobs", "ddplaunch serve"};
  app.add_option("--host", address.host, "address to listen on; 0.0.0.0 or :: for every interface")
      ->capture_default_str();
  app.add_option("--port", address.port, "TCP port; 0 picks a free one (printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--tls-cert", tls.cert, "PEM certificate: serve over TLS");
  app.add_option("--tls-key", tls.key, "PEM private key of --tls-cert");
  app.add_option("--tls-ca", tls.ca, "PEM CA: require client certificates signed by it");
  app.add_option("--node-timeout", node_timeout_s, "seconds without an agent heartbeat before its node counts as failed")
      ->check(positive_number())
      ->capture_default_str();
  app.add_option("--metrics-port", metrics_port,
                 "serve /metrics (Prometheus text), /status.json and a live page on this TCP port, on --host with "
                 "the same TLS; each job is shown only to requests with its token (Authorization: Bearer, or "
                 "?token=). 0 picks a free port (printed)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--log-level", log_level)->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return exit_code::kSuccess;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddplaunch serve: error: %s\n", printable_on_one_line(e.what()).c_str());
    return exit_code::kUsage;
  }
  if (tls.cert.empty() != tls.key.empty()) {
    std::fprintf(stderr, "ddplaunch serve: error: --tls-cert and --tls-key go together\n");
    return exit_code::kUsage;
  }
  init_logging("ddplaunch-serve", log_level);

  CoordinatorOptions options;
  options.node_timeout = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(node_timeout_s));
  std::unique_ptr<CoordinatorServer> server;
  try {
    server = std::make_unique<CoordinatorServer>(address, tls, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddplaunch serve: error: %s\n", printable_on_one_line(e.what()).c_str());
    return exit_code::kUsage;
  }
  // Declared after the coordinator's server, so destroyed before it.
  std::unique_ptr<MetricsServer> metrics;
  if (metrics_port >= 0) {
    MetricsServerConfig config;
    config.host = address.host;
    config.port = metrics_port;
    config.tls = tls;
    config.token_required = true;  // jobs made by their first joiner, each with its own token
    try {
      metrics = std::make_unique<MetricsServer>(config, coordinator_jobs(server->coordinator()));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddplaunch serve: error: %s\n", printable_on_one_line(e.what()).c_str());
      return exit_code::kUsage;
    }
    spdlog::info("metrics: {}metrics (Prometheus), {}status.json and the live page {} (with a job's token)",
                 metrics->url(), metrics->url(), metrics->url());
  }
  spdlog::info("coordinator serving on {}:{}{} (NCCL IDs: {})", address.host, server->port(),
               tls.enabled() ? " with TLS" : "", server->coordinator().ids().describe());
  // Machine-readable for scripts that asked for port 0.
  std::printf("listening on %s:%d\n", address.host.c_str(), server->port());
  if (metrics) std::printf("metrics on %s\n", metrics->url().c_str());
  std::fflush(stdout);

  // The handled signals are blocked (main): wait for one synchronously.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : stop_signals()) sigaddset(&stop, s);
  int signo = 0;
  sigwait(&stop, &signo);
  spdlog::info("received signal {}, shutting down", signo);
  metrics.reset();
  server->shutdown();
  return exit_code::for_signal(signo);
}

}  // namespace ddp
