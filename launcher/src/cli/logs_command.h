#pragma once
// `ddplaunch logs [JOB] [--rank R] [-f] [--attempt K]`: a job's output,
// running or finished. With --rank, that rank's stdout.log and stderr.log of
// attempt K (default: the newest); without, the console of a detached job,
// else every rank's logs of the attempt, one after another. -f follows them
// until the job ends.

namespace ddp {

/// Runs the subcommand; argv[0] is "logs". Returns 0, 1 (no such job, attempt
/// or rank), 2 (bad usage, or several jobs run: name one).
int run_logs_command(int argc, const char* const* argv);

}  // namespace ddp
