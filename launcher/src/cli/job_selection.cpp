#include "cli/job_selection.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

namespace ddp {

SelectedJob select_running_job(const std::string& command, const std::string& job_id) {
  std::vector<RunningJob> jobs = running_jobs();
  if (!job_id.empty()) {
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(), [&](const RunningJob& j) { return j.job_id != job_id; }),
               jobs.end());
  }
  if (jobs.empty()) {
    std::fprintf(stderr, "ddplaunch %s: error: %s\n", command.c_str(),
                 job_id.empty() ? "no running ddplaunch job of this user on this machine"
                                : fmt::format("no running job with id '{}' on this machine", job_id).c_str());
    return {std::nullopt, 1};
  }
  const std::string first = jobs.front().job_id;
  if (job_id.empty() && std::any_of(jobs.begin(), jobs.end(), [&](const RunningJob& j) { return j.job_id != first; })) {
    std::string ids;
    for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j.job_id;
    std::fprintf(stderr, "ddplaunch %s: error: several jobs run here (%s): choose one with --job\n", command.c_str(),
                 ids.c_str());
    return {std::nullopt, 2};
  }
  return {jobs.back(), 0};
}

}  // namespace ddp
