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

// What faulthandler writes at SIGSEGV on Python 3.11.
const char* kFatalStack =
    "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
    "  File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at\n"
    "  File \"/tmp/train.py\", line 4 in load_batch\n\n"
    "Extension modules: torch._C, torch._C._fft, numpy.core._multiarray_umath (total: 3)\n";

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(FailureReport, TheFatalSignalStackIsTheTracebackOfACrash) {
  const auto path = write_temp("ddp_fatal_", kFatalStack);
  FailureEvidence ev;
  ev.fatal_stack = read_fatal_stack(path);
  std::filesystem::remove(path);
  EXPECT_EQ(ev.fatal_stack,
            "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
            "  File \"/usr/lib/python3.11/ctypes/__init__.py\", line 519 in string_at\n"
            "  File \"/tmp/train.py\", line 4 in load_batch");
  const WorkerRecord w = failed_worker(ExitStatus::killed(SIGSEGV));
  const auto j = failure_to_json(w, ev);
  EXPECT_EQ(j["traceback"], ev.fatal_stack);
  EXPECT_EQ(j["fatal_stack"], ev.fatal_stack);
  const std::string text = format_failure(0, w, ev);
  EXPECT_NE(text.find("failed: killed by SIGSEGV"), std::string::npos) << text;
  EXPECT_NE(text.find("  Python stack at the fatal signal (fatal_stack.log):\n"
                      "    Fatal Python error: Segmentation fault\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n      File \"/tmp/train.py\", line 4 in load_batch\n"), std::string::npos) << text;
}

TEST(FailureReport, AnErrorFileTracebackComesFirstAndTheFatalStackStaysBesideIt) {
  // A DataLoader worker aborted (its stack in the file), then the rank raised.
  FailureEvidence ev;
  ev.error_file = nlohmann::json::parse(kTorchErrorFile);
  ev.fatal_stack = "Fatal Python error: Aborted";
  const auto j = failure_to_json(failed_worker(ExitStatus::exited(1)), ev);
  EXPECT_NE(j["traceback"].get<std::string>().find("RuntimeError: boom"), std::string::npos);
  EXPECT_EQ(j["fatal_stack"], "Fatal Python error: Aborted");
}

TEST(FailureReport, AMissingEmptyOrLongFatalStackFile) {
  EXPECT_EQ(read_fatal_stack("/nonexistent/fatal_stack.log"), "");
  const auto empty = write_temp("ddp_fatal_empty_", "");
  EXPECT_EQ(read_fatal_stack(empty), "");
  std::filesystem::remove(empty);
  const auto long_file = write_temp("ddp_fatal_long_", std::string(40000, 'x') + "\nthe end\n");
  const std::string text = read_fatal_stack(long_file);
  std::filesystem::remove(long_file);
  EXPECT_EQ(text.size(), 16u * 1024 - 1);   // the last 16 KiB, less the final newline
  EXPECT_EQ(text.substr(text.size() - 8), "\nthe end");
  EXPECT_TRUE(failure_to_json(failed_worker(ExitStatus::killed(SIGSEGV)), FailureEvidence{})["fatal_stack"].is_null());
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
