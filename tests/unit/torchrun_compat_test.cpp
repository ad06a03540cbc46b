// The pieces behind torchrun compatibility: the console prefix template, the
// stop signals, --duplicate-*-filters, the torchrun options that are refused or
// have no effect, the "Root Cause" summary, and the job id nodes agree on.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli/torchrun_only_options.h"
#include "cli/usage_error.h"
#include "output/line_prefix.h"
#include "process/stop_signals.h"
#include "report/root_cause_summary.h"
#include "temp_dir.h"
#include "topology/launch_plan.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// ------------------------------------------------------------ line prefix

TEST(LinePrefix, ExpandsTorchrunsPlaceholdersLikeSafeSubstitute) {
  const LinePrefixFields f{5, 1, "trainer", "node7"};
  EXPECT_EQ(expand_line_prefix("[${role_name}${local_rank}]:", f), "[trainer1]:");
  EXPECT_EQ(expand_line_prefix("${rank}|$local_rank|$hostname ", f), "5|1|node7 ");
  EXPECT_EQ(expand_line_prefix("cost $$5 ${rank}", f), "cost $5 5");
  // unknown or broken placeholders stay as written
  EXPECT_EQ(expand_line_prefix("${nope} $x ${rank", f), "${nope} $x ${rank");
  EXPECT_EQ(expand_line_prefix("$", f), "$");
  EXPECT_EQ(expand_line_prefix("$ranks", f), "$ranks");
}

// ------------------------------------------------------------ stop signals

std::vector<int> signals_of(const std::string& text) {
  std::string why;
  const auto s = parse_signal_list(text, why);
  EXPECT_TRUE(s) << why;
  return s.value_or(std::vector<int>{});
}

std::string refusal_of(const std::string& text) {
  std::string why;
  EXPECT_FALSE(parse_signal_list(text, why)) << text;
  return why;
}

