// The per-user job registry (job/job_registry.h) and how `attach`, `logs` and
// `stop` choose a job from it (cli/job_selection.h): records live through the
// job and after it, a killed agent reads as lost, the folder must be this
// user's alone, and an ended record holds no secret.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/job_selection.h"
#include "dead_pid.h"
#include "temp_dir.h"
#include "exit_codes.h"
#include "job/job_registry.h"

namespace ddp {
namespace {

// An agent killed by SIGKILL never runs JobRegistration's destructor. The
// tests play that by never destroying the registration; it stays reachable
// from here, so leak checkers (the ASan build) do not take the play for a leak.
void as_if_killed(std::unique_ptr<JobRegistration> registration) {
  static std::vector<std::unique_ptr<JobRegistration>> killed;
  killed.push_back(std::move(registration));
}

namespace fs = std::filesystem;

using ddp::testing::dead_pid;

// Points the registry (XDG_RUNTIME_DIR/ddplaunch/jobs) at a fresh folder.
class JobRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("XDG_RUNTIME_DIR");
    if (old != nullptr) saved_ = old;
    had_ = old != nullptr;
    ::setenv("XDG_RUNTIME_DIR", root_.c_str(), 1);
  }
  void TearDown() override {
    if (had_) {
      ::setenv("XDG_RUNTIME_DIR", saved_.c_str(), 1);
    } else {
      ::unsetenv("XDG_RUNTIME_DIR");
    }
  }

  static JobRecord job(const std::string& id, int pid, double started) {
    JobRecord j;
    j.job_id = id;
    j.endpoint = "127.0.0.1:29500";
    j.token = "s3cret-token";
    j.pid = pid;
    j.started_unix_s = started;
    j.log_dir = "/logs/" + id;
    j.local_ranks = 2;
    return j;
  }

  fs::path jobs_dir() const { return root_ / "ddplaunch" / "jobs"; }

  testing::TempDir dir_{"ddp_registry_"};
  const fs::path& root_ = dir_.path();
  std::string saved_;
  bool had_ = false;
};

TEST_F(JobRegistryTest, ARecordLivesThroughTheJobAndAfterIt) {
  {
    JobRegistration reg(job("a", ::getpid(), 100));
    EXPECT_EQ(running_jobs().at(0).node_rank, -1) << "no node before the first rendezvous";
    reg.update_attempt(2, 8, 4, 1);
    auto running = running_jobs();
    ASSERT_EQ(running.size(), 1u);
    EXPECT_EQ(running[0].world_size, 8);
    EXPECT_EQ(running[0].node_rank, 1);
    EXPECT_EQ(running[0].restarts, 2);
    EXPECT_EQ(running[0].token, "s3cret-token");
    EXPECT_FALSE(running[0].exit_code.has_value());
    reg.finish(exit_code::kHang, false, "the summary\n");
  }
  EXPECT_TRUE(running_jobs().empty());
  auto all = all_jobs();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, JobState::kFailed);
  ASSERT_TRUE(all[0].exit_code.has_value());
  EXPECT_EQ(*all[0].exit_code, exit_code::kHang);
  EXPECT_EQ(all[0].summary, "the summary\n");
  EXPECT_GT(all[0].ended_unix_s, 0);
  EXPECT_TRUE(all[0].token.empty()) << "an ended job's record keeps no secret";
}

TEST_F(JobRegistryTest, AnAgentLeavingWithoutFinishRecordsAnInternalError) {
  { JobRegistration reg(job("a", ::getpid(), 100)); }
  auto all = all_jobs();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, JobState::kFailed);
  EXPECT_EQ(all[0].exit_code, exit_code::kInternal);
}

TEST_F(JobRegistryTest, StatesFollowTheExitCode) {
  EXPECT_EQ(state_of_exit(0, false), JobState::kSucceeded);
  EXPECT_EQ(state_of_exit(0, true), JobState::kSucceeded);
  EXPECT_EQ(state_of_exit(143, true), JobState::kStopped);
  EXPECT_EQ(state_of_exit(exit_code::kRequeue, false), JobState::kStopped);
  EXPECT_EQ(state_of_exit(3, false), JobState::kFailed);
}

TEST_F(JobRegistryTest, AKilledAgentsRecordReadsAsLost) {
  const int pid = dead_pid();
  auto reg = std::make_unique<JobRegistration>(job("gone", pid, 100));
  as_if_killed(std::move(reg));
  EXPECT_TRUE(running_jobs().empty());
  auto all = all_jobs();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, JobState::kLost);
  EXPECT_FALSE(all[0].exit_code.has_value());
  EXPECT_EQ(find_job("gone", pid)->state, JobState::kLost);
  EXPECT_FALSE(find_job("gone", pid + 1).has_value());
}

