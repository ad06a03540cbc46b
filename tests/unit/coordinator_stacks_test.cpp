// The coordinator's rounds of stack collection: before a hung job is stopped
// (every rank asked, the merge in the report) and for `ddplaunch stacks`.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "coordinator/coordinator_job.h"
#include "stacks/stack_collection.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

RankReport report(int rank, uint64_t enqueued, uint64_t completed) {
  RankReport r;
  r.rank = rank;
  r.node_rank = 0;
  r.local_rank = rank;
  r.host = "h";
  r.pid = 100 + rank;
  r.step = 20;
  r.phase = enqueued > completed ? WorkerPhase::kBackward : WorkerPhase::kData;
  r.last_enqueued = enqueued;
  r.last_started = enqueued;
  r.last_completed = completed;
  return r;
}

RankStacks python_stack(int rank, const std::string& function, int line) {
  RankStacks s;
  s.rank = rank;
  s.language = "python";
  s.threads.push_back({"MainThread", true, {{"<module>", "/w/train.py", 10, "main()"}, {function, "/w/train.py", line, ""}}});
  return s;
}

class CoordinatorStacksTest : public ::testing::Test {
 protected:
  CoordinatorStacksTest() : ids(make_random_id_source()) {
    JobConfig config;
    config.nnodes = 1;
    config.nproc = 3;
    config.heartbeat_interval = 1s;
    config.hang_timeout = 5s;
    job = std::make_unique<CoordinatorJob>("job", "token", config, clock, *ids);
    JoinParams p;
    p.host = "h";
    p.nproc = 3;
    p.nnodes = 1;
    p.master_port = 29500;
    job->join(p, 10s, [](const Status& s, const Assignment&) { ASSERT_TRUE(s.ok()) << s.message(); });
  }

  // One agent heartbeat: ranks 0 and 1 wait in collective 8, rank 2 never entered it.
  std::vector<int> heartbeat(std::vector<RankStacks> stacks = {}) {
    int64_t current = 0;
    std::vector<int> dump;
    const Status s = job->heartbeat(0, 0, current, {{report(0, 8, 7), {}}, {report(1, 8, 7), {}}, {report(2, 7, 7), {}}},
                                    &dump, std::move(stacks));
    EXPECT_TRUE(s.ok()) << s.message();
    return dump;
  }

  GenerationView view() { return job->current_view(); }

  FakeClock clock;
  std::unique_ptr<UniqueIdSource> ids;
  std::unique_ptr<CoordinatorJob> job;
};

