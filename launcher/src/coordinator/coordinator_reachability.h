#pragma once
// Why an agent cannot reach its coordinator, in one line: the network's view
// first (the name, then TCP to each address: tcp_probe.h), then gRPC's own
// (a TLS handshake that fails, a port where no coordinator answers, gRPC's
// name lookup stuck on a resolver the user forced).
//
// Threading: the returned function is self-contained (it owns the channel it
// probes), so ConnectionDiagnosis may run it on any thread, even after the
// client that made it is gone.

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

namespace ddp {

/// host and port: the coordinator's endpoint; channel: the client's channel to
/// it; tls: whether this node uses TLS. The function returns "" when the
/// coordinator answers after all.
std::function<std::string()> coordinator_reachability_probe(const std::string& host, int port,
                                                            std::shared_ptr<grpc::Channel> channel, bool tls);

}  // namespace ddp
