#pragma once
// `ddplaunch doctor [--nproc-per-node N|gpu|cpu|auto] [--master-addr H]
// [--master-port P] [--rdzv-endpoint HOST[:PORT]] [--log-dir D]
// [--checkpoint-dir D] [--json]`: the environment preflight (preflight.h),
// one line per check, "ok|warn|fail  NAME: REASON", then a summary line.
// Exit 0 when no check failed, 1 when one did, 2 on bad usage.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "doctor/check_result.h"

namespace ddp {

/// Runs the subcommand; argv[0] is "doctor".
int run_doctor_command(int argc, const char* const* argv);

/// The text report: one line per check, then "summary: ...".
std::string render_checks_text(const std::vector<CheckResult>& results, double elapsed_s);

/// {"checks": [{"name", "level", "reason"}...], "summary": {"ok", "warn",
///  "fail"}, "result": worst level, "elapsed_s"}.
nlohmann::json render_checks_json(const std::vector<CheckResult>& results, double elapsed_s);

}  // namespace ddp
