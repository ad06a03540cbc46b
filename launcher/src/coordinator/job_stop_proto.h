#pragma once
// Conversions between the protocol's JobStop and the plain one the
// membership logic works on. Used by the thin adapters only (the coordinator
// service and client).

#include <chrono>

#include "ddplaunch/v1/coordinator.pb.h"
#include "membership/job_stop.h"

namespace ddp {

inline void to_proto(const JobStop& stop, ddplaunch::v1::JobStop& out) {
  out.set_at_next_boundary(!stop.stop_at_step);
  out.set_stop_at_step(stop.stop_at_step.value_or(0));
  out.set_reason(stop.reason);
  out.set_stop_timeout_ms(std::chrono::duration_cast<std::chrono::milliseconds>(stop.stop_timeout).count());
  out.set_pending(stop.pending);
}

inline JobStop from_proto(const ddplaunch::v1::JobStop& in) {
  JobStop stop;
  if (!in.at_next_boundary()) stop.stop_at_step = in.stop_at_step();
  stop.reason = in.reason();
  stop.stop_timeout = std::chrono::milliseconds(in.stop_timeout_ms());
  stop.pending = in.pending();
  return stop;
}

}  // namespace ddp
