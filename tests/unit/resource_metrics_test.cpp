// How per-rank resource samples travel: the agent's board (sampled by pid,
// kept when the process is gone, forwarded with or without heartbeats), the
// wire (AgentHeartbeatRequest.resources), the coordinator's health view
// (kept per rank, never making a rank "monitored"), the JSON names and the
// `status` table's columns. FakeClock throughout; nothing sleeps.
#include <gtest/gtest.h>

#include "agent/worker_health_board.h"
#include "cli/status_command.h"
#include "health/hang_detector.h"
#include "metrics/resource_history.h"
#include "metrics/resources_json.h"
#include "metrics/resources_proto.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

RankResources sample(int pid, double cpu, uint64_t rss) {
  RankResources r;
  r.pid = pid;
  r.cpu_percent = cpu;
  r.rss_bytes = rss;
  r.threads = 3;
  r.voluntary_ctx_switches = 10;
  r.nonvoluntary_ctx_switches = 2;
  r.written_bytes = 4096;
  r.dirtied_bytes = 1024;
  return r;
}

GpuResources a_gpu(int index, double util) {
  GpuResources g;
  g.index = index;
  g.uuid = "GPU-" + std::to_string(index);
  g.util_percent = util;
  g.mem_used_bytes = 79ull << 30;
  g.mem_total_bytes = 80ull << 30;
  g.rank_mem_bytes = 70ull << 30;
  g.temperature_c = 83;
  g.power_w = 699.94;
  g.sm_clock_mhz = 1755;
  g.throttle_reasons = {"sw_thermal_slowdown"};
  g.xid_errors = 1;
  g.last_xid = 79;
  g.ecc_errors = 0;
  return g;
}

TEST(ResourceMetrics, TheBoardSamplesEveryStartedRankAndKeepsTheLastOfAGoneOne) {
  FakeClock clock;
  WorkerHealthBoard board(clock);
  std::map<int, int> asked;
  bool rank1_alive = true;
  board.set_resource_sampler([&](const std::map<int, int>& pids) {
    asked = pids;
    std::map<int, RankResources> out;
    out[0] = sample(pids.at(0), 5, 1 << 20);
    if (rank1_alive) out[1] = sample(pids.at(1), 99, 2 << 20);
    return out;
  });
  board.sample_resources();
  EXPECT_TRUE(board.resources().empty()) << "no worker started yet";
  board.set_worker_pid(0, 100);
  board.set_worker_pid(1, 101);
  board.sample_resources();
  EXPECT_EQ(asked, (std::map<int, int>{{0, 100}, {1, 101}}));
  clock.advance(2s);
  auto now = board.resources();
  ASSERT_EQ(now.size(), 2u);
  EXPECT_EQ(now[1].cpu_percent, 99);
  EXPECT_EQ(now[1].age, 2s);
  EXPECT_FALSE(now[1].process_gone);

  rank1_alive = false;
  board.sample_resources();
  now = board.resources();
  EXPECT_TRUE(now[1].process_gone);
  EXPECT_EQ(now[1].cpu_percent, 99) << "its last values stay";
  EXPECT_EQ(now[1].age, 2s) << "as old as they are";
  EXPECT_EQ(now[0].age, 0s);

  board.clear();
  EXPECT_TRUE(board.resources().empty());
}

