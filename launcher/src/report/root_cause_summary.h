#pragma once
// The closing failure summary in the shape torchrun users know from its
// ChildFailedError: a block naming the program, the other failures and the
// root cause (time, host, rank, local_rank, exitcode, error_file,
// traceback). ddplaunch prints it at the end of a failed job, after its own
// report lines, so scripts and eyes trained on torchrun's output find it.
// Pure.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"

namespace ddp {

/// One failed worker as the summary shows it.
struct RankFailure {
  WallTime time{};
  std::string host;
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  int exit_code = 0;  // the exit code; with signal set, torchrun shows -signal
  int signal = 0;
  std::string error_file;  // the worker's TORCHELASTIC_ERROR_FILE, "" when it wrote none
  std::optional<nlohmann::json> error_file_contents;
  std::string fatal_stack;  // the Python stack at a fatal signal (FailureEvidence::fatal_stack), or ""
};

/// program: PROGRAM as the user gave it. others: the other workers that
/// failed on their own in the same attempt.
std::string format_root_cause_summary(const std::string& program, const RankFailure& root,
                                      const std::vector<RankFailure>& others);

/// The same block when the coordinator placed the job's root cause on
/// another node (`where`, e.g. "node 1"): this node's failures are listed as
/// what followed it, and the root cause is the coordinator's words.
std::string format_remote_root_cause_summary(const std::string& program, const std::string& where,
                                             const std::string& root_cause,
                                             const std::vector<RankFailure>& local_failures);

}  // namespace ddp
