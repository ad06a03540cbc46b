#pragma once
// --inject-fault KIND[=SECONDS]@STEP:RANK — a test and demo aid that makes one
// rank (or every rank: RANK '*') misbehave at the start of step STEP:
//   crash   abort() (SIGABRT, a core-dump style death)
//   exit    exit code 17
//   hang    stop making progress (sleep forever); the process and its
//           heartbeats stay alive
//   silent  stop making progress and stop heartbeats too
//   slow    sleep SECONDS (default 1) in every step from STEP on
// Faults fire in the first attempt only (TORCHELASTIC_RESTART_COUNT unset or
// 0), so a job restarted by ddplaunch --max-restarts can recover. The option
// may be given more than once.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddp::train {

enum class FaultKind { kCrash, kExit, kHang, kSilent, kSlow };

struct FaultSpec {
  FaultKind kind = FaultKind::kCrash;
  int64_t step = 0;
  int rank = -1;          // -1: every rank
  double seconds = 1.0;   // slow
};

/// Parses one --inject-fault value; std::invalid_argument naming what is wrong.
FaultSpec parse_fault(const std::string& text);

class FaultInjector {
 public:
  /// restart_count: this attempt's number (faults fire only in attempt 0).
  /// stop_heartbeats: called before a silent fault blocks.
  FaultInjector(std::vector<FaultSpec> faults, int rank, int restart_count, std::function<void()> stop_heartbeats = {});

  /// Called at the start of every step; may not return (crash, exit, hang, silent).
  void before_step(int64_t step);

 private:
  std::vector<FaultSpec> faults_;
  std::function<void()> stop_heartbeats_;
};

}  // namespace ddp::train
