#include "supervise/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <memory>

#include "fake_spawner.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

struct RecordingListener final : SupervisorListener {
  void on_attempt_started(int attempt) override { attempts.push_back(attempt); }
  void on_first_failure(int, const WorkerRecord& w) override { first_failures.push_back(w.rank); }
  void on_attempt_ended(int attempt, const std::vector<WorkerRecord>&) override { ended.push_back(attempt); }
  void on_restart(int next, const Verdict&) override { restarts.push_back(next); }
  void on_finished(int attempt, const Verdict& v) override { finished.push_back({attempt, v.exit_code}); }
  void on_stop_requested(int attempt, int signo) override { stop_requests.push_back({attempt, signo}); }
  void on_stop_timed_out(int attempt) override { stop_timeouts.push_back(attempt); }
  void on_signalling_workers(int, int signo) override { signalling.push_back(signo); }
  std::vector<int> attempts, first_failures, ended, restarts, stop_timeouts, signalling;
  std::vector<std::pair<int, int>> stop_requests;
  std::vector<std::pair<int, int>> finished;  // attempt, exit code
};

class SupervisorTest : public ::testing::Test {
 protected:
  Supervisor make(int nproc, int max_restarts = 0, Duration stop_timeout = Duration::zero()) {
    arbiter = std::make_unique<LocalArbiter>(max_restarts);
    SupervisorConfig config;
    config.shutdown_grace = 5s;
    config.stop_timeout = stop_timeout;
    config.plan_attempt = [nproc](int attempt) {
      std::vector<WorkerSpec> specs;
      for (int r = 0; r < nproc; ++r) {
        specs.push_back({r, r, {{"worker"}, {"TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt)}, {}}});
      }
      return specs;
    };
    return Supervisor(std::move(config), spawner, clock, listener, *arbiter);
  }
  pid_t pid_of(const Supervisor& s, int rank) const { return s.workers().at(static_cast<size_t>(rank)).pid; }

  testing::FakeSpawner spawner;
  FakeClock clock;
  RecordingListener listener;
  std::unique_ptr<LocalArbiter> arbiter;
};

TEST_F(SupervisorTest, AllWorkersSucceedingEndsWithZero) {
  Supervisor s = make(3);
  s.start();
  ASSERT_EQ(spawner.spawned.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(s.finished());
    s.on_child_exit(pid_of(s, r), ExitStatus::exited(0));
  }
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 0);
  EXPECT_EQ(listener.finished, (std::vector<std::pair<int, int>>{{0, 0}}));
  EXPECT_TRUE(spawner.signals.empty());
  EXPECT_EQ(spawner.released.size(), 3u);
}

TEST_F(SupervisorTest, FirstFailureTearsDownTheOthersAtOnceAndGivesItsCode) {
  Supervisor s = make(3);
  s.start();
  s.on_child_exit(pid_of(s, 1), ExitStatus::exited(3));
  EXPECT_EQ(listener.first_failures, std::vector<int>{1});
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGTERM});
  EXPECT_EQ(spawner.signals_to(pid_of(s, 2)), std::vector<int>{SIGTERM});
  EXPECT_TRUE(spawner.signals_to(pid_of(s, 1)).empty());
  // The others die of the SIGTERM: they are stopped, not new root causes.
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGTERM));
  s.on_child_exit(pid_of(s, 2), ExitStatus::exited(1));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 3);
  EXPECT_EQ(s.root_cause()->rank, 1);
  EXPECT_EQ(s.workers()[0].state, WorkerState::kStopped);
  EXPECT_EQ(s.workers()[2].state, WorkerState::kStopped);
  EXPECT_EQ(listener.first_failures.size(), 1u);
}

TEST_F(SupervisorTest, WorkerKilledBySignalGives128PlusSignal) {
  Supervisor s = make(2);
  s.start();
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGKILL));
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGTERM));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGKILL);
}

TEST_F(SupervisorTest, StubbornWorkerGetsSigkillOnlyAfterTheGracePeriod) {
  Supervisor s = make(2);
  s.start();
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(1));
  ASSERT_TRUE(s.next_deadline().has_value());
  EXPECT_EQ(*s.next_deadline(), clock.now() + 5s);
  clock.advance(4900ms);
  s.on_tick();
  EXPECT_EQ(spawner.signals_to(pid_of(s, 1)), std::vector<int>{SIGTERM});
  clock.advance(100ms);
  s.on_tick();
  EXPECT_EQ(spawner.signals_to(pid_of(s, 1)), (std::vector<int>{SIGTERM, SIGKILL}));
  EXPECT_FALSE(s.next_deadline().has_value());
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGKILL));
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 1);
}

TEST_F(SupervisorTest, SignalIsForwardedAndExitCodeIs128PlusIt) {
  Supervisor s = make(2);
  s.start();
  s.on_signal(SIGINT);
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGINT});
  EXPECT_EQ(listener.signalling, std::vector<int>{SIGINT});
  EXPECT_EQ(spawner.signals_to(pid_of(s, 1)), std::vector<int>{SIGINT});
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGINT));
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGINT));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGINT);
  EXPECT_TRUE(listener.first_failures.empty());  // stopping is not a failure
}

