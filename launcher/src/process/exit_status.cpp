#include "process/exit_status.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include <csignal>
#include <cstring>

namespace ddp {

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) return killed(WTERMSIG(status), WCOREDUMP(status));
  return exited(WEXITSTATUS(status));
}

std::string ExitStatus::describe() const {
  if (signal == 0) return fmt::format("exit code {}", code);
  return fmt::format("killed by {}{}", signal_name(signal), core_dumped ? " (core dumped)" : "");
}

std::string signal_name(int signo) {
  // sigabbrev_np is glibc >= 2.32; it gives "KILL" for 9.
  if (const char* abbrev = sigabbrev_np(signo)) return fmt::format("SIG{}", abbrev);
  return fmt::format("SIG{}", signo);
}

}  // namespace ddp
