// A stop request as the runtime reads it (health.h): the step named in
// ddplaunch's DDPLAUNCH_STOP_FILE, compared with the step begun last.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "ddp/runtime/health.h"

namespace {

TEST(StopRequest, TheStepIsReadFromTheRequest) {
  EXPECT_EQ(ddp::parse_stop_at_step(R"({"stop_at_step": 42, "reason": "SIGTERM"})"), 42);
  EXPECT_EQ(ddp::parse_stop_at_step(R"({"reason":"x","stop_at_step":null})"), -1);
  EXPECT_EQ(ddp::parse_stop_at_step("{\"stop_at_step\" :\n 7}"), 7);
  EXPECT_FALSE(ddp::parse_stop_at_step(""));
  EXPECT_FALSE(ddp::parse_stop_at_step(R"({"stop_at_step": "soon"})"));
  EXPECT_FALSE(ddp::parse_stop_at_step(R"({"stop_at_step"})"));
  EXPECT_FALSE(ddp::parse_stop_at_step(R"({"stop_at_step": -3})"));
}

TEST(StopRequest, EveryDigitOfTheStepIsRead) {
  // 19 digits used to be cut to 18, a step ten times smaller.
  EXPECT_EQ(ddp::parse_stop_at_step(R"({"stop_at_step":9223372036854775807})"), INT64_MAX);
  EXPECT_EQ(ddp::parse_stop_at_step(R"({"stop_at_step":1000000000000000000})"), 1000000000000000000);
  EXPECT_EQ(ddp::parse_stop_at_step(R"({"stop_at_step":00000000000000000000012})"), 12);
  EXPECT_FALSE(ddp::parse_stop_at_step(R"({"stop_at_step":9223372036854775808})"));
  EXPECT_FALSE(ddp::parse_stop_at_step(R"({"stop_at_step":99999999999999999999999})"));
}

TEST(StopRequest, ARankStopsOnceItHasBegunTheLastStep) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ddp-stop-" + std::to_string(getpid()) + ".json");
  std::filesystem::remove(file);
  ASSERT_EQ(setenv("DDPLAUNCH_STOP_FILE", file.c_str(), 1), 0);
  ddp::TrainingProgress progress;
  progress.begin_step(3);
  progress.end_step();
  EXPECT_FALSE(progress.stop_requested()) << "no request yet";
  std::ofstream(file) << R"({"stop_at_step": 6, "reason": "SIGTERM to ddplaunch"})" << "\n";
  EXPECT_FALSE(progress.stop_requested()) << "4 steps done, stop after 6";
  progress.begin_step(4);
  EXPECT_FALSE(progress.stop_requested());
  progress.begin_step(5);
  EXPECT_TRUE(progress.stop_requested()) << "step 5 is the sixth: the last to run";
  std::filesystem::remove(file);
  EXPECT_TRUE(progress.stop_requested()) << "a request, once read, stays";

  ASSERT_EQ(unsetenv("DDPLAUNCH_STOP_FILE"), 0);
  ddp::TrainingProgress outside_ddplaunch;
  EXPECT_FALSE(outside_ddplaunch.stop_requested());
}

TEST(StopRequest, WithoutAStepTheRankStopsAtItsNextBoundary) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ddp-stop-null-" + std::to_string(getpid()) + ".json");
  std::ofstream(file) << R"({"stop_at_step": null})";
  ASSERT_EQ(setenv("DDPLAUNCH_STOP_FILE", file.c_str(), 1), 0);
  ddp::TrainingProgress progress;
  EXPECT_TRUE(progress.stop_requested());
  std::filesystem::remove(file);
  ASSERT_EQ(unsetenv("DDPLAUNCH_STOP_FILE"), 0);
}

}  // namespace
