#include "process/exit_status.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace ddp {
namespace {

ExitStatus status_of_child(void (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(99);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return ExitStatus::from_wait_status(status);
}

TEST(ExitStatus, DecodesARealExitCode) {
  const ExitStatus s = status_of_child([] { _exit(42); });
  EXPECT_EQ(s.code, 42);
  EXPECT_EQ(s.signal, 0);
  EXPECT_FALSE(s.succeeded());
  EXPECT_EQ(s.shell_code(), 42);
  EXPECT_EQ(s.describe(), "exit code 42");
}

TEST(ExitStatus, DecodesARealSignal) {
  const ExitStatus s = status_of_child([] { raise(SIGKILL); });
  EXPECT_EQ(s.signal, SIGKILL);
  EXPECT_EQ(s.shell_code(), 137);
  EXPECT_EQ(s.describe(), "killed by SIGKILL");
}

TEST(ExitStatus, ZeroIsSuccess) { EXPECT_TRUE(ExitStatus::exited(0).succeeded()); }

TEST(SignalName, NamesCommonSignalsAndNumbersTheRest) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGRTMIN + 3).rfind("SIG", 0), 0u);
}

}  // namespace
}  // namespace ddp