TEST_F(JobRegistryTest, ARecycledPidIsNotTheAgent) {
  auto reg = std::make_unique<JobRegistration>(job("old", ::getpid(), 100));
  as_if_killed(std::move(reg));  // no end recorded
  // Make the record name an earlier process that had this pid.
  const fs::path path = jobs_dir() / ("old." + std::to_string(::getpid()) + ".json");
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::string json = text.str();
  const std::string key = "\"pid_start_ticks\":";
  const size_t at = json.find(key);
  ASSERT_NE(at, std::string::npos) << json;
  json.insert(at + key.size(), "1");  // another start time
  std::ofstream(path, std::ios::trunc) << json;
  auto all = all_jobs();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].state, JobState::kLost);
  EXPECT_TRUE(running_jobs().empty());
  text.str("");
  text << std::ifstream(path).rdbuf();
  EXPECT_EQ(text.str().find("s3cret-token"), std::string::npos) << "a lost record keeps no secret";
}

TEST_F(JobRegistryTest, OnlyTheNewestEndedRecordsAreKept) {
  for (int i = 0; i < kKeptEndedJobs + 5; ++i) {
    JobRegistration reg(job("j" + std::to_string(i), ::getpid(), 1000 + i));
    reg.finish(0, false, "");
  }
  JobRegistration running(job("live", ::getpid(), 1));  // the oldest, but running: kept
  auto all = all_jobs();
  ASSERT_EQ(all.size(), static_cast<size_t>(kKeptEndedJobs + 1));
  EXPECT_EQ(all.front().job_id, "live");
  EXPECT_EQ(all[1].job_id, "j5");
  EXPECT_EQ(all.back().job_id, "j" + std::to_string(kKeptEndedJobs + 4));
}

TEST_F(JobRegistryTest, RecordsAreTheUsersOwnAndMalformedOnesAreSkipped) {
  JobRegistration reg(job("a", ::getpid(), 100));
  struct stat st {};
  ASSERT_EQ(::stat(jobs_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& e : fs::directory_iterator(jobs_dir())) {
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << e.path() << " holds the token";
  }
  std::ofstream(jobs_dir() / "junk.json") << "{not json";
  std::ofstream(jobs_dir() / "typed.json") << R"({"job_id": 3, "pid": "x"})";
  EXPECT_EQ(all_jobs().size(), 1u);
}

TEST_F(JobRegistryTest, AFolderOfAnotherUserIsNotUsed) {
  { JobRegistration reg(job("a", ::getpid(), 100)); }
  ASSERT_EQ(all_jobs().size(), 1u);
  // /tmp/ddplaunch-<uid> is a guessable name: another user could make it
  // first, to read the tokens in it or plant records.
  if (::chown((root_ / "ddplaunch").c_str(), 65534, 65534) != 0) {
    GTEST_SKIP() << "only root can give the folder to another user here";
  }
  EXPECT_TRUE(all_jobs().empty());
  JobRegistration reg(job("b", ::getpid(), 200));
  EXPECT_FALSE(fs::exists(jobs_dir() / ("b." + std::to_string(::getpid()) + ".json")));
  EXPECT_FALSE(select_job_record("attach", "a", false).job.has_value());
}

TEST_F(JobRegistryTest, SelectionPrefersTheRunningJobThenTheNewest) {
  {
    JobRegistration old(job("old", ::getpid(), 100));
    old.finish(3, false, "");
  }
  // None runs: the newest (attach/logs), or an error (stop).
  SelectedJob s = select_job_record("attach", "", false);
  ASSERT_TRUE(s.job.has_value());
  EXPECT_EQ(s.job->job_id, "old");
  s = select_job_record("stop", "", true);
  EXPECT_FALSE(s.job.has_value());
  EXPECT_EQ(s.exit_code, 1);
  s = select_job_record("stop", "old", true);
  EXPECT_FALSE(s.job.has_value());
  EXPECT_EQ(s.exit_code, 1);
  s = select_job_record("attach", "nope", false);
  EXPECT_FALSE(s.job.has_value());
  EXPECT_EQ(s.exit_code, 1);

  JobRegistration one(job("one", ::getpid(), 200));
  s = select_job_record("attach", "", false);
  ASSERT_TRUE(s.job.has_value());
  EXPECT_EQ(s.job->job_id, "one");

  JobRegistration two(job("two", ::getpid(), 300));
  s = select_job_record("attach", "", false);
  EXPECT_FALSE(s.job.has_value());
  EXPECT_EQ(s.exit_code, 2) << "several run: the user must name one";
  s = select_job_record("attach", "two", false);
  ASSERT_TRUE(s.job.has_value());
  EXPECT_EQ(s.job->job_id, "two");
  s = select_job_record("logs", "old", false);
  ASSERT_TRUE(s.job.has_value());
  EXPECT_EQ(s.job->job_id, "old") << "a finished job by name";
}

}  // namespace
}  // namespace ddp
