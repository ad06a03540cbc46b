// GPU metrics per rank (metrics/resource_monitor.h) against a fake GpuReader
// (the seam in front of NVML) and a fake /proc tree: a missing NVML library,
// a GPU with no processes, a rank using two GPUs, a GPU used by a rank's
// child process, and two ranks sharing one GPU.
#include "metrics/resource_monitor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "metrics/nvml_gpu_reader.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class FakeGpus final : public GpuReader {
 public:
  explicit FakeGpus(std::vector<GpuReading>* script) : script_(script) {}
  std::vector<GpuReading> read() override { return *script_; }

 private:
  std::vector<GpuReading>* script_;  // the test changes it between samples
};

GpuReading gpu(int index, std::vector<GpuProcess> processes, double util = 50) {
  GpuReading r;
  r.device.index = index;
  r.device.uuid = "GPU-" + std::to_string(index);
  r.device.util_percent = util;
  r.device.mem_used_bytes = 10ull << 30;
  r.device.mem_total_bytes = 80ull << 30;
  r.device.temperature_c = 61;
  r.device.power_w = 312.5;
  r.device.sm_clock_mhz = 1980;
  r.device.throttle_reasons = {"sw_power_cap"};
  r.device.xid_errors = 0;
  r.device.ecc_errors = 0;
  r.processes = std::move(processes);
  return r;
}

class GpuMetrics : public ::testing::Test {
 protected:
  GpuMetrics() : root_(fs::temp_directory_path() / ("ddp-fake-proc-gpu-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(root_);
    std::ofstream(root_ / "uptime") << "1000.0 10.0\n";
  }
  ~GpuMetrics() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void process(int pid, int ppid) {
    fs::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "stat")
        << pid << " (p) S " << ppid << " 1 1 0 -1 0 0 0 0 0 100 100 0 0 20 0 2 0 50000 1000 25 0\n";
  }
  ResourceMonitor monitor() {
    return ResourceMonitor(root_.string(), clock_,
                           [this](std::string&) -> std::unique_ptr<GpuReader> {
                             ++opened_;
                             return std::make_unique<FakeGpus>(&script_);
                           });
  }

  fs::path root_;
  FakeClock clock_;
  std::vector<GpuReading> script_;
  int opened_ = 0;
};

TEST_F(GpuMetrics, AMissingNvmlLibraryIsNoReaderAndNoError) {
  std::string why;
  EXPECT_EQ(open_nvml("/nonexistent/libnvidia-ml.so.1", why), nullptr);
  EXPECT_NE(why.find("cannot be loaded"), std::string::npos) << why;

  // The monitor then gives CPU figures and no GPUs, and says why once.
  process(100, 1);
  ResourceMonitor m(root_.string(), clock_, [](std::string& reason) { return open_nvml("/nonexistent/libnvml.so", reason); });
  auto out = m.sample({{0, 100}});
  ASSERT_EQ(out.count(0), 1u);
  EXPECT_TRUE(out[0].cpu_percent.has_value());
  EXPECT_TRUE(out[0].gpus.empty());
  EXPECT_NE(m.gpu_unavailable_reason().find("cannot be loaded"), std::string::npos);
  clock_.advance(1s);
  EXPECT_TRUE(m.sample({{0, 100}})[0].gpus.empty());
}

TEST_F(GpuMetrics, NoFactoryMeansNoGpus) {
  process(100, 1);
  ResourceMonitor m(root_.string(), clock_, {});
  EXPECT_TRUE(m.sample({{0, 100}})[0].gpus.empty());
  EXPECT_FALSE(m.gpu_unavailable_reason().empty());
}

TEST_F(GpuMetrics, AGpuWithNoProcessesBelongsToNoRank) {
  process(100, 1);
  process(101, 1);
  script_ = {gpu(0, {{100, 1ull << 30}}), gpu(1, {})};
  ResourceMonitor m = monitor();
  auto out = m.sample({{0, 100}, {1, 101}});
  ASSERT_EQ(out[0].gpus.size(), 1u);
  EXPECT_EQ(out[0].gpus[0].index, 0);
  EXPECT_EQ(out[0].gpus[0].uuid, "GPU-0");
  EXPECT_EQ(out[0].gpus[0].rank_mem_bytes, 1ull << 30);
  EXPECT_EQ(out[0].gpus[0].mem_total_bytes, 80ull << 30);
  EXPECT_EQ(out[0].gpus[0].throttle_reasons, std::vector<std::string>{"sw_power_cap"});
  EXPECT_TRUE(out[1].gpus.empty()) << "GPU 1 lists no process: nobody's";
  EXPECT_EQ(opened_, 1);
  m.sample({{0, 100}, {1, 101}});
  EXPECT_EQ(opened_, 1) << "the reader is opened once";
}

TEST_F(GpuMetrics, ARankUsingTwoGpusGetsBoth) {
  process(100, 1);
  process(101, 1);
  script_ = {gpu(0, {{100, 2ull << 30}}, 90), gpu(1, {{100, 3ull << 30}, {101, 1ull << 30}}, 20)};
  auto out = monitor().sample({{0, 100}, {1, 101}});
  ASSERT_EQ(out[0].gpus.size(), 2u);
  EXPECT_EQ(out[0].gpus[0].index, 0);
  EXPECT_EQ(out[0].gpus[0].util_percent, 90);
  EXPECT_EQ(out[0].gpus[0].rank_mem_bytes, 2ull << 30);
  EXPECT_EQ(out[0].gpus[1].index, 1);
  EXPECT_EQ(out[0].gpus[1].rank_mem_bytes, 3ull << 30);
  // GPU 1 is shared: rank 1 sees it too, with its own share.
  ASSERT_EQ(out[1].gpus.size(), 1u);
  EXPECT_EQ(out[1].gpus[0].index, 1);
  EXPECT_EQ(out[1].gpus[0].rank_mem_bytes, 1ull << 30);
}

TEST_F(GpuMetrics, AGpuUsedByARanksChildIsTheRanks) {
  process(100, 1);     // rank 0
  process(200, 100);   // its child
  process(300, 200);   // and grandchild, which runs on GPU 0
  process(400, 1);     // someone else's process on GPU 1
  script_ = {gpu(0, {{300, 5ull << 30}, {200, std::nullopt}}), gpu(1, {{400, 1ull << 30}})};
  auto out = monitor().sample({{0, 100}});
  ASSERT_EQ(out[0].gpus.size(), 1u);
  EXPECT_EQ(out[0].gpus[0].index, 0);
  EXPECT_EQ(out[0].gpus[0].rank_mem_bytes, 5ull << 30) << "one process did not say: the other's share";
}

TEST_F(GpuMetrics, AGoneRankIsLeftOutAndGpusAreNotReadForNobody) {
  script_ = {gpu(0, {{100, 1}})};
  auto out = monitor().sample({{0, 100}});
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(opened_, 1);
}

TEST_F(GpuMetrics, AZombieCountsAsGone) {
  fs::create_directories(root_ / "100");
  std::ofstream(root_ / "100" / "stat") << "100 (p) Z 1 1 1 0 -1 0 0 0 0 0 100 100 0 0 20 0 1 0 50000 0 0 0\n";
  EXPECT_TRUE(monitor().sample({{0, 100}}).empty());
}

}  // namespace
}  // namespace ddp
