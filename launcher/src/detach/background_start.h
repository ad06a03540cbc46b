#pragma once
// `ddplaunch --detach`: the job runs in a background agent that outlives the
// terminal (and the SSH session) it was started from, while the command the
// user typed returns as soon as the job is registered.
//
// detach_from_terminal() forks. The child becomes the agent: a session of its
// own (no controlling terminal, so no SIGHUP from a closed terminal), stdin
// from /dev/null, stdout and stderr appended to the job's console log. The
// parent waits on a pipe until the agent says the job is registered (it then
// prints the job id and how to reach the job) or exits early (it then shows
// the console's last lines and returns the agent's exit code).
//
// Threading: detach_from_terminal() must run before any thread exists (fork
// copies only the calling thread); the rest from the thread that called it.

#include <sys/types.h>

#include <string>

namespace ddp {

struct Detached {
  bool in_agent = false;  // true in the child, which goes on to run the job
  pid_t agent_pid = 0;    // the child's pid (both sides)
  int ready_fd = -1;      // agent: the write end for notify_registered; parent: the read end
};

/// Creates the console log's folder and file, then forks. The agent keeps no
/// descriptor of the caller's but the ready pipe (an inherited lock or pipe
/// would otherwise be held by the job and its workers until the end). Throws
/// std::system_error when it cannot (nothing was started then).
Detached detach_from_terminal(const std::string& console_path);

/// In the agent, once the job is registered (`recorded`: whether its record
/// could be written, without which attach, stop and status cannot find it):
/// the waiting parent may return. Closes the descriptor; later calls do nothing.
void notify_registered(int& ready_fd, bool recorded);

/// In the parent: waits for the agent's word; prints the job id (stdout) and
/// how to attach, follow the logs and stop it (stderr). Returns 0, or the
/// agent's exit code when it ended before registering the job.
int report_background_start(const Detached& detached, const std::string& job_id, const std::string& console_path);

}  // namespace ddp
