#include "topology/host_resources.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace ddp {
namespace {

namespace fs = std::filesystem;

class HostResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    driver = fs::temp_directory_path() / ("ddp_gpus_" + std::to_string(::getpid()));
    for (const char* bus : {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}) fs::create_directories(driver / bus);
  }
  void TearDown() override { fs::remove_all(driver); }
  fs::path driver;
};

TEST_F(HostResourcesTest, CountsDriverDevices) { EXPECT_EQ(visible_cuda_devices(std::nullopt, driver.string()), 3); }

TEST_F(HostResourcesTest, CudaVisibleDevicesNarrowsAndStopsAtFirstInvalid) {
  EXPECT_EQ(visible_cuda_devices("1", driver.string()), 1);
  EXPECT_EQ(visible_cuda_devices("0,2", driver.string()), 2);
  EXPECT_EQ(visible_cuda_devices("0,-1,2", driver.string()), 1);
  EXPECT_EQ(visible_cuda_devices("", driver.string()), 0);
  EXPECT_EQ(visible_cuda_devices("-1", driver.string()), 0);
  EXPECT_EQ(visible_cuda_devices("0,1,2,3,4,5", driver.string()), 3);
}

TEST_F(HostResourcesTest, NoDriverMeansNoDevices) {
  EXPECT_EQ(visible_cuda_devices(std::nullopt, (driver / "absent").string()), 0);
  EXPECT_EQ(visible_cuda_devices("0,1", (driver / "absent").string()), 0);
}

TEST(UsableCpus, AtLeastOne) { EXPECT_GE(usable_cpus(), 1); }

}  // namespace
}  // namespace ddp
