#include "health/phase_history.h"

#include <algorithm>

namespace ddp {

int PhaseHistory::index(WorkerPhase p) {
  const int i = static_cast<int>(p);
  return i >= 0 && i < kActivities ? i : 0;
}

void PhaseHistory::add(WorkerPhase activity) {
  const int i = index(activity);
  if (size_ == kCapacity) {
    --counts_[ring_[next_]];
  } else {
    ++size_;
  }
  ring_[next_] = static_cast<uint8_t>(i);
  ++counts_[static_cast<size_t>(i)];
  next_ = static_cast<uint8_t>((next_ + 1) % kCapacity);
  ++added_;
}

PhaseHistory PhaseHistory::last(int n) const {
  PhaseHistory out;
  const int kept = n < size_ ? std::max(n, 0) : size_;
  for (int k = kept; k > 0; --k) {
    out.add(static_cast<WorkerPhase>(ring_[static_cast<size_t>((next_ + kCapacity - k) % kCapacity)]));
  }
  out.added_ = added_;
  return out;
}

WorkerPhase PhaseHistory::dominant() const {
  int best = 0;
  for (int i = 1; i < kActivities; ++i) {
    if (counts_[static_cast<size_t>(i)] > counts_[static_cast<size_t>(best)]) best = i;
  }
  return static_cast<WorkerPhase>(best);
}

}  // namespace ddp
