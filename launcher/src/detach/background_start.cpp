#include "detach/background_start.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "detach/console_tail.h"
#include "exit_codes.h"
#include "process/exit_status.h"

namespace ddp {
namespace {

[[noreturn]] void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

// How many of the console's last lines a start that failed shows.
constexpr int kLinesShownOnFailure = 30;

// The agent's word on the ready pipe.
constexpr char kRecorded = 'r';
constexpr char kNotRecorded = 'n';

}  // namespace

Detached detach_from_terminal(const std::string& console_path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(console_path).parent_path(), ec);
  const int console =
      open(console_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW, 0644);
  if (console < 0) throw_errno("cannot open the console log " + console_path);
  const int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int ready[2];
  if (null_in < 0 || pipe2(ready, O_CLOEXEC) != 0) throw_errno("cannot prepare the background agent");
  std::fflush(nullptr);  // nothing buffered twice

  const pid_t pid = fork();
  if (pid < 0) throw_errno("cannot start the background agent (fork)");
  Detached d;
  if (pid > 0) {
    close(console);
    close(null_in);
    close(ready[1]);
    d.agent_pid = pid;
    d.ready_fd = ready[0];
    return d;
  }
  close(ready[0]);
  setsid();                  // no controlling terminal: its hang-up cannot reach the job
  signal(SIGHUP, SIG_IGN);   // nor a SIGHUP someone sends the old process group
  dup2(null_in, STDIN_FILENO);
  dup2(console, STDOUT_FILENO);
  dup2(console, STDERR_FILENO);
  // Every other descriptor from 3 up, the ready pipe's write end excepted.
  close_range(3, static_cast<unsigned>(ready[1]) - 1, 0);
  close_range(static_cast<unsigned>(ready[1]) + 1, ~0U, 0);
  d.in_agent = true;
  d.agent_pid = getpid();
  d.ready_fd = ready[1];
  return d;
}

void notify_registered(int& ready_fd, bool recorded) {
  if (ready_fd < 0) return;
  const char word = recorded ? kRecorded : kNotRecorded;
  (void)!write(ready_fd, &word, 1);
  close(ready_fd);
  ready_fd = -1;
}

int report_background_start(const Detached& detached, const std::string& job_id, const std::string& console_path) {
  char byte = 0;
  ssize_t n;
  do {
    n = read(detached.ready_fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  close(detached.ready_fd);
  if (n == 1) {
    if (byte == kNotRecorded) {
      std::fprintf(stderr,
                   "ddplaunch: warning: job %s runs, but its record could not be written to the job registry (see "
                   "its console): attach, logs, stop and status cannot find it; follow %s, stop it with kill %d\n",
                   job_id.c_str(), console_path.c_str(), static_cast<int>(detached.agent_pid));
    }
    std::printf("%s\n", job_id.c_str());
    std::fflush(stdout);
    std::fprintf(stderr,
                 "ddplaunch: job %s runs in the background (agent pid %d); its console: %s\n"
                 "  follow it:    ddplaunch attach %s   (Ctrl-C leaves it running)\n"
                 "  a rank's log: ddplaunch logs %s --rank 0 [-f]\n"
                 "  stop it:      ddplaunch stop %s\n"
                 "  all jobs:     ddplaunch list\n",
                 job_id.c_str(), static_cast<int>(detached.agent_pid), console_path.c_str(), job_id.c_str(),
                 job_id.c_str(), job_id.c_str());
    return exit_code::kSuccess;
  }
  // The agent ended before the job was registered: say why, as it said it.
  int status = 0;
  while (waitpid(detached.agent_pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = ExitStatus::from_wait_status(status).shell_code();
  std::fprintf(stderr, "%s", last_lines_of_file(console_path, kLinesShownOnFailure).c_str());
  std::fprintf(stderr, "ddplaunch: error: job %s ended before it started (exit code %d); its console: %s\n",
               job_id.c_str(), code, console_path.c_str());
  return code;
}

}  // namespace ddp
