#pragma once
// `ddplaunch list [--json]`: this user's running and recent jobs on this
// machine (the job registry): id, state, start time, ranks, restarts, exit
// code, and whether it runs detached.

namespace ddp {

/// Runs the subcommand; argv[0] is "list". Returns 0, or 2 on bad usage.
int run_list_command(int argc, const char* const* argv);

}  // namespace ddp
