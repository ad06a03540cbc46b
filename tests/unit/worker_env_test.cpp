#include "job/worker_env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace ddp {
namespace {

std::map<std::string, std::string> as_map(const std::vector<std::string>& env) {
  std::map<std::string, std::string> m;
  for (const auto& e : env) {
    const auto eq = e.find('=');
    EXPECT_EQ(m.count(e.substr(0, eq)), 0u) << "duplicate " << e;
    m[e.substr(0, eq)] = e.substr(eq + 1);
  }
  return m;
}

WorkerIdentity identity() {
  WorkerIdentity id;
  id.rank = 5;
  id.local_rank = 1;
  id.world_size = 8;
  id.local_world_size = 4;
  id.group_rank = 1;
  id.group_world_size = 2;
  id.role = "trainer";
  id.master_addr = "10.0.0.1";
  id.master_port = 29500;
  id.restart_count = 2;
  id.max_restarts = 3;
  id.job_id = "job7";
  id.error_file = "/logs/error.json";
  id.rank_log_dir = "/logs";
  return id;
}

TEST(WorkerEnv, SetsTheTorchrunEnvironment) {
  const auto env = as_map(build_worker_env({}, identity()));
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("ROLE_RANK"), "5");
  EXPECT_EQ(env.at("ROLE_NAME"), "trainer");
  EXPECT_EQ(env.at("MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(env.at("TORCHELASTIC_MAX_RESTARTS"), "3");
  EXPECT_EQ(env.at("TORCHELASTIC_RUN_ID"), "job7");
  EXPECT_EQ(env.at("TORCHELASTIC_ERROR_FILE"), "/logs/error.json");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "1");
}

TEST(WorkerEnv, NamesTheSignalIntentFileOnlyWithAStopTimeout) {
  EXPECT_EQ(as_map(build_worker_env({}, identity())).count("DDPLAUNCH_SIGNAL_INTENT_FILE"), 0u);
  WorkerIdentity id = identity();
  id.signal_intent_file = "/run/agent/7.signal_intent";
  EXPECT_EQ(as_map(build_worker_env({"DDPLAUNCH_SIGNAL_INTENT_FILE=/stale"}, id)).at("DDPLAUNCH_SIGNAL_INTENT_FILE"),
            "/run/agent/7.signal_intent");
}

TEST(WorkerEnv, OneWorkerPerNodeKeepsOpenMpsOwnThreadCountAsTorchrunDoes) {
  WorkerIdentity id = identity();
  id.local_world_size = 1;
  EXPECT_EQ(as_map(build_worker_env({}, id)).count("OMP_NUM_THREADS"), 0u);
}

TEST(WorkerEnv, NcclAsyncErrorHandlingIsOnUnlessTheUserSaysOtherwise) {
  EXPECT_EQ(as_map(build_worker_env({}, identity())).at("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(as_map(build_worker_env({"TORCH_NCCL_ASYNC_ERROR_HANDLING=0"}, identity())).at("TORCH_NCCL_ASYNC_ERROR_HANDLING"),
            "0");
}

TEST(WorkerEnv, VirtualLocalRankShowsEachWorkerOnlyItsOwnDeviceAsDeviceZero) {
  WorkerIdentity id = identity();  // local rank 1
  id.virtual_local_rank = true;
  auto env = as_map(build_worker_env({}, id));
  EXPECT_EQ(env.at("LOCAL_RANK"), "0");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "1");
  env = as_map(build_worker_env({"CUDA_VISIBLE_DEVICES=4,5,6,7"}, id));
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "5");
  env = as_map(build_worker_env({"CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb"}, id));
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-bb");
  id.virtual_local_rank = false;
  env = as_map(build_worker_env({"CUDA_VISIBLE_DEVICES=4,5,6,7"}, id));
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "4,5,6,7");
}

TEST(WorkerEnv, KeepsTheUsersEnvironmentButOverridesStaleRanks) {
  const auto env = as_map(build_worker_env({"HOME=/root", "RANK=99", "A=b=c", "OMP_NUM_THREADS=4"}, identity()));
  EXPECT_EQ(env.at("HOME"), "/root");
  EXPECT_EQ(env.at("A"), "b=c");
  EXPECT_EQ(env.at("RANK"), "5");
  EXPECT_EQ(env.at("OMP_NUM_THREADS"), "4");
}

TEST(WorkerEnv, NodeDefaultsFillOnlyWhatTheEnvironmentLeavesUnset) {
  WorkerIdentity id = identity();
  id.node_defaults = {{"OPENBLAS_CORETYPE", "Cooperlake"}};
  EXPECT_EQ(as_map(build_worker_env({"HOME=/root"}, id)).at("OPENBLAS_CORETYPE"), "Cooperlake");
  EXPECT_EQ(as_map(build_worker_env({"OPENBLAS_CORETYPE=Haswell"}, id)).at("OPENBLAS_CORETYPE"), "Haswell");
}

}  // namespace
}  // namespace ddp

namespace ddp {
namespace {

TEST(WorkerEnv, ThePythonCompanionGoesFirstOnPythonPath) {
  WorkerIdentity id = identity();
  id.companion_dir = "/opt/ddplaunch/share/ddplaunch/python";
  id.companion_socket = "/run/user/1/ddplaunch/42.py.sock";
  auto env = as_map(build_worker_env({"PYTHONPATH=/home/u/lib", "TORCH_NCCL_TRACE_BUFFER_SIZE=100"}, id));
  EXPECT_EQ(env["PYTHONPATH"], "/opt/ddplaunch/share/ddplaunch/python:/home/u/lib");
  EXPECT_EQ(env["DDPLAUNCH_COMPANION_PATH"], id.companion_dir);
  EXPECT_EQ(env["DDPLAUNCH_COMPANION_SOCKET"], id.companion_socket);
  EXPECT_EQ(env["TORCH_NCCL_TRACE_BUFFER_SIZE"], "100") << "the user's setting wins";
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_PIPE_FILE"], "/logs/nccl_trace_pipe_rank_");
  EXPECT_EQ(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"], "/logs/nccl_trace_rank_");
  EXPECT_EQ(as_map(build_worker_env({}, id))["PYTHONPATH"], id.companion_dir);
}

TEST(WorkerEnv, WithoutTheCompanionPythonPathIsTheUsers) {
  auto env = as_map(build_worker_env({"PYTHONPATH=/home/u/lib"}, identity()));
  EXPECT_EQ(env["PYTHONPATH"], "/home/u/lib");
  EXPECT_EQ(env.count("DDPLAUNCH_COMPANION_SOCKET"), 0u);
  EXPECT_EQ(env.count("TORCH_NCCL_TRACE_BUFFER_SIZE"), 0u);
}

}  // namespace
}  // namespace ddp
