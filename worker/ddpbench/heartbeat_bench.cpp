// `ddpbench heartbeats` (see heartbeat_bench.h): the options, the two loads'
// alternating windows, the scrapes, and the summary.
#include "heartbeat_bench.h"

#include <CLI/CLI.hpp>
#include <curl/curl.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "heartbeat_load.h"
#include "metrics_scrape.h"
#include "rendezvous_run.h"
#include "serve_process.h"

namespace ddp::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The targets, at 2,048 agents x 8 ranks at 1 Hz.
constexpr double kTargetCores = 0.5;
constexpr double kTargetP99Ms = 10;
// Below this share of the beats due, the client did not keep the rate.
constexpr double kRateKeptShare = 0.95;
constexpr size_t kMaxErrorsShown = 5;

// One coordinator and the agents heartbeating to it. Members in the order
// they must be built; destroyed in reverse (the load before its stubs).
struct Side {
  Side(const char* n, bool with_resources) : name(n), resources(with_resources) {}
  const char* name;  // "resources", "no_resources"
  bool resources;
  std::unique_ptr<ServeProcess> serve;
  std::vector<std::unique_ptr<::ddplaunch::v1::Coordinator::Stub>> stubs;
  std::unique_ptr<RendezvousRun> rendezvous;
  std::unique_ptr<HeartbeatLoad> load;
  double rendezvous_s = 0;
  // Summed over the windows.
  double wall_s = 0, coordinator_cpu_s = 0, client_cpu_s = 0;
  LoadWindow calls;
  std::vector<Scrape> scrapes;
  LoadWindow while_scraping;  // the heartbeats due during the scrapes
  int64_t peak_rss_bytes = -1;
};

double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

