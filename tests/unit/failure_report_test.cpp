#include "report/failure_report.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>

namespace ddp {
namespace {

WorkerRecord failed_worker(ExitStatus status) {
  WorkerRecord w;
  w.rank = 3;
  w.local_rank = 1;
  w.pid = 4242;
  w.state = WorkerState::kFailed;
  w.exit = status;
  w.exit_time = WallTime(std::chrono::seconds(1'800'000'000));
  return w;
}

// What torch.distributed.elastic's @record writes.
const char* kTorchErrorFile = R"({"message": {"message": "RuntimeError: boom",
  "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3\nRuntimeError: boom\n",
                "timestamp": "1800000000"}}})";

TEST(FailureReport, JsonNamesRankPidAndExitCode) {
  FailureEvidence ev;
  ev.stderr_tail = {"line 1", "line 2"};
  const auto j = failure_to_json(failed_worker(ExitStatus::exited(3)), ev);
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["local_rank"], 1);
  EXPECT_EQ(j["pid"], 4242);
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_TRUE(j["signal"].is_null());
  EXPECT_EQ(j["stderr_tail"].size(), 2u);
  EXPECT_EQ(j["time"], "2027-01-15T08:00:00.000Z");
  EXPECT_FALSE(j["likely_oom"].get<bool>());
}

TEST(FailureReport, SignalDeathAndOomHint) {
  FailureEvidence ev;
  ev.likely_oom = true;
  const WorkerRecord w = failed_worker(ExitStatus::killed(SIGKILL));
  const auto j = failure_to_json(w, ev);
  EXPECT_TRUE(j["exit_code"].is_null());
  EXPECT_EQ(j["signal"], SIGKILL);
  EXPECT_EQ(j["signal_name"], "SIGKILL");
  EXPECT_TRUE(j["likely_oom"].get<bool>());
  const std::string text = format_failure(0, w, ev);
  EXPECT_NE(text.find("rank 3 (node 0, local rank 1, pid 4242) failed: killed by SIGKILL"), std::string::npos);
  EXPECT_NE(text.find("likely OOM-killed"), std::string::npos);
}

TEST(FailureReport, ReadsTheTracebackFromTheErrorFile) {
  const auto path = std::filesystem::temp_directory_path() / ("ddp_err_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << kTorchErrorFile;
  FailureEvidence ev;
  ev.error_file = read_error_file(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(ev.error_file.has_value());
  const WorkerRecord w = failed_worker(ExitStatus::exited(1));
  EXPECT_NE(failure_to_json(w, ev)["traceback"].get<std::string>().find("RuntimeError: boom"), std::string::npos);
  EXPECT_NE(format_failure(0, w, ev).find("    RuntimeError: boom"), std::string::npos);
}

TEST(FailureReport, MissingOrGarbledErrorFileIsIgnored) {
  EXPECT_FALSE(read_error_file("/nonexistent/error.json").has_value());
  const auto path = std::filesystem::temp_directory_path() / ("ddp_bad_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << "{not json";
  EXPECT_FALSE(read_error_file(path).has_value());
  std::filesystem::remove(path);
  EXPECT_FALSE(traceback_of(nlohmann::json{{"message", "plain string"}}).has_value());
}

TEST(FailureReport, AttemptReportListsEveryWorker) {
  std::vector<WorkerRecord> workers = {failed_worker(ExitStatus::exited(3)), failed_worker(ExitStatus::killed(SIGTERM))};
  workers[1].rank = 4;
  workers[1].state = WorkerState::kStopped;
  nlohmann::json failures = nlohmann::json::array({failure_to_json(workers[0], {})});
  const auto j = attempt_report_to_json("job", 2, workers[0], failures, workers);
  EXPECT_EQ(j["job_id"], "job");
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_EQ(j["root_cause"]["rank"], 3);
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_EQ(j["workers"][1]["state"], "stopped");
  EXPECT_EQ(j["workers"][1]["signal"], SIGTERM);
}

}  // namespace
}  // namespace ddp
