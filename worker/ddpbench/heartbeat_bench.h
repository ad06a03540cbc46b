#pragma once
// `ddpbench heartbeats`: the coordinator's cost of a running job's heartbeats
// and metrics (its target: 2,048 agents x 8 ranks at 1 Hz in under
// 0.5 of a core, heartbeat p99 under 10 ms), and its /metrics scrape time at
// that size. Two `ddplaunch serve` processes each get a world of simulated
// agents (rendezvous_run.h) and then their heartbeats (heartbeat_load.h): one
// with every rank's resource sample (RankResources with its GPUs), its peer
// without (heartbeats as before the resource metrics existed). The loads take
// turns in alternating windows; for each, the coordinator's CPU-seconds per
// second (/proc/PID/stat) and the heartbeat latency seen by the agents.

#include <string>

namespace CLI {
class App;
}

namespace ddp::bench {

struct HeartbeatBenchOptions {
  int nodes = 2048;
  int nproc_per_node = 8;
  double rate_hz = 1;        // heartbeats per agent per second
  double seconds = 20;       // measured per load, split over the rounds
  int rounds = 2;            // windows per load, alternating with the peer's
  double warmup_s = 2;       // heartbeats before each window and each scrape series
  int gpus_per_rank = 1;
  int scrapes = 5;           // GETs of /metrics per load
  int channels = 4;          // gRPC channels (TCP connections) the agents share
  std::string ddplaunch;     // empty: beside ddpbench, else PATH
  double timeout_s = 60;     // bound on each rendezvous
  bool json = false;
};

/// Adds the `heartbeats` subcommand to `app`, filling `options` when parsed.
CLI::App* add_heartbeat_command(CLI::App& app, HeartbeatBenchOptions& options);

/// Runs the benchmark; 0 when every heartbeat and scrape succeeded (whether
/// or not the targets were met), 1 otherwise.
int run_heartbeat_bench(const HeartbeatBenchOptions& options);

}  // namespace ddp::bench
