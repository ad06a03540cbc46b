#include "cli/launch_options.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "cli/usage_error.h"

namespace ddp {
namespace {

std::optional<LaunchOptions> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "ddplaunch");
  return parse_launch_options(static_cast<int>(args.size()), args.data());
}

TEST(LaunchOptions, DashAndUnderscoreSpellingsAndBothValueForms) {
  EXPECT_EQ(parse({"--nproc-per-node=4", "prog"})->nproc_per_node, "4");
  EXPECT_EQ(parse({"--nproc_per_node", "3", "prog"})->nproc_per_node, "3");
  EXPECT_EQ(parse({"--master_port=1234", "prog"})->master_port, 1234);
  EXPECT_EQ(parse({"--max-restarts", "2", "prog"})->max_restarts, 2);
  EXPECT_TRUE(parse({"--no_python", "prog"})->no_python);
  EXPECT_TRUE(parse({"-m", "pkg.mod"})->module);
}

TEST(LaunchOptions, EverythingAfterProgramBelongsToIt) {
  const auto o = parse({"--nproc-per-node=2", "prog", "--nproc-per-node=9", "-m", "x"});
  EXPECT_EQ(o->nproc_per_node, "2");
  EXPECT_FALSE(o->module);
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "--nproc-per-node=9", "-m", "x"}));
}

TEST(LaunchOptions, DoubleDashSeparatesProgram) {
  EXPECT_EQ(parse({"--", "prog", "a"})->command, (std::vector<std::string>{"prog", "a"}));
}

TEST(LaunchOptions, PetEnvironmentGivesDefaultsAndFlagsWin) {
  setenv("PET_NPROC_PER_NODE", "5", 1);
  setenv("PET_MAX_RESTARTS", "1", 1);
  EXPECT_EQ(parse({"prog"})->nproc_per_node, "5");
  EXPECT_EQ(parse({"--nproc-per-node=2", "prog"})->nproc_per_node, "2");
  EXPECT_EQ(parse({"prog"})->max_restarts, 1);
  unsetenv("PET_NPROC_PER_NODE");
  unsetenv("PET_MAX_RESTARTS");
}

TEST(LaunchOptions, BadUsageIsAUsageError) {
  EXPECT_THROW(parse({}), UsageError);
  EXPECT_THROW(parse({"--nproc-per-node=2"}), UsageError);
  EXPECT_THROW(parse({"--bogus", "prog"}), UsageError);
  EXPECT_THROW(parse({"--master-port=70000", "prog"}), UsageError);
  EXPECT_THROW(parse({"--master-port=abc", "prog"}), UsageError);
  EXPECT_THROW(parse({"--max-restarts=-1", "prog"}), UsageError);
  EXPECT_THROW(parse({"--shutdown-grace=-2", "prog"}), UsageError);
}

