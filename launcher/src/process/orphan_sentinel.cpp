#include "process/orphan_sentinel.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <system_error>

namespace ddp {
namespace {

[[noreturn]] void run_sentinel(int read_fd) {
  // Own process group: a signal aimed at ddplaunch's group must not take the
  // sentinel with it. Terminal signals are ignored for the same reason.
  setpgid(0, 0);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(s, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  std::set<pid_t> groups;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(read_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // ddplaunch is gone (or closed the pipe on a clean exit)
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      const char op = pending[start];
      const pid_t pgid = static_cast<pid_t>(std::strtol(pending.c_str() + start + 1, nullptr, 10));
      if (pgid <= 1) continue;
      if (op == '+') groups.insert(pgid);
      if (op == '-') groups.erase(pgid);
    }
    pending.erase(0, start);
  }
  for (pid_t pgid : groups) kill(-pgid, SIGKILL);
  _exit(0);
}

}  // namespace

std::unique_ptr<OrphanSentinel> OrphanSentinel::start() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    throw std::system_error(err, std::generic_category(), "fork sentinel");
  }
  if (pid == 0) {
    close(fds[1]);
    // Every other descriptor is CLOEXEC or irrelevant; the sentinel never execs,
    // but close the standard streams so it holds no terminal or pipe open.
    const int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    run_sentinel(fds[0]);
  }
  close(fds[0]);
  return std::unique_ptr<OrphanSentinel>(new OrphanSentinel(pid, fds[1]));
}

OrphanSentinel::~OrphanSentinel() {
  close(write_fd_);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

void OrphanSentinel::watch(pid_t pgid) { send('+', pgid); }
void OrphanSentinel::forget(pid_t pgid) { send('-', pgid); }

void OrphanSentinel::send(char op, pid_t pgid) {
  char line[32];
  const int len = std::snprintf(line, sizeof line, "%c%d\n", op, static_cast<int>(pgid));
  // Shorter than PIPE_BUF: the write is atomic. A sentinel that died leaves
  // EPIPE here, which changes nothing for the job itself.
  while (write(write_fd_, line, static_cast<size_t>(len)) < 0 && errno == EINTR) {
  }
}

}  // namespace ddp
