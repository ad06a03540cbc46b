#pragma once
// `ddplaunch stop [JOB]`: stops a running job as a SIGTERM to a foreground
// ddplaunch does (with --stop-timeout, at a step boundary; else the ranks get
// SIGTERM, the shutdown grace, then SIGKILL, and the failure report is
// written), then waits for its end and exits with the job's exit code.

namespace ddp {

/// Runs the subcommand; argv[0] is "stop". Returns the job's exit code, or 1
/// (no such running job, or it cannot be signalled), 2 (bad usage, or
/// several jobs run: name one).
int run_stop_command(int argc, const char* const* argv);

}  // namespace ddp
