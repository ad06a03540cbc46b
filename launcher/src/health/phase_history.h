#pragma once
// PhaseHistory: where one rank's last kCapacity heartbeats found it (its
// phase, or waiting in a collective: health/rank_health.h activity_of), so a
// warning can say "its heartbeats found it in phase data 80% of the time".
// A fixed ring of one byte per heartbeat plus a count per activity: constant
// memory per rank (the coordinator holds one per rank of jobs of 16,384 ranks)
// and constant time per heartbeat.
//
// Threading: none (its owner runs under CoordinatorJob's lock).

#include <array>
#include <cstdint>

#include "health/rank_health.h"

namespace ddp {

class PhaseHistory {
 public:
  static constexpr int kCapacity = 32;  // ~30 heartbeats: half a minute at the default interval
  static constexpr int kActivities = static_cast<int>(WorkerPhase::kOther) + 1;

  /// One heartbeat's activity; the oldest falls out once kCapacity are kept.
  void add(WorkerPhase activity);
  void clear() { *this = PhaseHistory(); }

  /// Heartbeats kept (at most kCapacity).
  int size() const { return size_; }
  /// Heartbeats added so far, kept or not.
  uint64_t added() const { return added_; }
  /// The history of only the last `n` heartbeats kept (all where n >= size()).
  PhaseHistory last(int n) const;
  int count(WorkerPhase activity) const { return counts_[index(activity)]; }
  /// The activity seen most often (the earlier in WorkerPhase's order on a
  /// tie); kUnknown when empty.
  WorkerPhase dominant() const;

 private:
  static int index(WorkerPhase p);

  std::array<uint8_t, kCapacity> ring_{};
  std::array<uint8_t, kActivities> counts_{};
  uint8_t next_ = 0;  // where the next heartbeat goes
  uint8_t size_ = 0;
  uint64_t added_ = 0;
};

}  // namespace ddp
