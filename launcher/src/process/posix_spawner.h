#pragma once
// PosixSpawner: fork/exec of worker processes, each the leader of its own
// process group, with a parent-death signal, stdin from /dev/null and
// stdout/stderr captured through pipes. Registers every group with the
// OrphanSentinel (when given) so nothing survives ddplaunch.
//
// Threading: call from the thread that will outlive the workers (the parent
// death signal follows the forking thread).

#include "process/orphan_sentinel.h"
#include "process/process_spawner.h"

namespace ddp {

class PosixSpawner final : public ProcessSpawner {
 public:
  /// sentinel may be null (then only the parent-death signal protects).
  explicit PosixSpawner(OrphanSentinel* sentinel) : sentinel_(sentinel) {}

  SpawnedProcess spawn(const SpawnRequest& request) override;
  void signal_group(pid_t pid, int signo) override;
  void release(pid_t pid) override;

 private:
  OrphanSentinel* sentinel_;
};

}  // namespace ddp
