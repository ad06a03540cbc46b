// ddpbench: the benchmark program of worker/ (DESIGN.md). One CLI11
// subcommand per benchmark; each lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#ifdef DDP_HAVE_RUNTIME
#include "allreduce_bench.h"
#endif
#include "heartbeat_bench.h"
#include "rendezvous_bench.h"

int main(int argc, char** argv) {
  CLI::App app{"ddpbench: ddplaunch's rendezvous, heartbeat and collective benchmarks", "ddpbench"};
  app.require_subcommand(1);
  ddp::bench::RendezvousBenchOptions rendezvous;
  CLI::App* rendezvous_cmd = ddp::bench::add_rendezvous_command(app, rendezvous);
  ddp::bench::HeartbeatBenchOptions heartbeats;
  CLI::App* heartbeats_cmd = ddp::bench::add_heartbeat_command(app, heartbeats);
#ifdef DDP_HAVE_RUNTIME
  ddp::bench::AllreduceBenchOptions allreduce;
  CLI::App* allreduce_cmd = ddp::bench::add_allreduce_command(app, allreduce);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddpbench: error: %s\n", e.what());
    return 2;
  }
  if (rendezvous_cmd->parsed()) return ddp::bench::run_rendezvous_bench(rendezvous);
  if (heartbeats_cmd->parsed()) return ddp::bench::run_heartbeat_bench(heartbeats);
#ifdef DDP_HAVE_RUNTIME
  try {
    if (allreduce_cmd->parsed()) return ddp::bench::run_allreduce_bench(allreduce);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpbench: error: %s\n", e.what());
    return 1;
  }
#endif
  return 2;
}
