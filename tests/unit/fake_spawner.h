#pragma once
// A ProcessSpawner that starts nothing: it hands out fake pids and records
// every spawn, signal and release, so supervisor tests can script exits.

#include <cerrno>
#include <map>
#include <system_error>
#include <utility>
#include <vector>

#include "process/process_spawner.h"

namespace ddp::testing {

class FakeSpawner final : public ProcessSpawner {
 public:
  SpawnedProcess spawn(const SpawnRequest& request) override {
    if (fail_next_spawns > 0) {
      --fail_next_spawns;
      throw std::system_error(EAGAIN, std::generic_category(), "fork");
    }
    spawned.push_back(request);
    const pid_t pid = next_pid++;
    return {pid, -1, -1};
  }
  void signal_group(pid_t pid, int signo) override { signals.emplace_back(pid, signo); }
  void release(pid_t pid) override { released.push_back(pid); }

  /// Signals sent to pid, in order.
  std::vector<int> signals_to(pid_t pid) const {
    std::vector<int> out;
    for (const auto& [p, s] : signals) {
      if (p == pid) out.push_back(s);
    }
    return out;
  }

  int fail_next_spawns = 0;
  pid_t next_pid = 1000;
  std::vector<SpawnRequest> spawned;
  std::vector<std::pair<pid_t, int>> signals;
  std::vector<pid_t> released;
};

}  // namespace ddp::testing
