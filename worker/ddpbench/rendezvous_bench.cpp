// `ddpbench rendezvous` (see rendezvous_bench.h): the options, repeated runs
// of rendezvous_run.h against one coordinator, and the summary.
#include "rendezvous_bench.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "rendezvous_run.h"
#include "serve_process.h"

namespace ddp::bench {
namespace {

constexpr double kTargetSeconds = 1.0;  // the target: 2,048 x 8 ranks in under 1 s

nlohmann::json peer_context() {
  return {{"name", "torchrun c10d rendezvous"},
          {"hosts", 4000},
          {"seconds", 10.0},
          {"source", "a published figure for torchrun (after its O(n) fix), not measured here"}};
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Bytes in MiB, or null when unknown (negative).
nlohmann::json mib_or_null(int64_t bytes) { return bytes < 0 ? nlohmann::json() : nlohmann::json(mib(bytes)); }

}  // namespace

CLI::App* add_rendezvous_command(CLI::App& app, RendezvousBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "rendezvous", "N simulated agents: join + NCCL ID + barrier against one coordinator on loopback");
  cmd->add_option("--nodes", o.nodes, "simulated agents (nodes)")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--nproc-per-node", o.nproc_per_node, "workers per simulated node")
      ->check(CLI::Range(1, 1 << 12))
      ->capture_default_str();
  cmd->add_option("--coordinator", o.coordinator, "HOST:PORT of a running coordinator (default: start ddplaunch serve)");
  cmd->add_option("--ddplaunch", o.ddplaunch, "the ddplaunch to start as coordinator (default: beside ddpbench, else PATH)");
  cmd->add_option("--channels", o.channels, "gRPC channels (TCP connections) the agents share")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--repeat", o.repeat, "runs, each on a fresh job; the median is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--timeout", o.timeout_s, "seconds allowed for each run")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--phased", o.phased,
                "start each call for all agents once all have ended the previous one (a clean per-phase "
                "breakdown); default: each agent goes on at once, as real agents do");
  cmd->add_flag("--json", o.json, "print one JSON line instead of a summary");
  return cmd;
}

int run_rendezvous_bench(const RendezvousBenchOptions& o) {
  std::unique_ptr<ServeProcess> serve;
  std::vector<RunResult> runs;
  std::string target = o.coordinator;
  int64_t idle_rss = -1;  // the coordinator's RSS before the first run
  try {
    // Forks: before gRPC starts any thread.
    if (target.empty()) {
      serve = ServeProcess::start(find_ddplaunch(o.ddplaunch), std::chrono::seconds(10));
      target = serve->endpoint();
    }
    const auto stubs = connect_channels(target, o.channels, 10);
    if (serve) idle_rss = serve->rss_bytes().value_or(-1);
    for (int i = 0; i < o.repeat; ++i) {
      if (serve) serve->reset_peak_rss();
      RendezvousRun run(stubs, o);
      runs.push_back(run.execute());
      if (serve) {
        // The kernel may fold the last pages into VmHWM only later than VmRSS.
        runs.back().peak_rss_bytes =
            std::max(serve->peak_rss_bytes().value_or(-1), serve->rss_bytes().value_or(-1));
      }
      if (!runs.back().errors.empty()) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpbench: error: rendezvous: %s\n", e.what());
    return 1;
  }
  const int64_t final_rss = serve ? serve->rss_bytes().value_or(-1) : -1;
  if (serve) serve->stop();

  const RunResult& last = runs.back();
  if (!last.errors.empty()) {
    std::fprintf(stderr, "ddpbench: rendezvous of %d x %d ranks was wrong:\n", o.nodes, o.nproc_per_node);
    for (const auto& e : last.errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return 1;
  }
  std::vector<const RunResult*> sorted;
  for (const auto& r : runs) sorted.push_back(&r);
  std::sort(sorted.begin(), sorted.end(), [](const RunResult* a, const RunResult* b) { return a->total_s < b->total_s; });
  const RunResult& median = *sorted[(sorted.size() - 1) / 2];  // the lower middle for an even count
  int64_t peak = -1;  // the highest of the runs' peaks; -1: unknown
  std::vector<double> all;
  nlohmann::json peaks = nlohmann::json::array();
  for (const auto& r : runs) {
    all.push_back(r.total_s);
    peak = std::max(peak, r.peak_rss_bytes);
    peaks.push_back(mib_or_null(r.peak_rss_bytes));
  }

  nlohmann::json j;
  j["bench"] = "rendezvous";
  j["nodes"] = o.nodes;
  j["nproc_per_node"] = o.nproc_per_node;
  j["world_size"] = static_cast<int64_t>(o.nodes) * o.nproc_per_node;
  j["channels"] = o.channels;
  j["repeat"] = o.repeat;
  j["phased"] = o.phased;
  j["coordinator"] = serve ? "ddplaunch serve (started by ddpbench)" : "external " + target;
  j["seconds"] = median.total_s;
  j["seconds_all"] = all;
  // Consecutive phases ending at the last reply of each call; they sum to
  // "seconds". first_join_reply: when the first agent learnt its rank.
  j["breakdown_s"] = {{"join", median.join_s},
                      {"nccl_id", median.nccl_id_s},
                      {"barrier", median.barrier_s},
                      {"first_join_reply", median.first_join_reply_s}};
  j["coordinator_peak_rss_bytes"] = peak < 0 ? nlohmann::json() : nlohmann::json(peak);
  j["coordinator_peak_rss_mib"] = mib_or_null(peak);
  // Per run (the peak mark is reset before each); a serve coordinator keeps
  // earlier runs' jobs, so later runs start higher.
  j["coordinator_peak_rss_mib_all"] = peaks;
  j["coordinator_idle_rss_mib"] = mib_or_null(idle_rss);
  j["coordinator_final_rss_mib"] = mib_or_null(final_rss);
  j["target_seconds"] = kTargetSeconds;
  j["ratio_to_target"] = median.total_s / kTargetSeconds;
  j["meets_target"] = median.total_s < kTargetSeconds;
  j["peer_context"] = peer_context();
  j["ok"] = true;
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("rendezvous of %d nodes x %d = %lld ranks over %d channel(s), %d run(s)\n", o.nodes, o.nproc_per_node,
              static_cast<long long>(o.nodes) * o.nproc_per_node, o.channels, o.repeat);
  std::printf("  %.3f s median (join %.3f, NCCL ID %.3f, barrier %.3f); %.2fx the %.1f s target\n", median.total_s,
              median.join_s, median.nccl_id_s, median.barrier_s, median.total_s / kTargetSeconds, kTargetSeconds);
  if (peak >= 0) std::printf("  coordinator peak RSS %.1f MiB\n", mib(peak));
  std::printf("  context: about 10 s is the published figure for torchrun's c10d rendezvous at 4,000 hosts (not measured here)\n");
  return 0;
}

}  // namespace ddp::bench