TEST(StopSignals, TorchrunsDefaultAndOtherSpellings) {
  EXPECT_EQ(signals_of("SIGTERM,SIGINT,SIGHUP,SIGQUIT"), (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
  EXPECT_EQ(signals_of("term, usr1 ,SIGUSR2"), (std::vector<int>{SIGTERM, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(signals_of("15,15,SIGTERM"), std::vector<int>{SIGTERM});
  EXPECT_EQ(stop_signals(), (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
}

TEST(StopSignals, RefusesWhatCannotOrMustNotBeHandled) {
  EXPECT_EQ(refusal_of("SIGTERM,SIGBOGUS"), "'SIGBOGUS' is not a signal");
  EXPECT_THAT(refusal_of("SIGKILL"), HasSubstr("SIGKILL cannot be handled"));
  EXPECT_THAT(refusal_of("STOP"), HasSubstr("SIGSTOP cannot be handled"));
  EXPECT_THAT(refusal_of("SIGCHLD"), HasSubstr("SIGCHLD"));
  EXPECT_EQ(refusal_of("999"), "'999' is not a signal");
}

// ----------------------------------------------------- duplicate filters

TEST(DuplicateFilters, CommaSeparatedWithDoubleCommaForAComma) {
  EXPECT_EQ(parse_duplicate_filters("apple,orange"), (std::vector<std::string>{"apple", "orange"}));
  EXPECT_EQ(parse_duplicate_filters("a,,b,c"), (std::vector<std::string>{"a,b", "c"}));
  EXPECT_EQ(parse_duplicate_filters(""), std::vector<std::string>{});
  EXPECT_EQ(parse_duplicate_filters(",x,"), std::vector<std::string>{"x"});
}

// ------------------------------------------------ torchrun-only options

TEST(TorchrunOnlyOptions, DefaultsSayNothing) { EXPECT_TRUE(check_torchrun_only_options(LaunchOptions{}, 0).empty()); }

TEST(TorchrunOnlyOptions, OptionsWithoutEffectSayWhyOnce) {
  LaunchOptions o;
  o.monitor_interval_s = 5;
  o.start_method = "fork";
  o.rdzv_backend = "c10d";
  const auto notes = check_torchrun_only_options(o, 0);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_THAT(notes[0], HasSubstr("--monitor-interval=5 has no effect"));
  EXPECT_THAT(notes[1], HasSubstr("--start-method=fork has no effect"));
}

TEST(TorchrunOnlyOptions, WhatNeedsAMissingPieceIsRefusedByName) {
  LaunchOptions o;
  o.logs_specs = "my_plugin";
  EXPECT_THROW(check_torchrun_only_options(o, 0), UsageError);
  o = LaunchOptions{};
  o.rdzv_backend = "etcd";
  try {
    check_torchrun_only_options(o, 0);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--rdzv-backend=etcd needs an etcd server"));
  }
  o = LaunchOptions{};
  o.numa_binding = "node";
  EXPECT_THROW(check_torchrun_only_options(o, 0), UsageError);
  EXPECT_NO_THROW(check_torchrun_only_options(o, 8));
}

// -------------------------------------------------- root cause summary

TEST(RootCauseSummary, HasTheShapeOfTorchrunsChildFailedError) {
  RankFailure root;
  root.time = std::chrono::system_clock::from_time_t(1'800'000'000);
  root.host = "node3";
  root.rank = 5;
  root.local_rank = 1;
  root.pid = 4242;
  root.exit_code = 3;
  const std::string text = format_root_cause_summary("train.py", root, {});
  EXPECT_EQ(text.rfind(std::string(60, '=') + "\ntrain.py FAILED\n" + std::string(60, '-') + "\nFailures:\n  "
                                                                                               "<NO_OTHER_FAILURES>\n",
                       0),
            0u)
      << text;
  EXPECT_THAT(text, HasSubstr("Root Cause (first observed failure):\n[0]:\n  time      : "));
  EXPECT_THAT(text, HasSubstr("  host      : node3\n  rank      : 5 (local_rank: 1)\n  exitcode  : 3 (pid: 4242)\n"
                              "  error_file: <N/A>\n  traceback : not recorded"));
}

TEST(RootCauseSummary, SignalsAndErrorFilesAndOtherFailures) {
  RankFailure root;
  root.rank = 0;
  root.pid = 10;
  root.signal = SIGKILL;
  RankFailure other;
  other.rank = 1;
  other.pid = 11;
  other.exit_code = 1;
  other.error_file = "/logs/rank_1/error.json";
  other.error_file_contents = nlohmann::json::parse(
      R"({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\"\nValueError: x\n"}}})");
  const std::string text = format_root_cause_summary("t.py", root, {other});
  EXPECT_THAT(text, HasSubstr("exitcode  : -9 (pid: 10)"));
  EXPECT_THAT(text, HasSubstr("traceback : Signal 9 (SIGKILL) received by PID 10"));
  EXPECT_THAT(text, HasSubstr("Failures:\n[1]:\n"));
  EXPECT_THAT(text, HasSubstr("  error_file: /logs/rank_1/error.json\n  traceback : Traceback (most recent call "
                              "last):\n    File \"t.py\"\n  ValueError: x\n"));
}

TEST(RootCauseSummary, ACrashShowsThePythonStackAtTheSignal) {
  RankFailure root;
  root.rank = 1;
  root.pid = 20;
  root.signal = SIGSEGV;
  root.fatal_stack = "Fatal Python error: Segmentation fault\n\nStack (most recent call first):\n"
                     "  File \"/tmp/train.py\", line 4 in load_batch";
  EXPECT_THAT(format_root_cause_summary("train.py", root, {}),
              HasSubstr("  traceback : Signal 11 (SIGSEGV) received by PID 20\n"
                        "  Fatal Python error: Segmentation fault\n  \n  Stack (most recent call first):\n"
                        "    File \"/tmp/train.py\", line 4 in load_batch\n"));
}

TEST(RootCauseSummary, ARanksExceptionAfterAChildCrashedIsFollowedByTheChildsStack) {
  RankFailure root;
  root.rank = 1;
  root.pid = 20;
  root.exit_code = 1;
  root.error_file_contents = nlohmann::json::parse(
      R"({"message": {"message": "RuntimeError: x", "extraInfo": {"py_callstack": )"
      R"("Traceback (most recent call last):\nRuntimeError: DataLoader worker (pid(s) 21) exited unexpectedly\n"}}})");
  root.fatal_stack = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
                     "  File \"/tmp/train.py\", line 9 in __getitem__";
  EXPECT_THAT(format_root_cause_summary("train.py", root, {}),
              HasSubstr("  RuntimeError: DataLoader worker (pid(s) 21) exited unexpectedly\n"
                        "  \n"
                        "  Python stack at a child process's fatal signal (fatal_stack.log):\n"
                        "  Fatal Python error: Segmentation fault\n"));
}

TEST(RootCauseSummary, ARootCauseOnAnotherNodeListsThisNodesFailuresAsWhatFollowed) {
  RankFailure local;
  local.rank = 0;
  local.pid = 10;
  local.exit_code = 1;
  const std::string text = format_remote_root_cause_summary(
      "t.py", "node 1", "node 1 (b) went silent: no agent heartbeat for 1.5 s\nsecond line", {local});
  EXPECT_THAT(text, HasSubstr("t.py FAILED\n"));
  EXPECT_THAT(text, HasSubstr("Failures on this node (after the root cause):\n[1]:\n"));
  EXPECT_THAT(text, HasSubstr("  rank      : 0 (local_rank: 0)\n  exitcode  : 1 (pid: 10)\n"));
  EXPECT_THAT(text, HasSubstr("Root Cause (the job's first failure, on node 1):\n  node 1 (b) went silent: no agent "
                              "heartbeat for 1.5 s\n  second line\n"));
  EXPECT_THAT(text, Not(HasSubstr("[0]:")));
}

// ------------------------------------------------ the job id nodes agree on

LaunchPlan plan_of(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  std::vector<const char*> argv{"ddplaunch"};
  for (const auto& a : args) argv.push_back(a.c_str());
  const auto o = parse_launch_options(static_cast<int>(argv.size()), argv.data());
  return resolve_launch_plan(*o, [env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it != env.end()) return it->second;
    if (std::string(name) == "PATH") return std::string("/usr/bin:/bin");
    return std::nullopt;
  });
}

// The usage error's message, or "accepted".
std::string plan_error(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  try {
    plan_of(std::move(args), std::move(env));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(JobId, NodesStartedByHandWithoutAnIdShareTorchrunsDefault) {
  const auto a = plan_of({"--nnodes=2", "--node-rank=1", "--rdzv-endpoint=192.0.2.1:29400", "--log-dir=/l", "true"});
  const auto b = plan_of({"--nnodes=2", "--node-rank=1", "--rdzv-endpoint=192.0.2.1:29400", "--log-dir=/l", "true"});
  EXPECT_EQ(a.job_id, "none");
  EXPECT_EQ(b.job_id, "none");
  EXPECT_TRUE(a.job_id_defaulted);
  EXPECT_EQ(a.token, "none");
  // each run still writes to a folder of its own
  EXPECT_EQ(a.job_log_dir.parent_path(), "/l");
  EXPECT_EQ(a.job_log_dir.filename().string().rfind("none-", 0), 0u);
  EXPECT_NE(a.job_log_dir, b.job_log_dir);
}

TEST(JobId, AGivenIdIsTheFolderAndASingleNodeGetsAFreshOne) {
  const auto named = plan_of({"--nnodes=2", "--node-rank=1", "--rdzv-endpoint=192.0.2.1", "--rdzv-id=exp7",
                              "--log-dir=/l", "true"});
  EXPECT_EQ(named.job_id, "exp7");
  EXPECT_FALSE(named.job_id_defaulted);
  EXPECT_EQ(named.job_log_dir, "/l/exp7");
  const auto single = plan_of({"--log-dir=/l", "true"});
  EXPECT_EQ(single.job_id.rfind("ddp-", 0), 0u);
  EXPECT_EQ(single.job_log_dir, "/l/" + single.job_id);
  EXPECT_EQ(plan_of({"true"}, {{"PET_RDZV_ID", "from-env"}}).job_id, "from-env");
}

TEST(LaunchPlanTorchrun, ElasticNodeCountsAndLastCall) {
  const auto p = plan_of({"--nnodes=1:3", "--rdzv-endpoint=192.0.2.1", "--rdzv-conf=last_call_timeout=2", "true"});
  EXPECT_EQ(p.min_nnodes, 1);
  EXPECT_EQ(p.nnodes, 3);
  EXPECT_EQ(p.last_call_timeout, std::chrono::seconds(2));
  EXPECT_THROW(plan_of({"--nnodes=3:1", "true"}), UsageError);
  EXPECT_THROW(plan_of({"--nnodes=0:1", "true"}), UsageError);
}

TEST(LaunchPlanTorchrun, RdzvConfTimeoutsOutOfRangeAreRefused) {
  // "1e300" and "inf" overflowed the conversion to nanoseconds (undefined
  // behaviour); "1e-12" became a timeout of no time at all.
  for (const char* conf : {"--rdzv-conf=join_timeout=1e300", "--rdzv-conf=node_timeout=inf",
                           "--rdzv-conf=heartbeat_interval=1e-12", "--rdzv-conf=last_call_timeout=nan"}) {
    EXPECT_THROW(plan_of({conf, "true"}), UsageError) << conf;
  }
  EXPECT_EQ(plan_of({"--rdzv-conf=join_timeout=1e9", "true"}).join_timeout, std::chrono::seconds(1'000'000'000));
  EXPECT_EQ(plan_of({"--rdzv-conf=node_timeout=1e-9", "true"}).node_timeout, std::chrono::nanoseconds(1));
}

TEST(LaunchPlanTorchrun, SecondsOptionsOutOfRangeAreRefused) {
  // The same conversion for the command line's seconds: a usage error, not undefined behaviour.
  for (const char* option : {"--hang-timeout=1e300", "--stop-timeout=inf", "--shutdown-grace=1e10",
                             "--heartbeat-interval=nan", "--sync-wait=1e300"}) {
    EXPECT_THROW(plan_of({option, "true"}), UsageError) << option;
  }
  EXPECT_EQ(plan_of({"--hang-timeout=1e9", "true"}).hang_timeout, std::chrono::seconds(1'000'000'000));
  EXPECT_EQ(plan_of({"--stop-timeout=0", "true"}).stop_timeout, Duration::zero());
}

TEST(LaunchPlanFailover, AnEndpointListGivesTheLaterEndpointsInOrderWithTheFirstsPortByDefault) {
  const auto p = plan_of({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1:29400,192.0.2.2,[fd00::3]:7000",
                          "true"});
  EXPECT_EQ(p.rdzv_host, "192.0.2.1");
  EXPECT_EQ(p.rdzv_port, 29400);
  ASSERT_EQ(p.later_endpoints.size(), 2u);
  EXPECT_EQ(p.later_endpoints[0].host, "192.0.2.2");
  EXPECT_EQ(p.later_endpoints[0].port, 29400);
  EXPECT_EQ(p.later_endpoints[1].host, "fd00::3");
  EXPECT_EQ(p.later_endpoints[1].port, 7000);
  EXPECT_TRUE(plan_of({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1", "true"}).later_endpoints.empty());
}

TEST(LaunchPlanFailover, ABadListIsRefusedByName) {
  auto message = [](std::vector<std::string> args) {
    try {
      plan_of(std::move(args));
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(message({"--nnodes=3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1,192.0.2.2", "true"}),
              HasSubstr("needs an elastic job (--nnodes=MIN:MAX"));
  EXPECT_THAT(message({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1,,192.0.2.2", "true"}),
              HasSubstr("an empty entry in the list"));
  EXPECT_THAT(message({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1,", "true"}),
              HasSubstr("an empty entry in the list"));
  EXPECT_THAT(message({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1,192.0.2.1:29400", "true"}),
              HasSubstr("'192.0.2.1:29400' is listed twice"));
  EXPECT_THAT(message({"--nnodes=1:3", "--node-rank=1", "--rdzv-endpoint=192.0.2.1,192.0.2.2:x", "true"}),
              HasSubstr("--rdzv-endpoint entry '192.0.2.2:x'"));
}

TEST(LaunchPlanTorchrun, LegacyLocalRankArgumentGoesRightAfterTheProgram) {
  EXPECT_EQ(plan_of({"--legacy-local-rank-arg", "--no-python", "true", "a", "b"}).local_rank_arg_at, 1);
  EXPECT_EQ(plan_of({"true"}).local_rank_arg_at, -1);
}

TEST(LaunchPlanTorchrun, SignalsToHandleAreParsedOrRefused) {
  EXPECT_EQ(plan_of({"--signals-to-handle=SIGUSR1,SIGTERM", "true"}).stop_signals,
            (std::vector<int>{SIGUSR1, SIGTERM}));
  EXPECT_THROW(plan_of({"--signals-to-handle=SIGKILL", "true"}), UsageError);
}

TEST(LaunchPlanTorchrun, PrefixTemplateFromTheOptionOrTorchelasticsVariable) {
  EXPECT_EQ(plan_of({"true"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "[${rank}]"}}).log_line_prefix_template,
            "[${rank}]");
  EXPECT_EQ(plan_of({"--log-line-prefix-template=<$rank>", "true"}, {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "x"}})
                .log_line_prefix_template,
            "<$rank>");
}

TEST(LaunchPlanTorchrun, SecondsThatRoundToNoTimeAreRefusedWhereTimeMustPass) {
  // "1e-12" passed the check of a positive number and became a heartbeat every 0 ns.
  EXPECT_THROW(plan_of({"--heartbeat-interval=1e-12", "true"}), UsageError);
  EXPECT_THROW(plan_of({"--hang-timeout=1e-12", "true"}), UsageError);
  EXPECT_EQ(plan_of({"--heartbeat-interval=1e-9", "true"}).heartbeat_interval, std::chrono::nanoseconds(1));
  EXPECT_EQ(plan_of({"--shutdown-grace=1e-12", "true"}).shutdown_grace, Duration::zero());  // 0 is allowed there
}

TEST(LaunchPlanTorchrun, EmptySignalListAndMasterAddrAreRefused) {
  // "--signals-to-handle=" left the job with no signal that stops it.
  EXPECT_THAT(plan_error({"--signals-to-handle=", "true"}), HasSubstr("--signals-to-handle '': names no signal"));
  EXPECT_THAT(plan_error({"--signals-to-handle= ,", "true"}), HasSubstr("names no signal"));
  EXPECT_THAT(plan_error({"--master-addr=", "true"}), HasSubstr("--master-addr is empty"));
}

TEST(JobId, AnIdThatCannotNameAFolderOnOneLineIsRefusedNamingItsOrigin) {
  EXPECT_THAT(plan_error({"--rdzv-id=job\n2", "true"}), HasSubstr("--rdzv-id 'job\\n2' holds a control character"));
  EXPECT_THAT(plan_error({"--rdzv-id=" + std::string(201, 'x'), "true"}),
              HasSubstr("is 201 characters long, more than the 200"));
  EXPECT_EQ(plan_of({"--rdzv-id=" + std::string(200, 'x'), "--log-dir=/l", "true"}).job_id, std::string(200, 'x'));
  EXPECT_THAT(plan_error({"true"}, {{"PET_RDZV_ID", "a/b"}}), HasSubstr("PET_RDZV_ID 'a/b' cannot be used"));
  EXPECT_THAT(plan_error({"--rdzv-id=a/b", "true"}, {{"PET_RDZV_ID", "ok"}}), HasSubstr("--rdzv-id 'a/b'"));
}

TEST(LaunchPlanLogDir, AFileInThePlaceOfAFolderIsRefusedAndNothingIsCreated) {
  // It used to fail after the coordinator started and the job was registered: exit 70.
  ddp::testing::TempDir tmp("ddp-logdir-");
  const auto file = tmp.path() / "train.py";
  std::ofstream(file) << "print()\n";
  EXPECT_THAT(plan_error({"--log-dir=" + (file / "logs").string(), "true"}),
              HasSubstr("--log-dir '" + (file / "logs").string() + "': '" + file.string() + "' is not a folder"));
  EXPECT_THAT(plan_error({"--log-dir=" + file.string(), "true"}), HasSubstr("is not a folder"));
  EXPECT_THAT(plan_error({"true"}, {{"TMPDIR", file.string()}}), HasSubstr("the default log folder"));
  // a folder still to be made is fine, and is not made here
  const auto later = tmp.path() / "a" / "b";
  EXPECT_EQ(plan_of({"--log-dir=" + later.string(), "--rdzv-id=j", "true"}).job_log_dir, later / "j");
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "a"));
}

TEST(LaunchPlanTorchrun, AValueFromAPetVariableIsRefusedNamingIt) {
  setenv("PET_TEE", "9", 1);
  const std::string tee = plan_error({"true"});
  unsetenv("PET_TEE");
  EXPECT_EQ(tee, "--tee: '9' is not 0, 1, 2 or 3 (--tee is set by PET_TEE)");
  setenv("PET_LOCAL_RANKS_FILTER", "0,", 1);
  const std::string filter = plan_error({"true"});
  const std::string flag = plan_error({"--local-ranks-filter=0", "true"});
  unsetenv("PET_LOCAL_RANKS_FILTER");
  EXPECT_THAT(filter, HasSubstr("(--local-ranks-filter is set by PET_LOCAL_RANKS_FILTER)"));
  EXPECT_EQ(flag, "accepted");
}

}  // namespace
}  // namespace ddp
