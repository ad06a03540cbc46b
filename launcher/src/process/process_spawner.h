#pragma once
// ProcessSpawner seam: how the supervisor starts and signals worker processes.
// PosixSpawner does it for real; unit tests use a fake that records calls and
// lets the test script exits.

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddp {

/// One process to start.
struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is a path or a name looked up in PATH
  std::vector<std::string> env;   // complete environment, "NAME=value"
  std::vector<int> cpus;          // CPU affinity (--numa-binding); empty: inherited
};

/// A started process. The read ends of its stdout/stderr pipes belong to the
/// caller from now on (-1 when the spawner does not capture output).
struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  /// Starts the process as the leader of a new process group. A program that
  /// cannot be executed still yields a process, which exits 127 after writing
  /// the reason to its stderr. Throws std::system_error when no process could
  /// be created at all.
  virtual SpawnedProcess spawn(const SpawnRequest& request) = 0;
  /// Sends signo to the process group led by pid (the worker and its children).
  virtual void signal_group(pid_t pid, int signo) = 0;
  /// Called once the leader has been reaped: kills what is left of its group
  /// (children that outlived it) and stops tracking it.
  virtual void release(pid_t pid) = 0;
};

}  // namespace ddp
