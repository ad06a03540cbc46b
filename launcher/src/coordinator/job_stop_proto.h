#pragma once
// Conversions between the protocol's JobStop and the plain one the
// membership logic works on. Used by the thin adapters only (the coordinator
// service and client).

#include <algorithm>
#include <chrono>
#include <cstdint>

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

/// Values from the wire are bounded: a negative step is 0, a timeout lies
/// within [0, JobStop::kMaxStopTimeoutMs] (a huge one would overflow a
/// deadline on the clock).
inline int64_t bounded_stop_timeout_ms(int64_t ms) { return std::clamp<int64_t>(ms, 0, JobStop::kMaxStopTimeoutMs); }

inline JobStop from_proto(const ddplaunch::v1::JobStop& in) {
  JobStop stop;
  if (!in.at_next_boundary()) stop.stop_at_step = std::max<int64_t>(in.stop_at_step(), 0);
  stop.reason = in.reason();
  stop.stop_timeout = std::chrono::milliseconds(bounded_stop_timeout_ms(in.stop_timeout_ms()));
  stop.pending = in.pending();
  return stop;
}

}  // namespace ddp
