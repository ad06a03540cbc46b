#pragma once
// TroubleWarnings: the coordinator's imbalance and trouble rules over the
// same per-rank heartbeats and resource samples HangDetector gets. Each rule
// gives a warning, never a verdict: nothing is stopped. Pure and
// clock-driven: no gRPC, no threads; unit tests drive it with FakeClock.
//
// The rules (thresholds in TroubleConfig; README "Warnings" lists them):
//  - straggler: a rank whose busy time per step (its step time where the
//    worker does not report busy time) stays above straggler_factor x the
//    median of the others' for straggler_heartbeats consecutive new steps.
//    Where ranks report a sync span (RankReport::sync_seconds: DDP's forward
//    and backward, where a Python rank waits for the others unseen), only
//    the least span across ranks counts as busy: the rank the others wait
//    for waits least there, so its span is the work every rank does;
//  - gpu_underused: a rank whose GPU utilisation (the mean of its GPUs) stays
//    below gpu_low_fraction x the median of the others' (and at least
//    gpu_low_gap points below it) for gpu_low_samples consecutive samples.
//    Only ranks with GPU samples take part, on either side;
//  - gpu_throttled: a GPU holding a thermal or hardware power-brake
//    throttle reason for throttle_samples consecutive samples (sw_power_cap
//    is left out: a busy GPU at its power limit is normal, and every GPU of
//    a job at full load would show it);
//  - gpu_xid: a GPU that reports critical Xid errors (counted since its agent
//    started watching, so any is news); names the last Xid;
//  - gpu_ecc: a GPU whose uncorrected ECC errors rise above the first count
//    seen in this generation (the count runs since the driver loaded);
//  - memory_full: a GPU whose memory in use reaches memory_full of its total.
// The two imbalance rules say what the rank was doing, from the phase
// history of its last heartbeats (health/phase_history.h), and what the
// others were; each warning carries one "look at" hint chosen by it.
// A warning is given once per (rank, kind, GPU) per generation.
//
// Cost: a heartbeat or sample is O(1) (O(GPUs)); check() sorts the ranks'
// latest figures only when some rank reported a new one, and looks only at
// the ranks that did: O(n log n) at most per check for n ranks.
//
// Ownership and threading: NOT thread-safe; its owner (HangDetector) calls
// it under CoordinatorJob's lock. Keeps a reference to `clock`.

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "health/phase_history.h"
#include "health/rank_health.h"
#include "metrics/rank_resources.h"

namespace ddp {

struct TroubleConfig {
  double straggler_factor = 3.0;  // busy time above factor x the median of the others
  int straggler_heartbeats = 5;   // ... in this many consecutive reports with new steps
  double gpu_low_fraction = 0.5;  // GPU utilisation below this fraction of the others' median
  double gpu_low_gap = 25.0;      // ... and at least this many points below it
  int gpu_low_samples = 5;        // ... in this many consecutive samples
  int throttle_samples = 3;       // consecutive samples with a thermal/power throttle reason
  double memory_full = 0.95;      // GPU memory in use / total
  /// A rank's phase history takes at most one heartbeat per this interval,
  /// and the rules one resource sample (an agent may forward the same one
  /// twice). Half the heartbeat interval.
  Duration phase_interval = std::chrono::milliseconds(500);
};

enum class TroubleKind : uint8_t { kStraggler, kGpuUnderused, kGpuThrottled, kGpuXid, kGpuEcc, kMemoryFull };
constexpr int kTroubleKinds = 6;
/// "straggler", "gpu_underused", "gpu_throttled", "gpu_xid", "gpu_ecc", "memory_full".
const char* to_string(TroubleKind kind);

struct TroubleWarning {
  TroubleKind kind = TroubleKind::kStraggler;
  int rank = -1;
  int gpu = -1;          // the GPU's index on its node; -1: not about one GPU
  std::string summary;   // one sentence naming the rank, e.g. "rank 2 (host h, pid 7) is a straggler: ..."
  std::string look_at;   // the one hint, e.g. "the network and rank 2's peers"
  SteadyTime at{};       // when it was given
  double value = 0;      // the rank's figure (busy s, util %); for tests
  double others = 0;     // the others' median, where the rule compares
  /// The console line: "summary; look at: look_at".
  std::string line() const;
};

/// A kind of warning given about a rank, and the GPU it was about (-1: not
/// about one GPU).
struct GivenWarning {
  TroubleKind kind = TroubleKind::kStraggler;
  int gpu = -1;
};

/// [{"kind", "rank", "gpu" (GPU kinds only), "summary", "look_at", "age_s"}]
/// for warnings given before `now`.
nlohmann::json warnings_json(const std::vector<TroubleWarning>& warnings, SteadyTime now);
/// [{"kind", "gpu" (GPU kinds only)}]; an empty array when none.
nlohmann::json given_json(const std::vector<GivenWarning>& given);

class TroubleWarnings {
 public:
  /// How a warning names a rank, e.g. "rank 3 (host h3, pid 103)".
  using Describe = std::function<std::string(int rank)>;

