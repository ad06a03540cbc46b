#pragma once
// OomProbe: reads how many processes the kernel's OOM killer has killed in
// ddplaunch's memory cgroup (the workers share it). A worker that died of
// SIGKILL while that count went up was most likely OOM-killed.

#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

class OomProbe {
 public:
  /// Finds the counter for this process's cgroup (v2 memory.events, or v1
  /// memory.oom_control); the probe reads nothing when neither exists.
  static OomProbe for_current_process();
  /// Reads the counter from an explicit file (tests).
  explicit OomProbe(std::string counter_file) : file_(std::move(counter_file)) {}

  /// The current oom_kill count, or nullopt when unknown.
  std::optional<uint64_t> kills() const;

 private:
  std::string file_;
};

}  // namespace ddp
