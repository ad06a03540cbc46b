#include "numa/machine_topology.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "numa/cpu_list.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::set<int> read_cpu_list(const fs::path& path) { return parse_cpu_list(read_text(path)).value_or(std::set<int>{}); }

int read_int(const fs::path& path, int fallback) {
  try {
    return std::stoi(read_text(path));
  } catch (const std::exception&) {
    return fallback;
  }
}

// The lowest CPU sharing cpu's largest data or unified cache (its core complex).
int largest_cache_of(const fs::path& cpu_dir, int cpu) {
  int best_level = -1;
  int representative = cpu;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cpu_dir / "cache", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("index", 0) != 0) continue;
    const std::string type = read_text(entry.path() / "type");
    if (type != "Unified" && type != "Data") continue;
    const int level = read_int(entry.path() / "level", -1);
    const std::set<int> sharing = read_cpu_list(entry.path() / "shared_cpu_list");
    if (level > best_level && !sharing.empty()) {
      best_level = level;
      representative = *sharing.begin();
    }
  }
  return representative;
}

}  // namespace

std::set<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.insert(cpu);
  }
  return cpus;
}

MachineTopology read_machine_topology(const std::set<int>& allowed, const std::string& sys_root,
                                      const std::string& proc_root) {
  MachineTopology t;
  t.allowed = allowed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(proc_root) / "driver/nvidia/gpus", ec)) {
    t.gpus.push_back(entry.path().filename().string());
  }
  std::sort(t.gpus.begin(), t.gpus.end());
  for (const std::string& pci : t.gpus) {
    std::string lower = pci;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    // -1: the firmware names no node (a machine of one node)
    t.gpu_numa_node[pci] = std::max(read_int(fs::path(sys_root) / "bus/pci/devices" / lower / "numa_node", 0), 0);
  }
  const fs::path nodes = fs::path(sys_root) / "devices/system/node";
  for (const auto& entry : fs::directory_iterator(nodes, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 ||
        name.find_first_not_of("0123456789", 4) != std::string::npos) {
      continue;
    }
    t.node_cpus[std::stoi(name.substr(4))] = read_cpu_list(entry.path() / "cpulist");
  }
  if (t.node_cpus.empty()) t.node_cpus[0] = allowed;  // no NUMA in sysfs: one node
  for (const auto& [node, cpus] : t.node_cpus) {
    for (const int cpu : cpus) {
      const fs::path dir = fs::path(sys_root) / "devices/system/cpu" / ("cpu" + std::to_string(cpu));
      t.cpu_socket[cpu] = read_int(dir / "topology/physical_package_id", 0);
      const std::set<int> siblings = read_cpu_list(dir / "topology/thread_siblings_list");
      t.cpu_core[cpu] = siblings.empty() ? cpu : *siblings.begin();
      t.cpu_cache[cpu] = largest_cache_of(dir, cpu);
    }
  }
  return t;
}

}  // namespace ddp
