#pragma once
// Which running job a subcommand (`status`, `stacks`) talks to: the one job of
// this user on this machine, or the one --job names; with several agents of
// one job here, the newest. Says why on stderr when there is none.
//
// Threading: free function, no shared state.

#include <optional>
#include <string>

#include "job/job_registry.h"

namespace ddp {

struct SelectedJob {
  std::optional<RunningJob> job;
  int exit_code = 0;  // when no job: 1 (none running), 2 (several: --job needed)
};

/// command: "status", "stacks", ... for the error line.
SelectedJob select_running_job(const std::string& command, const std::string& job_id);

}  // namespace ddp
