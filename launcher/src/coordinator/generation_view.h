#pragma once
// A generation of a job as agents see it: its state, and why it ended.

#include <cstdint>
#include <functional>
#include <string>

#include "ddp/common/status.h"

namespace ddp {

enum class GenerationState { kRunning = 1, kStopping = 2, kRestarting = 3, kFinished = 4 };
const char* to_string(GenerationState state);

/// A generation's state as agents see it.
struct GenerationView {
  int64_t generation = 0;
  GenerationState state = GenerationState::kRunning;
  int exit_code = 0;  // with kFinished
  std::string reason;
  int failed_node = -1;
  int failed_rank = -1;
  std::string report_json;  // the hang or desync report, when that was the cause
  /// With kRestarting: the next generation has other nodes (the restart
  /// budget is untouched).
  bool membership_change = false;
};

using WatchCallback = std::function<void(const Status&, const GenerationView&)>;

}  // namespace ddp
