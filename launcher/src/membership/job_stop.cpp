#include "membership/job_stop.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ddp {

std::optional<int64_t> choose_stop_step(const std::vector<RankReport>& reports, Duration lag) {
  // Steps are what the ranks reported, any int64 the protocol carries: the
  // sums below saturate at the largest rather than overflow.
  constexpr int64_t kLast = std::numeric_limits<int64_t>::max();
  const auto plus = [](int64_t a, int64_t b) { return a > kLast - b ? kLast : a + b; };
  std::optional<int64_t> most;
  double fastest = 0;  // seconds; 0: no step time known
  for (const RankReport& r : reports) {
    if (r.step < 0) continue;
    // The runtime reports the step it began; the companion the steps it completed.
    most = std::max(most.value_or(0), plus(r.step, 1));
    if (r.step_seconds > 0 && (fastest == 0 || r.step_seconds < fastest)) fastest = r.step_seconds;
  }
  if (!most) return std::nullopt;
  const double lag_s = std::chrono::duration<double>(lag).count();
  const double ahead = fastest > 0 ? std::ceil(lag_s / fastest) : 2;
  return plus(*most, static_cast<int64_t>(std::min(ahead, 1e9)) + 1);
}

std::optional<JobStop> decide_job_stop(const PendingJobStop& pending, const std::vector<RankReport>& reports,
                                       Duration lag, SteadyTime now) {
  JobStop decided = pending.stop;
  decided.pending = false;
  decided.stop_at_step = choose_stop_step(reports, lag);
  if (!decided.stop_at_step && now < pending.deadline) return std::nullopt;
  return decided;
}

}  // namespace ddp
