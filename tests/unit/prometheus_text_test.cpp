// The Prometheus text exposition (version 0.0.4) the metrics port serves:
// the formatter's escaping, values and families (http/prometheus_text.h),
// and the families made from a job's status document (http/job_metrics.h).
#include "http/job_metrics.h"
#include "http/prometheus_text.h"

#include <gtest/gtest.h>

#include "text_lines.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp {
namespace {

using ddp::testing::lines;

TEST(PrometheusText, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("a\\b"), "a\\\\b");
  EXPECT_EQ(escape_label_value("say \"hi\""), "say \\\"hi\\\"");
  EXPECT_EQ(escape_label_value("two\nlines"), "two\\nlines");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(escape_label_value(""), "");
  EXPECT_EQ(escape_label_value("tab\tstays"), "tab\tstays");  // only \, " and line feed are escaped
}

TEST(PrometheusText, EscapesHelpTextButNotQuotes) {
  EXPECT_EQ(escape_help_text("a \"quoted\" word"), "a \"quoted\" word");
  EXPECT_EQ(escape_help_text("back\\slash\nnext"), "back\\\\slash\\nnext");
}

TEST(PrometheusText, WritesGoStyleValues) {
  EXPECT_EQ(format_sample_value(0), "0");
  EXPECT_EQ(format_sample_value(42), "42");
  EXPECT_EQ(format_sample_value(-3), "-3");
  EXPECT_EQ(format_sample_value(0.125), "0.125");
  EXPECT_EQ(format_sample_value(0.1), "0.1");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_sample_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_sample_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(format_sample_value(1e20)), 1e20);
  EXPECT_EQ(std::stod(format_sample_value(123456789.123)), 123456789.123);
}

TEST(PrometheusText, ChecksNames) {
  EXPECT_TRUE(valid_metric_name("ddplaunch_rank_step"));
  EXPECT_TRUE(valid_metric_name("job:rate5m"));
  EXPECT_TRUE(valid_metric_name("_x9"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_FALSE(valid_metric_name("9lives"));
  EXPECT_FALSE(valid_metric_name("has-dash"));
  EXPECT_FALSE(valid_metric_name("has space"));
  EXPECT_TRUE(valid_label_name("job_id"));
  EXPECT_FALSE(valid_label_name("job:id"));  // colons are for metric names only
  EXPECT_FALSE(valid_label_name("__name__"));
  EXPECT_FALSE(valid_label_name("1st"));
  EXPECT_FALSE(valid_label_name(""));
}

TEST(PrometheusText, OneFamilyPerNameWithHelpAndTypeFirst) {
  PrometheusText out;
  out.declare("b_total", MetricType::kCounter, "Counts b.");
  out.declare("a", MetricType::kGauge, "An \"a\"\nover two lines \\ here.");
  // Samples of the two families interleaved: the text keeps each family whole.
  out.add("a", {{"rank", "0"}}, 1);
  out.add("b_total", {}, 7);
  out.add("a", {{"rank", "1"}}, 2.5);
  out.add("b_total", {}, 8);
  EXPECT_EQ(out.sample_count(), 4u);
  EXPECT_EQ(out.text(),
            "# HELP b_total Counts b.\n"
            "# TYPE b_total counter\n"
            "b_total 7\n"
            "b_total 8\n"
            "# HELP a An \"a\"\\nover two lines \\\\ here.\n"
            "# TYPE a gauge\n"
            "a{rank=\"0\"} 1\n"
            "a{rank=\"1\"} 2.5\n");
}

TEST(PrometheusText, WritesEscapedLabelsInOrder) {
  PrometheusText out;
  out.declare("m", MetricType::kUntyped, "m");
  out.add("m", {{"job_id", "j\"1\""}, {"host", "a\\b\nc"}}, 3);
  EXPECT_EQ(lines(out.text()).back(), "m{job_id=\"j\\\"1\\\"\",host=\"a\\\\b\\nc\"} 3");
  EXPECT_EQ(lines(out.text())[1], "# TYPE m untyped");
}

TEST(PrometheusText, LeavesOutFamiliesWithoutSamples) {
  PrometheusText out;
  out.declare("empty", MetricType::kGauge, "nothing");
  EXPECT_EQ(out.text(), "");
  out.declare("full", MetricType::kGauge, "one");
  out.add("full", {}, 1);
  EXPECT_EQ(out.text(), "# HELP full one\n# TYPE full gauge\nfull 1\n");
}

TEST(PrometheusText, RefusesMisuse) {
  PrometheusText out;
  EXPECT_THROW(out.declare("bad-name", MetricType::kGauge, ""), std::logic_error);
  EXPECT_THROW(out.add("undeclared", {}, 1), std::logic_error);
  out.declare("g", MetricType::kGauge, "g");
  EXPECT_NO_THROW(out.declare("g", MetricType::kGauge, "again"));
  EXPECT_THROW(out.declare("g", MetricType::kCounter, "g"), std::logic_error);
  EXPECT_THROW(out.add("g", {{"__reserved", "x"}}, 1), std::logic_error);
  EXPECT_THROW(out.add("g", {{"bad-label", "x"}}, 1), std::logic_error);
}

// ---- the families of a job

nlohmann::json monitored_rank(int r, const std::string& phase, nlohmann::json resources = nullptr) {
  nlohmann::json j = {{"rank", r},          {"monitored", true},   {"node", r / 2},         {"local_rank", r % 2},
                      {"host", "node-" + std::to_string(r / 2)},   {"pid", 100 + r},       {"step", 40 + r},
                      {"phase", phase},     {"step_seconds", 0.25}, {"heartbeat_age_s", 0.5}, {"exited", false},
                      {"open_collectives", nlohmann::json::array()}};
  if (!resources.is_null()) j["resources"] = std::move(resources);
  return j;
}

nlohmann::json job_status() {
  nlohmann::json s = {{"job_id", "job-1"}, {"generation", 2},     {"state", "running"}, {"restarts_used", 2},
                      {"max_restarts", 3}, {"elapsed_s", 75.25}, {"world_size", 4},    {"nnodes", 2}};
  s["ranks"] = {{"world_size", 4},
                {"monitored_ranks", 3},
                {"hang_timeout_s", 300.0},
                {"seconds_since_progress", 0.5},
                {"ranks",
                 {monitored_rank(0, "forward"), monitored_rank(1, "backward"), monitored_rank(2, "something new"),
                  {{"rank", 3}, {"monitored", false}, {"note", "no runtime heartbeats"}}}}};
  return s;
}

// name{labels} -> value, for the samples of the text.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const std::string& l : lines(text)) {
    if (l.empty() || l[0] == '#') continue;
    const size_t space = l.rfind(' ');
    out[l.substr(0, space)] = l.substr(space + 1);
  }
  return out;
}

