#pragma once
// Failure reports: what a user reads first when a job fails. Built from the
// supervisor's records plus the evidence the launcher gathered (stderr tail,
// the worker's TORCHELASTIC_ERROR_FILE, the OOM counter). The console text and
// the JSON document carry the same facts.

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "supervise/supervisor.h"

namespace ddp {

/// Evidence about one failed worker.
struct FailureEvidence {
  std::vector<std::string> stderr_tail;
  /// The parsed TORCHELASTIC_ERROR_FILE, when the worker wrote one.
  std::optional<nlohmann::json> error_file;
  /// What the Python companion's faulthandler wrote at a fatal signal
  /// (rank_<r>/fatal_stack.log): the crashing thread's Python stack, the
  /// rank's or a forked DataLoader worker's. Empty when nothing was written.
  std::string fatal_stack;
  bool likely_oom = false;
};

/// The fatal-signal stack file's name in a rank's log folder.
inline constexpr const char* kFatalStackFileName = "fatal_stack.log";

/// The text of a fatal-signal stack file, at most its last 16 KiB, without
/// the closing list of extension modules; "" when missing or empty.
std::string read_fatal_stack(const std::filesystem::path& path);

/// Reads a TORCHELASTIC_ERROR_FILE; nullopt when missing or not JSON.
std::optional<nlohmann::json> read_error_file(const std::filesystem::path& path);

/// The Python traceback inside an error file written by torch's @record
/// ({"message": {"message": ..., "extraInfo": {"py_callstack": ...}}}).
std::optional<std::string> traceback_of(const nlohmann::json& error_file);

/// The failure of one worker, as in failure.json.
nlohmann::json failure_to_json(const WorkerRecord& worker, const FailureEvidence& evidence);

/// The whole attempt: {"job_id", "attempt", "root_cause", "failures", "workers"}.
nlohmann::json attempt_report_to_json(const std::string& job_id, int attempt, const WorkerRecord& root_cause,
                                      const nlohmann::json& failures, const std::vector<WorkerRecord>& workers);

/// Console text for a root cause, several lines, each ending in '\n'.
std::string format_failure(int node_rank, const WorkerRecord& worker, const FailureEvidence& evidence);

}  // namespace ddp
