#pragma once
// EndpointFailover: the production CoordinatorFailover. It knows the job's
// --rdzv-endpoint list; moving to an endpoint retargets the agent's
// CoordinatorClient there, after starting that endpoint's coordinator in
// this process when this machine can listen on it (its host is local and no
// other agent took the port first).
//
// Threading: move_to() and hosting() run on the event-loop thread.

#include <memory>
#include <optional>
#include <vector>

#include "agent/coordinator_failover.h"
#include "coordinator/coordinator_client.h"
#include "coordinator/coordinator_server.h"
#include "net/host_port.h"

namespace ddp {

class EndpointFailover final : public CoordinatorFailover {
 public:
  /// endpoints: the job's list, each with its port. job: the job as this
  /// agent would host it (config from its own command line). client: the
  /// agent's (not owned; outlives this).
  EndpointFailover(std::vector<HostPort> endpoints, HostedJob job, TlsFiles tls, CoordinatorOptions options,
                   CoordinatorClient& client);

  int endpoints() const override { return static_cast<int>(endpoints_.size()); }
  std::string endpoint(int epoch) const override;
  bool move_to(const Takeover& takeover) override;

  /// Once this agent hosts entry epoch and its world formed: tells every
  /// earlier entry's coordinator, should it still run (a partition that
  /// healed), that the job moved on (a call with this epoch fences it:
  /// CoordinatorJob::check_epoch). Best effort, probe_timeout per entry.
  void fence_earlier(int epoch, Duration probe_timeout);

  /// The coordinator this agent hosts for entry epoch since a failover, or null.
  CoordinatorServer* hosting(int epoch) const { return hosted_epoch_ == epoch ? hosted_.get() : nullptr; }

 private:
  std::vector<HostPort> endpoints_;
  HostedJob job_;
  TlsFiles tls_;
  CoordinatorOptions options_;
  CoordinatorClient& client_;
  std::unique_ptr<CoordinatorServer> hosted_;
  int hosted_epoch_ = -1;  // the entry hosted_ serves
  int fenced_below_ = 0;   // entries before this one were told (fence_earlier)
};

/// An agent starting (or restarting) while its job may already have failed
/// over: the latest later endpoint whose coordinator runs the job, each
/// asked for probe_timeout (latest first). nullopt: none does, and the job
/// starts at the first endpoint.
std::optional<int> find_taken_over_job(const std::vector<HostPort>& endpoints, const std::string& job_id,
                                       const std::string& token, const TlsFiles& tls, Duration probe_timeout);

}  // namespace ddp
