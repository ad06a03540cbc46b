#pragma once
// `ddplaunch diagnose PATH... [--json]`: reads a job's NCCL logs (a log dir,
// searched for nccl.log / *.log, or log files) and prints what they say: per
// communicator the ranks that did and did not complete init, per rank host,
// pid, device and bus id, the transports between ranks and hosts, the network,
// and the warnings grouped with hints. Bad input: one line
// "ddplaunch diagnose: error: ..." on stderr and exit 2.

namespace ddp {

/// Runs the subcommand; argv[0] is "diagnose". Returns the exit code.
int run_diagnose_command(int argc, const char* const* argv);

}  // namespace ddp
