#include "topology/scheduler_detect.h"
#include "topology/slurm_nodelist.h"

#include <gtest/gtest.h>

#include <map>

#include "cli/usage_error.h"

namespace ddp {
namespace {

using Env = std::map<std::string, std::string>;

GetEnv fake(const Env& env) {
  return [env](const char* name) -> std::optional<std::string> {
    const auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

DetectedTopology detect(const Env& env, const TopologyFlags& flags = {}) { return detect_topology(flags, fake(env)); }

std::string usage_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(no UsageError)";
}

bool has_note_containing(const DetectedTopology& t, const std::string& text) {
  for (const auto& n : t.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

using Hosts = std::vector<std::string>;

const Env kSlurmStep = {
    {"SLURM_JOB_ID", "4242"},      {"SLURM_JOB_NUM_NODES", "8"},          {"SLURM_JOB_NODELIST", "gpu[01-08]"},
    {"SLURM_STEP_NUM_NODES", "4"}, {"SLURM_STEP_NODELIST", "gpu[03-06]"}, {"SLURM_NODEID", "2"},
    {"SLURM_STEP_NUM_TASKS", "4"}};

// ------------------------------------------------------------ nodelist expansion

TEST(SlurmNodelist, PlainHostsAndRangesWithZeroPadding) {
  EXPECT_EQ(expand_slurm_nodelist("gpu5"), (Hosts{"gpu5"}));
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07],gpu5"), (Hosts{"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_slurm_nodelist("n[8-10]"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("n[098-101]"), (Hosts{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expand_slurm_nodelist("n[7]"), (Hosts{"n7"}));
}

TEST(SlurmNodelist, SeveralBracketGroupsMultiplyOutLeftmostSlowest) {
  EXPECT_EQ(expand_slurm_nodelist("rack[1-2]-n[1-2]"), (Hosts{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07],gpu5,rack[1-2]-n[1-2]"),
            (Hosts{"node01", "node02", "node03", "node07", "gpu5", "rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(expand_slurm_nodelist("[1-2]x"), (Hosts{"1x", "2x"}));
  EXPECT_EQ(expand_slurm_nodelist("a[1,3]b[0-1]c"), (Hosts{"a1b0c", "a1b1c", "a3b0c", "a3b1c"}));
}

TEST(SlurmNodelist, CommasInsideBracketsAreRangesOutsideAreHosts) {
  EXPECT_EQ(expand_slurm_nodelist("a[1,2],b[3]"), (Hosts{"a1", "a2", "b3"}));
  EXPECT_EQ(expand_slurm_nodelist("a1,a2"), (Hosts{"a1", "a2"}));
  EXPECT_EQ(expand_slurm_nodelist("host-with.dots.example,h2"), (Hosts{"host-with.dots.example", "h2"}));
}

TEST(SlurmNodelist, MalformedInputIsAUsageErrorQuotingTheText) {
  for (const std::string bad : {"node[1-", "a[3-1]", "a,,b", "a[]", "a[1,,2]", "a[x-2]", "a]1", "a[1[2]]", ",a", "a,",
                                "", "a [1]", "a[1-2-3]", "a[-2]"}) {
    const std::string message = usage_error_of([&] { expand_slurm_nodelist(bad); });
    EXPECT_NE(message, "(no UsageError)") << bad;
    EXPECT_NE(message.find("'" + bad + "'"), std::string::npos) << message;
  }
  EXPECT_NE(usage_error_of([] { expand_slurm_nodelist("a[3-1]"); }).find("3-1"), std::string::npos);
  EXPECT_NE(usage_error_of([] { expand_slurm_nodelist("node[1-"); }).find("unclosed"), std::string::npos);
}

TEST(SlurmNodelist, AbsurdSizesAreRefusedNotAllocated) {
  EXPECT_THROW(expand_slurm_nodelist("n[0-999999999]"), UsageError);
  EXPECT_THROW(expand_slurm_nodelist("n[0-9999]-[0-9999]"), UsageError);
  EXPECT_THROW(expand_slurm_nodelist("n[1234567890]"), UsageError);
}

TEST(SlurmNodelist, LongHostNamesAreRefusedBeforeTheyMultiply) {
  // 2^20 names of 2000 characters each, from a 2 KB list, took gigabytes.
  const std::string prefix(2000, 'a');
  EXPECT_NE(usage_error_of([&] { expand_slurm_nodelist(prefix + "[0-1048575]"); }).find("longer than 255"),
            std::string::npos);
  EXPECT_THROW(expand_slurm_nodelist("n[0-1048575]" + prefix), UsageError);
  EXPECT_THROW(expand_slurm_nodelist(std::string(256, 'h')), UsageError);
  EXPECT_EQ(expand_slurm_nodelist(std::string(252, 'h') + "[1-2]"),
            (Hosts{std::string(252, 'h') + "1", std::string(252, 'h') + "2"}));
  EXPECT_EQ(expand_slurm_nodelist(std::string(255, 'h')), (Hosts{std::string(255, 'h')}));
}

// ------------------------------------------------------------------ single node

TEST(SchedulerDetect, NothingSetIsASingleNode) {
  const auto t = detect({{"HOME", "/root"}, {"MASTER_ADDR", "localhost"}});
  EXPECT_EQ(t.source, "single node");
  EXPECT_EQ(t.nnodes, 1);
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_FALSE(t.rdzv_host);
  EXPECT_FALSE(t.job_id);
  EXPECT_TRUE(t.missing.empty());
  EXPECT_NO_THROW(require_complete_topology(t));
}

TEST(SchedulerDetect, SingleNodeKeepsTheRdzvIdFlag) {
  TopologyFlags f;
  f.rdzv_id = "myjob";
  EXPECT_EQ(detect({}, f).job_id, "myjob");
  EXPECT_EQ(detect({}, f).source, "single node");
}

// ------------------------------------------------------------------------ flags

TEST(TopologyFlagsPrecedence, CompleteFlagsWinOverEverySource) {
  TopologyFlags f;
  f.nnodes = 3;
  f.node_rank = 1;
  f.rdzv_endpoint = "head:1234";
  Env env = kSlurmStep;
  env["PET_NODE_RANK"] = "0";
  env["OMPI_COMM_WORLD_SIZE"] = "9";
  env["OMPI_COMM_WORLD_RANK"] = "8";
  const auto t = detect(env, f);
  EXPECT_EQ(t.source, "flags");
  EXPECT_EQ(t.nnodes, 3);
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.rdzv_host, "head");
  EXPECT_EQ(t.rdzv_port, 1234);
  EXPECT_FALSE(t.job_id);
  EXPECT_TRUE(t.missing.empty());
}

TEST(TopologyFlagsPrecedence, NnodesOneIsASingleNodeJobEvenUnderAScheduler) {
  TopologyFlags f;
  f.nnodes = 1;
  const auto t = detect(kSlurmStep, f);
  EXPECT_EQ(t.source, "flags");
  EXPECT_EQ(t.nnodes, 1);
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_TRUE(t.missing.empty());
  f.node_rank = 2;
  EXPECT_THROW(detect({}, f), UsageError);
}

TEST(TopologyFlagsPrecedence, EndpointWithoutPortGetsTheDefaultPort) {
  TopologyFlags f;
  f.nnodes = 2;
  f.node_rank = 0;
  f.rdzv_endpoint = "head";
  EXPECT_EQ(detect({}, f).rdzv_port, 29400);
  EXPECT_EQ(detect_topology(f, fake({}), 5000).rdzv_port, 5000);
}

TEST(TopologyFlagsPrecedence, Ipv6Endpoints) {
  TopologyFlags f;
  f.nnodes = 2;
  f.node_rank = 0;
  f.rdzv_endpoint = "[fe80::1]:29500";
  auto t = detect({}, f);
  EXPECT_EQ(t.rdzv_host, "fe80::1");
  EXPECT_EQ(t.rdzv_port, 29500);
  f.rdzv_endpoint = "fe80::1";
  t = detect({}, f);
  EXPECT_EQ(t.rdzv_host, "fe80::1");
  EXPECT_EQ(t.rdzv_port, 29400);
}

TEST(TopologyFlagsPrecedence, MalformedEndpointsAndNegativeFlagsAreUsageErrors) {
  for (const std::string bad : {"host:", "host:0", "host:70000", "host:x", ":29400", "[::1", "[::1]x", "[]", ""}) {
    TopologyFlags f;
    f.nnodes = 2;
    f.node_rank = 0;
    f.rdzv_endpoint = bad;
    EXPECT_THROW(detect({}, f), UsageError) << bad;
  }
  TopologyFlags f;
  f.nnodes = 0;
  EXPECT_THROW(detect({}, f), UsageError);
  f.nnodes = 2;
  f.node_rank = -1;
  EXPECT_THROW(detect({}, f), UsageError);
}

TEST(TopologyFlagsPrecedence, PartialFlagsWithoutASourceAreFlagsWithWhatIsMissing) {
  TopologyFlags f;
  f.nnodes = 4;
  auto t = detect({}, f);
  EXPECT_EQ(t.source, "flags");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_FALSE(t.node_rank);
  ASSERT_EQ(t.missing.size(), 1u);
  EXPECT_NE(t.missing[0].find("--rdzv-endpoint"), std::string::npos);
  const std::string message = usage_error_of([&] { require_complete_topology(t); });
  EXPECT_NE(message.find("source: flags"), std::string::npos) << message;
  EXPECT_NE(message.find("rendezvous endpoint"), std::string::npos) << message;

  TopologyFlags rank_only;
  rank_only.node_rank = 1;
  t = detect({}, rank_only);
  EXPECT_EQ(t.source, "flags");
  EXPECT_EQ(t.missing.size(), 2u);  // node count and endpoint
}

TEST(TopologyFlagsPrecedence, NnodesAndEndpointWithoutRankLeaveTheRankToTheCoordinator) {
  TopologyFlags f;
  f.nnodes = 2;
  f.rdzv_endpoint = "head:29400";
  const auto t = detect({}, f);
  EXPECT_EQ(t.source, "flags");
  EXPECT_FALSE(t.node_rank);
  EXPECT_TRUE(t.missing.empty());
}

// torchrun's documented "stacked single-node" form, and the same with a fixed port:
//   torchrun --rdzv-backend=c10d --rdzv-endpoint=localhost:0 --nproc-per-node=N train.py
TEST(TopologyFlagsPrecedence, ALoopbackEndpointAloneIsOneNodeAsInTorchrun) {
  for (const std::string endpoint : {"localhost:0", "127.0.0.1:29555", "[::1]:0", "localhost"}) {
    TopologyFlags f;
    f.rdzv_endpoint = endpoint;
    const auto t = detect({}, f);
    EXPECT_EQ(t.source, "single node") << endpoint;
    EXPECT_EQ(t.nnodes, 1) << endpoint;
    EXPECT_EQ(t.node_rank, 0) << endpoint;
    EXPECT_TRUE(t.missing.empty()) << endpoint;
    ASSERT_EQ(t.notes.size(), 1u) << endpoint;
    EXPECT_NE(t.notes[0].find("--nnodes=1"), std::string::npos) << t.notes[0];
  }
  EXPECT_EQ(detect({{"PET_RDZV_ENDPOINT", "localhost:0"}}).nnodes, 1);
  TopologyFlags one;
  one.nnodes = 1;
  one.rdzv_endpoint = "localhost:0";
  EXPECT_TRUE(detect({}, one).missing.empty());
}

TEST(TopologyFlagsPrecedence, ARemoteEndpointAloneStillAsksForTheNodeCount) {
  TopologyFlags f;
  f.rdzv_endpoint = "node0:29400";
  const auto t = detect({}, f);
  EXPECT_EQ(t.source, "flags");
  ASSERT_EQ(t.missing.size(), 1u);
  EXPECT_NE(t.missing[0].find("node count"), std::string::npos);
}

TEST(TopologyFlagsPrecedence, PortZeroIsRefusedBeyondOneNode) {
  TopologyFlags f;
  f.nnodes = 2;
  f.node_rank = 0;
  f.rdzv_endpoint = "localhost:0";
  std::string message = usage_error_of([&] { detect({}, f); });
  EXPECT_NE(message.find("--rdzv-endpoint='localhost:0': port 0 (any free port) works only for a single-node job"),
            std::string::npos)
      << message;
  TopologyFlags remote;
  remote.rdzv_endpoint = "node0:0";
  message = usage_error_of([&] { detect({}, remote); });
  EXPECT_NE(message.find("port 0"), std::string::npos) << message;
  // Under a multi-node Slurm step the count comes from Slurm: still refused.
  TopologyFlags under_slurm;
  under_slurm.rdzv_endpoint = "localhost:0";
  message = usage_error_of([&] { detect(kSlurmStep, under_slurm); });
  EXPECT_NE(message.find("port 0"), std::string::npos) << message;
}

TEST(TopologyFlagsPrecedence, PartialFlagsTakeMasterAddrForTheEndpoint) {
  TopologyFlags f;
  f.nnodes = 2;
  f.node_rank = 1;
  const auto t = detect({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29555"}}, f);
  EXPECT_EQ(t.source, "flags");
  EXPECT_EQ(t.rdzv_host, "10.0.0.1");
  EXPECT_EQ(t.rdzv_port, 29555);
  EXPECT_TRUE(t.missing.empty());
}

TEST(TopologyFlagsPrecedence, RdzvEndpointFlagCombinesWithSlurm) {
  TopologyFlags f;
  f.rdzv_endpoint = "login1:3000";
  f.rdzv_id = "run7";
  const auto t = detect(kSlurmStep, f);
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 2);
  EXPECT_EQ(t.rdzv_host, "login1");
  EXPECT_EQ(t.rdzv_port, 3000);
  EXPECT_EQ(t.job_id, "run7");
  EXPECT_TRUE(has_note_containing(t, "--rdzv-endpoint"));
}

TEST(TopologyFlagsPrecedence, NnodesAndEndpointFlagsUnderSlurmKeepSlurmsRank) {
  TopologyFlags f;
  f.nnodes = 4;
  f.rdzv_endpoint = "gpu03:29400";
  const auto t = detect(kSlurmStep, f);
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.node_rank, 2);
  EXPECT_FALSE(has_note_containing(t, "--nnodes"));  // same value: nothing overridden
}

TEST(TopologyFlagsPrecedence, FlagsOverrideFieldsOfASourceAndAreChecked) {
  TopologyFlags f;
  f.node_rank = 3;
  auto t = detect(kSlurmStep, f);
  EXPECT_EQ(t.node_rank, 3);
  EXPECT_TRUE(has_note_containing(t, "node rank 3 from --node-rank"));
  f.node_rank = 4;  // slurm says 4 nodes
  EXPECT_NE(usage_error_of([&] { detect(kSlurmStep, f); }).find("node rank 4"), std::string::npos);
}

// ----------------------------------------------------------------- torchrun env

TEST(TopologyTorchrunEnv, PetVariables) {
  const auto t = detect(
      {{"PET_NNODES", "3"}, {"PET_NODE_RANK", "2"}, {"PET_RDZV_ENDPOINT", "head:29401"}, {"PET_RDZV_ID", "abc"}});
  EXPECT_EQ(t.source, "torchrun env");
  EXPECT_EQ(t.nnodes, 3);
  EXPECT_EQ(t.node_rank, 2);
  EXPECT_EQ(t.rdzv_host, "head");
  EXPECT_EQ(t.rdzv_port, 29401);
  EXPECT_EQ(t.job_id, "abc");
  EXPECT_TRUE(t.missing.empty());
}

TEST(TopologyTorchrunEnv, PlainMasterAddrAndNodeRank) {
  auto t = detect({{"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "23456"}, {"NODE_RANK", "1"}, {"PET_NNODES", "2"}});
  EXPECT_EQ(t.source, "torchrun env");
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.rdzv_host, "10.1.1.1");
  EXPECT_EQ(t.rdzv_port, 23456);

  t = detect({{"MASTER_ADDR", "h"}, {"GROUP_RANK", "3"}, {"GROUP_WORLD_SIZE", "4"}});
  EXPECT_EQ(t.source, "torchrun env");
  EXPECT_EQ(t.node_rank, 3);
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.rdzv_port, 29400);
}

TEST(TopologyTorchrunEnv, PetEndpointBeatsPetMasterBeatsPlainMaster) {
  Env env = {{"PET_NODE_RANK", "0"},   {"PET_NNODES", "2"},      {"PET_RDZV_ENDPOINT", "a:1"},
             {"PET_MASTER_ADDR", "b"}, {"PET_MASTER_PORT", "2"}, {"MASTER_ADDR", "c"}};
  EXPECT_EQ(detect(env).rdzv_host, "a");
  env.erase("PET_RDZV_ENDPOINT");
  EXPECT_EQ(detect(env).rdzv_host, "b");
  EXPECT_EQ(detect(env).rdzv_port, 2);
  env.erase("PET_MASTER_ADDR");
  EXPECT_EQ(detect(env).rdzv_host, "c");
}

TEST(TopologyTorchrunEnv, BeatsSchedulers) {
  Env env = kSlurmStep;
  env["PET_NODE_RANK"] = "1";
  env["PET_NNODES"] = "2";
  env["PET_RDZV_ENDPOINT"] = "x:5";
  const auto t = detect(env);
  EXPECT_EQ(t.source, "torchrun env");
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_FALSE(t.job_id);
}

TEST(TopologyTorchrunEnv, PetNnodesAloneIsAPartialRequestPlainVariablesAloneAreNothing) {
  const auto t = detect({{"PET_NNODES", "2"}});
  EXPECT_EQ(t.source, "torchrun env");
  EXPECT_EQ(t.nnodes, 2);
  ASSERT_EQ(t.missing.size(), 1u);
  EXPECT_EQ(detect({{"PET_NNODES", "1"}}).source, "torchrun env");
  EXPECT_EQ(detect({{"PET_NNODES", "1"}}).nnodes, 1);
  EXPECT_EQ(detect({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}).source, "single node");
  EXPECT_EQ(detect({{"NODE_RANK", "1"}}).source, "single node");
}

TEST(TopologyTorchrunEnv, FlagsBeatPetValuesFieldByField) {
  TopologyFlags f;
  f.node_rank = 0;
  f.rdzv_id = "cli";
  const auto t =
      detect({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_RDZV_ENDPOINT", "h"}, {"PET_RDZV_ID", "env"}}, f);
  EXPECT_EQ(t.source, "torchrun env");  // nnodes and endpoint still came from PET_*
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_EQ(t.job_id, "cli");
}

TEST(TopologyTorchrunEnv, PetValuesCombineWithSchedulersFieldByField) {
  Env env = kSlurmStep;
  env["PET_NODE_RANK"] = "3";
  env["PET_RDZV_ID"] = "named";
  const auto t = detect(env);
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 3);
  EXPECT_EQ(t.rdzv_host, "gpu03");
  EXPECT_EQ(t.job_id, "named");
  EXPECT_TRUE(has_note_containing(t, "node rank 3 from PET_NODE_RANK"));
}

TEST(TopologyTorchrunEnv, ElasticRangesAndBadNumbers) {
  EXPECT_EQ(detect({{"PET_NODE_RANK", "0"}, {"PET_NNODES", "2:2"}, {"PET_RDZV_ENDPOINT", "h"}}).nnodes, 2);
  // an elastic range: MAX is the node count, MIN the fewest the job starts with
  const auto elastic = detect({{"PET_NODE_RANK", "0"}, {"PET_NNODES", "1:4"}, {"PET_RDZV_ENDPOINT", "h"}});
  EXPECT_EQ(elastic.nnodes, 4);
  EXPECT_EQ(elastic.min_nnodes, 1);
  EXPECT_FALSE(detect({{"PET_NODE_RANK", "0"}, {"PET_NNODES", "2:2"}, {"PET_RDZV_ENDPOINT", "h"}}).min_nnodes);
  EXPECT_NE(usage_error_of([] { detect({{"PET_NNODES", "3:2"}}); }).find("PET_NNODES='3:2': expected N or MIN:MAX"),
            std::string::npos);
  EXPECT_NE(usage_error_of([] { detect({{"PET_NNODES", "0:2"}}); }).find("1 <= MIN <= MAX"), std::string::npos);
  EXPECT_NE(usage_error_of([] { detect({{"PET_NNODES", "1:x"}}); }).find("PET_NNODES='1:x'"), std::string::npos);
  EXPECT_NE(usage_error_of([] { detect({{"PET_NODE_RANK", "two"}}); }).find("PET_NODE_RANK='two'"), std::string::npos);
  EXPECT_THROW(detect({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}, {"NODE_RANK", "0"}}), UsageError);
  EXPECT_THROW(detect({{"PET_NODE_RANK", "2"}, {"PET_NNODES", "2"}, {"PET_RDZV_ENDPOINT", "h"}}), UsageError);
}

TEST(TopologyTorchrunEnv, EmptyVariablesCountAsUnset) {
  EXPECT_EQ(detect({{"PET_NODE_RANK", ""}, {"SLURM_JOB_ID", ""}, {"MASTER_ADDR", ""}}).source, "single node");
}

TEST(TopologyTorchrunEnv, RankWithoutNnodesIsMissingTheCount) {
  const auto t = detect({{"PET_NODE_RANK", "1"}, {"PET_RDZV_ENDPOINT", "h:1"}});
  EXPECT_EQ(t.source, "torchrun env");
  ASSERT_EQ(t.missing.size(), 1u);
  EXPECT_NE(t.missing[0].find("node count"), std::string::npos);
  EXPECT_THROW(require_complete_topology(t), UsageError);
  TopologyFlags f;
  f.nnodes = 2;
  EXPECT_TRUE(detect({{"PET_NODE_RANK", "1"}, {"PET_RDZV_ENDPOINT", "h:1"}}, f).missing.empty());
}

// ------------------------------------------------------------------------ slurm

TEST(SlurmTopology, InsideAStepUsesTheStepVariables) {
  const auto t = detect(kSlurmStep);
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 2);
  EXPECT_EQ(t.rdzv_host, "gpu03");
  EXPECT_EQ(t.rdzv_port, 29400);
  EXPECT_EQ(t.job_id, "4242");
  EXPECT_TRUE(has_note_containing(t, "SLURM_STEP_NODELIST gpu[03-06] -> rendezvous host gpu03"));
  EXPECT_TRUE(t.missing.empty());
}

TEST(SlurmTopology, OutsideAStepUsesTheJobVariablesAndSaysSo) {
  const auto t = detect({{"SLURM_JOB_ID", "7"},
                         {"SLURM_JOB_NUM_NODES", "4"},
                         {"SLURM_JOB_NODELIST", "node[01-04]"},
                         {"SLURM_NODEID", "0"}});
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_EQ(t.rdzv_host, "node01");
  EXPECT_TRUE(has_note_containing(t, "SLURM_JOB_NODELIST node[01-04] -> rendezvous host node01"));
  EXPECT_TRUE(has_note_containing(t, "srun"));
}

TEST(SlurmTopology, OlderSpellings) {
  const auto t =
      detect({{"SLURM_JOBID", "9"}, {"SLURM_NNODES", "2"}, {"SLURM_NODELIST", "a,b"}, {"SLURM_NODEID", "1"}});
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.job_id, "9");
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.rdzv_host, "a");
}

TEST(SlurmTopology, NodeCountCanComeFromTheListAlone) {
  const auto t = detect({{"SLURM_JOB_ID", "1"}, {"SLURM_STEP_NODELIST", "r[1-2]-n[1-3]"}, {"SLURM_NODEID", "5"}});
  EXPECT_EQ(t.nnodes, 6);
  EXPECT_EQ(t.node_rank, 5);
  EXPECT_EQ(t.rdzv_host, "r1-n1");
}

TEST(SlurmTopology, OneNodeWithoutNodeIdIsRankZero) {
  const auto t = detect({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_JOB_NODELIST", "solo"}});
  EXPECT_EQ(t.nnodes, 1);
  EXPECT_EQ(t.node_rank, 0);
  EXPECT_TRUE(t.missing.empty());
}

TEST(SlurmTopology, InconsistentOrMalformedVariablesAreUsageErrors) {
  Env env = kSlurmStep;
  env["SLURM_STEP_NUM_NODES"] = "3";  // list names 4
  EXPECT_NE(usage_error_of([&] { detect(env); }).find("SLURM_STEP_NUM_NODES=3"), std::string::npos);
  env = kSlurmStep;
  env["SLURM_STEP_NODELIST"] = "gpu[03-";
  EXPECT_NE(usage_error_of([&] { detect(env); }).find("gpu[03-"), std::string::npos);
  // which variable holds the malformed list
  EXPECT_EQ(usage_error_of([&] { detect(env); }).rfind("SLURM_STEP_NODELIST: ", 0), 0u);
  env = kSlurmStep;
  env["SLURM_NODEID"] = "4";
  EXPECT_THROW(detect(env), UsageError);
  env["SLURM_NODEID"] = "x";
  EXPECT_THROW(detect(env), UsageError);
}

TEST(SlurmTopology, SeveralTasksPerNodeAreRefused) {
  Env env = kSlurmStep;
  env["SLURM_STEP_NUM_TASKS"] = "32";
  EXPECT_NE(usage_error_of([&] { detect(env); }).find("--ntasks-per-node=1"), std::string::npos);
}

TEST(SlurmTopology, ExportedMasterAddrBeatsTheFirstHostAndFlagsBeatBoth) {
  Env env = kSlurmStep;
  env["MASTER_ADDR"] = "10.9.9.9";
  env["MASTER_PORT"] = "29510";
  auto t = detect(env);
  EXPECT_EQ(t.source, "slurm");
  EXPECT_EQ(t.rdzv_host, "10.9.9.9");
  EXPECT_EQ(t.rdzv_port, 29510);
  EXPECT_TRUE(has_note_containing(t, "not gpu03"));
  TopologyFlags f;
  f.rdzv_endpoint = "flaghost";
  t = detect(env, f);
  EXPECT_EQ(t.rdzv_host, "flaghost");
  EXPECT_EQ(t.rdzv_port, 29400);
}

TEST(SlurmTopology, BeatsOpenMpiAndKubernetes) {
  Env env = kSlurmStep;
  env["OMPI_COMM_WORLD_SIZE"] = "4";
  env["OMPI_COMM_WORLD_RANK"] = "3";
  env["JOB_COMPLETION_INDEX"] = "1";
  EXPECT_EQ(detect(env).source, "slurm");
  EXPECT_EQ(detect(env).node_rank, 2);
}

// ---------------------------------------------------------------------- openmpi

TEST(SchedulerOpenMpi, RanksFromOmpiEndpointFromMasterAddr) {
  const auto t = detect({{"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_RANK", "3"},
                         {"MASTER_ADDR", "n0"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}});
  EXPECT_EQ(t.source, "openmpi");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 3);
  EXPECT_EQ(t.rdzv_host, "n0");
  EXPECT_EQ(t.rdzv_port, 29400);
  EXPECT_FALSE(t.job_id);
  EXPECT_TRUE(t.missing.empty());
  EXPECT_TRUE(has_note_containing(t, "MASTER_ADDR"));
}

TEST(SchedulerOpenMpi, WithoutAnAddressTheNotesAndMissingSaySo) {
  const auto t = detect({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_EQ(t.source, "openmpi");
  EXPECT_FALSE(t.rdzv_host);
  EXPECT_TRUE(has_note_containing(t, "no address"));
  ASSERT_EQ(t.missing.size(), 1u);
  const std::string message = usage_error_of([&] { require_complete_topology(t); });
  EXPECT_NE(message.find("openmpi"), std::string::npos);
  EXPECT_NE(message.find("MASTER_ADDR"), std::string::npos);
}

TEST(SchedulerOpenMpi, FlagEndpointCompletesIt) {
  TopologyFlags f;
  f.rdzv_endpoint = "n0:777";
  const auto t = detect({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"MASTER_ADDR", "other"}}, f);
  EXPECT_EQ(t.source, "openmpi");
  EXPECT_EQ(t.rdzv_host, "n0");
  EXPECT_EQ(t.rdzv_port, 777);
}

TEST(SchedulerOpenMpi, SeveralPerHostIsNoted) {
  const auto t = detect({{"OMPI_COMM_WORLD_SIZE", "8"},
                         {"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                         {"MASTER_ADDR", "n0"}});
  EXPECT_TRUE(has_note_containing(t, "ppr:1:node"));
}

TEST(SchedulerOpenMpi, NeedsBothVariablesAndBeatsKubernetes) {
  EXPECT_EQ(detect({{"OMPI_COMM_WORLD_SIZE", "2"}}).source, "single node");
  EXPECT_EQ(
      detect({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"JOB_COMPLETION_INDEX", "0"}}).source,
      "openmpi");
}

// ------------------------------------------------------------------- kubernetes

TEST(SchedulerKubernetes, IndexedJobNamesPodZeroThroughTheJobNamedService) {
  const auto t = detect({{"JOB_COMPLETION_INDEX", "3"}, {"HOSTNAME", "train-3"}, {"PET_NNODES", "4"}});
  EXPECT_EQ(t.source, "kubernetes");
  EXPECT_EQ(t.nnodes, 4);
  EXPECT_EQ(t.node_rank, 3);
  EXPECT_EQ(t.rdzv_host, "train-0.train");
  EXPECT_EQ(t.rdzv_port, 29400);
  EXPECT_EQ(t.job_id, "train");
  EXPECT_TRUE(t.missing.empty());
}

TEST(SchedulerKubernetes, IndexedJobSubdomainAndNnodesFromOurVariables) {
  const auto t = detect({{"JOB_COMPLETION_INDEX", "12"},
                         {"HOSTNAME", "my-job-v2-12"},
                         {"DDPLAUNCH_NNODES", "16"},
                         {"DDPLAUNCH_K8S_SUBDOMAIN", "svc"}});
  EXPECT_EQ(t.nnodes, 16);
  EXPECT_EQ(t.node_rank, 12);
  EXPECT_EQ(t.rdzv_host, "my-job-v2-0.svc");
  EXPECT_EQ(t.job_id, "my-job-v2");
}

TEST(SchedulerKubernetes, IndexedJobWithoutNnodesOrMatchingHostnameListsWhatIsMissing) {
  auto t = detect({{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "random-pod-name"}});
  EXPECT_EQ(t.source, "kubernetes");
  EXPECT_FALSE(t.rdzv_host);
  EXPECT_TRUE(has_note_containing(t, "cannot name pod 0"));
  ASSERT_EQ(t.missing.size(), 2u);
  EXPECT_NE(t.missing[0].find("DDPLAUNCH_NNODES"), std::string::npos);
  t = detect({{"JOB_COMPLETION_INDEX", "1"}, {"PET_NNODES", "2"}, {"MASTER_ADDR", "pod0.svc"}});
  EXPECT_EQ(t.rdzv_host, "pod0.svc");
  EXPECT_TRUE(t.missing.empty());
  // "-1" alone is not a job name.
  EXPECT_FALSE(detect({{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "-1"}}).rdzv_host);
}

TEST(SchedulerKubernetes, IndexedJobManifestWithPetEndpointKeepsTheCompletionIndexRank) {
  // As deploy/kubernetes/indexed-job.yaml sets it.
  const auto t = detect({{"JOB_COMPLETION_INDEX", "1"},
                         {"HOSTNAME", "ddp-train-1"},
                         {"PET_NNODES", "2"},
                         {"PET_RDZV_ENDPOINT", "ddp-train-0.ddp-train:29400"},
                         {"PET_RDZV_ID", "ddp-train"}});
  EXPECT_EQ(t.source, "kubernetes");
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.rdzv_host, "ddp-train-0.ddp-train");
  EXPECT_EQ(t.rdzv_port, 29400);
  EXPECT_EQ(t.job_id, "ddp-train");
  EXPECT_TRUE(t.missing.empty());
}

TEST(SchedulerKubernetes, IndexedJobRankOutsideNnodesIsAUsageError) {
  EXPECT_THROW(detect({{"JOB_COMPLETION_INDEX", "4"}, {"HOSTNAME", "j-4"}, {"PET_NNODES", "4"}}), UsageError);
  EXPECT_THROW(detect({{"JOB_COMPLETION_INDEX", "x"}}), UsageError);
}

const Env kJobSet = {{"JOBSET_NAME", "llm"},          {"REPLICATED_JOB_NAME", "workers"}, {"JOB_INDEX", "2"},
                     {"JOB_COMPLETION_INDEX", "1"},   {"HOSTNAME", "llm-workers-2-1"},    {"PET_NNODES", "12"},
                     {"REPLICATED_JOB_REPLICAS", "3"}};

TEST(SchedulerKubernetesJobSet, RankIsJobIndexTimesPodsPerJobPlusCompletionIndex) {
  const auto t = detect(kJobSet);
  EXPECT_EQ(t.source, "kubernetes jobset");
  EXPECT_EQ(t.nnodes, 12);
  EXPECT_EQ(t.node_rank, 2 * 4 + 1);
  EXPECT_EQ(t.rdzv_host, "llm-workers-0-0.llm");
  EXPECT_EQ(t.rdzv_port, 29400);
  EXPECT_EQ(t.job_id, "llm");
  EXPECT_TRUE(t.missing.empty());
}

TEST(SchedulerKubernetesJobSet, PodsPerJobGivenOutrightAndSubdomainOverride) {
  Env env = kJobSet;
  env.erase("PET_NNODES");
  env["DDPLAUNCH_K8S_PODS_PER_JOB"] = "2";
  env["DDPLAUNCH_K8S_SUBDOMAIN"] = "net";
  const auto t = detect(env);
  EXPECT_EQ(t.nnodes, 6);  // 2 pods x 3 replicas
  EXPECT_EQ(t.node_rank, 5);
  EXPECT_EQ(t.rdzv_host, "llm-workers-0-0.net");
}

TEST(SchedulerKubernetesJobSet, UnknownPodsPerJobLeavesTheRankToTheCoordinator) {
  Env env = kJobSet;
  env.erase("REPLICATED_JOB_REPLICAS");
  auto t = detect(env);
  EXPECT_FALSE(t.node_rank);
  EXPECT_TRUE(has_note_containing(t, "DDPLAUNCH_K8S_PODS_PER_JOB"));
  EXPECT_TRUE(t.missing.empty());
  env["JOB_INDEX"] = "0";
  t = detect(env);
  EXPECT_EQ(t.node_rank, 1);
}

TEST(SchedulerKubernetesJobSet, IncompleteOrInconsistentEnvironmentIsAUsageError) {
  Env env = kJobSet;
  env.erase("REPLICATED_JOB_NAME");
  EXPECT_NE(usage_error_of([&] { detect(env); }).find("REPLICATED_JOB_NAME"), std::string::npos);
  env = kJobSet;
  env.erase("JOB_INDEX");
  EXPECT_NE(usage_error_of([&] { detect(env); }).find("jobset.sigs.k8s.io/job-index"), std::string::npos);
  env = kJobSet;
  env["PET_NNODES"] = "10";  // not a multiple of 3 replicas
  EXPECT_THROW(detect(env), UsageError);
  env = kJobSet;
  env["JOB_COMPLETION_INDEX"] = "4";  // a Job has 4 pods: 0..3
  EXPECT_THROW(detect(env), UsageError);
}

TEST(SchedulerKubernetesJobSet, ManifestWithPetEndpointAndCustomSubdomain) {
  // As deploy/kubernetes/jobset.yaml sets it: one replicated job "node", 2 pods.
  const auto t = detect({{"JOBSET_NAME", "ddp-train"},
                         {"REPLICATED_JOB_NAME", "node"},
                         {"JOB_INDEX", "0"},
                         {"JOB_COMPLETION_INDEX", "1"},
                         {"PET_NNODES", "2"},
                         {"PET_RDZV_ENDPOINT", "ddp-train-node-0-0.ddp-train:29400"},
                         {"PET_RDZV_ID", "ddp-train"}});
  EXPECT_EQ(t.source, "kubernetes jobset");
  EXPECT_EQ(t.nnodes, 2);
  EXPECT_EQ(t.node_rank, 1);
  EXPECT_EQ(t.rdzv_host, "ddp-train-node-0-0.ddp-train");
  EXPECT_EQ(t.job_id, "ddp-train");
  EXPECT_TRUE(t.missing.empty());
}

TEST(SchedulerKubernetesJobSet, BeatsThePlainIndexedJobAndFlagsStillOverride) {
  TopologyFlags f;
  f.rdzv_id = "custom";
  f.rdzv_endpoint = "coord:1";
  const auto t = detect(kJobSet, f);
  EXPECT_EQ(t.source, "kubernetes jobset");
  EXPECT_EQ(t.job_id, "custom");
  EXPECT_EQ(t.rdzv_host, "coord");
}

}  // namespace
}  // namespace ddp
