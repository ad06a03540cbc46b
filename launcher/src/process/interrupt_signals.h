#pragma once
// The signals that interrupt a command which waits on a job (`attach`,
// `logs -f`, `stop`): Ctrl-C, SIGTERM, SIGHUP (a dropped SSH session).
//
// Threading: blocks them in the calling thread, which then reads them from
// the returned descriptor.

#include <signal.h>
#include <sys/signalfd.h>

namespace ddp {

/// Blocks SIGINT, SIGTERM and SIGHUP and returns a signalfd that becomes
/// readable when one arrives (-1 when none could be made: poll without it).
inline int interrupt_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  return signalfd(-1, &set, SFD_CLOEXEC);
}

}  // namespace ddp
