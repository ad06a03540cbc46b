#pragma once
// StepStats: the figures of the progress lines over a window of steps: step
// time, samples per second, and the share of gradient communication hidden
// behind backward (1 - time backward's end waited for the all-reduces / time
// the all-reduces ran). Plain arithmetic over durations, no clocks read here.

#include <chrono>
#include <cstdint>

namespace ddp::train {

class StepStats {
 public:
  using Seconds = std::chrono::duration<double>;

  /// One step: its wall time, samples it processed on all ranks, how long
  /// its all-reduces ran in all, and how long the end of backward waited.
  void add(Seconds step, int64_t samples, Seconds communication, Seconds exposed);

  int64_t steps() const { return steps_; }
  double mean_step_seconds() const;
  double samples_per_second() const;
  /// In [0, 1]; 1 when there was no communication at all.
  double hidden_share() const;
  void reset() { *this = StepStats{}; }

 private:
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  double step_s_ = 0;
  double communication_s_ = 0;
  double exposed_s_ = 0;
};

}  // namespace ddp::train
