#include "lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ddp::train {

double LrSchedule::at(int64_t step) const {
  if (step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (kind != "cosine") return base;
  const int64_t span = std::max<int64_t>(1, steps - warmup);
  const double progress = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
  return base * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace ddp::train
