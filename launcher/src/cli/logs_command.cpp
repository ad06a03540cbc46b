#include "cli/logs_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/job_end.h"
#include "cli/job_selection.h"
#include "cli/number_checks.h"
#include "detach/console_tail.h"
#include "detach/follow_job.h"
#include "job/log_layout.h"

namespace ddp {
namespace fs = std::filesystem;
namespace {

// The number in "attempt_3" or "rank_12"; nullopt for other names.
std::optional<int> numbered(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) || digits.size() > 9) {
    return std::nullopt;
  }
  return std::stoi(digits);
}

// The numbers of dir's sub-folders named prefix<N>, ascending.
std::vector<int> numbered_folders(const fs::path& dir, const std::string& prefix) {
  std::vector<int> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (auto n = numbered(entry.path().filename().string(), prefix); n && entry.is_directory(ec)) found.push_back(*n);
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The log files `logs` shows, in order; empty (after one error line, unless
// quiet) when none. *shown_attempt: the attempt they belong to (-1: the console).
std::vector<std::string> files_to_show(const JobRecord& job, std::optional<int> rank, std::optional<int> attempt,
                                       bool quiet, int* shown_attempt) {
  *shown_attempt = -1;
  if (!rank && !job.console.empty()) return {job.console};
  const fs::path job_dir(job.log_dir);
  const std::vector<int> attempts = numbered_folders(job_dir, kAttemptFolderPrefix);
  if (attempts.empty()) {
    if (!quiet) std::fprintf(stderr, "ddplaunch logs: error: job %s has no attempt folder in %s yet\n", job.job_id.c_str(),
                 job.log_dir.c_str());
    return {};
  }
  const int k = attempt.value_or(attempts.back());
  if (std::find(attempts.begin(), attempts.end(), k) == attempts.end()) {
    if (!quiet) std::fprintf(stderr, "ddplaunch logs: error: job %s has no attempt %d (it has attempts %d..%d)\n",
                 job.job_id.c_str(), k, attempts.front(), attempts.back());
    return {};
  }
  const fs::path attempt_dir = attempt_log_dir(job_dir, k);
  const std::vector<int> ranks = numbered_folders(attempt_dir, kRankFolderPrefix);
  *shown_attempt = k;
  if (rank && std::find(ranks.begin(), ranks.end(), *rank) == ranks.end()) {
    if (!quiet) std::fprintf(stderr, "ddplaunch logs: error: attempt %d of job %s has no rank %d here%s\n", k, job.job_id.c_str(),
                 *rank, ranks.empty() ? "" : fmt::format(" (ranks {}..{} ran on this node)", ranks.front(), ranks.back()).c_str());
    return {};
  }
  std::vector<std::string> files;
  for (int r : ranks) {
    if (rank && r != *rank) continue;
    for (const char* name : {"stdout.log", "stderr.log"}) {
      const fs::path p = rank_log_dir(job_dir, k, r) / name;
      if (fs::exists(p)) files.push_back(p.string());
    }
  }
  return files;
}

}  // namespace

int run_logs_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch logs: a job's output, running or finished", "ddplaunch logs"};
  std::string job_id;
  std::optional<int> rank, attempt;
  bool follow = false;
  add_job_argument(app, job_id);
  app.add_option("--rank", rank, "this global rank's stdout.log and stderr.log (default: the console, or every rank)")
      ->check(non_negative_number());
  app.add_option("--attempt", attempt, "this attempt (restart) of the job (default: the newest)")
      ->check(non_negative_number());
  app.add_flag("-f,--follow", follow, "keep printing what is written, until the job ends");
  if (const auto done = parse_command_line(app, "logs", argc, argv)) return *done;
  const SelectedJob selected = select_job_record("logs", job_id, false);
  if (!selected.job) return selected.exit_code;
  const JobRecord& job = *selected.job;
  int shown_attempt = -1;
  const std::vector<std::string> files = files_to_show(job, rank, attempt, false, &shown_attempt);
  if (files.empty()) return 1;

  std::vector<std::unique_ptr<FileFollower>> followers;
  const auto show = [&followers](const std::vector<std::string>& paths) {
    for (const std::string& path : paths) {
      // A header per file where several are shown, as tail does.
      if (paths.size() > 1) std::printf("==> %s <==\n", path.c_str());
      followers.push_back(std::make_unique<FileFollower>(path, 0));
      followers.back()->copy_new(stdout);
    }
    std::fflush(stdout);
  };
  show(files);
  if (follow && job.running()) {
    // Without --attempt, a restart's new attempt is followed once its files appear.
    const auto next_attempt = [&] {
      if (attempt || shown_attempt < 0) return;
      int newest = -1;
      std::vector<std::string> next = files_to_show(job, rank, std::nullopt, true, &newest);
      if (newest <= shown_attempt || next.empty()) return;
      for (auto& f : followers) f->copy_new(stdout);  // the old attempt's last words
      std::printf("==> %s: attempt %d <==\n", job.job_id.c_str(), newest);
      followers.clear();
      shown_attempt = newest;
      show(next);
    };
    const FollowOutcome outcome = follow_until_job_ends(followers, job, next_attempt);
    if (outcome.ended) report_job_end(*outcome.ended, false);
  }
  return 0;
}

}  // namespace ddp
