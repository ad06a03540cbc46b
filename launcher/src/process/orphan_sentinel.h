#pragma once
// OrphanSentinel: a tiny helper process that outlives ddplaunch for one reason:
// if ddplaunch dies abruptly (even by SIGKILL), it kills every worker process
// group still registered, so no worker and no worker's child keeps holding a
// GPU. Workers also get PR_SET_PDEATHSIG, but that reaches only the direct
// child; the sentinel reaches the whole group.
//
// How: the sentinel holds the read end of a pipe whose write end only ddplaunch
// holds. ddplaunch writes "+pgid" / "-pgid" records as groups come and go;
// end-of-file means ddplaunch is gone, and the sentinel kills what is left.
//
// Ownership/threading: owned by main; call from one thread. Start it before
// any other thread exists (it forks).

#include <sys/types.h>

#include <memory>

namespace ddp {

class OrphanSentinel {
 public:
  /// Forks the sentinel. Throws std::system_error on failure.
  static std::unique_ptr<OrphanSentinel> start();
  /// Closes the pipe (the sentinel then has nothing left to kill) and reaps it.
  ~OrphanSentinel();
  OrphanSentinel(const OrphanSentinel&) = delete;
  OrphanSentinel& operator=(const OrphanSentinel&) = delete;

  void watch(pid_t pgid);
  void forget(pid_t pgid);
  pid_t pid() const { return pid_; }

 private:
  OrphanSentinel(pid_t pid, int write_fd) : pid_(pid), write_fd_(write_fd) {}
  void send(char op, pid_t pgid);

  pid_t pid_;
  int write_fd_;
};

}  // namespace ddp
