#pragma once
// What a worker tells its agent about itself every heartbeat interval, so the
// launcher can name a rank that stopped (silent), never entered a collective
// the others wait in (stuck), issued a different one (desync) or lags
// (straggler) — within seconds, not after a collective's 10-minute timeout.
//
// TrainingProgress is what the training loop updates (cheap: atomics; call it
// as often as you like). The heartbeat thread that ddp::init() starts under
// ddplaunch reads it together with the collective's flight record.
//
//   auto group = ddp::init();
//   auto& progress = group->progress();
//   progress.begin_step(step);  progress.set_phase(ddp::Phase::kForward); ...
//   progress.end_step();        // records the step's duration
//
// Threading: every method is thread-safe.

#include <atomic>
#include <chrono>
#include <cstdint>

namespace ddp {

enum class Phase { kUnknown = 0, kData, kForward, kBackward, kOptimizer, kCheckpoint, kOther };
const char* to_string(Phase phase);

class TrainingProgress {
 public:
  void begin_step(int64_t step);
  void set_phase(Phase phase) { phase_.store(phase, std::memory_order_relaxed); }
  /// Time the training thread spent waiting for other ranks in this step
  /// (e.g. the reducer's wait at the end of backward): not counted as busy.
  void add_wait(double seconds);
  /// The step begun last has ended: its duration becomes step_seconds(), and
  /// its duration less the waits busy_seconds() (what tells a straggler: in
  /// lock-step training every rank's step takes as long as the slowest's,
  /// but the slow one waits least).
  void end_step();

  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  Phase phase() const { return phase_.load(std::memory_order_relaxed); }
  double step_seconds() const { return step_seconds_.load(std::memory_order_relaxed); }
  double busy_seconds() const { return busy_seconds_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> step_{-1};
  std::atomic<Phase> phase_{Phase::kUnknown};
  std::atomic<double> step_seconds_{0};
  std::atomic<double> busy_seconds_{0};
  std::atomic<double> waited_seconds_{0};  // in the step now running
  std::atomic<int64_t> step_started_ns_{0};
};

/// Writes every thread's stack of this process (a header line per thread,
/// then its frames) to DDPLAUNCH_RANK_LOG_DIR/stacks.log under ddplaunch, else
/// to stderr, through a real-time signal each thread handles itself. Asked for by the launcher before it tears down a hung job, so the
/// logs show where each thread was. Installs its handler on first use.
void dump_all_thread_stacks();

}  // namespace ddp
