#include "membership/job_stop.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ddp {

namespace {

/// The least positive step time of the reports and `fastest_seen`; 0: none.
double fastest_step_seconds(const std::vector<RankReport>& reports, double fastest_seen) {
  double fastest = fastest_seen > 0 ? fastest_seen : 0;
  for (const RankReport& r : reports) {
    if (r.step < 0 || r.step_seconds <= 0) continue;
    if (fastest == 0 || r.step_seconds < fastest) fastest = r.step_seconds;
  }
  return fastest;
}

}  // namespace

std::optional<int64_t> choose_stop_step(const std::vector<RankReport>& reports, Duration lag, double fastest_seen) {
  // Steps are what the ranks reported, any int64 the protocol carries: the
  // sums below saturate at the largest rather than overflow.
  constexpr int64_t kLast = std::numeric_limits<int64_t>::max();
  const auto plus = [](int64_t a, int64_t b) { return a > kLast - b ? kLast : a + b; };
  std::optional<int64_t> most;
  for (const RankReport& r : reports) {
    if (r.step < 0) continue;
    // The runtime reports the step it began; the companion the steps it completed.
    most = std::max(most.value_or(0), plus(r.step, 1));
  }
  if (!most) return std::nullopt;
  const double fastest = fastest_step_seconds(reports, fastest_seen);
  const double lag_s = std::chrono::duration<double>(lag).count();
  const double ahead = fastest > 0 ? std::ceil(lag_s / fastest) : 2;
  return plus(*most, static_cast<int64_t>(std::min(ahead, 1e9)) + 1);
}

std::optional<JobStop> decide_job_stop(const PendingJobStop& pending, const std::vector<RankReport>& reports,
                                       Duration lag, SteadyTime now, double fastest_seen) {
  JobStop decided = pending.stop;
  decided.pending = false;
  decided.stop_at_step = choose_stop_step(reports, lag, fastest_seen);
  const bool step_time_known = fastest_step_seconds(reports, fastest_seen) > 0;
  if ((!decided.stop_at_step || !step_time_known) && now < pending.deadline) return std::nullopt;
  return decided;
}

}  // namespace ddp