TEST(ResourceMetrics, SamplesRideWithHeartbeatsOrAloneForRanksWithout) {
  FakeClock clock;
  WorkerHealthBoard board(clock);
  board.set_resource_sampler([](const std::map<int, int>& pids) {
    std::map<int, RankResources> out;
    for (const auto& [rank, pid] : pids) out[rank] = sample(pid, rank * 10.0, 1 << 20);
    return out;
  });
  board.set_worker_pid(2, 102);
  board.set_worker_pid(3, 103);
  RankReport hb;
  hb.rank = 2;
  hb.pid = 102;
  hb.step = 7;
  board.record(hb);
  board.sample_resources();
  const auto forwarded = board.latest_with_resources();
  ASSERT_EQ(forwarded.size(), 2u);
  EXPECT_EQ(forwarded[0].report.rank, 2);
  EXPECT_FALSE(forwarded[0].report.resources_only);
  ASSERT_TRUE(forwarded[0].report.resources.has_value());
  EXPECT_EQ(forwarded[0].report.resources->cpu_percent, 20);
  EXPECT_EQ(forwarded[1].report.rank, 3);
  EXPECT_TRUE(forwarded[1].report.resources_only) << "rank 3 sends no heartbeats";
  EXPECT_EQ(forwarded[1].report.pid, 103);
  EXPECT_EQ(board.latest().size(), 1u) << "latest() stays heartbeats only";

  // Over the wire and back, as the coordinator's service reads it.
  ::ddplaunch::v1::AgentHeartbeatRequest req;
  req.set_node_rank(1);
  req.set_host("node-b");
  std::vector<ForwardedReport> with_gpu = forwarded;
  with_gpu[1].report.resources->gpus = {a_gpu(0, 3), a_gpu(1, 4)};
  add_forwarded(with_gpu, req);
  EXPECT_EQ(req.workers_size(), 1) << "no heartbeat is made up for rank 3";
  EXPECT_EQ(req.resources_size(), 2);
  const auto back = forwarded_reports(req);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].report.step, 7);
  ASSERT_TRUE(back[0].report.resources.has_value());
  EXPECT_EQ(back[0].report.resources->rss_bytes, 1u << 20);
  EXPECT_EQ(back[0].report.resources->written_bytes, 4096u);
  EXPECT_EQ(back[0].report.resources->dirtied_bytes, 1024u);
  EXPECT_TRUE(back[1].report.resources_only);
  EXPECT_EQ(back[1].report.node_rank, 1);
  EXPECT_EQ(back[1].report.host, "node-b");
  ASSERT_EQ(back[1].report.resources->gpus.size(), 2u);
  const GpuResources& g = back[1].report.resources->gpus[1];
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g.util_percent, 4);
  EXPECT_EQ(g.mem_total_bytes, 80ull << 30);
  EXPECT_EQ(g.last_xid, 79);
  EXPECT_EQ(g.throttle_reasons, std::vector<std::string>{"sw_thermal_slowdown"});
  EXPECT_FALSE(back[1].report.resources->gpus[0].rank_mem_bytes == std::nullopt);
}

TEST(ResourceMetrics, UnsetFiguresStayUnsetOnTheWire) {
  RankResources bare;
  bare.pid = 9;
  ::ddplaunch::v1::RankResources wire;
  to_proto(4, bare, wire);
  const RankResources back = from_proto(wire);
  EXPECT_EQ(back.pid, 9);
  EXPECT_FALSE(back.cpu_percent.has_value());
  EXPECT_FALSE(back.rss_bytes.has_value());
  EXPECT_FALSE(back.threads.has_value());
  EXPECT_FALSE(back.written_bytes.has_value());
  EXPECT_FALSE(back.dirtied_bytes.has_value());
}

