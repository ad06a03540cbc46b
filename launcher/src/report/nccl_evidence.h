#pragma once
// The NCCL side of a failure report: when an attempt's ranks wrote NCCL logs
// (--nccl-debug, or NCCL_DEBUG in the environment), the part of `ddplaunch
// diagnose` that explains a failure or hang: communicators whose init did
// not complete everywhere (the ranks missing) and NCCL's warnings with hints.

#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ddp {

struct NcclEvidence {
  nlohmann::json json;   // diagnose's JSON (communicators, ranks, warnings, ...)
  std::string summary;   // one line for the console; empty when nothing is wrong
};

/// nullopt when the attempt's directory holds no NCCL log lines.
std::optional<NcclEvidence> nccl_evidence(const std::filesystem::path& attempt_dir);

}  // namespace ddp
