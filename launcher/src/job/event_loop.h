#pragma once
// EventLoop: the launcher's one thread of control. It sleeps in epoll until a
// child exits (SIGCHLD through a signalfd), a signal for ddplaunch arrives,
// a worker writes output, or the supervisor's next deadline passes. Nothing
// is polled on a timer: a worker's death is acted on the moment it happens.
//
// Ownership: owns its epoll and signalfd descriptors; watches (does not own)
// the output pipes, which the OutputRouter owns. Threading: single thread.

#include <functional>

#include "ddp/common/clock.h"
#include "output/output_router.h"
#include "supervise/supervisor.h"

namespace ddp {

/// Blocks SIGCHLD and the stop signals (process/stop_signals.h; they are read
/// from the signalfd instead), unblocks every other signal, and ignores
/// SIGPIPE. Call at the top of main(), and again once the stop signals are
/// known, before any thread or child exists; spawned workers get default
/// dispositions back.
void block_handled_signals();

class EventLoop {
 public:
  EventLoop(OutputRouter& router, const Clock& clock);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  /// Starts reading a worker's output pipe.
  void watch_output(int pipe_fd);
  /// Calls handler when fd becomes readable (an eventfd other threads use to
  /// wake the loop); the handler must consume what made it readable.
  void watch_wakeup(int fd, std::function<void(Supervisor&)> handler);
  /// Starts the supervisor and runs until it has finished; returns its exit code.
  int run(Supervisor& supervisor);

 private:
  void reap_children(Supervisor& supervisor);
  void read_signals(Supervisor& supervisor);
  int timeout_ms(const Supervisor& supervisor) const;

  OutputRouter& router_;
  const Clock& clock_;
  int epoll_fd_ = -1;
  int wakeup_fd_ = -1;
  std::function<void(Supervisor&)> wakeup_handler_;
  int signal_fd_ = -1;
};

}  // namespace ddp