TEST(JobMetrics, RankSeriesCarryTheFourLabels) {
  const auto s = samples(jobs_metrics_text({job_status()}));
  const std::string r0 = "{job_id=\"job-1\",node=\"0\",rank=\"0\",host=\"node-0\"}";
  EXPECT_EQ(s.at("ddplaunch_rank_step" + r0), "40");
  EXPECT_EQ(s.at("ddplaunch_rank_step_seconds" + r0), "0.25");
  EXPECT_EQ(s.at("ddplaunch_rank_heartbeat_age_seconds" + r0), "0.5");
  EXPECT_EQ(s.at("ddplaunch_rank_open_collectives" + r0), "0");
  EXPECT_EQ(s.at("ddplaunch_rank_exited" + r0), "0");
  EXPECT_EQ(s.at("ddplaunch_rank_step{job_id=\"job-1\",node=\"1\",rank=\"2\",host=\"node-1\"}"), "42");
}

TEST(JobMetrics, PhaseIsALabelledGaugeWithBoundedValues) {
  const auto s = samples(jobs_metrics_text({job_status()}));
  const std::string r0 = "ddplaunch_rank_phase{job_id=\"job-1\",node=\"0\",rank=\"0\",host=\"node-0\",phase=\"";
  EXPECT_EQ(s.at(r0 + "forward\"}"), "1");
  EXPECT_EQ(s.at(r0 + "backward\"}"), "0");
  std::set<std::string> phases;
  for (const auto& [series, value] : s) {
    const size_t at = series.find("phase=\"");
    if (series.rfind("ddplaunch_rank_phase{", 0) == 0) phases.insert(series.substr(at + 7, series.find('"', at + 7) - at - 7));
  }
  EXPECT_EQ(phases, std::set<std::string>(metric_phases().begin(), metric_phases().end()));
  // A phase outside the list counts as unknown, so the values stay bounded.
  const std::string r2 = "ddplaunch_rank_phase{job_id=\"job-1\",node=\"1\",rank=\"2\",host=\"node-1\",phase=\"";
  EXPECT_EQ(s.at(r2 + "unknown\"}"), "1");
}

