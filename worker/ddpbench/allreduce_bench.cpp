#include "allreduce_bench.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/types.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ddp/runtime/init.h"

namespace ddp::bench {
namespace {

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  const double value = std::stod(text, &used);
  const std::string suffix = text.substr(used);
  double scale = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") scale = 1 << 10;
  if (suffix == "M" || suffix == "MiB") scale = 1 << 20;
  if (suffix == "G" || suffix == "GiB") scale = 1 << 30;
  return static_cast<int64_t>(value * scale);
}

at::ScalarType scalar_type(const std::string& name) {
  if (name == "float64") return at::kDouble;
  if (name == "float16") return at::kHalf;
  if (name == "bfloat16") return at::kBFloat16;
  return at::kFloat;
}

}  // namespace

CLI::App* add_allreduce_command(CLI::App& app, AllreduceBenchOptions& o) {
  CLI::App* cmd = app.add_subcommand("allreduce", "time all-reduce across the ranks of a ddplaunch job");
  cmd->add_option("--backend", o.backend, "gloo or nccl")->check(CLI::IsMember({"gloo", "nccl"}));
  cmd->add_option("--sizes", o.sizes, "message sizes in bytes (K, M, G suffixes)")->delimiter(',');
  cmd->add_option("--warmup", o.warmup)->check(CLI::NonNegativeNumber);
  cmd->add_option("--iters", o.iters)->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", o.dtype)->check(CLI::IsMember({"float32", "float64", "float16", "bfloat16"}));
  cmd->add_flag("--json", o.json, "one JSON line per size");
  cmd->add_option("--buffer", o.buffer, "plain tensors, or reduction buffers (what DDP's buckets use)")
      ->check(CLI::IsMember({"plain", "reduction"}));
  return cmd;
}

int run_allreduce_bench(const AllreduceBenchOptions& o) {
  InitOptions init_options;
  init_options.backend = o.backend;
  auto group = init(init_options);
  Collective& comm = group->collective();
  const int n = group->world_size;
  const bool root = group->rank == 0;
  const at::ScalarType dtype = scalar_type(o.dtype);
  // NCCL reduces device memory: every tensor it sees lives on this rank's GPU.
  const at::Device device = comm.backend() == "nccl" ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(group->local_rank))
                                                     : at::Device(at::kCPU);
  const auto on_device = at::TensorOptions().device(device);
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  if (root && !o.json) {
    std::printf("# ddpbench allreduce: %d ranks, backend %s, dtype %s, %s buffers (%s)\n", n,
                comm.backend().c_str(), o.dtype.c_str(), o.buffer.c_str(), group->source.c_str());
    std::printf("%12s %12s %10s %10s %10s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  }
  bool all_right = true;
  for (const std::string& size_text : o.sizes) {
    const int64_t count = std::max<int64_t>(1, parse_size(size_text) / element);
    at::Tensor t = o.buffer == "reduction" ? comm.new_reduction_buffer(count, on_device.dtype(dtype))
                                           : at::empty({count}, on_device.dtype(dtype));
    for (int i = 0; i < o.warmup; ++i) {
      t.fill_(1);
      comm.all_reduce(t, ReduceOp::kSum)->wait();
    }
    double total_s = 0;
    for (int i = 0; i < o.iters; ++i) {
      t.fill_(group->rank + 1);
      comm.barrier()->wait();
      const auto start = std::chrono::steady_clock::now();
      comm.all_reduce(t, ReduceOp::kSum)->wait();
      total_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    // Every element must hold 1 + 2 + ... + n.
    const double expected = n * (n + 1) / 2.0;
    const bool right = t.to(at::kCPU).to(at::kDouble).sub(expected).abs().max().item<double>() < 1e-3 * expected;
    all_right = all_right && right;
    // Report the slowest rank's time: the collective ends when the last rank does.
    at::Tensor slowest = at::full({1}, total_s / o.iters, on_device.dtype(at::kDouble));
    at::Tensor gathered = at::empty({n}, slowest.options());
    comm.all_gather(slowest, gathered)->wait();
    const double seconds = gathered.to(at::kCPU).max().item<double>();
    const double bytes = static_cast<double>(count * element);
    const double algbw = bytes / seconds / 1e9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    if (!root) continue;
    if (o.json) {
      nlohmann::json row = {{"bench", "allreduce"}, {"impl", "ddplaunch"}, {"backend", comm.backend()},
                            {"ranks", n},          {"dtype", o.dtype},      {"bytes", count * element},
                            {"buffer", o.buffer},
                            {"seconds", seconds},  {"algbw_gbps", algbw},   {"busbw_gbps", busbw},
                            {"correct", right}};
      std::printf("%s\n", row.dump().c_str());
    } else {
      std::printf("%12lld %12lld %10.1f %10.3f %10.3f%s\n", static_cast<long long>(count * element),
                  static_cast<long long>(count), seconds * 1e6, algbw, busbw, right ? "" : "  WRONG RESULT");
    }
  }
  std::fflush(stdout);
  return all_right ? 0 : 1;
}

}  // namespace ddp::bench
