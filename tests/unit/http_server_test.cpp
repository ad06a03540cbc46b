// The metrics port (http/metrics_server.h) as a client sees it: a real
// server on an ephemeral loopback port, over a fake job source, answering
// /metrics, /status.json and / with and without the job's token.
#include "http/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddp {
namespace {

nlohmann::json status_of(const std::string& job_id, int world_size) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world_size; ++r) {
    ranks.push_back({{"rank", r},         {"monitored", true},      {"node", 0},
                     {"local_rank", r},   {"host", "h"},            {"pid", 10 + r},
                     {"step", 100 + r},   {"phase", "forward"},     {"step_seconds", 0.5},
                     {"heartbeat_age_s", 0.25}, {"exited", false}, {"open_collectives", nlohmann::json::array()}});
  }
  nlohmann::json s = {{"job_id", job_id}, {"generation", 0}, {"state", "running"}, {"restarts_used", 0},
                      {"max_restarts", 1}, {"elapsed_s", 3.5}, {"world_size", world_size}, {"nnodes", 1}};
  s["ranks"] = {{"world_size", world_size}, {"monitored_ranks", world_size}, {"hang_timeout_s", 300.0},
                {"ranks", ranks}};
  return s;
}

ServedJob fake_job(const std::string& id, const std::string& token, int world_size) {
  const std::string json = status_of(id, world_size).dump();
  return {id, [token](const std::string& t) { return t == token; }, [json] { return json; }};
}

class HttpServerTest : public ::testing::Test {
 protected:
  void start(bool token_required, std::vector<ServedJob> jobs) {
    MetricsServerConfig config;
    config.host = "127.0.0.1";
    config.port = 0;
    config.token_required = token_required;
    server_ = std::make_unique<MetricsServer>(config, [jobs] { return jobs; });
    ASSERT_GT(server_->port(), 0);
  }

  httplib::Result get(const std::string& path, const std::string& bearer = "") {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(5, 0);
    httplib::Headers headers;
    if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
    return client.Get(path.c_str(), headers);
  }

  std::unique_ptr<MetricsServer> server_;
};