void sleep_s(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

// Nearest rank: the smallest value with at least p of the values at or below it.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

void merge(LoadWindow& into, LoadWindow w) {
  into.sent += w.sent;
  into.answered += w.answered;
  into.failed += w.failed;
  into.skipped += w.skipped;
  into.latencies_s.insert(into.latencies_s.end(), w.latencies_s.begin(), w.latencies_s.end());
  into.max_lag_s = std::max(into.max_lag_s, w.max_lag_s);
  for (auto& e : w.errors) {
    if (into.errors.size() < kMaxErrorsShown) into.errors.push_back(std::move(e));
  }
}

// A coordinator with a formed world of simulated agents, ready to heartbeat.
void prepare(Side& side, const HeartbeatBenchOptions& o, const RendezvousBenchOptions& world) {
  side.stubs = connect_channels(side.serve->endpoint(), o.channels, 10);
  side.rendezvous = std::make_unique<RendezvousRun>(side.stubs, world);
  RunResult r = side.rendezvous->execute();
  if (!r.errors.empty()) {
    std::string all;
    for (const auto& e : r.errors) all += "\n  " + e;
    throw std::runtime_error(fmt::format("the rendezvous of {} x {} ranks was wrong:{}", o.nodes, o.nproc_per_node, all));
  }
  side.rendezvous_s = r.total_s;
  PayloadShape shape;
  shape.nproc = o.nproc_per_node;
  shape.gpus_per_rank = o.gpus_per_rank;
  shape.resources = side.resources;
  side.load = std::make_unique<HeartbeatLoad>(side.stubs, side.rendezvous->job_id(), side.rendezvous->token(),
                                              side.rendezvous->joined(), shape, o.rate_hz);
}

// One measured window of a side's load, after its warm-up.
void measure(Side& side, const HeartbeatBenchOptions& o, double window_s) {
  side.load->start();
  sleep_s(o.warmup_s);
  const auto from = SteadyClock::now();
  const double cpu0 = side.serve->cpu_seconds().value_or(0), client0 = process_cpu_seconds();
  sleep_s(window_s);
  const auto to = SteadyClock::now();
  const double cpu1 = side.serve->cpu_seconds().value_or(0), client1 = process_cpu_seconds();
  side.load->stop();
  side.wall_s += std::chrono::duration<double>(to - from).count();
  side.coordinator_cpu_s += cpu1 - cpu0;
  side.client_cpu_s += client1 - client0;
  merge(side.calls, side.load->window(from, to));
}

// /metrics while the side's heartbeats go on, as a scraper sees it.
void scrape(Side& side, const HeartbeatBenchOptions& o) {
  side.load->start();
  sleep_s(o.warmup_s);
  MetricsScraper scraper(side.serve->metrics_url(), side.rendezvous->token());
  const auto from = SteadyClock::now();
  for (int i = 0; i < o.scrapes; ++i) {
    side.scrapes.push_back(scraper.fetch());
    if (!side.scrapes.back().error.empty()) break;
  }
  const auto to = SteadyClock::now();
  side.load->stop();
  side.while_scraping = side.load->window(from, to);
}

nlohmann::json side_json(const Side& s, const HeartbeatBenchOptions& o) {
  const double ranks = static_cast<double>(o.nodes) * o.nproc_per_node;
  std::vector<double> scrape_s, first_byte_s;
  for (const Scrape& x : s.scrapes) {
    scrape_s.push_back(x.seconds);
    first_byte_s.push_back(x.first_byte_seconds);
  }
  const Scrape last = s.scrapes.empty() ? Scrape{} : s.scrapes.back();
  nlohmann::json j;
  j["resources_in_heartbeats"] = s.resources;
  j["rendezvous_s"] = s.rendezvous_s;
  j["wall_s"] = s.wall_s;
  j["coordinator_cpu_s"] = s.coordinator_cpu_s;
  j["coordinator_cores"] = s.wall_s > 0 ? s.coordinator_cpu_s / s.wall_s : 0;
  j["client_cores"] = s.wall_s > 0 ? s.client_cpu_s / s.wall_s : 0;
  j["heartbeats_sent"] = s.calls.sent;
  j["heartbeats_answered"] = s.calls.answered;
  j["heartbeats_failed"] = s.calls.failed;
  j["heartbeats_skipped"] = s.calls.skipped;
  const double due = static_cast<double>(o.nodes) * o.rate_hz * s.wall_s;
  j["heartbeats_due"] = due;
  j["rate_hz_achieved"] = s.wall_s > 0 ? static_cast<double>(s.calls.sent) / (o.nodes * s.wall_s) : 0;
  j["rate_kept"] = due > 0 && static_cast<double>(s.calls.sent) >= kRateKeptShare * due;
  j["max_send_lag_ms"] = s.calls.max_lag_s * 1e3;
  j["latency_ms"] = {{"p50", percentile(s.calls.latencies_s, 0.5) * 1e3},
                     {"p99", percentile(s.calls.latencies_s, 0.99) * 1e3},
                     {"max", percentile(s.calls.latencies_s, 1.0) * 1e3}};
  j["scrape_s"] = scrape_s;
  // A scrape reads the whole job's status: heartbeats wait for it meanwhile.
  // null: no heartbeat was due while a scrape ran.
  const std::vector<double>& busy = s.while_scraping.latencies_s;
  auto busy_ms = [&busy](double p) { return busy.empty() ? nlohmann::json() : nlohmann::json(percentile(busy, p) * 1e3); };
  j["latency_ms_while_scraping"] = {{"p99", busy_ms(0.99)}, {"max", busy_ms(1.0)}};
  j["scrape_median_s"] = percentile(scrape_s, 0.5);
  j["scrape_max_s"] = percentile(scrape_s, 1.0);
  j["scrape_first_byte_median_s"] = percentile(first_byte_s, 0.5);
  j["scrape_bytes"] = last.bytes;
  j["scrape_series"] = last.series;
  j["scrape_rank_series"] = last.rank_series;
  j["scrape_series_per_rank"] = static_cast<double>(last.rank_series) / ranks;
  j["coordinator_peak_rss_mib"] =
      s.peak_rss_bytes < 0 ? nlohmann::json() : nlohmann::json(static_cast<double>(s.peak_rss_bytes) / (1 << 20));
  return j;
}

// null when the peer measured nothing (a short run's CPU time can be under a clock tick).
nlohmann::json ratio(double ours, double peer) { return peer > 0 ? nlohmann::json(ours / peer) : nlohmann::json(); }

void print_summary(const nlohmann::json& j, const HeartbeatBenchOptions& o) {
  const nlohmann::json& a = j["sides"]["resources"];
  const nlohmann::json& b = j["sides"]["no_resources"];
  const nlohmann::json& r = j["ratios"];
  std::printf("heartbeats of %d agents x %d = %lld ranks at %g Hz (%d GPU sample(s) per rank), %d channel(s); "
              "%d window(s) of %.1f s per load\n",
              o.nodes, o.nproc_per_node, static_cast<long long>(j["world_size"]), o.rate_hz, o.gpus_per_rank,
              o.channels, o.rounds, o.seconds / o.rounds);
  std::printf("  %-26s %20s %20s %8s\n", "", "with resources", "without (peer)", "ratio");
  auto row = [&](const char* what, const std::string& ours, const std::string& peer, const nlohmann::json& x) {
    std::printf("  %-26s %20s %20s %8s\n", what, ours.c_str(), peer.c_str(),
                x.is_null() ? "" : fmt::format("{:.2f}", x.get<double>()).c_str());
  };
  auto cores = [](const nlohmann::json& s) { return fmt::format("{:.3f} core", s["coordinator_cores"].get<double>()); };
  auto ms = [](const nlohmann::json& s, const char* p) { return fmt::format("{:.2f} ms", s["latency_ms"][p].get<double>()); };
  auto secs = [](const nlohmann::json& s, const char* k) { return fmt::format("{:.3f} s", s[k].get<double>()); };
  row("coordinator CPU", cores(a), cores(b), r["coordinator_cores"]);
  row("heartbeat p50", ms(a, "p50"), ms(b, "p50"), r["latency_p50"]);
  row("heartbeat p99", ms(a, "p99"), ms(b, "p99"), r["latency_p99"]);
  row("heartbeat max", ms(a, "max"), ms(b, "max"), nullptr);
  auto rate = [](const nlohmann::json& s) { return fmt::format("{:.3f} Hz", s["rate_hz_achieved"].get<double>()); };
  row("rate achieved per agent", rate(a), rate(b), nullptr);
  auto client = [](const nlohmann::json& s) { return fmt::format("{:.3f} core", s["client_cores"].get<double>()); };
  row("client (ddpbench) CPU", client(a), client(b), nullptr);
  auto rss = [](const nlohmann::json& s) {
    return s["coordinator_peak_rss_mib"].is_null() ? std::string("?")
                                                   : fmt::format("{:.0f} MiB", s["coordinator_peak_rss_mib"].get<double>());
  };
  row("coordinator peak RSS", rss(a), rss(b), nullptr);
  row("/metrics scrape median", secs(a, "scrape_median_s"), secs(b, "scrape_median_s"), r["scrape_median"]);
  row("/metrics scrape worst", secs(a, "scrape_max_s"), secs(b, "scrape_max_s"), nullptr);
  auto busy = [](const nlohmann::json& s, const char* p) {
    const nlohmann::json& x = s["latency_ms_while_scraping"][p];
    return x.is_null() ? std::string("-") : fmt::format("{:.2f} ms", x.get<double>());
  };
  row("heartbeat p99 in scrapes", busy(a, "p99"), busy(b, "p99"), nullptr);
  row("heartbeat max in scrapes", busy(a, "max"), busy(b, "max"), nullptr);
  auto mb = [](const nlohmann::json& s) { return fmt::format("{:.1f} MB", s["scrape_bytes"].get<double>() / 1e6); };
  row("/metrics size", mb(a), mb(b), nullptr);
  auto series = [](const nlohmann::json& s) {
    return fmt::format("{} ({:.1f}/rank)", s["scrape_series"].get<int64_t>(), s["scrape_series_per_rank"].get<double>());
  };
  row("/metrics series", series(a), series(b), nullptr);
  std::printf("  ratio: with resources / without; the peer is the same heartbeats without RankResources (as before "
              "the resource metrics), on its own ddplaunch serve, measured in alternating windows of this run\n");
  std::printf("  scrapes: %d per load while its heartbeats go on\n", o.scrapes);
  for (const auto* s : {&a, &b}) {
    if (!(*s)["rate_kept"].get<bool>()) {
      std::printf("  note (%s): only %.0f%% of the heartbeats due were sent (%lld skipped as the agent's previous one "
                  "was unanswered; sends up to %.0f ms late): the figures are for a lighter load than asked\n",
                  s == &a ? "with resources" : "without",
                  100.0 * (*s)["heartbeats_sent"].get<double>() / (*s)["heartbeats_due"].get<double>(),
                  static_cast<long long>((*s)["heartbeats_skipped"].get<int64_t>()), (*s)["max_send_lag_ms"].get<double>());
    }
  }
  const nlohmann::json& m = j["meets_target"];
  std::printf("%s: coordinator CPU %.3f core (target < %.1f) %s; heartbeat p99 %.2f ms (target < %.0f ms) %s\n",
              m["all"].get<bool>() ? "PASS" : "FAIL", a["coordinator_cores"].get<double>(), kTargetCores,
              m["coordinator_cores"].get<bool>() ? "met" : "missed", a["latency_ms"]["p99"].get<double>(),
              kTargetP99Ms, m["latency_p99"].get<bool>() ? "met" : "missed");
}

}  // namespace

