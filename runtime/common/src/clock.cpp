#include "ddp/common/clock.h"

#include <fmt/format.h>

#include <ctime>

namespace ddp {

SystemClock& SystemClock::instance() {
  static SystemClock clock;
  return clock;
}

std::string format_iso8601(WallTime t) {
  const auto since_epoch = t.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch - secs).count();
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm utc{};
  gmtime_r(&tt, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &utc);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(millis));
}

}  // namespace ddp
