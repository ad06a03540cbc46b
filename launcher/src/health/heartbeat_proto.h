#pragma once
// Conversions between the protocol's WorkerHeartbeat and the plain
// RankReport the health logic works on. Used by the thin adapters only: the
// local agent service (worker -> agent), the coordinator client (agent ->
// coordinator) and the coordinator service.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "ddplaunch/v1/coordinator.pb.h"
#include "health/rank_health.h"

namespace ddp {

inline WorkerPhase phase_from_string(const std::string& name) {
  for (WorkerPhase p : {WorkerPhase::kData, WorkerPhase::kForward, WorkerPhase::kBackward, WorkerPhase::kOptimizer,
                        WorkerPhase::kCheckpoint, WorkerPhase::kCollective, WorkerPhase::kOther}) {
    if (name == to_string(p)) return p;
  }
  return WorkerPhase::kUnknown;
}

/// Ages (a collective's, a heartbeat's time held at the agent) beyond this
/// are clamped, as in the companion's messages: a larger count of
/// milliseconds would overflow Duration's nanoseconds (1e12 ms is 1e9 s).
inline constexpr int64_t kMaxHeartbeatAgeMs = 1'000'000'000'000;

/// An age in milliseconds from the protocol: negative is none.
inline Duration heartbeat_age(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, kMaxHeartbeatAgeMs));
}

inline CollectiveSeen from_proto(const ::ddplaunch::v1::CollectiveRecord& c) {
  return CollectiveSeen{c.sequence(), c.op(), c.bytes(), c.dtype(), c.state(), heartbeat_age(c.age_ms())};
}

inline void to_proto(const CollectiveSeen& c, ::ddplaunch::v1::CollectiveRecord& out) {
  out.set_sequence(c.sequence);
  out.set_op(c.op);
  out.set_bytes(c.bytes);
  out.set_dtype(c.dtype);
  out.set_state(c.state);
  out.set_age_ms(std::chrono::duration_cast<std::chrono::milliseconds>(c.age).count());
}

/// node_rank and host are the agent's (the worker does not send them).
inline RankReport from_proto(const ::ddplaunch::v1::WorkerHeartbeat& hb, int node_rank, const std::string& host) {
  RankReport r;
  r.rank = hb.rank();
  r.node_rank = node_rank;
  r.local_rank = hb.local_rank();
  r.host = host;
  r.pid = hb.pid();
  r.step = hb.step();
  r.phase = phase_from_string(hb.phase());
  r.step_seconds = hb.step_seconds();
  r.busy_seconds = hb.busy_seconds();
  r.sync_seconds = hb.sync_seconds();
  r.last_enqueued = hb.last_enqueued();
  r.last_started = hb.last_started();
  r.last_completed = hb.last_completed();
  r.exiting = hb.exiting();
  r.activity = hb.activity();
  r.peer_calls_done = hb.peer_calls_done();
  r.recent.reserve(static_cast<size_t>(hb.recent_size()));
  for (const auto& c : hb.recent()) r.recent.push_back(from_proto(c));
  r.subgroups.reserve(static_cast<size_t>(hb.subgroups_size()));
  for (const auto& g : hb.subgroups()) {
    SubgroupProgress p;
    p.group = g.group();
    p.ranks.assign(g.ranks().begin(), g.ranks().end());
    p.last_enqueued = g.last_enqueued();
    p.last_completed = g.last_completed();
    if (g.has_open()) p.open = from_proto(g.open());
    p.recent.reserve(static_cast<size_t>(g.recent_size()));
    for (const auto& c : g.recent()) p.recent.push_back(from_proto(c));
    r.subgroups.push_back(std::move(p));
  }
  r.peer_waits.reserve(static_cast<size_t>(hb.peer_waits_size()));
  for (const auto& w : hb.peer_waits()) {
    r.peer_waits.push_back(PeerWait{w.op(), w.peer(), w.bytes(), heartbeat_age(w.age_ms())});
  }
  return r;
}

inline void to_proto(const RankReport& r, Duration held, ::ddplaunch::v1::WorkerHeartbeat& hb) {
  hb.set_rank(r.rank);
  hb.set_local_rank(r.local_rank);
  hb.set_pid(r.pid);
  hb.set_step(r.step);
  hb.set_phase(to_string(r.phase));
  hb.set_step_seconds(r.step_seconds);
  hb.set_busy_seconds(r.busy_seconds);
  hb.set_sync_seconds(r.sync_seconds);
  hb.set_last_enqueued(r.last_enqueued);
  hb.set_last_started(r.last_started);
  hb.set_last_completed(r.last_completed);
  hb.set_exiting(r.exiting);
  hb.set_activity(r.activity);
  hb.set_peer_calls_done(r.peer_calls_done);
  for (const CollectiveSeen& c : r.recent) to_proto(c, *hb.add_recent());
  for (const SubgroupProgress& g : r.subgroups) {
    auto* out = hb.add_subgroups();
    out->set_group(g.group);
    out->mutable_ranks()->Add(g.ranks.begin(), g.ranks.end());
    out->set_last_enqueued(g.last_enqueued);
    out->set_last_completed(g.last_completed);
    if (g.open) to_proto(*g.open, *out->mutable_open());
    for (const CollectiveSeen& c : g.recent) to_proto(c, *out->add_recent());
  }
  for (const PeerWait& w : r.peer_waits) {
    auto* out = hb.add_peer_waits();
    out->set_op(w.op);
    out->set_peer(w.peer);
    out->set_bytes(w.bytes);
    out->set_age_ms(std::chrono::duration_cast<std::chrono::milliseconds>(w.age).count());
  }
  hb.set_held_ms(std::chrono::duration_cast<std::chrono::milliseconds>(held).count());
}

}  // namespace ddp