TEST(JobMetrics, SeriesPerRankAreAsTheReadmeSays) {
  const auto s = samples(jobs_metrics_text({job_status()}));
  std::map<std::string, int> per_rank;
  for (const auto& [series, value] : s) {
    const size_t at = series.find("rank=\"");
    if (at != std::string::npos) per_rank[series.substr(at, series.find('"', at + 6) - at)]++;
  }
  EXPECT_EQ(per_rank.size(), 3u) << "the rank without heartbeats has no series";
  for (const auto& [rank, n] : per_rank) EXPECT_EQ(n, kRankSeriesPerRank) << rank;
}

TEST(JobMetrics, JobSeries) {
  nlohmann::json status = job_status();
  status["failure"] = "stuck_collective: rank 1 never entered all_reduce #12";
  status["rendezvous_s"] = 1.5;
  status["hang_verdicts"] = {{"silent_rank", 2}, {"stuck_collective", 1}, {"desync", 0}};
  const auto s = samples(jobs_metrics_text({status}));
  EXPECT_EQ(s.at("ddplaunch_job_generation{job_id=\"job-1\"}"), "2");
  EXPECT_EQ(s.at("ddplaunch_job_restarts_total{job_id=\"job-1\"}"), "2");
  EXPECT_EQ(s.at("ddplaunch_job_max_restarts{job_id=\"job-1\"}"), "3");
  EXPECT_EQ(s.at("ddplaunch_job_world_size{job_id=\"job-1\"}"), "4");
  EXPECT_EQ(s.at("ddplaunch_job_monitored_ranks{job_id=\"job-1\"}"), "3");
  EXPECT_EQ(s.at("ddplaunch_job_state{job_id=\"job-1\",state=\"running\"}"), "1");
  EXPECT_EQ(s.at("ddplaunch_job_state{job_id=\"job-1\",state=\"finished\"}"), "0");
  EXPECT_EQ(s.at("ddplaunch_job_state{job_id=\"job-1\",state=\"rendezvous\"}"), "0") << "the world forming";
  EXPECT_EQ(s.at("ddplaunch_job_failed{job_id=\"job-1\"}"), "1");
  EXPECT_EQ(s.at("ddplaunch_job_hang_verdict{job_id=\"job-1\",kind=\"stuck_collective\"}"), "1");
  EXPECT_EQ(s.at("ddplaunch_job_hang_verdict{job_id=\"job-1\",kind=\"silent_rank\"}"), "0");
  EXPECT_EQ(s.at("ddplaunch_job_hang_verdicts_total{job_id=\"job-1\",kind=\"silent_rank\"}"), "2");
  EXPECT_EQ(s.at("ddplaunch_job_hang_verdicts_total{job_id=\"job-1\",kind=\"stuck_collective\"}"), "1");
  EXPECT_EQ(s.at("ddplaunch_job_hang_verdicts_total{job_id=\"job-1\",kind=\"desync\"}"), "0");
  EXPECT_EQ(s.at("ddplaunch_job_rendezvous_seconds{job_id=\"job-1\"}"), "1.5");
  EXPECT_EQ(s.count("ddplaunch_job_teardown_seconds{job_id=\"job-1\"}"), 0u) << "left out when not known";
}

TEST(JobMetrics, ResourcesWhenTheHeartbeatCarriesThem) {
  nlohmann::json status = job_status();
  status["ranks"]["ranks"][0]["resources"] = {
      {"cpu_percent", 97.5},
      {"rss_bytes", 1 << 30},
      {"voluntary_ctx_switches", 120},
      {"gpus", nlohmann::json::array({nlohmann::json{
                   {"index", 3}, {"util_percent", 88}, {"mem_used_bytes", 2048}, {"sm_clock_mhz", 1410}}})}};
  status["ranks"]["ranks"][1]["resources"] = "not an object";
  const auto s = samples(jobs_metrics_text({status}));
  const std::string r0 = "{job_id=\"job-1\",node=\"0\",rank=\"0\",host=\"node-0\"";
  EXPECT_EQ(s.at("ddplaunch_rank_cpu_percent" + r0 + "}"), "97.5");
  EXPECT_EQ(s.at("ddplaunch_rank_rss_bytes" + r0 + "}"), "1073741824");
  EXPECT_EQ(s.at("ddplaunch_rank_gpu_utilization_percent" + r0 + ",gpu=\"3\"}"), "88");
  EXPECT_EQ(s.at("ddplaunch_rank_gpu_memory_used_bytes" + r0 + ",gpu=\"3\"}"), "2048");
  EXPECT_EQ(s.at("ddplaunch_rank_gpu_sm_clock_hertz" + r0 + ",gpu=\"3\"}"), "1410000000");
  EXPECT_EQ(s.at("ddplaunch_rank_context_switches_total" + r0 + ",kind=\"voluntary\"}"), "120");
  // What was not measured is left out, never written as 0.
  EXPECT_EQ(s.count("ddplaunch_rank_threads" + r0 + "}"), 0u);
  EXPECT_EQ(s.count("ddplaunch_rank_context_switches_total" + r0 + ",kind=\"nonvoluntary\"}"), 0u);
  EXPECT_EQ(s.count("ddplaunch_rank_gpu_power_watts" + r0 + ",gpu=\"3\"}"), 0u);
}

