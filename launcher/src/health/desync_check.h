#pragma once
// DesyncCheck: the hang detector's look for ranks that issued different
// collectives as the same number k (their op, bytes or dtype differ), of the
// default process group or of another one (a Python rank's dist.new_group).
// Reported without any timeout: such ranks hang, or a backend aborts them.
//
// It is fed every heartbeat, those overtaken in transit by a later one too:
// what a rank issued is a fact whatever the date the coordinator gives the
// report (the agent's last heartbeat before a rank's failure often reads as
// older than the one before it).
//
// A desync is first noticed between two ranks, while the others' heartbeats
// with collective k may still be on their way. So the verdict waits until
// every running rank has reported k or gone past it, for at most the wait the
// caller gives (two heartbeat intervals), and then lists every rank: "ranks
// 0,2 all_reduce 4 B float32, rank 1 all_reduce 3.9 KiB (4000 B) float32".
//
// Threading: not thread-safe; its owner (HangDetector) calls it under the
// owner's mutex.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "health/hang_verdict.h"
#include "health/rank_health.h"

namespace ddp {

/// One rank as the verdict needs it now.
struct DesyncRank {
  const RankReport* report = nullptr;  // its last report; null: none in this generation
  bool running = false;                // not exited: a report of collective k may still come
};

class DesyncCheck {
 public:
  explicit DesyncCheck(int world_size);

  /// A new generation: forget every rank and the desync.
  void reset(int world_size);

  /// Compares the collectives the report shows (the default group's recent
  /// ones; of other groups the last calls and the one open) with what other
  /// ranks issued as the same numbers, and keeps them as what the rank
  /// issued. A desync noticed first is kept, dated `now`.
  void record(const RankReport& report, SteadyTime now);

  /// Whether a desync has been noticed in this generation.
  bool found() const { return desync_.has_value(); }

  /// The desync verdict (its summary, culprits, waiting ranks; no details),
  /// or nullopt: none noticed, or some running rank has not reported
  /// collective k yet and `wait` has not passed since the desync was
  /// noticed. `ranks` is indexed by rank, world_size long.
  std::optional<HangVerdict> verdict(const std::vector<DesyncRank>& ranks, SteadyTime now, Duration wait) const;

 private:
  struct Signature {  // what one rank issued as one collective
    int rank = -1;
    std::string op;
    int64_t bytes = 0;
    std::string dtype;
  };
  using BySequence = std::map<uint64_t, Signature>;
  /// What one rank issued, its last calls of each group (key "": the default one).
  using Issued = std::map<std::string, BySequence>;
  struct Desync {
    uint64_t sequence = 0;
    std::string group;            // empty: the default group's collective
    std::vector<Signature> seen;  // the conflicting reports as first noticed
    SteadyTime found_at{};
  };

  /// Compares `sig` with the first report of collective `sequence` of
  /// `group` (in `first`), noting a desync where they differ, and keeps it
  /// in what its rank issued.
  void compare(const std::string& group, uint64_t sequence, const Signature& sig, SteadyTime now);
  /// What `rank` issued as collective k of the desync's group, if known.
  const Signature* issued_k(int rank) const;
  /// Whether the rank's report shows it went past collective k without
  /// the record showing what it issued as k (it fell out of the record).
  bool past_k(const RankReport& report) const;

  std::map<std::string, BySequence> first_;  // by group: the first report of each collective
  std::vector<Issued> issued_;               // by rank
  std::optional<Desync> desync_;
};

}  // namespace ddp
