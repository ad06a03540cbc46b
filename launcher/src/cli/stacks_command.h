#pragma once
// `ddplaunch stacks [--job ID] [--json] [--wait S]`: every rank's stacks of a
// running job, taken now without stopping it (a live stack dump of every rank
// at once), merged: ranks grouped by identical stack (stack_merge.h). Each
// rank's full stacks also go to its rank_<r>/stacks.log.

namespace ddp {

/// Runs the subcommand; argv[0] is "stacks". Returns the exit code (0, 1 when
/// no job or its coordinator cannot be reached, 2 on bad usage).
int run_stacks_command(int argc, const char* const* argv);

}  // namespace ddp
