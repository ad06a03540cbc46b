// A process named by pid and start time (process/process_identity.h): a
// zombie or a later process with a recycled pid is not the one recorded.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dead_pid.h"
#include "process/process_identity.h"

namespace ddp {
namespace {

TEST(ProcessIdentity, ThisProcessIsItself) {
  const auto ticks = process_start_ticks(::getpid());
  ASSERT_TRUE(ticks.has_value());
  EXPECT_TRUE(same_process_running(::getpid(), *ticks));
  EXPECT_FALSE(same_process_running(::getpid(), *ticks + 1)) << "as a recycled pid reads";
  EXPECT_TRUE(same_process_running(::getpid(), 0)) << "an old record without a start time: the pid alone";
}

TEST(ProcessIdentity, AGoneProcessIsNotRunning) {
  const int pid = testing::dead_pid();
  EXPECT_FALSE(process_start_ticks(pid).has_value());
  EXPECT_FALSE(same_process_running(pid, 12345));
}

TEST(ProcessIdentity, AZombieIsNotRunning) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  const auto ticks = process_start_ticks(pid);
  ASSERT_TRUE(ticks.has_value());
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, pid, &info, WEXITED | WNOWAIT), 0);  // exited, not reaped: a zombie
  EXPECT_FALSE(same_process_running(pid, *ticks));
  ::waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace ddp
