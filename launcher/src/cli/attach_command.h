#pragma once
// `ddplaunch attach [JOB] [-n N]`: the live console of a detached job. Shows
// its last N lines, then follows. Ctrl-C detaches and leaves the job running
// (exit 0); when the job ends, prints its end and exits with its exit code.

namespace ddp {

/// Runs the subcommand; argv[0] is "attach". Returns the exit code: the job's
/// own once it ended, 0 when detached by a signal, 1 (no such job, or no
/// console to attach to), 2 (bad usage, or several jobs run: name one).
int run_attach_command(int argc, const char* const* argv);

}  // namespace ddp
