#pragma once
// ResourceMonitor: samples every local rank's process (/proc) and the GPUs
// its process uses (NVML through GpuReader) in one go; the agent calls it at
// the heartbeat interval (WorkerHealthBoard::sample_resources, from the
// heartbeat thread) with the pid of each rank the supervisor started.
//
// A GPU belongs to a rank when NVML lists, on that device, the rank's pid or
// a descendant of it (the chain of parents is walked upwards in /proc, so a
// rank that runs its CUDA work in a child process still gets its GPU). A rank
// may so get several GPUs, and a GPU several ranks. NVML's pids are the
// host's: an agent in a container with its own pid namespace sees no match,
// and its ranks show no GPUs.
//
// The GPU reader is opened on the first sample (not at start: NVML's start
// can take a moment, and the launcher starts at once); when there is none
// (no library, no device) that is said once, at info level, and the ranks
// get CPU metrics only.
//
// Threading: sample() is thread-safe (one lock around the whole sample).

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ddp/common/clock.h"
#include "metrics/gpu_reader.h"
#include "metrics/proc_sampler.h"
#include "metrics/rank_resources.h"

namespace ddp {

class ResourceMonitor {
 public:
  /// Opens the GPU reader; null, with why, when there is none.
  using GpuReaderFactory = std::function<std::unique_ptr<GpuReader>(std::string& why)>;

  /// proc_root: "/proc" in production. clock: kept by reference, must
  /// outlive the monitor. open_gpus: empty means no GPU metrics.
  ResourceMonitor(std::string proc_root, const Clock& clock, GpuReaderFactory open_gpus);
  /// The production monitor: /proc, the system clock and NVML (kNvmlLibrary).
  static std::unique_ptr<ResourceMonitor> for_this_machine();

  /// One sample of each rank in pid_by_rank (rank -> pid). A rank whose
  /// process cannot be read (gone) is left out; the caller keeps its last.
  std::map<int, RankResources> sample(const std::map<int, int>& pid_by_rank);

  /// Why there are no GPU metrics, once the first sample has tried (empty: there are).
  std::string gpu_unavailable_reason() const;

 private:
  /// The rank whose process is pid or an ancestor of pid; -1: none.
  int owner_of(int pid, const std::map<int, int>& rank_by_pid) const;

  mutable std::mutex mutex_;
  ProcSampler proc_;
  GpuReaderFactory open_gpus_;
  bool gpus_tried_ = false;
  std::unique_ptr<GpuReader> gpus_;
  std::string no_gpus_;
};

}  // namespace ddp