TEST(LaunchOptions, UnknownOptionMessageNamesIt) {
  try {
    parse({"--nprocs=2", "prog"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--nprocs=2"), std::string::npos) << e.what();
  }
}

std::string usage_error(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// Every option of torchrun 2.x (torch/distributed/run.py), as users write them.
TEST(LaunchOptions, EveryTorchrunOptionIsAccepted) {
  const auto o = parse({"--nnodes=1:2", "--nproc-per-node=2", "--rdzv-backend=c10d", "--rdzv-endpoint=h:29400",
                        "--rdzv-id=exp", "--rdzv-conf=join_timeout=60", "--standalone", "--max-restarts=1",
                        "--monitor-interval=1", "--start-method=spawn", "--event-log-handler=null", "--role=trainer",
                        "--no-python", "--run-path", "--log-dir=/tmp/l", "-r", "3", "-t", "0:1",
                        "--local-ranks-filter=0", "--node-rank=0", "--master-addr=h", "--master-port=29500",
                        "--local-addr=10.0.0.1", "--signals-to-handle=SIGTERM,SIGUSR1",
                        "--duplicate-stdout-filters=loss", "--duplicate-stderr-filters=nccl",
                        "--virtual-local-rank", "--shutdown-timeout=30", "prog", "--lr", "1"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->nnodes, "1:2");
  EXPECT_EQ(o->rdzv_backend, "c10d");
  EXPECT_EQ(o->monitor_interval_s, 1.0);
  EXPECT_EQ(o->redirects, "3");
  EXPECT_EQ(o->tee, "0:1");
  EXPECT_TRUE(o->run_path);
  EXPECT_TRUE(o->virtual_local_rank);
  EXPECT_EQ(o->signals_to_handle, "SIGTERM,SIGUSR1");
  EXPECT_EQ(o->duplicate_stdout_filters, "loss");
  EXPECT_EQ(o->shutdown_grace_s, 30.0);
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "--lr", "1"}));
  // and their underscore spellings
  const auto u = parse({"--nproc_per_node=2", "--rdzv_backend=static", "--monitor_interval=5", "--start_method=fork",
                        "--event_log_handler=console", "--run_path", "--local_ranks_filter=0",
                        "--duplicate_stdout_filters=a", "--virtual_local_rank", "--signals_to_handle=SIGINT",
                        "--shutdown_timeout=2", "--use_env", "prog"});
  ASSERT_TRUE(u);
  EXPECT_EQ(u->start_method, "fork");
  EXPECT_TRUE(u->virtual_local_rank);
}

TEST(LaunchOptions, ShortRedirectsAndTeeTakeAttachedValues) {
  EXPECT_EQ(parse({"-r3", "prog"})->redirects, "3");
  EXPECT_EQ(parse({"-t2", "prog"})->tee, "2");
}

TEST(LaunchOptions, UnambiguousPrefixesAreExpandedAsArgparseDoes) {
  EXPECT_EQ(parse({"--redirect=3", "prog"})->redirects, "3");
  EXPECT_EQ(parse({"--nproc", "2", "prog"})->nproc_per_node, "2");  // the value is the next word
  EXPECT_EQ(parse({"--nproc_per=3", "prog"})->nproc_per_node, "3");
  EXPECT_EQ(parse({"--max-r=2", "prog"})->max_restarts, 2);
  EXPECT_TRUE(parse({"--virtual", "prog"})->virtual_local_rank);
  // the program's own options are its own
  EXPECT_EQ(parse({"prog", "--redirect=3"})->command, (std::vector<std::string>{"prog", "--redirect=3"}));
  EXPECT_EQ(parse({"--", "prog", "--redirect=3"})->command, (std::vector<std::string>{"prog", "--redirect=3"}));
}

TEST(LaunchOptions, AmbiguousPrefixesNameTheCandidates) {
  const std::string why = usage_error({"--d=x", "prog"});
  EXPECT_NE(why.find("ambiguous option: --d could match --duplicate-stdout-filters"), std::string::npos) << why;
  EXPECT_NE(why.find("--duplicate-stderr-filters"), std::string::npos) << why;
  EXPECT_NE(usage_error({"--rdzv=x", "prog"}).find("ambiguous"), std::string::npos);
}

TEST(LaunchOptions, TorchrunChoicesAreChecked) {
  EXPECT_NE(usage_error({"--start-method=thread", "prog"}).find("--start-method"), std::string::npos);
  EXPECT_NE(usage_error({"--event-log-handler=file", "prog"}).find("--event-log-handler"), std::string::npos);
  EXPECT_NE(usage_error({"--rdzv-backend=zookeeper", "prog"}).find("--rdzv-backend"), std::string::npos);
  EXPECT_NE(usage_error({"--numa-binding=everywhere", "prog"}).find("--numa-binding"), std::string::npos);
  EXPECT_NE(usage_error({"--monitor-interval=0", "prog"}).find("--monitor-interval"), std::string::npos);
}

TEST(LaunchOptions, PetVariablesSetTorchrunsFlags) {
  setenv("PET_VIRTUAL_LOCAL_RANK", "1", 1);
  setenv("PET_RUN_PATH", "1", 1);
  setenv("PET_START_METHOD", "forkserver", 1);
  const auto o = parse({"prog"});
  unsetenv("PET_VIRTUAL_LOCAL_RANK");
  unsetenv("PET_RUN_PATH");
  unsetenv("PET_START_METHOD");
  EXPECT_TRUE(o->virtual_local_rank);
  EXPECT_TRUE(o->run_path);
  EXPECT_EQ(o->start_method, "forkserver");
}

TEST(LaunchOptions, AnEmptyValueAfterTheEqualsSignIsTheValueNotTheProgram) {
  // CLI11 took the next argument as the value of "--role=": PROGRAM became
  // the role and its first argument ran as the program.
  const auto o = parse({"--role=", "prog", "a"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->role, "");
  EXPECT_EQ(o->command, (std::vector<std::string>{"prog", "a"}));
  EXPECT_EQ(parse({"--signals-to-handle=", "prog"})->signals_to_handle, "");
  EXPECT_EQ(parse({"--log_dir=", "prog"})->command, (std::vector<std::string>{"prog"}));
  EXPECT_EQ(parse({"--nproc=", "prog"})->nproc_per_node, "");  // an abbreviation too
  // a number cannot be empty
  EXPECT_EQ(usage_error({"--master-port=", "prog"}), "--master-port= has no value: expected a number");
  EXPECT_NE(usage_error({"--max-restarts=", "prog"}).find("--max-restarts="), std::string::npos);
  EXPECT_NE(usage_error({"--hang-timeout=", "prog"}).find("--hang-timeout="), std::string::npos);
}

TEST(LaunchOptions, NumberChecksSayWhatIsWrongInOneShortLine) {
  // CLI11's own checks spelled out the largest double, 309 digits.
  EXPECT_EQ(usage_error({"--max-restarts=-1", "prog"}), "--max-restarts: '-1' is not a number >= 0");
  EXPECT_EQ(usage_error({"--node-rank=first", "prog"}), "--node-rank: 'first' is not a number >= 0");
  EXPECT_EQ(usage_error({"--heartbeat-interval=0", "prog"}), "--heartbeat-interval: '0' is not a number > 0");
  EXPECT_EQ(usage_error({"--hang-timeout=nan", "prog"}), "--hang-timeout: 'nan' is not a number > 0");
  EXPECT_EQ(parse({"--shutdown-grace=0", "prog"})->shutdown_grace_s, 0);
  EXPECT_EQ(parse({"--monitor-interval=0.5", "prog"})->monitor_interval_s, 0.5);
}

TEST(LaunchOptions, AValueFromTheEnvironmentIsRefusedNamingTheVariable) {
  setenv("PET_MAX_RESTARTS", "abc", 1);
  setenv("DDPLAUNCH_GROW", "later", 1);
  const std::string restarts = usage_error({"prog"});
  const std::string grow = usage_error({"--max-restarts=1", "prog"});
  const std::string flag_wins = usage_error({"--max-restarts=1", "--grow=now", "prog"});
  unsetenv("PET_MAX_RESTARTS");
  unsetenv("DDPLAUNCH_GROW");
  EXPECT_EQ(restarts, "--max-restarts: 'abc' is not a number >= 0 (--max-restarts is set by PET_MAX_RESTARTS)");
  EXPECT_NE(grow.find("(--grow is set by DDPLAUNCH_GROW)"), std::string::npos) << grow;
  EXPECT_EQ(flag_wins, "");  // the command line's values were used, not the variables'
}

TEST(LaunchOptions, NameOptionSourceAppendsTheFirstVariableOnce) {
  LaunchOptions o;
  o.option_env = {{"--tee", "PET_TEE"}, {"--heartbeat-interval", "PET_HEARTBEAT_INTERVAL"}};
  EXPECT_EQ(name_option_source(o, "--tee: '9' is not 0, 1, 2 or 3"),
            "--tee: '9' is not 0, 1, 2 or 3 (--tee is set by PET_TEE)");
  EXPECT_EQ(name_option_source(o, "--hang-timeout 1 s must be longer than --heartbeat-interval 2 s"),
            "--hang-timeout 1 s must be longer than --heartbeat-interval 2 s (--heartbeat-interval is set by "
            "PET_HEARTBEAT_INTERVAL)");
  EXPECT_EQ(name_option_source(o, "--tee-x is not --teeth"), "--tee-x is not --teeth");  // whole names only
  EXPECT_EQ(name_option_source(o, "PET_TEE='9': --tee"), "PET_TEE='9': --tee");  // named already
  EXPECT_EQ(name_option_source(LaunchOptions{}, "--tee: bad"), "--tee: bad");
}

TEST(UsageErrorText, IsAlwaysOneLine) {
  EXPECT_STREQ(UsageError("got '2\nx'").what(), "got '2\\nx'");
  EXPECT_STREQ(UsageError("a\tb\rc\x7f").what(), "a\\tb\\x0dc\\x7f");
  EXPECT_STREQ(UsageError("caf\xc3\xa9 ok").what(), "caf\xc3\xa9 ok");  // UTF-8 stays as it is
  const std::string quoted = usage_error({"--max-restarts=1\nx", "prog"});
  EXPECT_EQ(quoted, "--max-restarts: '1\\nx' is not a number >= 0");
}

}  // namespace
}  // namespace ddp
