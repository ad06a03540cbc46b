#include "numa/numa_binding.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <sstream>

namespace ddp {
namespace {

std::set<int> allowed_cpus_of_node(const MachineTopology& t, int node) {
  std::set<int> cpus;
  const auto it = t.node_cpus.find(node);
  if (it == t.node_cpus.end()) return cpus;
  for (const int cpu : it->second) {
    if (t.allowed.count(cpu) != 0) cpus.insert(cpu);
  }
  return cpus;
}

int node_of_gpu(const MachineTopology& t, int gpu) { return t.gpu_numa_node.at(t.gpus.at(static_cast<size_t>(gpu))); }

// The node's CPUs grouped by key (physical core, cache), groups in key order.
std::map<int, std::set<int>> grouped(const std::set<int>& cpus, const std::map<int, int>& key_of) {
  std::map<int, std::set<int>> groups;
  for (const int cpu : cpus) {
    const auto it = key_of.find(cpu);
    groups[it == key_of.end() ? cpu : it->second].insert(cpu);
  }
  return groups;
}

// Where gpu stands among the visible GPUs on its own NUMA node, and how many there are.
std::pair<size_t, size_t> position_on_node(const MachineTopology& t, const std::vector<int>& visible, int gpu) {
  const int node = node_of_gpu(t, gpu);
  std::vector<int> on_node;
  for (const int g : visible) {
    if (node_of_gpu(t, g) == node) on_node.push_back(g);
  }
  const auto at = std::find(on_node.begin(), on_node.end(), gpu) - on_node.begin();
  return {static_cast<size_t>(at), on_node.size()};
}

std::set<int> socket_cpus(const MachineTopology& t, int gpu) {
  const std::set<int> home = allowed_cpus_of_node(t, node_of_gpu(t, gpu));
  if (home.empty()) return home;
  const int socket = t.cpu_socket.count(*home.begin()) ? t.cpu_socket.at(*home.begin()) : 0;
  std::set<int> cpus;
  for (const auto& [node, all] : t.node_cpus) {
    const std::set<int> mine = allowed_cpus_of_node(t, node);
    if (!mine.empty() && t.cpu_socket.count(*mine.begin()) && t.cpu_socket.at(*mine.begin()) == socket) {
      cpus.insert(mine.begin(), mine.end());
    }
  }
  return cpus;
}

std::set<int> exclusive_cpus(const MachineTopology& t, const std::vector<int>& visible, int gpu) {
  const int node = node_of_gpu(t, gpu);
  const auto cores = grouped(allowed_cpus_of_node(t, node), t.cpu_core);
  const auto [index, gpus] = position_on_node(t, visible, gpu);
  const size_t per_gpu = cores.size() / gpus;
  const size_t extra = cores.size() % gpus;  // the lowest GPUs get one more core
  if (per_gpu == 0) {
    throw NumaBindingError(fmt::format("--numa-binding=exclusive: NUMA node {} has {} physical core(s) for {} GPU(s)",
                                       node, cores.size(), gpus));
  }
  const size_t start = index * per_gpu + std::min(index, extra);
  const size_t count = per_gpu + (index < extra ? 1 : 0);
  std::set<int> cpus;
  auto core = cores.begin();
  std::advance(core, static_cast<std::ptrdiff_t>(start));
  for (size_t k = 0; k < count; ++k, ++core) cpus.insert(core->second.begin(), core->second.end());
  return cpus;
}

std::set<int> core_complex_cpus(const MachineTopology& t, const std::vector<int>& visible, int gpu) {
  const auto caches = grouped(allowed_cpus_of_node(t, node_of_gpu(t, gpu)), t.cpu_cache);
  std::vector<std::set<int>> ordered;
  for (const auto& [key, cpus] : caches) ordered.push_back(cpus);
  // The largest groups first, then the lowest CPUs.
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const std::set<int>& a, const std::set<int>& b) { return a.size() > b.size(); });
  if (ordered.empty()) return {};
  return ordered[position_on_node(t, visible, gpu).first % ordered.size()];
}

}  // namespace

std::optional<NumaMode> parse_numa_mode(const std::string& name) {
  if (name == "node") return NumaMode::kNode;
  if (name == "socket") return NumaMode::kSocket;
  if (name == "exclusive") return NumaMode::kExclusive;
  if (name == "core-complex") return NumaMode::kCoreComplex;
  return std::nullopt;
}

std::vector<int> visible_gpus(const MachineTopology& t, const std::optional<std::string>& cuda_visible_devices) {
  std::vector<int> visible;
  if (!cuda_visible_devices) {
    for (size_t i = 0; i < t.gpus.size(); ++i) visible.push_back(static_cast<int>(i));
    return visible;
  }
  std::stringstream list(*cuda_visible_devices);
  for (std::string item; std::getline(list, item, ',');) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 4) {
      throw NumaBindingError(fmt::format("--numa-binding: CUDA_VISIBLE_DEVICES entry '{}' is not a device index "
                                         "(UUIDs and MIG names need NVML to map to a PCI address)",
                                         item));
    }
    const int index = std::stoi(item);
    if (index >= static_cast<int>(t.gpus.size())) break;  // CUDA stops at the first invalid entry too
    visible.push_back(index);
  }
  return visible;
}

std::vector<std::set<int>> numa_cpus_per_local_rank(NumaMode mode, const MachineTopology& t,
                                                    const std::vector<int>& visible, int nproc) {
  if (static_cast<int>(visible.size()) < nproc) {
    throw NumaBindingError(fmt::format("--numa-binding: {} local rank(s) but {} visible GPU(s); each rank binds "
                                       "near the GPU of its local index",
                                       nproc, visible.size()));
  }
  std::vector<std::set<int>> per_rank;
  for (int rank = 0; rank < nproc; ++rank) {
    const int gpu = visible[static_cast<size_t>(rank)];
    std::set<int> cpus;
    switch (mode) {
      case NumaMode::kNode:
        cpus = allowed_cpus_of_node(t, node_of_gpu(t, gpu));
        break;
      case NumaMode::kSocket:
        cpus = socket_cpus(t, gpu);
        break;
      case NumaMode::kExclusive:
        cpus = exclusive_cpus(t, visible, gpu);
        break;
      case NumaMode::kCoreComplex:
        cpus = core_complex_cpus(t, visible, gpu);
        break;
    }
    if (cpus.empty()) {
      throw NumaBindingError(fmt::format("--numa-binding: no CPU this process may use is near GPU {} ({}, NUMA "
                                         "node {})",
                                         gpu, t.gpus[static_cast<size_t>(gpu)], node_of_gpu(t, gpu)));
    }
    per_rank.push_back(std::move(cpus));
  }
  return per_rank;
}

}  // namespace ddp
