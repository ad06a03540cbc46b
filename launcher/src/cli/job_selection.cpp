#include "cli/job_selection.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>

#include "cli/usage_error.h"

namespace ddp {

SelectedJob select_running_job(const std::string& command, const std::string& job_id) {
  std::vector<JobRecord> jobs = running_jobs();
  if (!job_id.empty()) {
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(), [&](const JobRecord& j) { return j.job_id != job_id; }),
               jobs.end());
  }
  if (jobs.empty()) {
    std::fprintf(stderr, "ddplaunch %s: error: %s\n", command.c_str(),
                 job_id.empty() ? "no running ddplaunch job of this user on this machine"
                                : fmt::format("no running job with id '{}' on this machine",
                                              printable_on_one_line(job_id)).c_str());
    return {std::nullopt, 1};
  }
  const std::string first = jobs.front().job_id;
  if (job_id.empty() && std::any_of(jobs.begin(), jobs.end(), [&](const JobRecord& j) { return j.job_id != first; })) {
    std::string ids;
    for (const auto& j : jobs) ids += (ids.empty() ? "" : ", ") + j.job_id;
    std::fprintf(stderr, "ddplaunch %s: error: several jobs run here (%s): choose one with --job\n", command.c_str(),
                 ids.c_str());
    return {std::nullopt, 2};
  }
  return {jobs.back(), 0};
}

SelectedJob select_job_record(const std::string& command, const std::string& job_id, bool running_only) {
  std::vector<JobRecord> jobs = all_jobs();  // oldest first
  if (!job_id.empty()) {
    jobs.erase(std::remove_if(jobs.begin(), jobs.end(), [&](const JobRecord& j) { return j.job_id != job_id; }),
               jobs.end());
  }
  const auto newest_running = std::find_if(jobs.rbegin(), jobs.rend(), [](const JobRecord& j) { return j.running(); });
  if (newest_running != jobs.rend()) {
    if (job_id.empty()) {
      std::vector<std::string> ids;
      for (const auto& j : jobs) {
        if (j.running() && std::find(ids.begin(), ids.end(), j.job_id) == ids.end()) ids.push_back(j.job_id);
      }
      if (ids.size() > 1) {
        std::fprintf(stderr, "ddplaunch %s: error: %zu jobs run here (%s): name one\n", command.c_str(), ids.size(),
                     fmt::format("{}", fmt::join(ids, ", ")).c_str());
        return {std::nullopt, 2};
      }
    }
    return {*newest_running, 0};
  }
  if (jobs.empty() || running_only) {
    std::string why = job_id.empty() ? (running_only || !jobs.empty() ? "no running ddplaunch job of this user on this machine"
                                                                        : "no ddplaunch job of this user on this machine")
                      : jobs.empty() ? fmt::format("no job with id '{}' of this user on this machine",
                                                   printable_on_one_line(job_id))
                                     : fmt::format("job {} is not running: it {} ({})", job_id,
                                                   jobs.back().state == JobState::kLost ? "was lost" : "has ended",
                                                   jobs.back().exit_code ? fmt::format("exit code {}", *jobs.back().exit_code)
                                                                         : std::string("its agent was killed"));
    std::fprintf(stderr, "ddplaunch %s: error: %s\n", command.c_str(), why.c_str());
    return {std::nullopt, 1};
  }
  return {jobs.back(), 0};
}

void add_job_argument(CLI::App& app, std::string& job_id) {
  app.add_option("job", job_id, "the job id (--rdzv-id; see `ddplaunch list`): needed when several jobs run");
  app.add_option("--job", job_id, "the same, as an option");
}

std::optional<int> parse_command_line(CLI::App& app, const std::string& command, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddplaunch %s: error: %s\n", command.c_str(), printable_on_one_line(e.what()).c_str());
    return 2;
  }
  return std::nullopt;
}

std::optional<int> parse_job_command_line(CLI::App& app, const std::string& command, const std::string& json_instead_of,
                                          JobCommandLine& line, int argc, const char* const* argv) {
  add_job_argument(app, line.job_id);
  app.add_flag("--json", line.json, "one JSON document instead of " + json_instead_of);
  return parse_command_line(app, command, argc, argv);
}

int ask_running_job(const std::string& command, const std::string& job_id,
                    const std::function<Status(CoordinatorClient&, std::string&)>& ask, JobRecord* job,
                    std::string* reply) {
  const SelectedJob selected = select_running_job(command, job_id);
  if (!selected.job) return selected.exit_code;
  *job = *selected.job;
  const Status s = ask(*coordinator_of(*job), *reply);
  return s.ok() ? 0 : report_unreachable_coordinator(command, *job, s);
}

std::unique_ptr<CoordinatorClient> coordinator_of(const JobRecord& job) {
  return std::make_unique<CoordinatorClient>(job.endpoint, job.job_id, job.token,
                                             TlsFiles{job.tls_cert, job.tls_key, job.tls_ca});
}

int report_unreachable_coordinator(const std::string& command, const JobRecord& job, const Status& s) {
  std::fprintf(stderr, "ddplaunch %s: error: the coordinator of job %s at %s: %s\n", command.c_str(),
               job.job_id.c_str(), job.endpoint.c_str(), s.message().c_str());
  return 1;
}

}  // namespace ddp
