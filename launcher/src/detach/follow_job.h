#pragma once
// `attach` and `logs -f`: copy what a job's log files gain to stdout until
// the job's agent has ended, or until the user interrupts (Ctrl-C, SIGTERM,
// SIGHUP), which leaves the job running.
//
// Threading: runs on the calling thread; blocks SIGINT, SIGTERM and SIGHUP
// in it to read them (process/interrupt_signals.h).

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "detach/console_tail.h"
#include "job/job_registry.h"

namespace ddp {

struct FollowOutcome {
  bool interrupted = false;         // a signal: the job may still run
  std::optional<JobRecord> ended;  // the job's final record, when it ended
};

/// Follows until the agent of `job` ends (its record is no longer running,
/// or is gone), copying the files' new bytes to stdout as they come; what
/// the files hold at the end is copied before returning. `each_round`, if
/// given, runs after every copy and may change `files` (`logs -f` moves to
/// the files of a new attempt).
FollowOutcome follow_until_job_ends(std::vector<std::unique_ptr<FileFollower>>& files, const JobRecord& job,
                                    const std::function<void()>& each_round = {});

}  // namespace ddp