TEST(ResourceMetrics, TheHealthViewKeepsSamplesWithoutMonitoringTheRank) {
  FakeClock clock;
  HangConfig config;
  config.hang_timeout = 3s;
  HangDetector health(config, 2, clock);
  RankReport only;
  only.rank = 1;
  only.pid = 101;
  only.resources_only = true;
  only.resources = sample(101, 97.5, 5 << 20);
  only.resources->age = 1s;
  health.on_report(only, 0s);
  EXPECT_FALSE(health.any_monitored());
  clock.advance(10s);
  EXPECT_FALSE(health.check().has_value()) << "a sampled script is never silent";
  nlohmann::json view = health.snapshot();
  const auto& r1 = view["ranks"][1];
  EXPECT_FALSE(r1["monitored"].get<bool>());
  ASSERT_TRUE(r1.contains("resources")) << r1.dump();
  EXPECT_EQ(r1["resources"]["cpu_percent"], 97.5);
  EXPECT_EQ(r1["resources"]["rss_bytes"], 5 << 20);
  EXPECT_NEAR(r1["resources"]["age_s"].get<double>(), 11.0, 1e-6);
  EXPECT_FALSE(view["ranks"][0].contains("resources"));

  // An older sample arriving late does not replace a newer one.
  RankReport late = only;
  late.resources->cpu_percent = 1;
  late.resources->age = 20s;
  health.on_report(late, 0s);
  EXPECT_EQ(health.snapshot()["ranks"][1]["resources"]["cpu_percent"], 97.5);

  // A heartbeat with a sample: the rank is monitored, the sample kept apart.
  RankReport hb;
  hb.rank = 0;
  hb.pid = 100;
  hb.step = 3;
  hb.resources = sample(100, 12, 1 << 20);
  health.on_report(hb, 0s);
  view = health.snapshot();
  EXPECT_TRUE(view["ranks"][0]["monitored"].get<bool>());
  EXPECT_EQ(view["ranks"][0]["resources"]["cpu_percent"], 12);
  EXPECT_EQ(health.latest_reports().size(), 1u);
  EXPECT_FALSE(health.latest_reports()[0].resources.has_value());

  // Exited ranks keep their last sample.
  health.on_rank_exited(0);
  hb.resources->process_gone = true;
  health.on_report(hb, 0s);
  EXPECT_TRUE(health.snapshot()["ranks"][0]["resources"]["process_gone"].get<bool>());
  health.reset(2);
  EXPECT_FALSE(health.snapshot()["ranks"][1].contains("resources"));
}

