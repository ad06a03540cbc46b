#pragma once
// The learning rate at each step: linear warm-up from base/warmup to base over
// the first `warmup` steps, then constant or a cosine decay to 0 at `steps`.
// A pure function of the step, so a resumed run needs no scheduler state.

#include <cstdint>
#include <string>

namespace ddp::train {

struct LrSchedule {
  double base = 0.1;
  std::string kind = "constant";  // constant | cosine
  int64_t warmup = 0;
  int64_t steps = 1;

  /// The rate for step (0-based).
  double at(int64_t step) const;
};

}  // namespace ddp::train
