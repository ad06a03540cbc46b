// AgentSession against a scripted coordinator (CoordinatorCalls) and a clock
// the test moves: joins and generations, a coordinator that stops answering,
// verdicts that need retries, outcomes that need retries, a job-wide stop
// heard with a heartbeat, a stop from the coordinator, a signal during join,
// and failover to the next coordinator endpoint when the coordinator is lost.
// The session's heartbeat and watch threads are real; their pauses are
// shortened to a millisecond, and every wait of the test is bounded.
#include "agent/agent_session.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "exit_codes.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// A clock the test moves while the session's threads read it.
class SharedFakeClock final : public Clock {
 public:
  SteadyTime now() const override { return SteadyTime(Duration(ticks_.load())); }
  WallTime wall_now() const override { return WallTime(std::chrono::seconds(1'800'000'000)); }
  void advance(Duration d) { ticks_ += d.count(); }

 private:
  std::atomic<Duration::rep> ticks_{std::chrono::duration_cast<Duration>(std::chrono::hours(1)).count()};
};

class ScriptedCoordinator final : public CoordinatorCalls {
 public:
  Status join(const JoinParams& params, int, Duration, JoinResult& result,
              const std::function<bool()>& should_abort) override {
    std::unique_lock<std::mutex> lock(mutex);
    joins.push_back(params);
    if (block_joins) {  // as the real one: parked until the agent gives up
      lock.unlock();
      while (!should_abort()) std::this_thread::sleep_for(1ms);
      return {StatusCode::kCancelled, "cancelled"};
    }
    if (joins_unreachable > 0) {
      --joins_unreachable;
      return {StatusCode::kUnavailable, "cannot reach the coordinator: connection refused"};
    }
    result.assignment.generation = give_generation.value_or(params.generation);
    result.assignment.nnodes = give_nnodes;
    result.assignment.restarts_used = give_restarts_used;
    result.assignment.node_rank = params.node_rank < 0 ? 0 : params.node_rank;
    result.assignment.world_size = params.nproc * give_nnodes;
    return Status::Ok();
  }
  Status heartbeat(int, int64_t, Duration, const std::vector<ForwardedReport>&, std::vector<int>*,
                   const std::vector<RankStacks>&, std::optional<JobStop>* stop) override {
    ++heartbeats;
    if (refused) return {StatusCode::kUnavailable, "ipv4:10.0.0.1:29400: Failed to connect to remote host: Connection refused"};
    if (unreachable) return {StatusCode::kUnavailable, "connection refused"};
    std::lock_guard<std::mutex> lock(mutex);
    if (stop) *stop = announced_stop;
    return Status::Ok();
  }
  Status report_outcome(int64_t generation, const NodeOutcome& outcome, Duration) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (report_failures > 0) {
      --report_failures;
      return {StatusCode::kUnavailable, "connection refused"};
    }
    reports.emplace_back(generation, outcome);
    return Status::Ok();
  }
  Status watch(int, int64_t generation, GenerationState known, Duration, GenerationView& view,
               CancelToken* cancel) override {
    if (cancel != nullptr) {  // the watch thread: parked until stopped, or told to stop the node
      std::unique_lock<std::mutex> lock(mutex);
      if (!cancel->arm([this] { parked.notify_all(); })) return {StatusCode::kCancelled, "cancelled"};
      parked.wait_for(lock, 5s, [&] { return cancel->cancelled() || stopping_reason.has_value(); });
      cancel->disarm();
      if (cancel->cancelled()) return {StatusCode::kCancelled, "cancelled"};
      view.generation = generation;
      view.state = GenerationState::kStopping;
      view.reason = *stopping_reason;
      return Status::Ok();
    }
    std::lock_guard<std::mutex> lock(mutex);  // waiting for the verdict
    if (verdicts.empty()) {
      view.state = known;
      return {StatusCode::kUnavailable, "connection refused"};
    }
    auto [status, answer] = verdicts.front();
    verdicts.pop_front();
    view = answer;
    return status;
  }
  Status request_stop(int, int64_t, const std::string& reason, Duration stop_timeout, Duration,
                      JobStop& stop) override {
    stop.stop_at_step = 77;
    stop.reason = reason;
    stop.stop_timeout = stop_timeout;
    return Status::Ok();
  }

  void stop_the_node(const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping_reason = reason;
    }
    parked.notify_all();
  }

  std::mutex mutex;
  std::condition_variable parked;
  std::vector<JoinParams> joins;
  std::vector<std::pair<int64_t, NodeOutcome>> reports;
  std::deque<std::pair<Status, GenerationView>> verdicts;
  std::optional<int64_t> give_generation;
  std::optional<JobStop> announced_stop;
  std::optional<std::string> stopping_reason;
  int report_failures = 0;
  int joins_unreachable = 0;
  int give_nnodes = 1;
  int give_restarts_used = 0;
  bool block_joins = false;
  std::atomic<bool> unreachable{false};
  std::atomic<bool> refused{false};  // the coordinator's host answers, nothing listens
  std::atomic<int> heartbeats{0};
};

// The job's endpoint list; records every move, and hosts when told to.
class FakeFailover final : public CoordinatorFailover {
 public:
  int endpoints() const override { return 3; }
  std::string endpoint(int epoch) const override { return "node" + std::to_string(epoch) + ":29400"; }
  bool move_to(const Takeover& takeover) override {
    moves.push_back(takeover);
    return host;
  }
  std::vector<Takeover> moves;
  bool host = false;
};

GenerationView verdict(GenerationState state, int exit_code = 0, std::string reason = "", bool membership = false) {
  GenerationView v;
  v.state = state;
  v.exit_code = exit_code;
  v.reason = std::move(reason);
  v.membership_change = membership;
  return v;
}

class AgentSessionTest : public ::testing::Test {
 protected:
  AgentSessionTest() : wakeup(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), health(clock) {
    settings.endpoint = "node0:29400";
    settings.job_id = "job-1";
    settings.nproc = 2;
    settings.agent_id = "agent-7";
    settings.heartbeat_interval = 1ms;
    settings.coordinator_timeout = 15s;
    session = std::make_unique<AgentSession>(settings, coordinator, clock, wakeup, health);
  }
  ~AgentSessionTest() override {
    session.reset();
    close(wakeup);
  }
  // Whether the session woke the event loop within 5 s.
  bool woke() const {
    pollfd p{wakeup, POLLIN, 0};
    return poll(&p, 1, 5000) == 1;
  }
  bool eventually(const std::function<bool()>& condition) const {
    for (int i = 0; i < 5000 && !condition(); ++i) std::this_thread::sleep_for(1ms);
    return condition();
  }

