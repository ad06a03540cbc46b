#include "process/posix_spawner.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace ddp {
namespace {

std::vector<char*> to_c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void write_all(int fd, const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

// Runs in the forked child: only async-signal-safe calls from here on.
[[noreturn]] void exec_child(pid_t parent, int out_fd, int err_fd, char** argv, char** envp, const cpu_set_t* cpus) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // the parent died before prctl took hold

  // Undo what ddplaunch set for itself: blocked signals (for signalfd) and
  // ignored SIGPIPE would otherwise be inherited across exec.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGCHLD}) signal(s, SIG_DFL);

  if (cpus != nullptr && sched_setaffinity(0, sizeof *cpus, cpus) != 0) {
    const int err = errno;
    write_all(err_fd, "ddplaunch: cannot bind to the CPUs of --numa-binding: ");
    write_all(err_fd, strerror(err));
    write_all(err_fd, "\n");
    _exit(127);
  }

  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);

  execvpe(argv[0], argv, envp);
  const int err = errno;
  write_all(STDERR_FILENO, "ddplaunch: cannot execute ");
  write_all(STDERR_FILENO, argv[0]);
  write_all(STDERR_FILENO, ": ");
  write_all(STDERR_FILENO, strerror(err));
  write_all(STDERR_FILENO, "\n");
  _exit(127);
}

}  // namespace

SpawnedProcess PosixSpawner::spawn(const SpawnRequest& request) {
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw std::system_error(err, std::generic_category(), "pipe2");
  }
  // Build the C arrays before fork: the child must not allocate.
  auto argv = to_c_array(request.argv);
  auto envp = to_c_array(request.env);
  const pid_t parent = getpid();
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (const int cpu : request.cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &cpus);
  }

  const pid_t pid = fork();
  if (pid == 0) {
    exec_child(parent, out_pipe[1], err_pipe[1], argv.data(), envp.data(), request.cpus.empty() ? nullptr : &cpus);
  }
  const int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    throw std::system_error(fork_errno, std::generic_category(), "fork");
  }
  // Also set the group from the parent: whichever runs first wins, and a signal
  // sent to the group right after spawn() then reaches the child.
  setpgid(pid, pid);
  if (sentinel_) sentinel_->watch(pid);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  return {pid, out_pipe[0], err_pipe[0]};
}

void PosixSpawner::signal_group(pid_t pid, int signo) {
  kill(-pid, signo);
  // A stopped process (SIGSTOP, a debugger) acts on the signal only once it
  // runs again; without this a frozen worker would hold teardown for the
  // whole grace period.
  if (signo != SIGKILL && signo != SIGCONT) kill(-pid, SIGCONT);
}

void PosixSpawner::release(pid_t pid) {
  kill(-pid, SIGKILL);  // children that outlived their worker are orphans now
  if (sentinel_) sentinel_->forget(pid);
}

}  // namespace ddp
