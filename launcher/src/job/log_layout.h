#pragma once
// The job's log folder: LOGDIR/<job>/attempt_<k>/rank_<r>/{stdout,stderr}.log,
// written by the agent (launch_job) and read by `logs`.

#include <fmt/format.h>

#include <filesystem>

namespace ddp {

inline constexpr const char* kAttemptFolderPrefix = "attempt_";
inline constexpr const char* kRankFolderPrefix = "rank_";
/// --sync's live state (sync/checkpoint_sync.h), in the job's folder, for `list`.
inline constexpr const char* kSyncStateFile = "sync.json";

inline std::filesystem::path attempt_log_dir(const std::filesystem::path& job_log_dir, int attempt) {
  return job_log_dir / fmt::format("{}{}", kAttemptFolderPrefix, attempt);
}

inline std::filesystem::path rank_log_dir(const std::filesystem::path& job_log_dir, int attempt, int rank) {
  return attempt_log_dir(job_log_dir, attempt) / fmt::format("{}{}", kRankFolderPrefix, rank);
}

}  // namespace ddp
