#include "coordinator/coordinator_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

#include "coordinator/coordinator_service.h"
#include "net/host_port.h"

namespace ddp {
namespace {

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(tls.ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                           : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({read_file(tls.key), read_file(tls.cert)});
  if (!tls.ca.empty()) options.pem_root_certs = read_file(tls.ca);
  return grpc::SslServerCredentials(options);
}

std::string listen_target(const ServerAddress& a) { return format_host_port(a.host, a.port); }

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("cannot read {}", path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

CoordinatorServer::CoordinatorServer(const ServerAddress& address, const TlsFiles& tls, CoordinatorOptions options,
                                     std::optional<HostedJob> hosted)
    : ids_(make_unique_id_source()),
      coordinator_(std::make_unique<Coordinator>(SystemClock::instance(), *ids_, options)),
      service_(std::make_unique<CoordinatorService>(*coordinator_)) {
  if (hosted) coordinator_->create_job(hosted->job_id, hosted->token, hosted->config, hosted->takeover);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which would let a second coordinator
  // silently share a port that is in use; a busy port must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const bool listen = !address.host.empty();
  if (listen) builder.AddListeningPort(listen_target(address), server_credentials(tls), &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || (listen && port_ == 0)) {
    throw std::runtime_error(fmt::format("cannot listen on {}:{} (address in use or not local)", address.host,
                                         address.port));
  }
  ticker_ = std::thread([this] {
    while (!ticker_done_.load()) {
      // While shutting down, keep answering calls that park late: the
      // server's shutdown waits for every one of them.
      if (stopping_.load()) {
        coordinator_->abort_all();
      } else {
        coordinator_->tick();
      }
      std::unique_lock<std::mutex> lock(ticker_mutex_);
      ticker_wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return ticker_done_.load(); });
    }
  });
}

CoordinatorServer::~CoordinatorServer() { shutdown(); }

void CoordinatorServer::wait() { server_->Wait(); }

std::shared_ptr<grpc::Channel> CoordinatorServer::in_process_channel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void CoordinatorServer::shutdown() {
  if (stopping_.exchange(true)) return;
  // A parked call holds its reactor until answered, and the server waits for
  // every reactor: answer them all before shutting down.
  coordinator_->abort_all();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  {
    std::lock_guard<std::mutex> lock(ticker_mutex_);
    ticker_done_ = true;
  }
  ticker_wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

}  // namespace ddp
