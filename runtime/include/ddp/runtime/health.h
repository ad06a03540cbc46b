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
#include <optional>
#include <string>
#include <vector>

namespace ddp {

enum class Phase { kUnknown = 0, kData, kForward, kBackward, kOptimizer, kCheckpoint, kOther };
const char* to_string(Phase phase);

class TrainingProgress {
 public:
  void begin_step(int64_t step);
  /// Also counts the call (activity()): a rank whose phases change works,
  /// even through a long loop with no step and no collective (evaluation).
  void set_phase(Phase phase) {
    phase_.store(phase, std::memory_order_relaxed);
    activity_.fetch_add(1, std::memory_order_relaxed);
  }
  /// Time the training thread spent waiting for other ranks in this step
  /// (e.g. the reducer's wait at the end of backward): not counted as busy.
  void add_wait(double seconds);
  /// The step begun last has ended: its duration becomes step_seconds(), and
  /// its duration less the waits busy_seconds() (what tells a straggler: in
  /// lock-step training every rank's step takes as long as the slowest's,
  /// but the slow one waits least).
  void end_step();

  /// True once ddplaunch has asked the job to stop (SIGTERM with
  /// --stop-timeout: a preemption) and the step begun last is the last one
  /// to run: save what must survive (a checkpoint) and exit 0, and the job
  /// can be started again from there. Every rank stops after the same step,
  /// the one the request names. Call it between steps; while no request is
  /// there it costs a failed open() of DDPLAUNCH_STOP_FILE.
  bool stop_requested() const;

  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  Phase phase() const { return phase_.load(std::memory_order_relaxed); }
  double step_seconds() const { return step_seconds_.load(std::memory_order_relaxed); }
  double busy_seconds() const { return busy_seconds_.load(std::memory_order_relaxed); }
  /// set_phase() calls so far.
  uint64_t activity() const { return activity_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> step_{-1};
  std::atomic<Phase> phase_{Phase::kUnknown};
  std::atomic<uint64_t> activity_{0};
  std::atomic<double> step_seconds_{0};
  std::atomic<double> busy_seconds_{0};
  std::atomic<double> waited_seconds_{0};  // in the step now running
  std::atomic<int64_t> step_started_ns_{0};
  const std::string stop_file_ = stop_file_from_environment();
  mutable std::atomic<int64_t> stop_at_{kNotAsked};  // steps to complete; -1: at the next boundary

  static constexpr int64_t kNotAsked = -2;
  static std::string stop_file_from_environment();
};

/// The "stop_at_step" of a stop request's text (ddplaunch's
/// DDPLAUNCH_STOP_FILE): the step count, -1 for null (stop at the next step
/// boundary), nullopt when the text is no such request.
std::optional<int64_t> parse_stop_at_step(const std::string& text);

// ---- every thread's stack ---------------------------------------------------
// Asked for by the launcher when it judged the job hung (and by
// `ddplaunch stacks`): where each thread of this worker is, symbolized, for
// the rank's stacks.log and for the launcher itself (the next heartbeat
// carries them, see heartbeat_sender.h). Each thread records its own stack
// from a real-time signal handler (SIGRTMIN+5, installed on first use); the
// asking thread waits for the answers, then symbolizes them outside signal
// context (runtime/src/thread_stacks.h, runtime/src/stack_symbolizer.h).

/// One frame of a thread's stack.
struct StackFrameInfo {
  std::string function;  // demangled C++ name; "libfoo.so+0x1a2b" where the object has no symbol there
  std::string file;      // the source file where the debug information says, else the object file
  int line = 0;          // 0: unknown
};

/// One thread of this process.
struct ThreadStackInfo {
  std::string name;   // /proc/self/task/<tid>/comm
  int tid = 0;
  bool main = false;  // the program's main thread (tid == pid)
  bool answered = true;
  std::string note;   // when !answered: why there are no frames (stopped, blocks the signal, ...)
  std::vector<StackFrameInfo> frames;  // outermost first; the signal handler's own frames are left out
};

/// Every thread's stack of this process at one moment.
struct ProcessStacks {
  int64_t unix_ms = 0;     // when they were taken (wall clock)
  std::string symbolizer;  // "libdw" (function, file:line, inlined calls) or "dladdr" (function names only)
  std::vector<ThreadStackInfo> threads;  // the main thread first, then by tid
};

/// Takes every thread's stack now. Waits at most `wait` for the threads'
/// answers; one that does not answer is listed with a note and no frames.
/// Thread-safe (concurrent calls take turns); call it from a normal thread,
/// never from a signal handler.
ProcessStacks capture_all_thread_stacks(std::chrono::milliseconds wait = std::chrono::milliseconds(500));

/// The stacks as stacks.log has them: a header line
///   ddp: every thread's stack (asked by ddplaunch) at <UTC time>: ...
/// then per thread
///   Thread <comm> (tid N, main) (most recent call last):
///     #k function at file:line      (or "in <object>" without line information)
/// outermost frame first; #0 is the innermost, where the thread is now, as
/// debuggers number frames.
std::string format_thread_stacks(const ProcessStacks& stacks);

/// Takes every thread's stack (capture_all_thread_stacks()), appends them to
/// DDPLAUNCH_RANK_LOG_DIR/stacks.log under ddplaunch (else to stderr) and
/// returns them for the heartbeat to carry. Thread-safe.
ProcessStacks dump_all_thread_stacks();

}  // namespace ddp
