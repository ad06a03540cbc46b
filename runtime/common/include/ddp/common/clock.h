#pragma once
// Clock seam: production code asks a Clock for the time so that unit tests can
// drive timeouts with FakeClock instead of sleeping.
//
// Threading: SystemClock is stateless and thread-safe. FakeClock is for
// single-threaded tests; advance() and now() must not race.

#include <chrono>
#include <string>

namespace ddp {

using SteadyTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;
  /// Monotonic time, for deadlines and durations.
  virtual SteadyTime now() const = 0;
  /// Calendar time, for reports read by people.
  virtual WallTime wall_now() const = 0;
};

class SystemClock final : public Clock {
 public:
  SteadyTime now() const override { return std::chrono::steady_clock::now(); }
  WallTime wall_now() const override { return std::chrono::system_clock::now(); }
  /// The process-wide instance.
  static SystemClock& instance();
};

/// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  SteadyTime now() const override { return steady_; }
  WallTime wall_now() const override { return wall_; }
  void advance(Duration d) {
    steady_ += d;
    wall_ += std::chrono::duration_cast<WallTime::duration>(d);
  }

 private:
  SteadyTime steady_{std::chrono::hours(1)};
  WallTime wall_{std::chrono::seconds(1'800'000'000)};
};

/// Formats a wall time as ISO-8601 UTC with milliseconds, e.g. 2026-12-02T16:10:23.123Z.
std::string format_iso8601(WallTime t);

}  // namespace ddp
