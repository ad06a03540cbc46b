#include "step_stats.h"

#include <algorithm>

namespace ddp::train {

void StepStats::add(Seconds step, int64_t samples, Seconds communication, Seconds exposed) {
  ++steps_;
  samples_ += samples;
  step_s_ += step.count();
  communication_s_ += communication.count();
  exposed_s_ += std::max(0.0, exposed.count());
}

double StepStats::mean_step_seconds() const { return steps_ > 0 ? step_s_ / static_cast<double>(steps_) : 0.0; }

double StepStats::samples_per_second() const { return step_s_ > 0 ? static_cast<double>(samples_) / step_s_ : 0.0; }

double StepStats::hidden_share() const {
  if (communication_s_ <= 0) return 1.0;
  return std::clamp(1.0 - exposed_s_ / communication_s_, 0.0, 1.0);
}

}  // namespace ddp::train