TEST_F(SupervisorTest, SigtermWithAStopTimeoutLetsTheWorkersStopOnTheirOwn) {
  Supervisor s = make(2, 3, 30s);
  s.start();
  s.on_signal(SIGTERM);
  EXPECT_TRUE(spawner.signals.empty()) << "nobody is signalled while the ranks stop at a step boundary";
  EXPECT_TRUE(listener.signalling.empty()) << "so the ranks ignore a SIGTERM from outside (Slurm's)";
  EXPECT_EQ(listener.stop_requests, (std::vector<std::pair<int, int>>{{0, SIGTERM}}));
  ASSERT_TRUE(s.next_deadline().has_value());
  EXPECT_EQ(*s.next_deadline(), clock.now() + 30s);
  clock.advance(10s);
  s.on_tick();
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(0));
  s.on_child_exit(pid_of(s, 1), ExitStatus::exited(0));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 75) << "requeue: stopped cleanly, not finished";
  EXPECT_TRUE(listener.restarts.empty());
  EXPECT_TRUE(listener.stop_timeouts.empty());
}

TEST_F(SupervisorTest, ADrainAskedByAnotherNodeLetsTheWorkersStopOnTheirOwnWithoutASignal) {
  Supervisor s = make(2, 3);  // no stop timeout of its own: the requesting node's counts
  s.start();
  s.drain(20s);
  EXPECT_TRUE(spawner.signals.empty());
  EXPECT_EQ(listener.stop_requests, (std::vector<std::pair<int, int>>{{0, 0}}));
  ASSERT_TRUE(s.next_deadline().has_value());
  EXPECT_EQ(*s.next_deadline(), clock.now() + 20s);
  s.drain(20s);  // heard again: nothing new
  EXPECT_EQ(listener.stop_requests.size(), 1u);
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(0));
  s.on_child_exit(pid_of(s, 1), ExitStatus::exited(0));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 75);
  EXPECT_EQ(s.stop_signal(), 0);
}

TEST_F(SupervisorTest, WorkersThatDoNotStopInTimeAreSignalledAsForAnyStop) {
  Supervisor s = make(2, 0, 30s);
  s.start();
  s.on_signal(SIGTERM);
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(0));
  clock.advance(30s);
  s.on_tick();
  EXPECT_EQ(listener.stop_timeouts, std::vector<int>{0});
  EXPECT_EQ(listener.signalling, std::vector<int>{SIGTERM}) << "told before the signal, so the ranks obey it";
  EXPECT_EQ(spawner.signals_to(pid_of(s, 1)), std::vector<int>{SIGTERM});
  EXPECT_TRUE(spawner.signals_to(pid_of(s, 0)).empty());
  ASSERT_TRUE(s.next_deadline().has_value());
  EXPECT_EQ(*s.next_deadline(), clock.now() + 5s) << "then the usual grace before SIGKILL";
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGTERM));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGTERM);
}

TEST_F(SupervisorTest, ASecondSignalWhileStoppingStopsTheWorkersAtOnce) {
  Supervisor s = make(1, 0, 30s);
  s.start();
  s.on_signal(SIGTERM);
  s.on_signal(SIGINT);
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGINT});
  EXPECT_EQ(listener.signalling, std::vector<int>{SIGINT});
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGINT));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGINT);
}

TEST_F(SupervisorTest, AFailureWhileStoppingIsAFailure) {
  Supervisor s = make(2, 0, 30s);
  s.start();
  s.on_signal(SIGTERM);
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(3));
  EXPECT_EQ(spawner.signals_to(pid_of(s, 1)), std::vector<int>{SIGTERM});
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGTERM));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGTERM) << "ddplaunch was signalled: 128+N, as without a stop timeout";
  EXPECT_EQ(listener.first_failures, std::vector<int>{0});
}

TEST_F(SupervisorTest, WithoutAStopTimeoutSigtermIsForwardedAtOnce) {
  Supervisor s = make(1);
  s.start();
  s.on_signal(SIGTERM);
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGTERM});
  EXPECT_TRUE(listener.stop_requests.empty());
}

TEST_F(SupervisorTest, SecondSignalEscalatesToSigkillWithoutWaiting) {
  Supervisor s = make(1);
  s.start();
  s.on_signal(SIGTERM);
  s.on_signal(SIGTERM);
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), (std::vector<int>{SIGTERM, SIGKILL}));
}

TEST_F(SupervisorTest, SignalPreventsRestart) {
  Supervisor s = make(2, /*max_restarts=*/3);
  s.start();
  s.on_signal(SIGHUP);
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(1));
  s.on_child_exit(pid_of(s, 1), ExitStatus::exited(1));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 128 + SIGHUP);
  EXPECT_TRUE(listener.restarts.empty());
}