TEST_F(CoordinatorStacksTest, AHangAsksEveryRankOnceAndStopsOnlyWhenAllAnswered) {
  const nlohmann::json none = {{"silent_rank", 0}, {"stuck_collective", 0}, {"desync", 0}};
  EXPECT_EQ(nlohmann::json::parse(job->status_json())["hang_verdicts"], none) << "every kind, counted from 0";
  EXPECT_TRUE(heartbeat().empty());
  clock.advance(6s);
  EXPECT_TRUE(heartbeat().empty());  // fresh heartbeats, no progress
  job->tick();  // the verdict: rank 2 never entered collective 8
  job->tick();
  EXPECT_EQ(nlohmann::json::parse(job->status_json())["hang_verdicts"]["stuck_collective"], 1)
      << "counted once, when given";
  EXPECT_EQ(view().state, GenerationState::kRunning);
  EXPECT_EQ(heartbeat(), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(heartbeat().empty()) << "each rank is asked once";
  heartbeat({python_stack(0, "wait_all_reduce", 20), python_stack(1, "wait_all_reduce", 20)});
  job->tick();
  EXPECT_EQ(view().state, GenerationState::kRunning) << "rank 2 has not answered yet";
  heartbeat({python_stack(2, "load_batch", 35)});
  job->tick();
  const GenerationView v = view();
  ASSERT_EQ(v.state, GenerationState::kStopping);
  EXPECT_NE(v.reason.find("rank 2"), std::string::npos) << v.reason;
  const nlohmann::json report = nlohmann::json::parse(v.report_json);
  EXPECT_EQ(report["kind"], "stuck_collective");
  EXPECT_EQ(report["culprits"], (std::vector<int>{2}));
  const nlohmann::json& groups = report["stacks"]["groups"];
  ASSERT_EQ(groups.size(), 2u) << report.dump(2);
  EXPECT_EQ(groups[0]["ranks"], (std::vector<int>{0, 1}));
  EXPECT_FALSE(groups[0]["likely_culprit"].get<bool>());
  EXPECT_EQ(groups[1]["ranks"], (std::vector<int>{2}));
  EXPECT_TRUE(groups[1]["likely_culprit"].get<bool>());
  EXPECT_NE(report["stacks"]["text"].get<std::string>().find("load_batch"), std::string::npos);
}

TEST_F(CoordinatorStacksTest, AHangStopsAtTheCollectionTimeoutWithoutEveryAnswer) {
  heartbeat();
  clock.advance(6s);
  job->tick();
  heartbeat({python_stack(0, "wait_all_reduce", 20)});
  clock.advance(stack_collection_timeout(1s) - 1s);
  job->tick();
  EXPECT_EQ(view().state, GenerationState::kRunning);
  clock.advance(2s);
  job->tick();
  const GenerationView v = view();
  ASSERT_EQ(v.state, GenerationState::kStopping);
  const nlohmann::json report = nlohmann::json::parse(v.report_json);
  EXPECT_EQ(report["stacks"]["did_not_answer"], (std::vector<int>{1, 2}));
}

TEST_F(CoordinatorStacksTest, StacksOnDemandAreMergedAndTheJobGoesOn) {
  Status status = {StatusCode::kCancelled, "not answered"};
  std::string json;
  job->collect_stacks(10s, [&](const Status& s, const std::string& j) {
    status = s;
    json = j;
  });
  EXPECT_EQ(heartbeat(), (std::vector<int>{0, 1, 2}));
  heartbeat({python_stack(0, "step", 20), python_stack(1, "step", 20), python_stack(2, "step", 20)});
  EXPECT_EQ(status.code(), StatusCode::kCancelled) << "answered only on tick";
  job->tick();
  ASSERT_TRUE(status.ok()) << status.message();
  const nlohmann::json merged = nlohmann::json::parse(json);
  ASSERT_EQ(merged["groups"].size(), 1u);
  EXPECT_EQ(merged["groups"][0]["ranks"], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(view().state, GenerationState::kRunning);
}

TEST_F(CoordinatorStacksTest, StacksOnDemandNameTheRanksThatDidNotAnswer) {
  std::string json;
  job->collect_stacks(3s, [&](const Status&, const std::string& j) { json = j; });
  heartbeat({python_stack(1, "step", 20)});
  clock.advance(3s);
  job->tick();
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(nlohmann::json::parse(json)["did_not_answer"], (std::vector<int>{0, 2}));
}

TEST_F(CoordinatorStacksTest, StacksOnDemandAreRefusedWhenNoGenerationRuns) {
  auto idle = std::make_unique<CoordinatorJob>("idle", "token", JobConfig{}, clock, *ids);
  Status status;
  idle->collect_stacks(1s, [&](const Status& s, const std::string&) { status = s; });
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorStacksTest, AbortAnswersPendingStackRequests) {
  Status status;
  job->collect_stacks(10s, [&](const Status& s, const std::string&) { status = s; });
  job->abort_all({StatusCode::kUnavailable, "shutting down"});
  EXPECT_EQ(status.code(), StatusCode::kUnavailable);
}

TEST_F(CoordinatorStacksTest, AFailureAfterADesyncSaysSo) {
  int64_t current = 0;
  RankReport a = report(0, 8, 7);
  a.recent = {{8, "all_reduce", 4, "float32", "started", 0ms}};
  RankReport b = report(1, 8, 7);
  b.recent = {{8, "all_reduce", 4000, "float32", "started", 0ms}};
  ASSERT_TRUE(job->heartbeat(0, 0, current, {{a, {}}, {b, {}}}).ok());
  NodeOutcome failed;
  failed.node_rank = 0;
  failed.exit_code = 134;
  failed.failed_rank = 0;
  failed.description = "rank 0 failed: killed by SIGABRT";
  ASSERT_TRUE(job->report_outcome(0, failed).ok());
  const GenerationView v = view();
  EXPECT_NE(v.reason.find("killed by SIGABRT; before that, desync at collective #8"), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("4000 B"), std::string::npos) << v.reason;
}

TEST(StackCollection, AsksEachNodesRanksOnceAndIsDoneWhenAllAnswered) {
  const SteadyTime t0{};
  StackCollection c(4, t0 + 5s);
  EXPECT_EQ(c.take_requests(2, 2), (std::vector<int>{2, 3}));
  EXPECT_TRUE(c.take_requests(2, 2).empty());
  EXPECT_EQ(c.take_requests(0, 8), (std::vector<int>{0, 1}));
  for (int r : {0, 1, 2}) c.on_answer(python_stack(r, "f", 1));
  c.on_answer(python_stack(9, "f", 1));  // outside the world
  EXPECT_FALSE(c.done(t0));
  EXPECT_EQ(c.unanswered(), (std::vector<int>{3}));
  c.on_answer(python_stack(3, "f", 1));
  EXPECT_TRUE(c.done(t0));
  EXPECT_EQ(c.answers().size(), 4u);
}

TEST(StackCollection, IsDoneAtItsDeadline) {
  const SteadyTime t0{};
  StackCollection c(2, t0 + 5s);
  EXPECT_FALSE(c.done(t0 + 4s));
  EXPECT_TRUE(c.done(t0 + 5s));
}

}  // namespace
}  // namespace ddp
