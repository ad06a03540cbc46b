#include "cli/stop_command.h"

#include <CLI/CLI.hpp>

#include <poll.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli/job_end.h"
#include "cli/job_selection.h"
#include "exit_codes.h"
#include "process/exit_status.h"
#include "process/interrupt_signals.h"

namespace ddp {
namespace {

// How often the job's records are read while it stops.
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
  std::vector<JobRecord> agents;
  for (JobRecord& j : running_jobs()) {
    if (j.job_id == selected.job->job_id) agents.push_back(std::move(j));
  }
  if (agents.empty()) agents.push_back(*selected.job);  // it ended meanwhile: report that end
  for (const JobRecord& agent : agents) {
    // The record is re-read just before: a recycled pid is never signalled.
    if (end_of(agent)) continue;
    const int signo = agent.stop_signal > 0 ? agent.stop_signal : SIGTERM;
    if (kill(agent.pid, signo) != 0 && errno != ESRCH) {  // ESRCH: it just ended
      std::fprintf(stderr, "ddplaunch stop: error: cannot signal the agent of job %s (pid %d): %s\n",
                   agent.job_id.c_str(), agent.pid, std::strerror(errno));
      return 1;
    }
    std::fprintf(stderr, "ddplaunch: stopping job %s (%s to its agent, pid %d)\n", agent.job_id.c_str(),
                 signal_name(signo).c_str(), agent.pid);
  }
  // The job decides how long it takes (--stop-timeout, --shutdown-grace): wait for its end.
  const int interrupts = interrupt_signal_fd();
  int code = 0;
  for (const JobRecord& agent : agents) {
    std::optional<JobRecord> end;
    while (!(end = end_of(agent))) {
      pollfd p{interrupts, POLLIN, 0};
      if (poll(&p, interrupts >= 0 ? 1 : 0, kRecordPollMs) > 0) {
        std::fprintf(stderr, "ddplaunch: job %s is still stopping; `ddplaunch list` shows its end\n",
                     agent.job_id.c_str());
        return exit_code::for_signal(SIGINT);
      }
    }
    code = report_job_end(*end, true);
  }
  return code;
}

}  // namespace ddp
