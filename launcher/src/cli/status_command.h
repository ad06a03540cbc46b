#pragma once
// `ddplaunch status [--job ID] [--json]`: the live health view of a running
// job, read from its coordinator: per rank host, pid, state, step, phase,
// heartbeat age, step time, CPU% and RSS (and GPU utilisation and memory
// when a rank has a GPU: the agents' samples) and open collective; the job's generation,
// restarts used and elapsed time. The job is found in this user's registry of
// running jobs (job_registry.h): the only one, or the one --job names.

#include <string>

#include <nlohmann/json.hpp>

namespace ddp {

/// Runs the subcommand; argv[0] is "status". Returns the exit code (0, 1 when
/// no job or its coordinator cannot be reached, 2 on bad usage).
int run_status_command(int argc, const char* const* argv);

/// The table `status` prints for a CoordinatorJob::status_json() document,
/// and under it the last warnings given (stragglers, GPU trouble), if any.
std::string render_status(const nlohmann::json& status);

}  // namespace ddp
