#include "http/job_metrics.h"

#include <algorithm>

#include "health/trouble_warnings.h"

namespace ddp {
namespace {

// The job's states in its status document: "rendezvous" while a generation's
// world forms, then its GenerationState names (coordinator/generation_view.h);
// and the hang verdict kinds (health/hang_detector.h): the label values.
const std::vector<std::string> kJobStates = {"rendezvous", "running", "stopping", "restarting", "finished"};
const std::vector<std::string> kHangKinds = {"silent_rank", "stuck_collective", "desync"};

void declare_all(PrometheusText& out) {
  using T = MetricType;
  out.declare("ddplaunch_job_generation", T::kGauge, "The job's generation (restart attempt) now running.");
  out.declare("ddplaunch_job_restarts_total", T::kCounter, "Restarts of the whole job used so far.");
  out.declare("ddplaunch_job_max_restarts", T::kGauge, "The job's restart budget (--max-restarts).");
  out.declare("ddplaunch_job_state", T::kGauge,
              "1 for the state the job's current generation is in (running, stopping, restarting, finished), "
              "0 for the others.");
  out.declare("ddplaunch_job_world_size", T::kGauge, "Ranks in the job's current generation.");
  out.declare("ddplaunch_job_nodes", T::kGauge, "Nodes in the job's current generation.");
  out.declare("ddplaunch_job_monitored_ranks", T::kGauge, "Ranks whose heartbeats the coordinator has received.");
  out.declare("ddplaunch_job_elapsed_seconds", T::kGauge, "Seconds since the coordinator took the job on.");
  out.declare("ddplaunch_job_seconds_since_progress", T::kGauge,
              "Seconds since any rank of the job last made progress (a step or a collective).");
  out.declare("ddplaunch_job_failed", T::kGauge, "1 when the current generation has a root-cause failure.");
  out.declare("ddplaunch_job_hang_verdict", T::kGauge,
              "1 when the current generation's failure is a hang verdict of this kind, else 0.");
  out.declare("ddplaunch_job_hang_verdicts_total", T::kCounter,
              "Hang verdicts of this kind given in every generation of the job so far.");
  out.declare("ddplaunch_job_rendezvous_seconds", T::kGauge,
              "How long the last rendezvous took, when the coordinator reports it.");
  out.declare("ddplaunch_job_teardown_seconds", T::kGauge,
              "How long the last teardown took, when the coordinator reports it.");
  out.declare("ddplaunch_job_warnings_total", T::kCounter,
              "Warnings given in the current generation (stragglers, idle or throttled GPUs, Xid and ECC errors, "
              "memory close to full); /status.json lists them.");
  out.declare("ddplaunch_rank_step", T::kGauge,
              "The rank's training step (rises while it trains; starts again after a restart).");
  out.declare("ddplaunch_rank_step_seconds", T::kGauge, "Duration of the rank's last finished step.");
  out.declare("ddplaunch_rank_heartbeat_age_seconds", T::kGauge, "Seconds since the rank's last heartbeat.");
  out.declare("ddplaunch_rank_open_collectives", T::kGauge, "Collectives the rank has enqueued but not completed.");
  out.declare("ddplaunch_rank_exited", T::kGauge, "1 once the rank's process has exited.");
  out.declare("ddplaunch_rank_phase", T::kGauge,
              "1 for the phase the rank is in (data, forward, backward, optimizer, checkpoint, other, unknown), "
              "0 for the others.");
  out.declare("ddplaunch_rank_resources_age_seconds", T::kGauge, "Age of the rank's latest resource sample.");
  out.declare("ddplaunch_rank_cpu_percent", T::kGauge, "CPU use of the rank's process, percent of one core.");
  out.declare("ddplaunch_rank_rss_bytes", T::kGauge, "Resident memory of the rank's process.");
  out.declare("ddplaunch_rank_threads", T::kGauge, "Threads of the rank's process.");
  out.declare("ddplaunch_rank_context_switches_total", T::kCounter,
              "Context switches of the rank's process since it started (kind: voluntary, nonvoluntary).");
  out.declare("ddplaunch_rank_gpu_utilization_percent", T::kGauge, "Utilisation of a GPU the rank uses (device-wide).");
  out.declare("ddplaunch_rank_gpu_memory_used_bytes", T::kGauge, "Memory used on a GPU the rank uses (device-wide).");
  out.declare("ddplaunch_rank_gpu_memory_total_bytes", T::kGauge, "Memory of a GPU the rank uses.");
  out.declare("ddplaunch_rank_gpu_temperature_celsius", T::kGauge, "Temperature of a GPU the rank uses.");
  out.declare("ddplaunch_rank_gpu_power_watts", T::kGauge, "Power draw of a GPU the rank uses.");
  out.declare("ddplaunch_rank_gpu_sm_clock_hertz", T::kGauge, "SM clock of a GPU the rank uses.");
  out.declare("ddplaunch_rank_gpu_xid_errors_total", T::kCounter,
              "Critical Xid errors of a GPU the rank uses, since its agent started watching.");
  out.declare("ddplaunch_rank_gpu_ecc_errors_total", T::kCounter,
              "Volatile uncorrected ECC errors of a GPU the rank uses.");
  out.declare("ddplaunch_rank_warning", T::kGauge,
              "1 for each warning given about the rank in this generation (kind: straggler, gpu_underused, "
              "gpu_throttled, gpu_xid, gpu_ecc, memory_full; gpu: the GPU's index for the GPU kinds).");
}

bool is_warning_kind(const std::string& kind) {
  for (int k = 0; k < kTroubleKinds; ++k) {
    if (kind == to_string(static_cast<TroubleKind>(k))) return true;
  }
  return false;
}

bool has_number(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number();
}

double number(const nlohmann::json& j, const char* key) { return j[key].get<double>(); }

std::string text_of(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key)) return "";
  const nlohmann::json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return v.dump();
}

