#include "cli/attach_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/job_end.h"
#include "cli/job_selection.h"
#include "cli/number_checks.h"
#include "detach/console_tail.h"
#include "detach/follow_job.h"

namespace ddp {

int run_attach_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch attach: follow the console of a detached job (Ctrl-C leaves it running)", "ddplaunch attach"};
  std::string job_id;
  int lines = 20;
  add_job_argument(app, job_id);
  app.add_option("-n,--lines", lines, "show this many of the console's last lines first")
      ->check(non_negative_number())
      ->capture_default_str();
  if (const auto done = parse_command_line(app, "attach", argc, argv)) return *done;
  const SelectedJob selected = select_job_record("attach", job_id, false);
  if (!selected.job) return selected.exit_code;
  const JobRecord& job = *selected.job;
  if (job.console.empty()) {
    std::fprintf(stderr,
                 "ddplaunch attach: error: job %s was started in the foreground (without --detach): it has no console "
                 "log here; its ranks' output: ddplaunch logs %s --rank R\n",
                 job.job_id.c_str(), job.job_id.c_str());
    return 1;
  }
  off_t end = 0;  // where the tail ends, following starts: each line is shown once
  const std::string tail = last_lines_of_file(job.console, lines, &end);
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fflush(stdout);
  std::vector<std::unique_ptr<FileFollower>> files;
  files.push_back(std::make_unique<FileFollower>(job.console, end));
  FollowOutcome outcome{false, job};
  if (job.running()) {
    outcome = follow_until_job_ends(files, job);
  } else {
    files.front()->copy_new(stdout);  // an unfinished last line
    std::fflush(stdout);
  }
  if (outcome.interrupted) {
    std::fprintf(stderr, "\nddplaunch: detached from job %s; it keeps running (`ddplaunch attach %s` follows it again)\n",
                 job.job_id.c_str(), job.job_id.c_str());
    return 0;
  }
  return report_job_end(*outcome.ended, false);
}

}  // namespace ddp
