// The runtime keeps a SIGTERM meant for ddplaunch (sigterm_guard.h): a real
// forked worker, the intent file ddplaunch writes, and real signals.
#include "sigterm_guard.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

class SigtermGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    intent_ = fs::temp_directory_path() / ("ddp-sigterm-intent-" + std::to_string(getpid()));
    fs::remove(intent_);
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    if (err_ >= 0) close(err_);
    fs::remove(intent_);
  }

  // A worker with the guard installed (no wait beyond 300 ms for an
  // unannounced SIGTERM), its stderr readable through err_.
  void start_worker() {
    int ready[2];
    int err[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(err), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      dup2(err[1], STDERR_FILENO);
      const bool installed = ddp::install_sigterm_guard(intent_.string(), std::chrono::milliseconds(300));
      const char answer = installed ? 'y' : 'n';
      (void)!write(ready[1], &answer, 1);
      for (;;) pause();
    }
    close(ready[1]);
    close(err[1]);
    err_ = err[0];
    char answer = 0;
    ASSERT_EQ(read(ready[0], &answer, 1), 1);
    close(ready[0]);
    ASSERT_EQ(answer, 'y');
  }

  void say(const std::string& word) { std::ofstream(intent_) << word << "\n"; }

  // Reads the worker's stderr until it holds `text` (or the pipe ends).
  bool stderr_says(const std::string& text) {
    std::string seen;
    char buffer[256];
    while (seen.find(text) == std::string::npos) {
      const ssize_t n = read(err_, buffer, sizeof buffer);
      if (n <= 0) return false;
      seen.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }

  int wait_status() {
    int status = 0;
    EXPECT_EQ(waitpid(child_, &status, 0), child_);
    child_ = -1;
    return status;
  }

  fs::path intent_;
  pid_t child_ = -1;
  int err_ = -1;
};

TEST_F(SigtermGuardTest, ASigtermWhileStoppingIsIgnoredAndOneWhileTerminatingKills) {
  start_worker();
  say("stopping");
  ASSERT_EQ(kill(child_, SIGTERM), 0);
  ASSERT_TRUE(stderr_says("ignoring a SIGTERM from outside ddplaunch"));
  int status = 0;
  EXPECT_EQ(waitpid(child_, &status, WNOHANG), 0) << "still running: it stops at its step boundary";
  say("terminating");
  ASSERT_EQ(kill(child_, SIGTERM), 0);
  status = wait_status();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM) << "dies of it, as without the guard";
}

TEST_F(SigtermGuardTest, AnUnannouncedSigtermKillsOnceDdplaunchHasHadTimeToSay) {
  start_worker();
  const auto sent = Clock::now();
  ASSERT_EQ(kill(child_, SIGTERM), 0);
  const int status = wait_status();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_GE(Clock::now() - sent, std::chrono::milliseconds(300)) << "it waited for an intent first";
}

TEST_F(SigtermGuardTest, AStopAnnouncedWhileWaitingKeepsTheWorker) {
  start_worker();
  ASSERT_EQ(kill(child_, SIGTERM), 0);
  say("stopping");  // ddplaunch got the same signal and says so a moment later
  ASSERT_TRUE(stderr_says("ignoring a SIGTERM"));
  int status = 0;
  EXPECT_EQ(waitpid(child_, &status, WNOHANG), 0);
}

TEST(SigtermGuard, AProgramsOwnHandlerIsLeftAlone) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGTERM, SIG_IGN);
    const bool installed = ddp::install_sigterm_guard("/nonexistent/intent");
    _exit(installed ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(ddp::install_sigterm_guard("")) << "no file named: nothing to guard";
}

}  // namespace
