#pragma once
// GpuReader: the seam between the resource metrics and NVML. One read()
// gives every GPU of the node with its figures and the processes NVML lists
// on it. The real one (nvml_gpu_reader.h) loads libnvidia-ml.so.1 at run
// time; unit tests use a scripted fake. ResourceMonitor maps the GPUs to
// ranks by those processes.
//
// Threading: a reader is called from one thread at a time (ResourceMonitor
// holds its lock around read()).

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "metrics/rank_resources.h"

namespace ddp {

/// A process NVML lists on a device (compute or graphics).
struct GpuProcess {
  int pid = 0;                            // as NVML sees it (the host's pid namespace)
  std::optional<uint64_t> used_bytes;     // its memory on the device, where NVML says
};

struct GpuReading {
  GpuResources device;                    // rank_mem_bytes is left empty here
  std::vector<GpuProcess> processes;
};

class GpuReader {
 public:
  virtual ~GpuReader() = default;
  /// Every device of the node, by index. A device NVML fails to describe is
  /// listed with what it did answer.
  virtual std::vector<GpuReading> read() = 0;
};

}  // namespace ddp
