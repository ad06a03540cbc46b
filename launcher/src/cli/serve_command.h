#pragma once
// `ddplaunch serve`: a standalone, long-lived coordinator serving many jobs by
// job id (each created by its first join and forgotten a while after it ends).

namespace ddp {

/// Runs the subcommand; argv[0] is "serve". Returns the exit code.
int run_serve_command(int argc, const char* const* argv);

}  // namespace ddp
