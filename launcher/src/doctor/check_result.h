#pragma once
// One line of `ddplaunch doctor`: a check's name, how it went and why.

#include <string>
#include <vector>

namespace ddp {

enum class CheckLevel { kOk, kWarn, kFail };

/// "ok", "warn" or "fail".
const char* level_name(CheckLevel level);

struct CheckResult {
  std::string name;  // e.g. "GPUs", "NCCL", "log dir"
  CheckLevel level = CheckLevel::kOk;
  std::string reason;  // one line, no trailing period needed
};

/// The worst level among results (kOk when empty).
CheckLevel worst_level(const std::vector<CheckResult>& results);

}  // namespace ddp
