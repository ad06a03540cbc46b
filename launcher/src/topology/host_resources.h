#pragma once
// What this node offers, for --nproc-per-node=gpu|cpu|auto. Counting GPUs
// needs no CUDA build: the NVIDIA driver lists its devices under /proc and
// CUDA_VISIBLE_DEVICES narrows them down.

#include <optional>
#include <string>

namespace ddp {

/// CUDA devices this process may use: the driver's count (from driver_dir, by
/// default /proc/driver/nvidia/gpus) narrowed by cuda_visible_devices when set.
int visible_cuda_devices(const std::optional<std::string>& cuda_visible_devices,
                         const std::string& driver_dir = "/proc/driver/nvidia/gpus");

/// CPUs this process may run on (its affinity mask).
int usable_cpus();

}  // namespace ddp
