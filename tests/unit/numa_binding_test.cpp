// --numa-binding on a faked machine: sysfs and the NVIDIA driver's /proc
// entries written into a temporary directory (two sockets, one NUMA node
// each, two hyperthreads per core, two L3 domains on node 1, four GPUs).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "numa/cpu_list.h"
#include "numa/machine_topology.h"
#include "numa/numa_binding.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// node 0: cores 0-3 (threads 0-3 and 8-11), socket 0, one L3
// node 1: cores 4-7 (threads 4-7 and 12-15), socket 1, L3 {4,5,12,13} and {6,7,14,15}
// GPUs: 0000:1A:00.0 and 0000:3b:00.0 on node 0, 0000:8a:00.0 and 0000:ba:00.0 on node 1
class FakeMachine {
 public:
  FakeMachine() : root_(fs::temp_directory_path() / ("ddp_numa_" + std::to_string(::getpid()) + "_" + std::to_string(next_++))) {
    write(sys() / "devices/system/node/node0/cpulist", "0-3,8-11");
    write(sys() / "devices/system/node/node1/cpulist", "4-7,12-15");
    write(sys() / "devices/system/node/possible", "0-1");
    for (int cpu = 0; cpu < 16; ++cpu) {
      const fs::path dir = sys() / "devices/system/cpu" / ("cpu" + std::to_string(cpu));
      const int core = cpu % 8;
      write(dir / "topology/physical_package_id", core < 4 ? "0" : "1");
      write(dir / "topology/thread_siblings_list", std::to_string(core) + "," + std::to_string(core + 8));
      write(dir / "cache/index0/type", "Data");
      write(dir / "cache/index0/level", "1");
      write(dir / "cache/index0/shared_cpu_list", std::to_string(core) + "," + std::to_string(core + 8));
      write(dir / "cache/index1/type", "Instruction");
      write(dir / "cache/index1/level", "4");  // never a complex: not data
      write(dir / "cache/index1/shared_cpu_list", "0-15");
      write(dir / "cache/index3/type", "Unified");
      write(dir / "cache/index3/level", "3");
      const std::string l3 = core < 4 ? "0-3,8-11" : core < 6 ? "4-5,12-13" : "6-7,14-15";
      write(dir / "cache/index3/shared_cpu_list", l3);
    }
    for (const auto& [gpu, node] : std::vector<std::pair<std::string, std::string>>{
             {"0000:1A:00.0", "0"}, {"0000:3b:00.0", "-1"}, {"0000:8a:00.0", "1"}, {"0000:ba:00.0", "1"}}) {
      fs::create_directories(root_ / "proc/driver/nvidia/gpus" / gpu);
      std::string lower = gpu;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      write(sys() / "bus/pci/devices" / lower / "numa_node", node);
    }
  }
  ~FakeMachine() { fs::remove_all(root_); }
  MachineTopology read(std::set<int> allowed = all()) const {
    return read_machine_topology(allowed, sys().string(), (root_ / "proc").string());
  }
  static std::set<int> all() { return *parse_cpu_list("0-15"); }

 private:
  fs::path sys() const { return root_ / "sys"; }
  fs::path root_;
  static inline int next_ = 0;
};

std::vector<std::string> bound(NumaMode mode, const MachineTopology& t, int nproc,
                               const std::optional<std::string>& visible_devices = std::nullopt) {
  std::vector<std::string> out;
  for (const auto& cpus : numa_cpus_per_local_rank(mode, t, visible_gpus(t, visible_devices), nproc)) {
    out.push_back(format_cpu_list(cpus));
  }
  return out;
}

TEST(CpuList, ParsesAndFormatsTheKernelsSyntax) {
  EXPECT_EQ(parse_cpu_list("0-2,4,6-7\n"), (std::set<int>{0, 1, 2, 4, 6, 7}));
  EXPECT_EQ(parse_cpu_list(""), std::set<int>{});
  EXPECT_FALSE(parse_cpu_list("3-1"));
  EXPECT_FALSE(parse_cpu_list("a"));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 4, 6, 7}), "0-2,4,6-7");
  EXPECT_EQ(format_cpu_list({}), "");
}