TEST(JobMetrics, ARankWithoutHeartbeatsHasOnlyItsResourceSeries) {
  nlohmann::json status = job_status();
  status["ranks"]["ranks"][3]["resources"] = {{"pid", 77}, {"cpu_percent", 12.5}, {"gpus", nlohmann::json::array()}};
  const auto s = samples(jobs_metrics_text({status}));
  EXPECT_EQ(s.at("ddplaunch_rank_cpu_percent{job_id=\"job-1\",node=\"\",rank=\"3\",host=\"\"}"), "12.5");
  for (const auto& [series, value] : s) {
    if (series.find("rank=\"3\"") == std::string::npos) continue;
    EXPECT_EQ(series.rfind("ddplaunch_rank_cpu_percent{", 0), 0u) << series << " " << value;
  }
}

// Each warning given about a rank is one series of a fixed kind; the job
// counts them.
TEST(JobMetrics, WarningsAreOneSeriesEachAndACount) {
  nlohmann::json status = job_status();
  status["ranks"]["warnings_total"] = 3;
  status["ranks"]["ranks"][1]["warnings"] = nlohmann::json::parse(
      R"([{"kind":"straggler"},{"kind":"memory_full","gpu":2},{"kind":"made up"}])");
  status["ranks"]["ranks"][3]["warnings"] = nlohmann::json::parse(R"([{"kind":"gpu_xid","gpu":0}])");
  const auto s = samples(jobs_metrics_text({status}));
  EXPECT_EQ(s.at("ddplaunch_job_warnings_total{job_id=\"job-1\"}"), "3");
  const std::string r1 = "ddplaunch_rank_warning{job_id=\"job-1\",node=\"0\",rank=\"1\",host=\"node-0\"";
  EXPECT_EQ(s.at(r1 + ",kind=\"straggler\"}"), "1");
  EXPECT_EQ(s.at(r1 + ",kind=\"memory_full\",gpu=\"2\"}"), "1");
  EXPECT_EQ(s.at("ddplaunch_rank_warning{job_id=\"job-1\",node=\"\",rank=\"3\",host=\"\",kind=\"gpu_xid\",gpu=\"0\"}"),
            "1");
  int warning_series = 0;
  for (const auto& [series, value] : s) {
    if (series.rfind("ddplaunch_rank_warning{", 0) == 0) ++warning_series;
  }
  EXPECT_EQ(warning_series, 3) << "a kind outside the list is left out; healthy ranks have none";
}

TEST(JobMetrics, SeveralJobsShareFamiliesAndOddDocumentsAreSkipped) {
  nlohmann::json other = job_status();
  other["job_id"] = "job \"2\"";
  const std::string text = jobs_metrics_text({job_status(), nlohmann::json("not a status"), other, {{"x", 1}}});
  int type_lines = 0;
  std::set<std::string> families;
  for (const std::string& l : lines(text)) {
    if (l.rfind("# TYPE ", 0) == 0) {
      ++type_lines;
      families.insert(l.substr(7, l.find(' ', 7) - 7));
    }
  }
  EXPECT_EQ(type_lines, static_cast<int>(families.size())) << "a family appears once\n" << text;
  EXPECT_NE(text.find("ddplaunch_job_generation{job_id=\"job \\\"2\\\"\"} 2"), std::string::npos) << text;
  EXPECT_EQ(jobs_metrics_text({}), "");
}

}  // namespace
}  // namespace ddp
