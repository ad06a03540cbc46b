#include "doctor/preflight.h"

#include <fmt/format.h>

#include <exception>

namespace ddp {

const char* level_name(CheckLevel level) {
  switch (level) {
    case CheckLevel::kOk: return "ok";
    case CheckLevel::kWarn: return "warn";
    case CheckLevel::kFail: return "fail";
  }
  return "?";
}

CheckLevel worst_level(const std::vector<CheckResult>& results) {
  CheckLevel worst = CheckLevel::kOk;
  for (const auto& r : results) {
    if (static_cast<int>(r.level) > static_cast<int>(worst)) worst = r.level;
  }
  return worst;
}

std::vector<CheckResult> run_preflight(const PreflightInputs& inputs, const SystemProbe& probe) {
  using Family = std::vector<CheckResult> (*)(const PreflightInputs&, const SystemProbe&);
  const std::pair<const char*, Family> families[] = {
      {"GPU checks", gpu_checks}, {"network checks", network_checks}, {"disk checks", disk_checks}, {"BLAS", blas_checks}};
  std::vector<CheckResult> all;
  for (const auto& [name, family] : families) {
    try {
      auto some = family(inputs, probe);
      all.insert(all.end(), some.begin(), some.end());
    } catch (const std::exception& e) {
      // One broken probe must not hide the other checks.
      all.push_back({name, CheckLevel::kFail, fmt::format("internal error: {}", e.what())});
    }
  }
  return all;
}

std::vector<CheckResult> run_preflight(const PreflightInputs& inputs) {
  return run_preflight(inputs, real_system_probe());
}

}  // namespace ddp