CLI::App* add_heartbeat_command(CLI::App& app, HeartbeatBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "heartbeats", "the coordinator's CPU and latency for N simulated agents' heartbeats with resource metrics, "
                    "against the same heartbeats without them; and its /metrics scrape time");
  cmd->add_option("--nodes", o.nodes, "simulated agents (nodes)")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--nproc-per-node", o.nproc_per_node, "ranks per simulated node")
      ->check(CLI::Range(1, 1 << 12))
      ->capture_default_str();
  cmd->add_option("--rate", o.rate_hz, "heartbeats per agent per second")
      ->check(CLI::Range(0.01, 1000.0))
      ->capture_default_str();
  cmd->add_option("--seconds", o.seconds, "measured seconds per load (split over the rounds)")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--rounds", o.rounds, "measured windows per load, alternating with the other load's")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup_s, "seconds of heartbeats before each window and before the scrapes")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  cmd->add_option("--gpus-per-rank", o.gpus_per_rank, "GPU samples in each rank's resources")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--scrapes", o.scrapes, "GETs of /metrics per load")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--channels", o.channels, "gRPC channels (TCP connections) the agents share")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--ddplaunch", o.ddplaunch, "the ddplaunch to start as coordinator (default: beside ddpbench, else PATH)");
  cmd->add_option("--timeout", o.timeout_s, "seconds allowed for each rendezvous")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_flag("--json", o.json, "print one JSON line instead of a summary");
  return cmd;
}