TEST(ResourceMetrics, JsonFieldNames) {
  RankResources r = sample(42, 12.345, 4096);
  r.age = 1500ms;
  r.gpus = {a_gpu(3, 87.66)};
  const nlohmann::json j = resources_to_json(r, WallTime(std::chrono::seconds(1'800'000'000)));
  for (const char* key : {"pid", "age_s", "sampled_at", "process_gone", "cpu_percent", "rss_bytes", "threads",
                          "voluntary_ctx_switches", "nonvoluntary_ctx_switches", "written_bytes", "dirtied_bytes", "gpus"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["cpu_percent"], 12.3);
  EXPECT_EQ(j["age_s"], 1.5);
  EXPECT_EQ(j["sampled_at"], "2027-01-15T07:59:58.500Z") << j["sampled_at"];  // 1.8e9 s less 1.5 s
  const auto& g = j["gpus"][0];
  for (const char* key : {"index", "uuid", "util_percent", "mem_used_bytes", "mem_total_bytes", "rank_mem_bytes",
                          "temperature_c", "power_w", "sm_clock_mhz", "throttle_reasons", "xid_errors", "last_xid",
                          "ecc_errors"}) {
    EXPECT_TRUE(g.contains(key)) << key;
  }
  EXPECT_EQ(g["util_percent"], 87.7);
  EXPECT_EQ(g["power_w"], 699.9);
  EXPECT_EQ(g["index"], 3);

  RankResources bare;
  bare.pid = 1;
  const nlohmann::json b = resources_to_json(bare, WallTime{});
  EXPECT_FALSE(b.contains("cpu_percent")) << "not measured: left out, never 0";
  EXPECT_TRUE(b["gpus"].is_array());
}

TEST(ResourceMetrics, StatusShowsCpuAndRssAndGpuColumnsOnlyWithGpus) {
  nlohmann::json s = {{"job_id", "j"}, {"world_size", 2}, {"nnodes", 1}};
  nlohmann::json r0 = {{"rank", 0}, {"monitored", false}, {"note", "no runtime heartbeats"}};
  r0["resources"] = resources_to_json(sample(4242, 99.6, 300ull << 20), WallTime{});
  nlohmann::json r1 = {{"rank", 1}, {"monitored", false}};
  s["ranks"] = {{"hang_timeout_s", 10.0}, {"ranks", {r0, r1}}};
  std::string out = render_status(s);
  EXPECT_NE(out.find(" cpu "), std::string::npos) << out;
  EXPECT_NE(out.find("rss"), std::string::npos) << out;
  EXPECT_EQ(out.find("gpu"), std::string::npos) << out;
  EXPECT_NE(out.find("100%"), std::string::npos) << out;
  EXPECT_NE(out.find("300.0 MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("4242"), std::string::npos) << "a script's pid, from its sample:\n" << out;

  RankResources with_gpus = sample(4242, 50, 1 << 20);
  with_gpus.gpus = {a_gpu(0, 97), a_gpu(1, 12)};
  s["ranks"]["ranks"][0]["resources"] = resources_to_json(with_gpus, WallTime{});
  out = render_status(s);
  EXPECT_NE(out.find("gpu util"), std::string::npos) << out;
  EXPECT_NE(out.find("97%,12%"), std::string::npos) << out;
  EXPECT_NE(out.find("158.0 GiB/160.0 GiB"), std::string::npos) << out;
}

RankResources on_gpus(std::vector<double> utils, uint64_t used = 10ull << 30) {
  RankResources r = sample(100, 50, 1 << 20);
  for (size_t i = 0; i < utils.size(); ++i) {
    GpuResources g;
    g.index = static_cast<int>(i);
    g.util_percent = utils[i];
    g.mem_used_bytes = used;
    g.mem_total_bytes = 80ull << 30;
    r.gpus.push_back(g);
  }
  return r;
}

TEST(ResourceMetrics, HistoryNotesAGpuIdleBeforeTheHangAndMemoryCloseToFull) {
  const SteadyTime t0{std::chrono::hours(1)};
  ResourceHistory h;
  h.add(t0, on_gpus({95, 90}));
  h.add(t0 + 5s, on_gpus({0, 91}));
  h.add(t0 + 15s, on_gpus({0, 92}));
  h.add(t0 + 45s, on_gpus({0, 93}));
  h.add(t0 + 44s, on_gpus({99, 93}));  // older than the last: ignored
  auto notes = h.notes(3, on_gpus({0, 93}), t0 + 45s, "before the hang");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "rank 3's GPU 0 was at 0% for the 40 s before the hang");

  // A busy sample ends the spell; a short one is not worth a word.
  h.add(t0 + 50s, on_gpus({40, 93}));
  h.add(t0 + 55s, on_gpus({0, 93}));
  EXPECT_TRUE(h.notes(3, on_gpus({0, 93}), t0 + 60s, "before the hang").empty());

  const uint64_t nearly_full = static_cast<uint64_t>(79.1 * (1ull << 30));
  notes = h.notes(5, on_gpus({80, 80}, nearly_full), t0 + 60s, "before the hang");
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_EQ(notes[0], "rank 5's GPU 0 was OOM-close: 79.1 of 80.0 GiB");
  EXPECT_EQ(notes[1], "rank 5's GPU 1 was OOM-close: 79.1 of 80.0 GiB");
}

TEST(ResourceMetrics, TheHangReportCarriesTheNotes) {
  FakeClock clock;
  HangConfig config;
  config.hang_timeout = 3s;
  config.heartbeat_interval = 1s;
  HangDetector health(config, 2, clock);
  for (int k = 0; k <= 3; ++k) {  // samples every 5 s: rank 0's GPU idle, rank 1's busy
    for (int rank : {0, 1}) {
      RankReport only;
      only.rank = rank;
      only.resources_only = true;
      only.resources = on_gpus({rank == 0 ? 0.0 : 97.0});
      health.on_report(only, 0s);
    }
    if (k < 3) clock.advance(5s);
  }
  for (int rank : {0, 1}) {
    RankReport hb;
    hb.rank = rank;
    hb.pid = 100 + rank;
    hb.step = 5;
    health.on_report(hb, 0s);
  }
  std::optional<HangVerdict> verdict;
  for (int i = 0; i < 60 && !verdict; ++i) {
    clock.advance(100ms);
    verdict = health.check();
  }
  ASSERT_TRUE(verdict.has_value());
  ASSERT_TRUE(verdict->details.contains("resource_notes")) << verdict->details.dump(1);
  const auto& notes = verdict->details["resource_notes"];
  ASSERT_EQ(notes.size(), 1u) << notes.dump();
  EXPECT_NE(notes[0].get<std::string>().find("rank 0's GPU 0 was at 0% for the 1"), std::string::npos) << notes.dump();
  EXPECT_TRUE(verdict->details["ranks"][0].contains("resources"));
}

}  // namespace
}  // namespace ddp