TEST_F(SupervisorTest, RestartsTheWholeGroupWhileTheBudgetLasts) {
  Supervisor s = make(2, /*max_restarts=*/2);
  s.start();
  for (int attempt = 0; attempt < 3; ++attempt) {
    ASSERT_EQ(s.attempt(), attempt);
    ASSERT_EQ(spawner.spawned.size(), static_cast<size_t>(2 * (attempt + 1)));
    EXPECT_EQ(spawner.spawned.back().env.at(0), "TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt));
    s.on_child_exit(pid_of(s, 1), ExitStatus::exited(7));
    s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGTERM));
  }
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 7);
  EXPECT_EQ(listener.attempts, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(listener.restarts, (std::vector<int>{1, 2}));
  EXPECT_EQ(listener.ended, (std::vector<int>{0, 1, 2}));
}

TEST_F(SupervisorTest, RestartedGroupThatSucceedsEndsWithZero) {
  Supervisor s = make(1, /*max_restarts=*/1);
  s.start();
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(1));
  ASSERT_FALSE(s.finished());
  s.on_child_exit(pid_of(s, 0), ExitStatus::exited(0));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 0);
}

TEST_F(SupervisorTest, StaleAndUnknownPidsAreIgnored) {
  Supervisor s = make(1, /*max_restarts=*/1);
  s.start();
  const pid_t first = pid_of(s, 0);
  s.on_child_exit(first, ExitStatus::exited(1));  // restarts
  s.on_child_exit(first, ExitStatus::exited(1));  // the old pid again
  s.on_child_exit(424242, ExitStatus::exited(1));
  EXPECT_FALSE(s.finished());
  EXPECT_EQ(s.attempt(), 1);
}

TEST_F(SupervisorTest, ForkFailureCountsAsThatRankFailing) {
  // Rank 0 starts; the fork for rank 1 fails.
  struct FailAfterFirst final : SupervisorListener {
    explicit FailAfterFirst(testing::FakeSpawner& sp) : spawner(sp) {}
    void on_worker_started(const WorkerRecord&, const SpawnedProcess&) override { spawner.fail_next_spawns = 1; }
    testing::FakeSpawner& spawner;
  } failing(spawner);
  SupervisorConfig config;
  config.plan_attempt = [](int) {
    return std::vector<WorkerSpec>{{0, 0, {{"w"}, {}, {}}}, {1, 1, {{"w"}, {}, {}}}, {2, 2, {{"w"}, {}, {}}}};
  };
  LocalArbiter no_restarts(0);
  Supervisor s(std::move(config), spawner, clock, failing, no_restarts);
  s.start();
  ASSERT_EQ(s.workers().size(), 2u);
  EXPECT_EQ(s.root_cause()->rank, 1);
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGTERM});
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGTERM));
  ASSERT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 127);
}

TEST_F(SupervisorTest, StopAttemptTearsDownWithoutARootCauseAndAsksTheArbiter) {
  struct Recording final : AttemptArbiter {
    Verdict conclude(const AttemptSummary& s) override {
      seen.push_back(s);
      return Verdict::finish(9);
    }
    std::vector<AttemptSummary> seen;
  } recording;
  SupervisorConfig config;
  config.plan_attempt = [](int) { return std::vector<WorkerSpec>{{0, 0, {{"w"}, {}, {}}}, {1, 1, {{"w"}, {}, {}}}}; };
  Supervisor s(std::move(config), spawner, clock, listener, recording);
  s.start();
  s.stop_attempt();
  EXPECT_EQ(spawner.signals_to(pid_of(s, 0)), std::vector<int>{SIGTERM});
  s.on_child_exit(pid_of(s, 0), ExitStatus::killed(SIGTERM));
  s.on_child_exit(pid_of(s, 1), ExitStatus::killed(SIGTERM));
  ASSERT_TRUE(s.finished());
  ASSERT_EQ(recording.seen.size(), 1u);
  EXPECT_TRUE(recording.seen[0].stop_requested);
  EXPECT_EQ(recording.seen[0].root_cause, nullptr);
  EXPECT_TRUE(listener.first_failures.empty());
  EXPECT_EQ(s.exit_code(), 9);
}

TEST_F(SupervisorTest, PlanErrorFinishesWithItsCodeWithoutSpawning) {
  SupervisorConfig config;
  config.plan_attempt = [](int) -> std::vector<WorkerSpec> { throw PlanError(125, "rendezvous timed out"); };
  LocalArbiter arbiter0(0);
  Supervisor s(std::move(config), spawner, clock, listener, arbiter0);
  s.start();
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.exit_code(), 125);
  EXPECT_TRUE(spawner.spawned.empty());
}

TEST_F(SupervisorTest, NoDeadlineWhileAllIsWell) {
  Supervisor s = make(2);
  s.start();
  EXPECT_FALSE(s.next_deadline().has_value());
  s.on_tick();
  EXPECT_TRUE(spawner.signals.empty());
}

}  // namespace
}  // namespace ddp
