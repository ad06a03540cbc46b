#include "cli/stop_command.h"

#include <CLI/CLI.hpp>

#include <poll.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/job_end.h"
#include "cli/job_selection.h"

namespace ddp {
namespace {

// How often the job's record is read while it stops.
constexpr int kRecordPollMs = 100;

}  // namespace

int run_stop_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch stop: stop a running job as SIGTERM to its ddplaunch would, and wait for its end",
               "ddplaunch stop"};
  std::string job_id;
  add_job_argument(app, job_id);
  if (const auto done = parse_command_line(app, "stop", argc, argv)) return *done;
  const SelectedJob selected = select_job_record("stop", job_id, true);
  if (!selected.job) return selected.exit_code;
  // Every agent of the job on this machine (several nodes of a test cluster may share it).
  std::vector<RunningJob> agents;
  for (RunningJob& j : running_jobs()) {
    if (j.job_id == selected.job->job_id) agents.push_back(std::move(j));
  }
  for (const RunningJob& agent : agents) {
    if (kill(agent.pid, SIGTERM) != 0) {
      std::fprintf(stderr, "ddplaunch stop: error: cannot signal the agent of job %s (pid %d): %s\n",
                   agent.job_id.c_str(), agent.pid, std::strerror(errno));
      return 1;
    }
    std::fprintf(stderr, "ddplaunch: stopping job %s (SIGTERM to its agent, pid %d)\n", agent.job_id.c_str(), agent.pid);
  }
  // The job decides how long it takes (--stop-timeout, --shutdown-grace): wait for its end.
  int code = 0;
  for (const RunningJob& agent : agents) {
    std::optional<RunningJob> now;
    while ((now = find_job(agent.job_id, agent.pid)) && now->running()) poll(nullptr, 0, kRecordPollMs);
    if (!now) {
      now = agent;
      now->state = JobState::kLost;
    }
    code = report_job_end(*now, true);
  }
  return code;
}

}  // namespace ddp
