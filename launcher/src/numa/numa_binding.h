#pragma once
// torchrun's --numa-binding: each worker runs only on CPUs near the GPU whose
// local index equals its local rank. The modes are torchrun's:
//   node          all CPUs of the GPU's NUMA node
//   socket        all CPUs of the NUMA nodes of the GPU's socket
//   exclusive     the node's physical cores split evenly among the node's GPUs
//                 (the lower GPUs get the extra cores), so no two workers share one
//   core-complex  one group of cores sharing the largest cache (an L3 domain)
//                 of the GPU's node per GPU, the largest groups first
// Only CPUs this process may run on count. Pure: the machine comes in as a
// MachineTopology.

#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "numa/machine_topology.h"

namespace ddp {

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

std::optional<NumaMode> parse_numa_mode(const std::string& name);

/// Why a binding cannot be made, in words for a usage error.
class NumaBindingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The machine's GPUs as CUDA numbers them here (indices into topology.gpus):
/// all of them, or those CUDA_VISIBLE_DEVICES lists by index. Throws
/// NumaBindingError for UUIDs or MIG names, which only NVML can map.
std::vector<int> visible_gpus(const MachineTopology& topology, const std::optional<std::string>& cuda_visible_devices);

/// The CPUs of each local rank 0..nproc-1, which uses visible[local rank].
/// Throws NumaBindingError when there are fewer visible GPUs than ranks, or
/// a rank would get no CPU.
std::vector<std::set<int>> numa_cpus_per_local_rank(NumaMode mode, const MachineTopology& topology,
                                                    const std::vector<int>& visible, int nproc);

}  // namespace ddp
