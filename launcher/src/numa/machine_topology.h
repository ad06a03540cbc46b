#pragma once
// What --numa-binding needs to know about this machine, read from sysfs and
// the NVIDIA driver's /proc entries (no CUDA or NVML needed): the GPUs in PCI
// order with their NUMA nodes, each NUMA node's CPUs, and for each CPU its
// socket, its physical core and the group sharing its largest cache.
//
// Threading: read_machine_topology is blocking file I/O; the struct is a value.

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddp {

struct MachineTopology {
  /// PCI addresses ("0000:1b:00.0") of the NVIDIA GPUs, in PCI order: CUDA's
  /// device order on machines of identical GPUs (CUDA_DEVICE_ORDER=PCI_BUS_ID).
  std::vector<std::string> gpus;
  std::map<std::string, int> gpu_numa_node;  // by PCI address; a machine of one node says 0
  std::map<int, std::set<int>> node_cpus;    // NUMA node -> its CPUs
  std::map<int, int> cpu_socket;             // CPU -> physical package
  std::map<int, int> cpu_core;               // CPU -> its physical core (lowest thread sibling)
  std::map<int, int> cpu_cache;              // CPU -> its largest cache (lowest CPU sharing it)
  std::set<int> allowed;                     // the CPUs this process may run on
};

/// sys_root and proc_root move /sys and /proc (tests). allowed: the CPUs to
/// keep (this process's affinity mask).
MachineTopology read_machine_topology(const std::set<int>& allowed, const std::string& sys_root = "/sys",
                                      const std::string& proc_root = "/proc");

/// This process's CPU affinity mask.
std::set<int> allowed_cpus();

}  // namespace ddp
