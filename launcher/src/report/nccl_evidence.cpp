#include "report/nccl_evidence.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <exception>

#include "nccl/nccl_diagnosis.h"
#include "nccl/nccl_log_files.h"

namespace ddp {

std::optional<NcclEvidence> nccl_evidence(const std::filesystem::path& attempt_dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(attempt_dir, ec)) return std::nullopt;
  nccl::NcclDiagnosis d;
  try {
    if (nccl::find_nccl_logs({attempt_dir.string()}).empty()) return std::nullopt;
    d = nccl::diagnose_paths({attempt_dir.string()});
  } catch (const std::exception&) {
    return std::nullopt;  // no NCCL lines, or unreadable: nothing to add
  }
  if (d.empty()) return std::nullopt;
  NcclEvidence e;
  e.json = nccl::to_json(d);
  std::vector<std::string> parts;
  for (const auto& c : d.communicators) {
    if (c.ranks_missing.empty()) continue;
    parts.push_back(fmt::format("communicator {} ({} ranks): init not complete on rank(s) {}",
                                c.comm_id.empty() ? "?" : c.comm_id, c.nranks, fmt::join(c.ranks_missing, ",")));
  }
  for (const auto& w : d.warnings) {
    parts.push_back(fmt::format("NCCL {} x{}{}", w.cls, w.count, w.hint.empty() ? "" : ": " + w.hint));
  }
  if (!parts.empty()) e.summary = fmt::format("NCCL logs: {}", fmt::join(parts, "; "));
  return e;
}

}  // namespace ddp