TEST_F(HttpServerTest, OpenJobAnswersMetricsStatusAndThePage) {
  start(false, {fake_job("j1", "tok", 3)});
  EXPECT_EQ(server_->url(), "http://127.0.0.1:" + std::to_string(server_->port()) + "/");

  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics) << httplib::to_string(metrics.error());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  for (int r = 0; r < 3; ++r) {
    const std::string series = "ddplaunch_rank_step{job_id=\"j1\",node=\"0\",rank=\"" + std::to_string(r) +
                               "\",host=\"h\"} " + std::to_string(100 + r) + "\n";
    EXPECT_NE(metrics->body.find(series), std::string::npos) << series << metrics->body;
  }
  EXPECT_NE(metrics->body.find("# TYPE ddplaunch_rank_step gauge\n"), std::string::npos);

  auto status = get("/status.json");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 200);
  EXPECT_EQ(status->get_header_value("Content-Type"), "application/json");
  EXPECT_EQ(status->body, status_document(status_of("j1", 3).dump()));
  const nlohmann::json doc = nlohmann::json::parse(status->body);
  EXPECT_EQ(doc["job_id"], "j1");
  EXPECT_EQ(doc["ranks"]["ranks"][0]["state"], "running") << "each rank's state, as status --json adds it";

  auto page = get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("status.json"), std::string::npos);
  EXPECT_NE(page->body.find("<script>"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Cache-Control"), "no-store");

  auto missing = get("/nothing-here");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(HttpServerTest, JobWithTokenRefusesMissingAndWrongTokens) {
  start(true, {fake_job("j1", "s3cret", 2)});
  for (const std::string path : {"/metrics", "/status.json"}) {
    auto none = get(path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"ddplaunch\"");
    EXPECT_EQ(none->body.find("ddplaunch_rank_step"), std::string::npos);

    auto wrong = get(path, "guess");
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    EXPECT_EQ(get(path + "?token=guess")->status, 401) << path;

    auto right = get(path, "s3cret");
    ASSERT_TRUE(right);
    EXPECT_EQ(right->status, 200) << path;
    EXPECT_NE(right->body.find("j1"), std::string::npos);
    EXPECT_EQ(get(path + "?token=s3cret")->status, 200) << path;
  }
  // The page holds no data: it loads without the token and asks for it.
  EXPECT_EQ(get("/")->status, 200);
}

TEST_F(HttpServerTest, EachTokenSeesItsOwnJob) {
  start(true, {fake_job("a", "token-a", 1), fake_job("b", "token-b", 2)});
  auto a = get("/metrics", "token-a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_NE(a->body.find("job_id=\"a\""), std::string::npos);
  EXPECT_EQ(a->body.find("job_id=\"b\""), std::string::npos);
  auto b = get("/status.json", "token-b");
  ASSERT_TRUE(b);
  EXPECT_EQ(nlohmann::json::parse(b->body)["job_id"], "b");
  EXPECT_EQ(get("/status.json?job=a", "token-b")->status, 401);
  EXPECT_EQ(get("/status.json?job=a", "token-a")->status, 200);
  EXPECT_EQ(get("/status.json?job=zzz", "token-a")->status, 404);
}

TEST_F(HttpServerTest, SeveralOpenJobsAskWhichOne) {
  start(false, {fake_job("a", "x", 1), fake_job("b", "y", 1)});
  auto both = get("/status.json");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->status, 300);
  EXPECT_EQ(nlohmann::json::parse(both->body)["jobs"], nlohmann::json::array({"a", "b"}));
  auto b = get("/status.json?job=b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 200);
  EXPECT_EQ(nlohmann::json::parse(b->body)["job_id"], "b");
  auto metrics = get("/metrics");
  EXPECT_NE(metrics->body.find("job_id=\"a\""), std::string::npos);
  EXPECT_NE(metrics->body.find("job_id=\"b\""), std::string::npos);
}

TEST_F(HttpServerTest, NoJobYet) {
  start(true, {});
  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->body, "");
  EXPECT_EQ(get("/status.json")->status, 404);
}

TEST_F(HttpServerTest, TheTokenNeverReachesTheLog) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  auto capture = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  capture->set_level(spdlog::level::trace);
  spdlog::set_default_logger(capture);
  start(true, {fake_job("j1", "the-real-secret", 1)});
  EXPECT_EQ(get("/metrics", "wrong-guess-1")->status, 401);
  EXPECT_EQ(get("/status.json?token=wrong-guess-2")->status, 401);
  EXPECT_EQ(get("/metrics")->status, 401);
  EXPECT_EQ(get("/metrics", "the-real-secret")->status, 200);
  server_.reset();  // every handler has finished
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  EXPECT_NE(text.find("wrong token"), std::string::npos) << text;
  for (const char* secret : {"wrong-guess-1", "wrong-guess-2", "the-real-secret", "token="}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << " in\n" << text;
  }
}

TEST_F(HttpServerTest, BusyPortIsAnErrorNamingTheOption) {
  start(false, {});
  MetricsServerConfig config;
  config.host = "127.0.0.1";
  config.port = server_->port();
  try {
    MetricsServer second(config, [] { return std::vector<ServedJob>{}; });
    FAIL() << "a second server listened on a busy port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-port"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(server_->port())), std::string::npos) << e.what();
  }
}

TEST_F(HttpServerTest, StopsPromptlyWithAnIdleKeepAliveConnection) {
  start(false, {fake_job("j1", "t", 1)});
  httplib::Client client("127.0.0.1", server_->port());
  client.set_keep_alive(true);
  ASSERT_EQ(client.Get("/metrics")->status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

}  // namespace
}  // namespace ddp
