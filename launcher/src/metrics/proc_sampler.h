#pragma once
// ProcSampler: one process's CPU use, memory, threads, context switches and
// bytes written, read from /proc/PID/stat, /proc/PID/status and /proc/PID/io.
//
// CPU% is the process's utime+stime (its own threads; children it waited
// for are not counted) over the time between two samples of the same pid,
// judged by the injected Clock, over at least kMinCpuWindow (a sample sooner
// after the last keeps the last figure); a pid's first sample gets its average since
// it started instead (/proc/uptime against its start time), so a value shows
// from the first heartbeat. A pid reused by a new process (another start
// time) starts over.
//
// Children (DataLoader workers) are not summed: this kernel family may lack
// /proc/PID/task/TID/children, and a scan of all of /proc for each rank at
// every heartbeat costs more than the figure is worth. parent_of() serves the
// GPU mapping, which needs the chain upwards only.
//
// Seams: `proc_root` (a directory laid out like /proc; unit tests build one)
// and the Clock (FakeClock in unit tests: no sleeping).
//
// Threading: not thread-safe (one caller: ResourceMonitor, under its lock).
// Keeps a reference to `clock`, which must outlive it.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp {

struct ProcessSample {
  int pid = 0;
  char state = '?';              // R, S, D, Z, T, ...
  int ppid = 0;
  uint64_t cpu_ticks = 0;        // utime + stime, in clock ticks
  uint64_t start_ticks = 0;      // when it started, in clock ticks after boot
  std::optional<double> cpu_percent;
  std::optional<uint64_t> rss_bytes;
  std::optional<int> threads;
  std::optional<uint64_t> voluntary_ctx_switches;
  std::optional<uint64_t> nonvoluntary_ctx_switches;
  // What tells a rank that writes a checkpoint from one that stands still
  // (/proc/PID/io). written_bytes ("wchar"): bytes passed to write() and the
  // like, to files and pipes (not socket sends), counted as each call
  // returns: one write() of a big tensor into the page cache moves it by up
  // to 2 GiB at once. dirtied_bytes ("write_bytes"): bytes it dirtied in the
  // page cache for storage, counted page by page as a write goes on.
  std::optional<uint64_t> written_bytes;
  std::optional<uint64_t> dirtied_bytes;
};

/// The shortest span a CPU% is measured over: the kernel counts CPU time in
/// ticks of 10 ms (USER_HZ 100), so over 200 ms a figure is within 5%.
inline constexpr Duration kMinCpuWindow = std::chrono::milliseconds(200);

class ProcSampler {
 public:
  /// ticks_per_second: the kernel's USER_HZ (sysconf(_SC_CLK_TCK)); 0: ask.
  /// page_size: for RSS when status has no VmRSS; 0: ask.
  ProcSampler(std::string proc_root, const Clock& clock, long ticks_per_second = 0, long page_size = 0);

  /// nullopt: no such process (or its files cannot be read or parsed).
  std::optional<ProcessSample> sample(int pid);
  /// The parent pid from /proc/PID/stat; 0 when unknown.
  int parent_of(int pid) const;
  /// Drops what is kept for CPU deltas of every pid not in `pids`.
  void forget_others(const std::set<int>& pids);

 private:
  struct Previous {
    uint64_t start_ticks = 0;
    uint64_t cpu_ticks = 0;
    SteadyTime at{};
    std::optional<double> cpu_percent;
  };
  std::optional<double> seconds_since_boot() const;

  std::string root_;
  const Clock& clock_;
  long hz_;
  long page_size_;
  std::map<int, Previous> previous_;  // by pid
};

/// The fields after the command name of a /proc/PID/stat line, or nullopt
/// when it does not look like one. [0] is the state (field 3 of proc(5)).
std::optional<std::vector<std::string>> split_proc_stat(const std::string& line);

}  // namespace ddp