  AgentSettings settings;
  ScriptedCoordinator coordinator;
  SharedFakeClock clock;
  int wakeup;
  WorkerHealthBoard health;
  std::unique_ptr<AgentSession> session;
  AttemptSummary ended_well;
};

TEST_F(AgentSessionTest, JoinsGenerationZeroThenTheOneAfterEachRestartVerdict) {
  session->join();
  ASSERT_EQ(coordinator.joins.size(), 1u);
  EXPECT_EQ(coordinator.joins[0].generation, 0);
  EXPECT_EQ(coordinator.joins[0].agent_id, "agent-7");
  // The verdict needs three polls: two fail (the coordinator is busy restarting), then it says.
  coordinator.verdicts = {{{StatusCode::kUnavailable, "refused"}, {}},
                          {{StatusCode::kUnavailable, "refused"}, {}},
                          {Status::Ok(), verdict(GenerationState::kRestarting, 0, "node 2 went silent", true)}};
  const Verdict v = session->conclude(ended_well);
  EXPECT_TRUE(v.restart);
  EXPECT_TRUE(v.membership_change);
  EXPECT_EQ(v.reason, "node 2 went silent");
  ASSERT_EQ(coordinator.reports.size(), 1u);
  EXPECT_TRUE(coordinator.reports[0].second.success);
  session->join();
  EXPECT_EQ(coordinator.joins.back().generation, 1);
}

TEST_F(AgentSessionTest, ANewcomerTakesTheGenerationTheCoordinatorGives) {
  coordinator.give_generation = 4;
  EXPECT_EQ(session->join().generation, 4);
  coordinator.verdicts = {{Status::Ok(), verdict(GenerationState::kRestarting)}};
  EXPECT_TRUE(session->conclude(ended_well).restart);
  EXPECT_EQ(coordinator.reports.at(0).first, 4);
  coordinator.give_generation.reset();
  EXPECT_EQ(session->join().generation, 5);
}

TEST_F(AgentSessionTest, ACoordinatorSilentForItsTimeoutStopsTheNodeWithTheRendezvousCode) {
  session->join();
  coordinator.unreachable = true;
  const int before = coordinator.heartbeats.load();
  ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > before + 2; }));
  EXPECT_FALSE(session->stop_requested()) << "a few failed heartbeats are no loss";
  clock.advance(16s);
  ASSERT_TRUE(woke());
  EXPECT_TRUE(session->stop_requested());
  EXPECT_NE(session->stop_reason().find("the coordinator at node0:29400 has been unreachable for"),
            std::string::npos)
      << session->stop_reason();
  AttemptSummary stopped;
  stopped.stop_requested = true;
  const Verdict v = session->conclude(stopped);
  EXPECT_EQ(v.exit_code, exit_code::kRendezvous);
  EXPECT_EQ(v.failed_node, Verdict::kCoordinator) << "this node's own failures followed the loss";
  EXPECT_TRUE(coordinator.reports.empty()) << "nobody to report to";
}

