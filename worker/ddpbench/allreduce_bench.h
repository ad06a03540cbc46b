#pragma once
// `ddpbench allreduce`: run under ddplaunch (one process per rank); times the
// runtime's all-reduce for each size and prints, on rank 0, a table like
// nccl-tests: size, time, algbw, busbw = algbw x 2(n-1)/n.

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ddp::bench {

struct AllreduceBenchOptions {
  std::string backend = "gloo";
  std::vector<std::string> sizes = {"1M", "4M", "16M", "64M"};  // bytes, K/M/G suffixes
  int warmup = 3;
  int iters = 10;
  std::string dtype = "float32";
  bool json = false;  // one JSON line per size instead of the table
  // "plain": ordinary tensors; "reduction": Collective::new_reduction_buffer,
  // the memory DDP's buckets live in (shared memory on one host with Gloo).
  std::string buffer = "plain";
};

CLI::App* add_allreduce_command(CLI::App& app, AllreduceBenchOptions& options);

/// 0 when every all-reduce gave the right sum, 1 otherwise.
int run_allreduce_bench(const AllreduceBenchOptions& options);

}  // namespace ddp::bench