void add_if_number(PrometheusText& out, const char* name, const MetricLabels& labels, const nlohmann::json& j,
                   const char* key) {
  if (has_number(j, key)) out.add(name, labels, number(j, key));
}

void add_resources(PrometheusText& out, const MetricLabels& labels, const nlohmann::json& res) {
  if (!res.is_object()) return;
  add_if_number(out, "ddplaunch_rank_resources_age_seconds", labels, res, "age_s");
  add_if_number(out, "ddplaunch_rank_cpu_percent", labels, res, "cpu_percent");
  add_if_number(out, "ddplaunch_rank_rss_bytes", labels, res, "rss_bytes");
  add_if_number(out, "ddplaunch_rank_threads", labels, res, "threads");
  for (const char* kind : {"voluntary", "nonvoluntary"}) {
    MetricLabels with_kind = labels;
    with_kind.emplace_back("kind", kind);
    add_if_number(out, "ddplaunch_rank_context_switches_total", with_kind, res,
                  (std::string(kind) + "_ctx_switches").c_str());
  }
  if (!res.contains("gpus") || !res["gpus"].is_array()) return;
  size_t i = 0;
  for (const nlohmann::json& gpu : res["gpus"]) {
    if (!gpu.is_object()) continue;
    MetricLabels g = labels;
    g.emplace_back("gpu", gpu.contains("index") ? text_of(gpu, "index") : std::to_string(i));
    ++i;
    add_if_number(out, "ddplaunch_rank_gpu_utilization_percent", g, gpu, "util_percent");
    add_if_number(out, "ddplaunch_rank_gpu_memory_used_bytes", g, gpu, "mem_used_bytes");
    add_if_number(out, "ddplaunch_rank_gpu_memory_total_bytes", g, gpu, "mem_total_bytes");
    add_if_number(out, "ddplaunch_rank_gpu_temperature_celsius", g, gpu, "temperature_c");
    add_if_number(out, "ddplaunch_rank_gpu_power_watts", g, gpu, "power_w");
    if (has_number(gpu, "sm_clock_mhz")) out.add("ddplaunch_rank_gpu_sm_clock_hertz", g, number(gpu, "sm_clock_mhz") * 1e6);
    add_if_number(out, "ddplaunch_rank_gpu_xid_errors_total", g, gpu, "xid_errors");
    add_if_number(out, "ddplaunch_rank_gpu_ecc_errors_total", g, gpu, "ecc_errors");
  }
}

// The rank's "warnings" (TroubleWarnings::rank_json): one series each, of
// a fixed kind, so at most one per kind (per GPU) and rank.
void add_warnings(PrometheusText& out, const MetricLabels& labels, const nlohmann::json& r) {
  if (!r.contains("warnings") || !r["warnings"].is_array()) return;
  for (const nlohmann::json& w : r["warnings"]) {
    const std::string kind = text_of(w, "kind");
    if (!is_warning_kind(kind)) continue;
    MetricLabels with_kind = labels;
    with_kind.emplace_back("kind", kind);
    if (w.contains("gpu")) with_kind.emplace_back("gpu", text_of(w, "gpu"));
    out.add("ddplaunch_rank_warning", with_kind, 1);
  }
}

