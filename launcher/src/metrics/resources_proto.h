#pragma once
// Conversions between the protocol's RankResources and the plain one, and
// how an agent heartbeat carries them: each rank's sample travels in
// AgentHeartbeatRequest.resources (by rank), beside the worker heartbeats,
// so a rank without heartbeats (a plain script) is sampled too. In C++ both
// ride in the same ForwardedReport list: a rank with no heartbeat is a
// report with resources_only set (see RankReport). Used by the thin adapters
// only (coordinator client and service).

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "coordinator/coordinator_job.h"
#include "ddplaunch/v1/coordinator.pb.h"
#include "health/heartbeat_proto.h"
#include "metrics/rank_resources.h"

namespace ddp {

/// What a heartbeat may carry, so a wrong or hostile agent cannot make the
/// coordinator keep much: GPUs per rank, throttle reasons per GPU, text length.
inline constexpr int kMaxGpusPerRank = 64;
inline constexpr int kMaxThrottleReasons = 16;
inline constexpr size_t kMaxGpuText = 96;

inline void to_proto(int rank, const RankResources& r, ::ddplaunch::v1::RankResources& out) {
  out.set_rank(rank);
  out.set_pid(r.pid);
  out.set_age_ms(std::chrono::duration_cast<std::chrono::milliseconds>(r.age).count());
  out.set_process_gone(r.process_gone);
  if (r.cpu_percent) out.set_cpu_percent(*r.cpu_percent);
  if (r.rss_bytes) out.set_rss_bytes(*r.rss_bytes);
  if (r.threads) out.set_threads(*r.threads);
  if (r.voluntary_ctx_switches) out.set_voluntary_ctx_switches(*r.voluntary_ctx_switches);
  if (r.nonvoluntary_ctx_switches) out.set_nonvoluntary_ctx_switches(*r.nonvoluntary_ctx_switches);
  if (r.written_bytes) out.set_written_bytes(*r.written_bytes);
  if (r.dirtied_bytes) out.set_dirtied_bytes(*r.dirtied_bytes);
  for (const GpuResources& g : r.gpus) {
    auto* o = out.add_gpus();
    o->set_index(g.index);
    o->set_uuid(g.uuid);
    if (g.util_percent) o->set_util_percent(*g.util_percent);
    if (g.mem_used_bytes) o->set_mem_used_bytes(*g.mem_used_bytes);
    if (g.mem_total_bytes) o->set_mem_total_bytes(*g.mem_total_bytes);
    if (g.rank_mem_bytes) o->set_rank_mem_bytes(*g.rank_mem_bytes);
    if (g.temperature_c) o->set_temperature_c(*g.temperature_c);
    if (g.power_w) o->set_power_w(*g.power_w);
    if (g.sm_clock_mhz) o->set_sm_clock_mhz(*g.sm_clock_mhz);
    for (const std::string& reason : g.throttle_reasons) o->add_throttle_reasons(reason);
    if (g.xid_errors) o->set_xid_errors(*g.xid_errors);
    if (g.last_xid) o->set_last_xid(*g.last_xid);
    if (g.ecc_errors) o->set_ecc_errors(*g.ecc_errors);
  }
}

inline RankResources from_proto(const ::ddplaunch::v1::RankResources& in) {
  RankResources r;
  r.pid = in.pid();
  r.age = heartbeat_age(in.age_ms());
  r.process_gone = in.process_gone();
  if (in.has_cpu_percent()) r.cpu_percent = in.cpu_percent();
  if (in.has_rss_bytes()) r.rss_bytes = in.rss_bytes();
  if (in.has_threads()) r.threads = in.threads();
  if (in.has_voluntary_ctx_switches()) r.voluntary_ctx_switches = in.voluntary_ctx_switches();
  if (in.has_nonvoluntary_ctx_switches()) r.nonvoluntary_ctx_switches = in.nonvoluntary_ctx_switches();
  if (in.has_written_bytes()) r.written_bytes = in.written_bytes();
  if (in.has_dirtied_bytes()) r.dirtied_bytes = in.dirtied_bytes();
  for (int i = 0; i < std::min(in.gpus_size(), kMaxGpusPerRank); ++i) {
    const auto& o = in.gpus(i);
    GpuResources g;
    g.index = o.index();
    g.uuid = o.uuid().substr(0, kMaxGpuText);
    if (o.has_util_percent()) g.util_percent = o.util_percent();
    if (o.has_mem_used_bytes()) g.mem_used_bytes = o.mem_used_bytes();
    if (o.has_mem_total_bytes()) g.mem_total_bytes = o.mem_total_bytes();
    if (o.has_rank_mem_bytes()) g.rank_mem_bytes = o.rank_mem_bytes();
    if (o.has_temperature_c()) g.temperature_c = o.temperature_c();
    if (o.has_power_w()) g.power_w = o.power_w();
    if (o.has_sm_clock_mhz()) g.sm_clock_mhz = o.sm_clock_mhz();
    for (int k = 0; k < std::min(o.throttle_reasons_size(), kMaxThrottleReasons); ++k) {
      g.throttle_reasons.push_back(o.throttle_reasons(k).substr(0, kMaxGpuText));
    }
    if (o.has_xid_errors()) g.xid_errors = o.xid_errors();
    if (o.has_last_xid()) g.last_xid = o.last_xid();
    if (o.has_ecc_errors()) g.ecc_errors = o.ecc_errors();
    r.gpus.push_back(std::move(g));
  }
  return r;
}

/// Agent side: the forwarded reports into the request (heartbeats into
/// workers, samples into resources).
inline void add_forwarded(const std::vector<ForwardedReport>& reports, ::ddplaunch::v1::AgentHeartbeatRequest& req) {
  for (const ForwardedReport& w : reports) {
    if (!w.report.resources_only) to_proto(w.report, w.held, *req.add_workers());
    if (w.report.resources) to_proto(w.report.rank, *w.report.resources, *req.add_resources());
    if (req.host().empty()) req.set_host(w.report.host);
  }
}

/// Coordinator side: the request's worker heartbeats and samples as one list;
/// a sample of a rank without a heartbeat here becomes a resources_only report.
inline std::vector<ForwardedReport> forwarded_reports(const ::ddplaunch::v1::AgentHeartbeatRequest& req) {
  std::vector<ForwardedReport> out;
  out.reserve(static_cast<size_t>(req.workers_size() + req.resources_size()));
  for (const auto& w : req.workers()) {
    out.push_back({from_proto(w, req.node_rank(), req.host()), heartbeat_age(w.held_ms())});
  }
  const size_t heartbeats = out.size();
  for (const auto& s : req.resources()) {
    const auto same = std::find_if(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(heartbeats),
                                   [&s](const ForwardedReport& f) { return f.report.rank == s.rank(); });
    if (same != out.begin() + static_cast<std::ptrdiff_t>(heartbeats)) {
      same->report.resources = from_proto(s);
      continue;
    }
    ForwardedReport f;
    f.report.rank = s.rank();
    f.report.node_rank = req.node_rank();
    f.report.host = req.host();
    f.report.pid = s.pid();
    f.report.resources_only = true;
    f.report.resources = from_proto(s);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ddp
