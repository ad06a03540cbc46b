#pragma once
// Conversions between the plain types and their gRPC/protobuf forms, for
// the adapters only (the service and the client).

#include <grpcpp/grpcpp.h>

#include "coordinator/coordinator_job.h"
#include "ddp/common/status.h"
#include "ddplaunch/v1/coordinator.pb.h"

namespace ddp {

/// Trailing metadata key the coordinator puts on every refusal it sends. A
/// client can then tell the coordinator's own answer ("rendezvous timed out",
/// DeadlineExceeded) from a transport failure with the same code, even when
/// the connection has closed by the time the client looks at it.
inline constexpr char kCoordinatorAnsweredKey[] = "ddplaunch-coordinator-answered";

inline grpc::Status to_grpc(const Status& s) {
  return s.ok() ? grpc::Status::OK : grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

inline Status from_grpc(const grpc::Status& s) {
  return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

inline GenerationState from_pb(::ddplaunch::v1::GenerationState s) {
  switch (s) {
    case ::ddplaunch::v1::STOPPING: return GenerationState::kStopping;
    case ::ddplaunch::v1::RESTARTING: return GenerationState::kRestarting;
    case ::ddplaunch::v1::FINISHED: return GenerationState::kFinished;
    default: return GenerationState::kRunning;
  }
}

inline ::ddplaunch::v1::GenerationState to_pb(GenerationState s) {
  switch (s) {
    case GenerationState::kStopping: return ::ddplaunch::v1::STOPPING;
    case GenerationState::kRestarting: return ::ddplaunch::v1::RESTARTING;
    case GenerationState::kFinished: return ::ddplaunch::v1::FINISHED;
    case GenerationState::kRunning: return ::ddplaunch::v1::RUNNING;
  }
  return ::ddplaunch::v1::RUNNING;
}

}  // namespace ddp
