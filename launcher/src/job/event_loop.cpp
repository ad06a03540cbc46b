#include "job/event_loop.h"

#include <signal.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "process/stop_signals.h"

namespace ddp {
namespace {

sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  for (int s : stop_signals()) sigaddset(&set, s);
  return set;
}

}  // namespace

void block_handled_signals() {
  // The whole mask: a signal dropped from the stop signals gets its default action back.
  const sigset_t set = handled_signals();
  sigprocmask(SIG_SETMASK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed console must not kill the launcher
}

EventLoop::EventLoop(OutputRouter& router, const Clock& clock) : router_(router), clock_(clock) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw std::system_error(errno, std::generic_category(), "epoll_create1");
  const sigset_t set = handled_signals();
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = signal_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, signal_fd_, &ev);
}

EventLoop::~EventLoop() {
  close(signal_fd_);
  close(epoll_fd_);
}

void EventLoop::watch_output(int pipe_fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = pipe_fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, pipe_fd, &ev) != 0) {
    throw std::system_error(errno, std::generic_category(), "epoll_ctl");
  }
}

void EventLoop::watch_wakeup(int fd, std::function<void(Supervisor&)> handler) {
  wakeup_fd_ = fd;
  wakeup_handler_ = std::move(handler);
  watch_output(fd);
}

int EventLoop::run(Supervisor& supervisor) {
  supervisor.start();
  epoll_event events[64];
  while (!supervisor.finished()) {
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms(supervisor));
    if (n < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "epoll_wait");
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == signal_fd_) {
        read_signals(supervisor);
      } else if (fd == wakeup_fd_) {
        wakeup_handler_(supervisor);
      } else {
        // A pipe at end of stream is closed by the router, which also takes
        // it out of the epoll set.
        router_.on_readable(fd);
      }
    }
    supervisor.on_tick();
  }
  router_.close_all();
  return supervisor.exit_code();
}

void EventLoop::read_signals(Supervisor& supervisor) {
  signalfd_siginfo info{};
  bool child_exited = false;
  while (read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGCHLD) {
      child_exited = true;  // SIGCHLDs coalesce: reap everything below
    } else {
      supervisor.on_signal(static_cast<int>(info.ssi_signo));
    }
  }
  if (child_exited) reap_children(supervisor);
}

void EventLoop::reap_children(Supervisor& supervisor) {
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;  // 0: others still run; -1/ECHILD: none left
    for (const WorkerRecord& w : supervisor.workers()) {
      if (w.pid != pid) continue;
      // Read its last words before the failure report is written.
      router_.drain_local_rank(w.local_rank);
      break;
    }
    supervisor.on_child_exit(pid, ExitStatus::from_wait_status(status));
  }
}

int EventLoop::timeout_ms(const Supervisor& supervisor) const {
  const auto deadline = supervisor.next_deadline();
  if (!deadline) return -1;
  const auto left = *deadline - clock_.now();
  if (left <= Duration::zero()) return 0;
  // Round up: waking a millisecond early would only spin once more.
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

}  // namespace ddp