TEST_F(AgentSessionTest, AStopFromTheCoordinatorWakesTheEventLoopWithItsReason) {
  session->join();
  coordinator.stop_the_node("rank 3 (node 1) failed: exit code 7");
  ASSERT_TRUE(woke());
  EXPECT_TRUE(session->stop_requested());
  EXPECT_EQ(session->stop_reason(), "rank 3 (node 1) failed: exit code 7");
  GenerationView finished = verdict(GenerationState::kFinished, 7, "rank 3 failed");
  finished.failed_node = 1;
  finished.failed_rank = 3;
  coordinator.verdicts = {{Status::Ok(), finished}};
  AttemptSummary stopped;
  stopped.stop_requested = true;
  const Verdict v = session->conclude(stopped);
  EXPECT_FALSE(v.restart);
  EXPECT_EQ(v.exit_code, 7);
  EXPECT_EQ(v.failed_node, 1) << "where the root cause was, for this node's failure.json";
  EXPECT_EQ(v.failed_rank, 3);
  EXPECT_TRUE(coordinator.reports.at(0).second.stopped);
}

TEST_F(AgentSessionTest, AnOutcomeIsReportedAgainWhileTheCoordinatorIsUnavailable) {
  session->join();
  coordinator.report_failures = 2;
  coordinator.verdicts = {{Status::Ok(), verdict(GenerationState::kFinished)}};
  EXPECT_EQ(session->conclude(ended_well).exit_code, 0);
  EXPECT_EQ(coordinator.reports.size(), 1u);
  EXPECT_EQ(coordinator.report_failures, 0);
}

TEST_F(AgentSessionTest, AJobWideStopHeardWithAHeartbeatWakesTheEventLoop) {
  session->join();
  EXPECT_FALSE(session->job_stop().has_value());
  {
    std::lock_guard<std::mutex> lock(coordinator.mutex);
    coordinator.announced_stop = JobStop{123, "SIGTERM to ddplaunch on node 1 (h1)", 60s};
  }
  ASSERT_TRUE(woke());
  ASSERT_TRUE(session->job_stop().has_value());
  EXPECT_EQ(session->job_stop()->stop_at_step, 123);
  EXPECT_EQ(session->job_stop()->stop_timeout, 60s);
  EXPECT_FALSE(session->stop_requested()) << "a drain, not a teardown";
}