int run_heartbeat_bench(const HeartbeatBenchOptions& o) {
  // Both coordinators fork before gRPC (or libcurl) starts any thread.
  std::array<Side, 2> sides{Side("resources", true), Side("no_resources", false)};
  Side& ours = sides[0];
  Side& peer = sides[1];
  try {
    const std::string ddplaunch = find_ddplaunch(o.ddplaunch);
    for (Side& s : sides) s.serve = ServeProcess::start(ddplaunch, std::chrono::seconds(10), true);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    RendezvousBenchOptions world;
    world.nodes = o.nodes;
    world.nproc_per_node = o.nproc_per_node;
    world.timeout_s = o.timeout_s;
    for (Side& s : sides) prepare(s, o, world);
    // Peer and ours take turns, in the order ABBA..., so that a drift in the
    // machine's load falls on both alike.
    const double window_s = o.seconds / o.rounds;
    for (int round = 0; round < o.rounds; ++round) {
      Side& first = round % 2 == 0 ? peer : ours;
      Side& second = round % 2 == 0 ? ours : peer;
      measure(first, o, window_s);
      measure(second, o, window_s);
    }
    for (Side& s : sides) scrape(s, o);
    for (Side& s : sides) s.peak_rss_bytes = s.serve->peak_rss_bytes().value_or(-1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpbench: error: heartbeats: %s\n", e.what());
    return 1;
  }

  std::vector<std::string> errors;
  for (const Side& s : sides) {
    for (const auto& e : s.calls.errors) errors.push_back(fmt::format("{}: {}", s.name, e));
    if (s.calls.failed > static_cast<int64_t>(s.calls.errors.size())) {
      errors.push_back(fmt::format("{}: {} heartbeat(s) failed in all", s.name, s.calls.failed));
    }
    if (s.calls.answered == 0) errors.push_back(fmt::format("{}: no heartbeat was answered", s.name));
    for (const auto& e : s.while_scraping.errors) errors.push_back(fmt::format("{} (while scraping): {}", s.name, e));
    for (const Scrape& x : s.scrapes) {
      if (!x.error.empty()) errors.push_back(fmt::format("{}: {}", s.name, x.error));
    }
  }
  for (Side& s : sides) s.serve->stop();
  if (!errors.empty()) {
    std::fprintf(stderr, "ddpbench: heartbeats of %d x %d ranks went wrong:\n", o.nodes, o.nproc_per_node);
    for (const auto& e : errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return 1;
  }

  nlohmann::json j;
  j["bench"] = "heartbeats";
  j["nodes"] = o.nodes;
  j["nproc_per_node"] = o.nproc_per_node;
  j["world_size"] = static_cast<int64_t>(o.nodes) * o.nproc_per_node;
  j["rate_hz"] = o.rate_hz;
  j["seconds"] = o.seconds;
  j["rounds"] = o.rounds;
  j["warmup_s"] = o.warmup_s;
  j["gpus_per_rank"] = o.gpus_per_rank;
  j["scrapes"] = o.scrapes;
  j["channels"] = o.channels;
  j["coordinator"] = "ddplaunch serve --metrics-port 0 (one per load, started by ddpbench)";
  j["peer"] = "the same heartbeats without RankResources (as before the resource metrics), measured in the same run";
  for (const Side& s : sides) j["sides"][s.name] = side_json(s, o);
  const nlohmann::json& a = j["sides"]["resources"];
  const nlohmann::json& b = j["sides"]["no_resources"];
  auto both = [&](auto get) { return ratio(get(a), get(b)); };
  j["ratios"] = {
      {"coordinator_cores", both([](const nlohmann::json& s) { return s["coordinator_cores"].get<double>(); })},
      {"latency_p50", both([](const nlohmann::json& s) { return s["latency_ms"]["p50"].get<double>(); })},
      {"latency_p99", both([](const nlohmann::json& s) { return s["latency_ms"]["p99"].get<double>(); })},
      {"scrape_median", both([](const nlohmann::json& s) { return s["scrape_median_s"].get<double>(); })}};
  const double cores = a["coordinator_cores"].get<double>(), p99 = a["latency_ms"]["p99"].get<double>();
  j["targets"] = {{"coordinator_cores", kTargetCores}, {"latency_p99_ms", kTargetP99Ms}};
  j["ratio_to_target"] = {{"coordinator_cores", cores / kTargetCores}, {"latency_p99", p99 / kTargetP99Ms}};
  j["meets_target"] = {{"coordinator_cores", cores < kTargetCores},
                       {"latency_p99", p99 < kTargetP99Ms},
                       {"all", cores < kTargetCores && p99 < kTargetP99Ms}};
  j["ok"] = true;
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    print_summary(j, o);
  }
  return 0;
}

}  // namespace ddp::bench