TEST(MachineTopology, ReadsGpusNodesSocketsCoresAndCaches) {
  FakeMachine m;
  const MachineTopology t = m.read();
  EXPECT_EQ(t.gpus, (std::vector<std::string>{"0000:1A:00.0", "0000:3b:00.0", "0000:8a:00.0", "0000:ba:00.0"}));
  EXPECT_EQ(t.gpu_numa_node.at("0000:3b:00.0"), 0);  // -1: the firmware names no node
  EXPECT_EQ(t.gpu_numa_node.at("0000:ba:00.0"), 1);
  EXPECT_EQ(format_cpu_list(t.node_cpus.at(1)), "4-7,12-15");
  EXPECT_EQ(t.cpu_socket.at(13), 1);
  EXPECT_EQ(t.cpu_core.at(13), 5);
  EXPECT_EQ(t.cpu_cache.at(13), 4);  // the level-3 cache, not the instruction cache of "level 4"
}

TEST(NumaBinding, NodeBindsEachRankToItsGpusNode) {
  FakeMachine m;
  EXPECT_EQ(bound(NumaMode::kNode, m.read(), 4),
            (std::vector<std::string>{"0-3,8-11", "0-3,8-11", "4-7,12-15", "4-7,12-15"}));
  // only CPUs this process may use
  EXPECT_EQ(bound(NumaMode::kNode, m.read(*parse_cpu_list("0-1,4-15")), 1), std::vector<std::string>{"0-1,8-11"});
}

TEST(NumaBinding, SocketBindsToEveryNodeOfTheGpusSocket) {
  FakeMachine m;
  EXPECT_EQ(bound(NumaMode::kSocket, m.read(), 3), (std::vector<std::string>{"0-3,8-11", "0-3,8-11", "4-7,12-15"}));
}

TEST(NumaBinding, ExclusiveSplitsTheNodesPhysicalCoresAmongItsGpus) {
  FakeMachine m;
  EXPECT_EQ(bound(NumaMode::kExclusive, m.read(), 4),
            (std::vector<std::string>{"0-1,8-9", "2-3,10-11", "4-5,12-13", "6-7,14-15"}));
  // three cores for two GPUs: the lower GPU gets the extra one
  EXPECT_EQ(bound(NumaMode::kExclusive, m.read(*parse_cpu_list("0-2,4-10,12-15")), 2),
            (std::vector<std::string>{"0-1,8-9", "2,10"}));
}

TEST(NumaBinding, CoreComplexGivesEachGpuItsOwnCacheDomain) {
  FakeMachine m;
  EXPECT_EQ(bound(NumaMode::kCoreComplex, m.read(), 4),
            (std::vector<std::string>{"0-3,8-11", "0-3,8-11", "4-5,12-13", "6-7,14-15"}));
}

TEST(NumaBinding, CudaVisibleDevicesChoosesAndOrdersTheGpus) {
  FakeMachine m;
  const MachineTopology t = m.read();
  EXPECT_EQ(visible_gpus(t, std::string("3,0")), (std::vector<int>{3, 0}));
  EXPECT_EQ(bound(NumaMode::kNode, t, 2, std::string("3,0")), (std::vector<std::string>{"4-7,12-15", "0-3,8-11"}));
  EXPECT_EQ(visible_gpus(t, std::string("1,9,2")), std::vector<int>{1});  // CUDA stops at an invalid index
  EXPECT_THROW(visible_gpus(t, std::string("GPU-5d1e1c77")), NumaBindingError);
}

TEST(NumaBinding, RefusesWhatCannotBeBound) {
  FakeMachine m;
  try {
    bound(NumaMode::kNode, m.read(), 5);
    FAIL();
  } catch (const NumaBindingError& e) {
    EXPECT_THAT(e.what(), HasSubstr("5 local rank(s) but 4 visible GPU(s)"));
  }
  try {
    bound(NumaMode::kExclusive, m.read(*parse_cpu_list("0,8,4-7,12-15")), 2);  // one core for two GPUs
    FAIL();
  } catch (const NumaBindingError& e) {
    EXPECT_THAT(e.what(), HasSubstr("NUMA node 0 has 1 physical core(s) for 2 GPU(s)"));
  }
  EXPECT_THROW(bound(NumaMode::kNode, m.read(*parse_cpu_list("4-7")), 1), NumaBindingError);
  EXPECT_EQ(parse_numa_mode("core-complex"), NumaMode::kCoreComplex);
  EXPECT_FALSE(parse_numa_mode("everywhere"));
}

}  // namespace
}  // namespace ddp
