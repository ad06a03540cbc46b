#pragma once
// The hang detector's settings in the tests of its verdicts: a 3 s hang
// timeout over 1 s heartbeats, so that a FakeClock run of seconds finds a
// hang.

#include <chrono>

#include "health/hang_detector.h"

namespace ddp {

inline HangConfig short_hang_config() {
  HangConfig c;
  c.hang_timeout = std::chrono::seconds(3);
  c.heartbeat_interval = std::chrono::seconds(1);
  return c;
}

}  // namespace ddp
