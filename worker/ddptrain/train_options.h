#pragma once
// TrainOptions: everything ddptrain's command line sets, parsed and checked
// before any rank joins the job (bad input is one line and exit 2, with
// nothing started). Plain C++: no LibTorch here.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp::train {

/// Bad command line; the message names the option and what is wrong.
class TrainUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainOptions {
  // Model.
  std::string model = "mlp";  // mlp | cnn | lm
  std::vector<int64_t> mlp_sizes{32, 64, 64, 10};
  int64_t context = 64;       // lm: bytes per sample

  // Data: synthetic (default), --data-file, or --text (lm).
  std::string data_file;
  std::string text_file;
  int64_t samples = 16384;    // synthetic set size
  uint64_t seed = 0;
  bool shuffle = false;

  // Optimization.
  int64_t steps = 100;
  int64_t batch_size = 32;    // per rank and step
  int64_t global_batch_size = 0;  // > 0: per step over all ranks; each rank takes G / world size
  int64_t grad_accum = 1;     // micro-batches per step (batch_size / grad_accum samples each)
  std::string optimizer = "sgd";  // sgd | adamw
  double lr = 0.1;
  double momentum = 0;
  double weight_decay = 0;
  std::string lr_schedule = "constant";  // constant | cosine
  int64_t warmup_steps = 0;
  std::string precision = "fp32";  // fp32 | fp64 | bf16 | fp16
  std::string device = "auto";     // auto | cpu | cuda
  std::string backend = "auto";    // auto | gloo | nccl

  // Reducer.
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  // Unlike the library's default (PyTorch's): ddptrain owns its gradients, so
  // it takes the faster layout (no copy of the buckets back into .grad).
  bool grad_as_bucket_view = true;
  bool find_unused_parameters = false;
  std::string comm_hook = "allreduce";  // allreduce | fp16 | bf16

  // Files.
  std::string init_file;
  std::string save_final;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // steps; 0: only with --checkpoint-dir at the end
  int keep = 3;
  std::string trace_file;

  // Faults (fault_injection.h), kept as given: parsed again by the trainer.
  std::vector<std::string> inject_faults;

  // Output.
  int64_t log_every = 10;
  bool quiet = false;
};

/// Parses "32,64,64,10" (spaces allowed around items) into positive integers.
/// std::invalid_argument naming `what` (e.g. "--mlp-sizes") and the bad item.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what = "list");

/// Parses argv; nullopt after --help (printed). Throws TrainUsageError.
std::optional<TrainOptions> parse_train_options(int argc, char** argv);

/// Samples per rank and step on `world_size` ranks: --batch-size, or
/// --global-batch-size / world_size. With a global batch the mathematics of a
/// step do not depend on the world size, so a job may resume on another one.
/// Throws TrainUsageError when the world size does not divide the global
/// batch, or the rank's share does not split into --grad-accum micro-batches.
int64_t per_rank_batch(const TrainOptions& o, int world_size);

}  // namespace ddp::train
