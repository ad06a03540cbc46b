#include "metrics/resources_json.h"

#include <cmath>

namespace ddp {
namespace {

template <typename T>
void put(nlohmann::json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

// One decimal is all a percentage or a wattage needs on a page.
std::optional<double> rounded(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return std::nullopt;
  return std::round(*v * 10.0) / 10.0;
}

}  // namespace

nlohmann::json resources_to_json(const RankResources& r, WallTime now) {
  nlohmann::json j;
  j["pid"] = r.pid;
  const double age_s = std::chrono::duration<double>(r.age).count();
  j["age_s"] = std::round(age_s * 1000.0) / 1000.0;
  j["sampled_at"] = format_iso8601(now - std::chrono::duration_cast<WallTime::duration>(r.age));
  j["process_gone"] = r.process_gone;
  put(j, "cpu_percent", rounded(r.cpu_percent));
  put(j, "rss_bytes", r.rss_bytes);
  put(j, "threads", r.threads);
  put(j, "voluntary_ctx_switches", r.voluntary_ctx_switches);
  put(j, "nonvoluntary_ctx_switches", r.nonvoluntary_ctx_switches);
  put(j, "written_bytes", r.written_bytes);
  put(j, "dirtied_bytes", r.dirtied_bytes);
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuResources& g : r.gpus) {
    nlohmann::json o;
    o["index"] = g.index;
    o["uuid"] = g.uuid;
    put(o, "util_percent", rounded(g.util_percent));
    put(o, "mem_used_bytes", g.mem_used_bytes);
    put(o, "mem_total_bytes", g.mem_total_bytes);
    put(o, "rank_mem_bytes", g.rank_mem_bytes);
    put(o, "temperature_c", g.temperature_c);
    put(o, "power_w", rounded(g.power_w));
    put(o, "sm_clock_mhz", g.sm_clock_mhz);
    o["throttle_reasons"] = g.throttle_reasons;
    put(o, "xid_errors", g.xid_errors);
    put(o, "last_xid", g.last_xid);
    put(o, "ecc_errors", g.ecc_errors);
    gpus.push_back(std::move(o));
  }
  j["gpus"] = std::move(gpus);
  return j;
}

}  // namespace ddp
