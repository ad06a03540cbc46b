// The stop request the launcher leaves for its ranks on SIGTERM with
// --stop-timeout (job/stop_request.h): the step every rank stops after, and
// the file they read.
#include "job/stop_request.h"
#include "membership/job_stop.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace ddp {
namespace {

using namespace std::chrono_literals;

RankReport report(int rank, int64_t step, double step_seconds) {
  RankReport r;
  r.rank = rank;
  r.step = step;
  r.step_seconds = step_seconds;
  return r;
}

TEST(ChooseStopStep, BeyondAnyStepARankCanReachBeforeItReadsTheRequest) {
  // Rank 1 is furthest (step 40 begun); at 10 ms a step, a lag of 2 s is 200
  // steps it may have gone on meanwhile.
  EXPECT_EQ(choose_stop_step({report(0, 39, 0.010), report(1, 40, 0.010)}, 2s), 41 + 200 + 1);
  // The fastest step time counts: ranks in lock-step move at the same pace.
  EXPECT_EQ(choose_stop_step({report(0, 10, 0.5), report(1, 10, 0.25)}, 2s), 11 + 8 + 1);
  // Slow steps: one more than the furthest, and one for the step in progress.
  EXPECT_EQ(choose_stop_step({report(0, 10, 60.0)}, 2s), 11 + 1 + 1);
  // No step time yet: two steps of margin.
  EXPECT_EQ(choose_stop_step({report(0, 0, 0)}, 2s), 1 + 2 + 1);
}

TEST(ChooseStopStep, AFasterStepReportedBeforeCountsOverALastSlowOne) {
  // The last report is of a step with an evaluation in it (60 s); the steps
  // around it take 10 ms, and 2 s of them would pass a step one ahead.
  EXPECT_EQ(choose_stop_step({report(0, 10, 60.0)}, 2s, 0.010), 11 + 200 + 1);
  // The faster of the two counts, whichever it is.
  EXPECT_EQ(choose_stop_step({report(0, 10, 0.25)}, 2s, 0.5), 11 + 8 + 1);
  EXPECT_EQ(choose_stop_step({report(0, 10, 0)}, 2s, 0.5), 11 + 4 + 1);
}

// Found by coordinator_rpc_fuzz: a step is whatever a rank (or an agent)
// sent, and one near 2^63 made the sums overflow.
TEST(ChooseStopStep, AStepNearTheLargestSaturatesInsteadOfOverflowing) {
  constexpr int64_t kLast = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(choose_stop_step({report(0, kLast, 0.5)}, 2s), kLast);
  EXPECT_EQ(choose_stop_step({report(0, 3, 0.5), report(1, kLast - 2, 0)}, 2s), kLast);
  EXPECT_EQ(choose_stop_step({report(0, kLast - 20, 0.5)}, 2s), kLast - 20 + 1 + 4 + 1);
}

TEST(ChooseStopStep, NoneWhenNoRankReportsSteps) {
  EXPECT_EQ(choose_stop_step({}, 2s), std::nullopt);
  EXPECT_EQ(choose_stop_step({report(0, -1, 0), report(1, -1, 0)}, 2s), std::nullopt);
}

TEST(DecideJobStop, WaitsForAReportOfStepsUntilTheDeadline) {
  PendingJobStop pending;
  pending.stop.reason = "SIGTERM to ddplaunch on node 1";
  pending.stop.stop_timeout = 60s;
  pending.stop.pending = true;
  pending.deadline = SteadyTime(10s);
  // No rank reports steps yet: "each at its next boundary" would stop the
  // ranks of a lock-step job after different steps, so no choice before the deadline.
  EXPECT_EQ(decide_job_stop(pending, {report(0, -1, 0)}, 2s, SteadyTime(9s)), std::nullopt);
  const std::optional<JobStop> chosen = decide_job_stop(pending, {report(0, 9, 0.5)}, 2s, SteadyTime(9s));
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->stop_at_step, 10 + 4 + 1);
  EXPECT_FALSE(chosen->pending);
  EXPECT_EQ(chosen->reason, "SIGTERM to ddplaunch on node 1");
  EXPECT_EQ(chosen->stop_timeout, 60s);
  // A program that reports no steps is told "at the next boundary" at the deadline.
  const std::optional<JobStop> late = decide_job_stop(pending, {report(0, -1, 0)}, 2s, SteadyTime(10s));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->stop_at_step, std::nullopt);
  EXPECT_FALSE(late->pending);
}

TEST(DecideJobStop, WaitsForAStepTimeUntilTheDeadline) {
  // The race a CI run met: SIGTERM when the last report was of the first
  // step (no step time yet), and the steps after it took 10 ms each. Two
  // steps of margin chose step 5; the ranks had completed 7 and read the
  // request one after another, so three stopped after step 7 and the fourth
  // went on into step 8's all-reduce.
  PendingJobStop pending;
  pending.stop.reason = "SIGTERM to ddplaunch on node 0";
  pending.deadline = SteadyTime(10s);
  EXPECT_EQ(decide_job_stop(pending, {report(0, 1, 0), report(1, 1, 0)}, 2s, SteadyTime(9s)), std::nullopt);
  // The next report has one: 2 s at 10 ms a step past the furthest.
  const std::optional<JobStop> chosen =
      decide_job_stop(pending, {report(0, 30, 0.010), report(1, 29, 0)}, 2s, SteadyTime(9s));
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->stop_at_step, 31 + 200 + 1);
  // One reported before is as good as one in the last reports.
  const std::optional<JobStop> seen = decide_job_stop(pending, {report(0, 30, 0)}, 2s, SteadyTime(9s), 0.010);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->stop_at_step, 31 + 200 + 1);
  // Steps slower than the wait: at the deadline, two steps of margin.
  const std::optional<JobStop> late = decide_job_stop(pending, {report(0, 1, 0)}, 2s, SteadyTime(10s));
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->stop_at_step, 2 + 2 + 1);
}

TEST(StopRequestFile, IsWrittenWholeAsJson) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("ddp-stop-request-" + std::to_string(getpid()) + ".json");
  StopRequest request;
  request.stop_at_step = 290;
  request.reason = "SIGTERM to ddplaunch on node-a";
  request.requested_at = WallTime(std::chrono::seconds(1'800'000'000));
  write_stop_request(path, request);
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp." + std::to_string(getpid())));
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  const auto j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j["stop_at_step"], 290);
  EXPECT_EQ(j["reason"], "SIGTERM to ddplaunch on node-a");
  EXPECT_EQ(j["requested_at"], "2027-01-15T08:00:00.000Z");
  request.stop_at_step.reset();
  write_stop_request(path, request);
  std::stringstream again;
  again << std::ifstream(path).rdbuf();
  EXPECT_TRUE(nlohmann::json::parse(again.str())["stop_at_step"].is_null());
  std::filesystem::remove(path);
  EXPECT_THROW(write_stop_request("/nonexistent/dir/stop.json", request), std::runtime_error);
}

TEST(StopRequestFile, TheAgentsOfNodesSharingTheLogFolderDoNotTakeEachOthersTempFile) {
  // Another node's agent is between writing its temp file and renaming it.
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("ddp-stop-shared-" + std::to_string(getpid()) + ".json");
  const std::string other_temp = path.string() + ".tmp.999999999";
  std::ofstream(other_temp) << "the other node's request\n";
  StopRequest request;
  request.stop_at_step = 12;
  write_stop_request(path, request);
  EXPECT_TRUE(std::filesystem::exists(other_temp)) << "still there for the other agent to rename";
  EXPECT_NO_THROW(std::filesystem::rename(other_temp, path));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ddp
