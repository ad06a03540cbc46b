#pragma once
// `ddplaunch top [JOB] [--interval S] [-n N | --once]`: the live health view
// of `status` (one row per rank), refreshed in place every S seconds like
// `nvidia-smi dmon` or `htop`. The job is chosen as `status` chooses it (the
// one running job of this user here, or JOB / --job). On a terminal each
// frame redraws the screen (top_frame.h) with the cursor hidden; elsewhere
// frames follow one another as plain text, a blank line between them.
//
// It ends: after N frames (exit 0); when stdout's reader has gone, as with
// `top | head` (exit 0); on Ctrl-C, SIGTERM or SIGHUP (exit 0, the job keeps
// running; the cursor is shown again); when the job ends (its last state on
// stderr, exit 0); when no job runs (one line, exit 1, at once) or its
// coordinator does not answer for 10 s while the job's agent still runs (one
// line, exit 1); on bad usage (one line, exit 2).
//
// Threading: runs on the calling thread; blocks SIGINT, SIGTERM and SIGHUP
// in it to read them (process/interrupt_signals.h).

namespace ddp {

/// Runs the subcommand; argv[0] is "top". Returns the exit code.
int run_top_command(int argc, const char* const* argv);

}  // namespace ddp
