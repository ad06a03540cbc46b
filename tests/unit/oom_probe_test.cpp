#include "report/oom_probe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ddp {
namespace {

TEST(OomProbe, ReadsTheOomKillCounterOfBothCgroupVersions) {
  const auto path = std::filesystem::temp_directory_path() / ("ddp_oom_" + std::to_string(::getpid()));
  // cgroup v2 memory.events
  std::ofstream(path) << "low 0\nhigh 0\nmax 2\noom 3\noom_kill 2\noom_group_kill 0\n";
  EXPECT_EQ(OomProbe(path.string()).kills(), 2u);
  // cgroup v1 memory.oom_control
  std::ofstream(path) << "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n";
  EXPECT_EQ(OomProbe(path.string()).kills(), 7u);
  std::ofstream(path) << "nothing here 1\n";
  EXPECT_FALSE(OomProbe(path.string()).kills().has_value());
  std::filesystem::remove(path);
  EXPECT_FALSE(OomProbe("").kills().has_value());
  EXPECT_FALSE(OomProbe("/nonexistent").kills().has_value());
}

}  // namespace
}  // namespace ddp
