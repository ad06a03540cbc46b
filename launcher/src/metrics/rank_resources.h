#pragma once
// RankResources: what an agent measured of one rank's process and of the GPUs
// that process uses, at one moment. The agent samples it at the heartbeat
// interval (resource_monitor.h) and sends it with its heartbeat; the
// coordinator keeps the latest per rank in its health view and shows it in
// `ddplaunch status --json` under each rank's "resources" (resources_json.h
// names the fields). Plain data: no gRPC, no NVML.
//
// A field left empty was not measured (an older kernel, a GPU or driver
// that does not report it): empty says "unknown", never zero.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp {

/// One GPU as NVML saw it, and what this rank holds on it.
struct GpuResources {
  int index = -1;                          // NVML's index on the node
  std::string uuid;                        // "GPU-...": stable, unlike the index
  std::optional<double> util_percent;      // time a kernel ran in NVML's last sample period (device-wide)
  std::optional<uint64_t> mem_used_bytes;  // device-wide
  std::optional<uint64_t> mem_total_bytes;
  std::optional<uint64_t> rank_mem_bytes;  // held by this rank's processes, where NVML says
  std::optional<int> temperature_c;
  std::optional<double> power_w;
  std::optional<int> sm_clock_mhz;
  std::vector<std::string> throttle_reasons;  // NVML's clock event reasons now active ("sw_power_cap", ...)
  std::optional<uint64_t> xid_errors;      // critical Xid events seen since the agent started watching
  std::optional<int> last_xid;             // the newest of them
  std::optional<uint64_t> ecc_errors;      // volatile uncorrected ECC errors (since the driver loaded)
};

struct RankResources {
  int pid = 0;                 // the rank's process that was sampled
  /// How old the sample is, as of when this copy was made (each holder
  /// restates it: the agent's board when forwarding, the coordinator on arrival).
  Duration age{};
  /// The process was gone at the last try: the values are its last ones.
  bool process_gone = false;
  std::optional<double> cpu_percent;  // of one core (a rank busy on 3 cores shows 300)
  std::optional<uint64_t> rss_bytes;
  std::optional<int> threads;
  std::optional<uint64_t> voluntary_ctx_switches;     // since the process started
  std::optional<uint64_t> nonvoluntary_ctx_switches;
  std::optional<uint64_t> written_bytes;  // to files and pipes since the process started (/proc/PID/io wchar)
  std::optional<uint64_t> dirtied_bytes;  // page cache it dirtied for storage, page by page (write_bytes)
  std::vector<GpuResources> gpus;  // the GPUs the rank's process (or a descendant) uses, by index
};

}  // namespace ddp
