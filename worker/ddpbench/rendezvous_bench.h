#pragma once
// `ddpbench rendezvous`: N simulated agents join one coordinator on loopback,
// fetch the world's NCCL ID and pass a barrier; prints how long that took and
// the coordinator's peak RSS (the target: 2,048 x 8 ranks in under 1 s).

#include <string>

namespace CLI {
class App;
}

namespace ddp::bench {

struct RendezvousBenchOptions {
  int nodes = 2048;
  int nproc_per_node = 8;
  std::string coordinator;  // HOST:PORT of a running coordinator; empty: start `ddplaunch serve`
  std::string ddplaunch;    // the ddplaunch to start; empty: beside ddpbench, else PATH
  int channels = 4;         // gRPC channels (TCP connections) the agents share
  int repeat = 1;           // runs, each with a fresh job id; the median is reported
  double timeout_s = 60;    // bound on each run
  bool phased = false;      // each call starts only once every agent has ended the previous one
  bool json = false;
};

/// Adds the `rendezvous` subcommand to `app`, filling `options` when parsed.
CLI::App* add_rendezvous_command(CLI::App& app, RendezvousBenchOptions& options);

/// Runs the benchmark; 0 when every run formed a correct world, 1 otherwise.
int run_rendezvous_bench(const RendezvousBenchOptions& options);

}  // namespace ddp::bench