  /// `clock` is kept by reference and must outlive this.
  TroubleWarnings(TroubleConfig config, int world_size, const Clock& clock);

  /// A new generation: forget every rank and every warning given.
  void reset(int world_size);

  /// A rank's heartbeat, made at `received` (the caller drops older ones).
  /// One with no step and no phase (before training) is left out of the
  /// phase history.
  void on_heartbeat(const RankReport& report, SteadyTime received);
  /// A rank's resource sample, taken at `taken`. One taken within
  /// phase_interval of the last one taken is the same sample forwarded again
  /// (agents restate its age), and is ignored.
  void on_resources(int rank, const RankResources& sample, SteadyTime taken);
  /// The rank's process ended: it no longer counts among "the others".
  void on_rank_exited(int rank);

  /// Evaluates at clock.now(); returns the warnings given now (each once).
  std::vector<TroubleWarning> check(const Describe& describe);

  /// The last kListed warnings given in this generation, oldest first.
  std::vector<TroubleWarning> recent() const { return {recent_.begin(), recent_.end()}; }
  /// ... as warnings_json() at clock.now().
  nlohmann::json recent_json() const;
  /// The kinds given about one rank (rank kinds first, then by GPU); none for
  /// a rank out of range. Allocates nothing when none was given.
  std::vector<GivenWarning> given_to(int rank) const;
  /// ... as given_json().
  nlohmann::json rank_json(int rank) const { return given_json(given_to(rank)); }
  /// Warnings given in this generation.
  uint64_t given() const { return given_; }

  static constexpr size_t kListed = 50;

 private:
  struct GpuTrack {
    int index = -1;
    int throttle_run = 0;
    std::string throttle_reasons;  // the latest thermal/power ones, for the summary
    std::optional<uint64_t> ecc_base;  // the first count seen in this generation
    uint8_t warned = 0;  // by 1 << TroubleKind
    bool pending = false;  // new figures since the last check
    uint64_t xid_errors = 0, ecc_errors = 0;
    int last_xid = -1;
    uint64_t mem_used = 0, mem_total = 0, rank_mem = 0;
  };
  struct RankTrack {
    PhaseHistory phases;
    std::optional<SteadyTime> phase_at;  // the last heartbeat the history took
    int64_t step = -1;
    double busy = 0;        // the last step's busy (or step) seconds; 0: unknown
    bool busy_measured = false;  // busy seconds (not step seconds) reported
    double sync = 0;        // of busy, its sync span (RankReport::sync_seconds); 0: none
    bool new_step = false;  // since the last check
    int slow_steps = 0;
    /// phases.added() at its last step that was not slow: a straggler's
    /// story tells only of the heartbeats since, not of the time before
    /// it fell behind.
    uint64_t slow_from = 0;
    std::optional<SteadyTime> sample_at;  // when the last sample taken in was taken
    std::optional<double> gpu_util;  // mean over its GPUs in the latest sample
    bool new_sample = false;
    int low_samples = 0;
    bool exited = false;
    uint8_t warned = 0;     // rank kinds given, by 1 << TroubleKind
    bool queued = false;    // in dirty_
    std::vector<GpuTrack> gpus;
  };

  void mark(int rank);
  void check_stragglers(const Describe& describe, std::vector<TroubleWarning>& out);
  /// The least sync span of the ranks that report one (0: none does).
  double least_sync() const;
  void check_gpu_use(const Describe& describe, std::vector<TroubleWarning>& out);
  void check_gpus(int rank, const Describe& describe, std::vector<TroubleWarning>& out);
  /// "its heartbeats found it in phase data 80% of the time, the others ...", and the hint;
  /// over the last `beats` heartbeats of each rank (all that are kept by default).
  std::pair<std::string, std::string> phase_story(int rank, int beats = PhaseHistory::kCapacity) const;
  void give(TroubleWarning w, std::vector<TroubleWarning>& out);
  bool active(int rank) const;

  TroubleConfig config_;
  const Clock& clock_;
  std::vector<RankTrack> ranks_;
  std::vector<int> dirty_;  // ranks with new figures since the last check, each once
  bool any_new_step_ = false;
  bool any_new_sample_ = false;
  std::deque<TroubleWarning> recent_;  // the last kListed given
  // The ranks' figures, sorted, for one rule's check: kept between checks so
  // that a check at 16,384 ranks allocates nothing.
  std::vector<double> sorted_;
  uint64_t given_ = 0;
};

}  // namespace ddp
