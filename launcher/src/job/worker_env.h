#pragma once
// The environment of one worker: the user's own environment plus what
// torchrun sets, so an unmodified PyTorch script's init_process_group("env://")
// works, plus DDPLAUNCH_* for the ddplaunch runtime.

#include <map>
#include <string>
#include <vector>

namespace ddp {

struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // node rank
  int group_world_size = 1;
  std::string role;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // restarts used (TORCHELASTIC_RESTART_COUNT; membership changes use none)
  int64_t generation = 0; // the job's generation (DDPLAUNCH_ATTEMPT)
  int max_restarts = 0;
  std::string job_id;
  std::string error_file;    // TORCHELASTIC_ERROR_FILE
  std::string rank_log_dir;  // DDPLAUNCH_RANK_LOG_DIR
  std::string stop_file;     // DDPLAUNCH_STOP_FILE: where a stop request appears (stop_request.h)
  /// DDPLAUNCH_SIGNAL_INTENT_FILE: what a SIGTERM means (rank_signal_intent.h); empty without --stop-timeout.
  std::string signal_intent_file;
  std::string agent_socket;  // DDPLAUNCH_AGENT_SOCKET: the local agent service
  std::string token;         // DDPLAUNCH_TOKEN: proves the worker belongs to the job
  int64_t heartbeat_interval_ms = 1000;  // DDPLAUNCH_HEARTBEAT_INTERVAL_MS
  /// torchrun's --virtual-local-rank: LOCAL_RANK=0, and CUDA_VISIBLE_DEVICES
  /// the one device this local rank would have used (its entry of the base
  /// environment's list, else its index).
  bool virtual_local_rank = false;
  /// NCCL_* that win over the node's environment (--nccl-debug, --nccl-debug-subsys).
  std::map<std::string, std::string> nccl_forced;
  /// NCCL_* of the launching node: added where the node's environment lacks them.
  std::map<std::string, std::string> job_env;
  /// Set where neither the node's environment nor the above sets them
  /// (OPENBLAS_CORETYPE, when this node's OpenBLAS would pick narrow kernels).
  std::map<std::string, std::string> node_defaults;
  /// Where NCCL logs when NCCL_DEBUG ends up set (NCCL_DEBUG_FILE, unless the
  /// environment names a file itself).
  std::string nccl_debug_file;
  /// The Python companion (python_companion.h): its bootstrap folder, put
  /// first on PYTHONPATH, and its channel's socket. Empty: not injected.
  std::string companion_dir;
  std::string companion_socket;
};

/// base: the launcher's environment as "NAME=value" entries. The result keeps
/// every entry of base except those the identity overrides, and sets, only
/// where base does not, what torchrun sets by default (OMP_NUM_THREADS=1 when
/// a node runs several workers, TORCH_NCCL_ASYNC_ERROR_HANDLING=1) and the
/// identity's node_defaults. With a companion_dir, PYTHONPATH starts with it
/// and, where the environment does not set them, PyTorch's NCCL flight
/// recorder keeps a trace and dumps it into the rank's log folder.
std::vector<std::string> build_worker_env(const std::vector<std::string>& base, const WorkerIdentity& id);

/// The calling process's environment as "NAME=value" entries, less what
/// ddplaunch set only for itself (grpc_name_resolution.h).
std::vector<std::string> current_environment();

}  // namespace ddp
