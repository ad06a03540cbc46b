#include "metrics/resource_monitor.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <set>

#include "metrics/nvml_gpu_reader.h"

namespace ddp {

ResourceMonitor::ResourceMonitor(std::string proc_root, const Clock& clock, GpuReaderFactory open_gpus)
    : proc_(std::move(proc_root), clock), open_gpus_(std::move(open_gpus)) {}

std::unique_ptr<ResourceMonitor> ResourceMonitor::for_this_machine() {
  return std::make_unique<ResourceMonitor>("/proc", SystemClock::instance(),
                                           [](std::string& why) { return open_nvml(kNvmlLibrary, why); });
}

std::string ResourceMonitor::gpu_unavailable_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return no_gpus_;
}

int ResourceMonitor::owner_of(int pid, const std::map<int, int>& rank_by_pid) const {
  // Bounded: a parent chain is short, and a corrupt one must not loop.
  for (int depth = 0; depth < 32 && pid > 1; ++depth) {
    if (const auto it = rank_by_pid.find(pid); it != rank_by_pid.end()) return it->second;
    pid = proc_.parent_of(pid);
  }
  return -1;
}

std::map<int, RankResources> ResourceMonitor::sample(const std::map<int, int>& pid_by_rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<int, RankResources> out;
  std::map<int, int> rank_by_pid;
  std::set<int> pids;
  for (const auto& [rank, pid] : pid_by_rank) {
    if (pid <= 0) continue;
    const auto p = proc_.sample(pid);
    // A zombie has let go of everything: it counts as gone.
    if (!p || p->state == 'Z' || p->state == 'X') continue;
    pids.insert(pid);
    rank_by_pid[pid] = rank;
    RankResources& r = out[rank];
    r.pid = pid;
    r.cpu_percent = p->cpu_percent;
    r.rss_bytes = p->rss_bytes;
    r.threads = p->threads;
    r.voluntary_ctx_switches = p->voluntary_ctx_switches;
    r.nonvoluntary_ctx_switches = p->nonvoluntary_ctx_switches;
    r.written_bytes = p->written_bytes;
    r.dirtied_bytes = p->dirtied_bytes;
  }
  proc_.forget_others(pids);

  if (!gpus_tried_) {
    gpus_tried_ = true;
    if (open_gpus_) gpus_ = open_gpus_(no_gpus_);
    if (!gpus_) {
      if (no_gpus_.empty()) no_gpus_ = "no GPU reader";
      // Worth a console line only where NVIDIA's driver is installed: on a
      // CPU machine it is what everyone expects, and it would come between
      // the ranks' first lines.
      std::error_code ec;
      const bool nvidia_driver = std::filesystem::exists("/dev/nvidiactl", ec);
      spdlog::log(nvidia_driver ? spdlog::level::info : spdlog::level::debug,
                  "per-rank metrics: CPU and memory only, no GPU metrics ({})", no_gpus_);
    }
  }
  if (!gpus_ || out.empty()) return out;
  for (GpuReading& reading : gpus_->read()) {
    std::map<int, GpuResources> users;  // by rank: this device, with what the rank holds on it
    std::set<int> seen;                 // a process in both the compute and the graphics list counts once
    for (const GpuProcess& p : reading.processes) {
      if (!seen.insert(p.pid).second) continue;
      const int rank = owner_of(p.pid, rank_by_pid);
      if (rank < 0) continue;
      const auto it = users.emplace(rank, reading.device).first;
      if (p.used_bytes) it->second.rank_mem_bytes = it->second.rank_mem_bytes.value_or(0) + *p.used_bytes;
    }
    for (auto& [rank, gpu] : users) out[rank].gpus.push_back(std::move(gpu));
  }
  return out;
}

}  // namespace ddp