void add_rank(PrometheusText& out, const std::string& job_id, const nlohmann::json& r) {
  if (!r.is_object()) return;
  const MetricLabels labels = {
      {"job_id", job_id}, {"node", text_of(r, "node")}, {"rank", text_of(r, "rank")}, {"host", text_of(r, "host")}};
  add_warnings(out, labels, r);
  if (!r.value("monitored", false)) {
    // No heartbeat (a plain script): its agent still samples its process.
    // node and host are empty then (Prometheus reads them as absent).
    if (r.contains("resources")) add_resources(out, labels, r["resources"]);
    return;
  }
  add_if_number(out, "ddplaunch_rank_step", labels, r, "step");
  add_if_number(out, "ddplaunch_rank_step_seconds", labels, r, "step_seconds");
  add_if_number(out, "ddplaunch_rank_heartbeat_age_seconds", labels, r, "heartbeat_age_s");
  if (r.contains("open_collectives") && r["open_collectives"].is_array()) {
    out.add("ddplaunch_rank_open_collectives", labels, static_cast<double>(r["open_collectives"].size()));
  }
  out.add("ddplaunch_rank_exited", labels, r.value("exited", false) ? 1 : 0);
  const std::vector<std::string>& phases = metric_phases();
  std::string phase = text_of(r, "phase");
  if (std::find(phases.begin(), phases.end(), phase) == phases.end()) phase = "unknown";
  for (const std::string& p : phases) {
    MetricLabels with_phase = labels;
    with_phase.emplace_back("phase", p);
    out.add("ddplaunch_rank_phase", with_phase, p == phase ? 1 : 0);
  }
  if (r.contains("resources")) add_resources(out, labels, r["resources"]);
}

}  // namespace

const std::vector<std::string>& metric_phases() {
  static const std::vector<std::string> phases = {"data",       "forward", "backward", "optimizer",
                                                  "checkpoint", "other",   "unknown"};
  return phases;
}

void add_job_metrics(const nlohmann::json& s, PrometheusText& out) {
  declare_all(out);
  if (!s.is_object() || !s.contains("job_id") || !s["job_id"].is_string()) return;
  const std::string job_id = s["job_id"].get<std::string>();
  const MetricLabels job = {{"job_id", job_id}};
  add_if_number(out, "ddplaunch_job_generation", job, s, "generation");
  add_if_number(out, "ddplaunch_job_restarts_total", job, s, "restarts_used");
  add_if_number(out, "ddplaunch_job_max_restarts", job, s, "max_restarts");
  if (s.contains("state") && s["state"].is_string()) {
    const std::string state = s["state"].get<std::string>();
    for (const std::string& name : kJobStates) {
      out.add("ddplaunch_job_state", {{"job_id", job_id}, {"state", name}}, name == state ? 1 : 0);
    }
  }
  add_if_number(out, "ddplaunch_job_world_size", job, s, "world_size");
  add_if_number(out, "ddplaunch_job_nodes", job, s, "nnodes");
  add_if_number(out, "ddplaunch_job_elapsed_seconds", job, s, "elapsed_s");
  const std::string failure = s.contains("failure") && s["failure"].is_string() ? s["failure"].get<std::string>() : "";
  out.add("ddplaunch_job_failed", job, failure.empty() ? 0 : 1);
  // A hang verdict becomes the generation's root cause as "KIND: summary".
  for (const std::string& kind : kHangKinds) {
    out.add("ddplaunch_job_hang_verdict", {{"job_id", job_id}, {"kind", kind}},
            failure.rfind(kind + ":", 0) == 0 ? 1 : 0);
  }
  if (s.contains("hang_verdicts") && s["hang_verdicts"].is_object()) {
    for (const std::string& kind : kHangKinds) {
      add_if_number(out, "ddplaunch_job_hang_verdicts_total", {{"job_id", job_id}, {"kind", kind}},
                    s["hang_verdicts"], kind.c_str());
    }
  }
  add_if_number(out, "ddplaunch_job_rendezvous_seconds", job, s, "rendezvous_s");
  add_if_number(out, "ddplaunch_job_teardown_seconds", job, s, "teardown_s");
  if (!s.contains("ranks") || !s["ranks"].is_object()) return;
  const nlohmann::json& health = s["ranks"];
  add_if_number(out, "ddplaunch_job_monitored_ranks", job, health, "monitored_ranks");
  add_if_number(out, "ddplaunch_job_seconds_since_progress", job, health, "seconds_since_progress");
  add_if_number(out, "ddplaunch_job_warnings_total", job, health, "warnings_total");
  if (!health.contains("ranks") || !health["ranks"].is_array()) return;
  for (const nlohmann::json& r : health["ranks"]) add_rank(out, job_id, r);
}

std::string jobs_metrics_text(const std::vector<nlohmann::json>& statuses) {
  PrometheusText out;
  for (const nlohmann::json& s : statuses) add_job_metrics(s, out);
  return out.text();
}

}  // namespace ddp
