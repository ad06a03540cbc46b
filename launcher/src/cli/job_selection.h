#pragma once
// What the subcommands about one job share: `status` and `stacks` (a running
// job's coordinator: their --job/--json command line, the one job of this
// user on this machine or the one --job names, with several agents of one job
// here the newest), and `attach`, `logs`, `stop` (a record of the registry,
// running or ended; JOB as a positional argument). Each says why on stderr,
// in one line, when it cannot go on.
//
// Threading: free functions, no shared state.

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "coordinator/coordinator_client.h"
#include "job/job_registry.h"

namespace ddp {

struct SelectedJob {
  std::optional<JobRecord> job;
  int exit_code = 0;  // when no job: 1 (none running), 2 (several: --job needed)
};

/// command: "status", "stacks", ... for the error line.
SelectedJob select_running_job(const std::string& command, const std::string& job_id);

/// `attach`, `logs`, `stop`: the job `job_id` names (its newest running
/// record, else its newest record), or with no id the one running job, or,
/// unless running_only, when none runs, the newest job. When none fits, one
/// error line: exit 1 (none, or not running), 2 (several run: name one).
SelectedJob select_job_record(const std::string& command, const std::string& job_id, bool running_only);

struct JobCommandLine {
  std::string job_id;  // --job
  bool json = false;    // --json
};

/// Adds --job and --json ("one JSON document instead of " + json_instead_of)
/// to `app`, which may hold options of its own, and parses argv. Returns the
/// exit code when the command ends here: 0 after printing the help, 2 after
/// one error line.
std::optional<int> parse_job_command_line(CLI::App& app, const std::string& command, const std::string& json_instead_of,
                                          JobCommandLine& line, int argc, const char* const* argv);

/// Adds JOB, the job id, as an optional positional argument (and as --job)
/// to `app`.
void add_job_argument(CLI::App& app, std::string& job_id);

/// Parses argv into `app`. Returns the exit code when the command ends here:
/// 0 after printing the help, 2 after one error line.
std::optional<int> parse_command_line(CLI::App& app, const std::string& command, int argc, const char* const* argv);

/// A client of the coordinator that `job`'s record names (its token and TLS files).
std::unique_ptr<CoordinatorClient> coordinator_of(const JobRecord& job);

/// The error line of a coordinator that did not answer `s`; returns 1.
int report_unreachable_coordinator(const std::string& command, const JobRecord& job, const Status& s);

/// Selects the job (select_running_job) and asks its coordinator through
/// `ask`. 0 with *job and *reply set, else the exit code after one error line.
int ask_running_job(const std::string& command, const std::string& job_id,
                    const std::function<Status(CoordinatorClient&, std::string&)>& ask, JobRecord* job,
                    std::string* reply);

}  // namespace ddp
