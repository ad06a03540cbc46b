#pragma once
// WatchRegistry: one job's parked long polls (CoordinatorJob::watch), each
// answered once its generation's state differs from what the caller knew, or
// at its deadline. The registry only keeps them; the job decides which to take
// and answers them after its lock is released.
//
// Threading: not thread-safe (CoordinatorJob serializes).

#include <functional>
#include <vector>

#include "coordinator/generation_view.h"
#include "ddp/common/clock.h"

namespace ddp {

struct ParkedWatch {
  int node_rank = -1;  // -1: an observer
  int64_t generation = 0;
  GenerationState known = GenerationState::kRunning;
  bool after_outcome = false;  // made after node_rank reported its outcome
  SteadyTime deadline{};
  WatchCallback done;
};

class WatchRegistry {
 public:
  void park(ParkedWatch watch) { parked_.push_back(std::move(watch)); }
  /// Removes and returns the watches `answerable` says can be answered, in
  /// the order they were parked.
  std::vector<ParkedWatch> take_if(const std::function<bool(const ParkedWatch&)>& answerable);
  /// Removes and returns those whose deadline has come.
  std::vector<ParkedWatch> take_expired(SteadyTime now) {
    return take_if([now](const ParkedWatch& w) { return w.deadline <= now; });
  }
  /// Removes and returns every watch (the coordinator shuts down).
  std::vector<ParkedWatch> take_all() {
    std::vector<ParkedWatch> all;
    all.swap(parked_);
    return all;
  }
  size_t size() const { return parked_.size(); }

 private:
  std::vector<ParkedWatch> parked_;
};

}  // namespace ddp
