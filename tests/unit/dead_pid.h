#pragma once
// A process id that names no running process, for tests of files left by a
// process killed with SIGKILL (agent sockets, job records).

#include <sys/wait.h>
#include <unistd.h>

namespace ddp::testing {

/// The pid of a child that has exited and been reaped (until the kernel
/// hands the number out again, which takes a full turn of the pid space).
inline int dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace ddp::testing
