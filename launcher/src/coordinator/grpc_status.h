#pragma once
// Conversions between ddp::Status and grpc::Status, for the adapters only.

#include <grpcpp/grpcpp.h>

#include "ddp/common/status.h"

namespace ddp {

inline grpc::Status to_grpc(const Status& s) {
  return s.ok() ? grpc::Status::OK : grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

inline Status from_grpc(const grpc::Status& s) {
  return s.ok() ? Status::Ok() : Status(static_cast<StatusCode>(s.error_code()), s.error_message());
}

}  // namespace ddp
