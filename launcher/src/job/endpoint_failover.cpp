#include "job/endpoint_failover.h"

#include <spdlog/spdlog.h>

#include <stdexcept>

#include "topology/ports.h"

namespace ddp {

EndpointFailover::EndpointFailover(std::vector<HostPort> endpoints, HostedJob job, TlsFiles tls,
                                   CoordinatorOptions options, CoordinatorClient& client)
    : endpoints_(std::move(endpoints)),
      job_(std::move(job)),
      tls_(std::move(tls)),
      options_(options),
      client_(client) {
  job_.config.endpoints = static_cast<int>(endpoints_.size());
}

std::string EndpointFailover::endpoint(int epoch) const {
  const HostPort& e = endpoints_.at(static_cast<size_t>(epoch));
  return format_host_port(e.host, e.port.value_or(0));
}

bool EndpointFailover::move_to(const Takeover& takeover) {
  const HostPort& e = endpoints_.at(static_cast<size_t>(takeover.epoch));
  const int port = e.port.value_or(0);
  // Binding the endpoint's own address succeeds only on its host.
  if (!hosted_ && can_bind(e.host, port)) {
    HostedJob job = job_;
    job.config.epoch = takeover.epoch;
    job.takeover = takeover;
    try {
      hosted_ = std::make_unique<CoordinatorServer>(ServerAddress{"0.0.0.0", port}, tls_, options_, job);
      hosted_epoch_ = takeover.epoch;
      spdlog::warn("this agent now hosts the job's coordinator at {} (epoch {}): generation {} forms with the "
                   "survivors of generation {}",
                   endpoint(takeover.epoch), takeover.epoch, takeover.generation, takeover.generation - 1);
    } catch (const std::runtime_error& err) {
      spdlog::info("another agent hosts the coordinator at {} ({})", endpoint(takeover.epoch), err.what());
    }
  }
  client_.retarget(endpoint(takeover.epoch), takeover.epoch);
  return hosted_epoch_ == takeover.epoch;
}

void EndpointFailover::fence_earlier(int epoch, Duration probe_timeout) {
  if (hosted_epoch_ != epoch || fenced_below_ >= epoch) return;
  for (int earlier = 0; earlier < epoch; ++earlier) {
    CoordinatorClient notice(endpoint(earlier), job_.job_id, job_.token, tls_);
    notice.retarget(endpoint(earlier), epoch);  // the call carries this epoch
    std::string json;
    const Status s = notice.status(probe_timeout, json);
    if (s.code() == StatusCode::kFailedPrecondition) {
      spdlog::warn("the coordinator at {} (epoch {}) was still running the job: it has been told to end its copy",
                   endpoint(earlier), earlier);
    }
  }
  fenced_below_ = epoch;
}

std::optional<int> find_taken_over_job(const std::vector<HostPort>& endpoints, const std::string& job_id,
                                       const std::string& token, const TlsFiles& tls, Duration probe_timeout) {
  for (int epoch = static_cast<int>(endpoints.size()) - 1; epoch > 0; --epoch) {
    const HostPort& e = endpoints[static_cast<size_t>(epoch)];
    const std::string target = format_host_port(e.host, e.port.value_or(0));
    CoordinatorClient probe(target, job_id, token, tls);
    std::string json;
    if (!probe.status(probe_timeout, json).ok()) continue;
    spdlog::warn("job {} runs at {} (--rdzv-endpoint entry {}): it failed over while this node was away; joining it "
                 "there",
                 job_id, target, epoch + 1);
    return epoch;
  }
  return std::nullopt;
}

}  // namespace ddp