TEST_F(AgentSessionTest, ThisNodesPreemptionAsksTheCoordinatorForTheWholeJob) {
  session->join();
  const std::optional<JobStop> stop = session->request_job_stop("SIGTERM to ddplaunch on node 0", 90s);
  ASSERT_TRUE(stop.has_value());
  EXPECT_EQ(stop->stop_at_step, 77);
  EXPECT_EQ(session->job_stop()->reason, "SIGTERM to ddplaunch on node 0");
}

TEST_F(AgentSessionTest, ASignalDuringJoinGivesUpWith128PlusIt) {
  // SIGHUP (a stop signal) blocked here and sent to this thread alone: it
  // stays pending, as it would in ddplaunch, whose signalfd reads it later.
  sigset_t hup, old;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &hup, &old), 0);
  coordinator.block_joins = true;
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  int code = 0;
  try {
    session->join();
  } catch (const PlanError& e) {
    code = e.exit_code;
  }
  const timespec none{0, 0};
  sigtimedwait(&hup, nullptr, &none);  // take the signal back
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  EXPECT_EQ(code, exit_code::for_signal(SIGHUP));
}

class AgentSessionFailoverTest : public AgentSessionTest {
 protected:
  AgentSessionFailoverTest() {
    session = std::make_unique<AgentSession>(settings, coordinator, clock, wakeup, health, &failover);
    coordinator.give_nnodes = 3;
    coordinator.give_restarts_used = 1;
  }
  // The coordinator stops answering heartbeats for longer than its timeout.
  void lose_the_coordinator() {
    coordinator.unreachable = true;
    // The heartbeat thread has read the clock (and failed) before it moves.
    const int before = coordinator.heartbeats.load();
    ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > before + 1; }));
    clock.advance(16s);
    ASSERT_TRUE(eventually([&] { return session->stop_requested(); }));
    // The session sets the flag, then writes the eventfd: the write may come a moment later.
    uint64_t count = 0;
    bool woken = false;  // a read takes the count: asked again, it would fail
    ASSERT_TRUE(eventually([&] {
      woken = woken || read(wakeup, &count, sizeof count) == static_cast<ssize_t>(sizeof count);
      return woken;
    })) << "the event loop was woken";
    coordinator.unreachable = false;
  }
  FakeFailover failover;
};

TEST_F(AgentSessionFailoverTest, ALostCoordinatorFailsOverToTheNextEndpointWhereTheNodeJoinsTheNextGeneration) {
  settings.node_rank = 2;
  session = std::make_unique<AgentSession>(settings, coordinator, clock, wakeup, health, &failover);
  failover.host = true;
  session->join();
  ASSERT_NO_FATAL_FAILURE(lose_the_coordinator());
  AttemptSummary stopped;
  stopped.stop_requested = true;
  const Verdict v = session->conclude(stopped);
  EXPECT_TRUE(v.restart);
  EXPECT_TRUE(v.membership_change) << "the restart budget is untouched";
  EXPECT_NE(v.reason.find("failing over to the next coordinator endpoint node1:29400 (epoch 1, hosted by this agent)"),
            std::string::npos)
      << v.reason;
  ASSERT_EQ(failover.moves.size(), 1u);
  const Takeover& t = failover.moves[0];
  EXPECT_EQ(t.epoch, 1);
  EXPECT_EQ(t.skipped, 0);
  EXPECT_EQ(t.generation, 1);
  EXPECT_EQ(t.restarts_used, 1);
  EXPECT_EQ(t.previous_nnodes, 3);
  EXPECT_EQ(session->epoch(), 1);
  EXPECT_TRUE(coordinator.reports.empty()) << "nobody to report to";
  session->join();
  EXPECT_EQ(coordinator.joins.back().generation, 1);
  EXPECT_EQ(coordinator.joins.back().node_rank, 2) << "a survivor asks for its rank again";
  EXPECT_TRUE(coordinator.joins.back().hosts_coordinator);
}

