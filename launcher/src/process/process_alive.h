#pragma once
// Whether a process id names a running process, for files named after the
// process that owns them (agent sockets, job registrations): one whose owner
// was killed with SIGKILL could not remove it.

#include <signal.h>

#include <cerrno>

namespace ddp {

/// True while `pid` runs (or is a zombie not yet reaped), including processes
/// of other users (EPERM). A recycled pid reads as alive: such a file waits
/// for the next check after that process ends.
inline bool process_alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

}  // namespace ddp
