#pragma once
// A process named by its pid and its start time, so a record that outlives
// its process (a job record of an agent killed with SIGKILL) is never taken
// for whatever process gets the same pid later.

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace ddp {

/// When `pid` started, in clock ticks since boot (/proc/PID/stat field 22);
/// nullopt when no such process is visible.
std::optional<uint64_t> process_start_ticks(pid_t pid);

/// True while the process `pid` that started at `start_ticks` runs: not a
/// zombie, not a later process with the recycled pid. start_ticks 0 (a record
/// written before start times were kept) checks the pid alone.
bool same_process_running(pid_t pid, uint64_t start_ticks);

}  // namespace ddp
