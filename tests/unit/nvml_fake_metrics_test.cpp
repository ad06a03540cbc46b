// The real NVML reader (metrics/nvml_gpu_reader.cpp) against a stand-in
// libnvidia-ml.so.1 (nvml_fake_metrics_lib.cpp, loaded by path): devices,
// figures, throttle reasons, the _v2 process list and Xid events, and the
// GPU reaching the rank whose pid NVML lists.
#include <gtest/gtest.h>
#include <unistd.h>

#include "ddp/common/clock.h"
#include "metrics/nvml_gpu_reader.h"
#include "metrics/resource_monitor.h"

namespace ddp {
namespace {

TEST(NvmlFakeMetrics, TheReaderReadsEveryDeviceThroughTheLoadedLibrary) {
  std::string why;
  std::unique_ptr<GpuReader> reader = open_nvml(DDP_FAKE_NVML_LIBRARY, why);
  ASSERT_NE(reader, nullptr) << why;
  const std::vector<GpuReading> gpus = reader->read();
  ASSERT_EQ(gpus.size(), 2u);
  const GpuResources& g = gpus[0].device;
  EXPECT_EQ(g.index, 0);
  EXPECT_EQ(g.uuid, "GPU-fake-0");
  EXPECT_EQ(g.util_percent, 87);
  EXPECT_EQ(g.mem_used_bytes, 10ull << 30);
  EXPECT_EQ(g.mem_total_bytes, 80ull << 30);
  EXPECT_EQ(g.temperature_c, 64);
  EXPECT_EQ(g.power_w, 312.5);
  EXPECT_EQ(g.sm_clock_mhz, 1980);
  EXPECT_EQ(g.throttle_reasons, (std::vector<std::string>{"sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(g.ecc_errors, 2u);
  EXPECT_EQ(g.xid_errors, 1u);
  EXPECT_EQ(g.last_xid, 79);
  ASSERT_EQ(gpus[0].processes.size(), 1u);
  EXPECT_EQ(gpus[0].processes[0].pid, static_cast<int>(getpid()));
  EXPECT_EQ(gpus[0].processes[0].used_bytes, 1ull << 30);
  EXPECT_TRUE(gpus[1].processes.empty());
  EXPECT_EQ(gpus[1].device.xid_errors, 0u);
  EXPECT_EQ(reader->read()[0].device.xid_errors, 1u) << "an event counts once";
}

TEST(NvmlFakeMetrics, TheRankWhosePidNvmlListsGetsTheGpu) {
  ResourceMonitor monitor("/proc", SystemClock::instance(),
                          [](std::string& why) { return open_nvml(DDP_FAKE_NVML_LIBRARY, why); });
  auto out = monitor.sample({{0, static_cast<int>(getpid())}});
  ASSERT_EQ(out.count(0), 1u);
  ASSERT_EQ(out[0].gpus.size(), 1u);
  EXPECT_EQ(out[0].gpus[0].index, 0);
  EXPECT_EQ(out[0].gpus[0].rank_mem_bytes, 1ull << 30);
  EXPECT_TRUE(monitor.gpu_unavailable_reason().empty());
}

}  // namespace
}  // namespace ddp
