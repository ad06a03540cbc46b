#include "coordinator/watch_registry.h"

#include <algorithm>
#include <iterator>

namespace ddp {

std::vector<ParkedWatch> WatchRegistry::take_if(const std::function<bool(const ParkedWatch&)>& answerable) {
  auto taken = std::stable_partition(parked_.begin(), parked_.end(),
                                     [&](const ParkedWatch& w) { return !answerable(w); });
  std::vector<ParkedWatch> out(std::make_move_iterator(taken), std::make_move_iterator(parked_.end()));
  parked_.erase(taken, parked_.end());
  return out;
}

}  // namespace ddp