TEST_F(AgentSessionFailoverTest, AJoinThatCannotReachTheNextEndpointMovesOnToTheOneAfter) {
  session->join();
  ASSERT_NO_FATAL_FAILURE(lose_the_coordinator());
  AttemptSummary stopped;
  stopped.stop_requested = true;
  ASSERT_TRUE(session->conclude(stopped).restart);
  coordinator.joins_unreachable = 1;
  session->join();
  ASSERT_EQ(failover.moves.size(), 2u);
  EXPECT_EQ(failover.moves[1].epoch, 2);
  EXPECT_EQ(failover.moves[1].skipped, 1) << "a skipped endpoint needs a strict majority";
  EXPECT_EQ(failover.moves[1].generation, 1);
  EXPECT_EQ(session->epoch(), 2);
  EXPECT_EQ(coordinator.joins.size(), 3u);
}

TEST_F(AgentSessionFailoverTest, ACoordinatorLostWhileTheVerdictIsAwaitedFailsOverToo) {
  session->join();
  // The verdict polls fail (no verdicts scripted) while the clock passes the timeout.
  std::atomic<bool> done{false};
  std::thread mover([&] {
    while (!done.load()) {
      clock.advance(1s);
      std::this_thread::sleep_for(1ms);
    }
  });
  const Verdict v = session->conclude(ended_well);
  done = true;
  mover.join();
  EXPECT_TRUE(v.restart);
  EXPECT_NE(v.reason.find("lost the coordinator at node0:29400 while waiting for the job's verdict"),
            std::string::npos)
      << v.reason;
  ASSERT_EQ(failover.moves.size(), 1u);
  EXPECT_EQ(failover.moves[0].epoch, 1);
}

TEST_F(AgentSessionFailoverTest, ARefusedConnectionFailsOverAfterThreeHeartbeatIntervalsNotTheTimeout) {
  settings.heartbeat_interval = 1ms;  // the pause between heartbeats stays short; the limit is at least 1 s
  session = std::make_unique<AgentSession>(settings, coordinator, clock, wakeup, health, &failover);
  session->join();
  coordinator.refused = true;
  const int before = coordinator.heartbeats.load();
  ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > before + 1; }));
  clock.advance(900ms);
  const int later = coordinator.heartbeats.load();
  ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > later + 1; }));
  EXPECT_FALSE(session->stop_requested()) << "not within 1 s";
  clock.advance(200ms);  // 1.1 s of refusals, far below the 15 s timeout
  ASSERT_TRUE(eventually([&] { return session->stop_requested(); }));
  coordinator.refused = false;
  AttemptSummary stopped;
  stopped.stop_requested = true;
  EXPECT_TRUE(session->conclude(stopped).restart);
  EXPECT_EQ(failover.moves.size(), 1u);
}

TEST_F(AgentSessionTest, WithoutAnotherEndpointARefusedConnectionIsWaitedForTheWholeTimeout) {
  session->join();
  coordinator.refused = true;
  const int before = coordinator.heartbeats.load();
  ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > before + 1; }));
  clock.advance(5s);  // a standalone coordinator restarting
  const int later = coordinator.heartbeats.load();
  ASSERT_TRUE(eventually([&] { return coordinator.heartbeats.load() > later + 2; }));
  EXPECT_FALSE(session->stop_requested());
}

TEST_F(AgentSessionFailoverTest, AtTheLastEndpointALostCoordinatorEndsTheNode) {
  AttemptSummary stopped;
  stopped.stop_requested = true;
  session->join();
  for (int epoch = 1; epoch <= 2; ++epoch) {
    ASSERT_NO_FATAL_FAILURE(lose_the_coordinator());
    ASSERT_TRUE(session->conclude(stopped).restart);
    ASSERT_EQ(session->epoch(), epoch);
    session->join();
  }
  ASSERT_NO_FATAL_FAILURE(lose_the_coordinator());
  const Verdict v = session->conclude(stopped);
  EXPECT_FALSE(v.restart);
  EXPECT_EQ(v.exit_code, exit_code::kRendezvous);
  EXPECT_EQ(failover.moves.size(), 2u);
}

}  // namespace
}  // namespace ddp
