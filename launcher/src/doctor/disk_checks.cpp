// Free space in the log directory and the checkpoint directory.

#include <fmt/format.h>

#include "doctor/preflight.h"
#include "output/byte_size.h"

namespace ddp {
namespace {

CheckResult disk_check(const std::string& name, const std::string& flag, const std::string& dir, const SystemProbe& p) {
  CheckResult c{name, CheckLevel::kOk, ""};
  const DiskInfo d = p.disk(dir);
  const std::string later = d.probed.empty() || d.probed == dir ? "" : fmt::format(" (created at launch under {})", d.probed);
  if (!d.ok) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("{}{}: cannot check ({}): {}", dir, later, flag, d.error.empty() ? "unknown error" : d.error);
  } else if (!d.writable) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("{} is not writable{}: {}", d.probed.empty() ? dir : d.probed,
                           d.probed == dir ? "" : fmt::format(" (needed to create {})", dir), d.error);
  } else if (d.free_bytes < kDiskFailBytes) {
    c.level = CheckLevel::kFail;
    c.reason = fmt::format("only {} free in {}{} (under {}): the job would run out of room", human_size(d.free_bytes),
                           dir, later, human_size(kDiskFailBytes));
  } else if (d.free_bytes < kDiskWarnBytes) {
    c.level = CheckLevel::kWarn;
    c.reason = fmt::format("only {} free in {}{} (under {})", human_size(d.free_bytes), dir, later,
                           human_size(kDiskWarnBytes));
  } else {
    c.reason = fmt::format("{} free in {}{}", human_size(d.free_bytes), dir, later);
  }
  return c;
}

}  // namespace

std::string human_size(uint64_t bytes) { return format_bytes(static_cast<int64_t>(bytes)); }

std::vector<CheckResult> disk_checks(const PreflightInputs& in, const SystemProbe& p) {
  std::vector<CheckResult> out;
  std::string log_dir = in.log_dir;
  if (log_dir.empty()) {
    // As resolve_launch_plan: ${TMPDIR:-/tmp}/ddplaunch-logs.
    const auto tmp = p.getenv ? p.getenv("TMPDIR") : std::nullopt;
    log_dir = (tmp && !tmp->empty() ? *tmp : std::string("/tmp")) + "/ddplaunch-logs";
  }
  out.push_back(disk_check("log dir", "--log-dir", log_dir, p));
  if (!in.checkpoint_dir.empty()) out.push_back(disk_check("checkpoint dir", "--checkpoint-dir", in.checkpoint_dir, p));
  return out;
}

}  // namespace ddp
