#include "train_options.h"

#include "fault_injection.h"

#include <CLI/CLI.hpp>

#include <sstream>

namespace ddp::train {
namespace {

void check(const TrainOptions& o) {
  auto fail = [](const std::string& m) { throw TrainUsageError(m); };
  if (o.steps < 1) fail("--steps must be at least 1");
  if (o.batch_size < 1) fail("--batch-size must be at least 1");
  if (o.grad_accum < 1) fail("--grad-accum must be at least 1");
  if (o.global_batch_size < 0) fail("--global-batch-size must be positive");
  if (o.global_batch_size == 0 && o.batch_size % o.grad_accum != 0) {
    fail("--batch-size " + std::to_string(o.batch_size) + " is not a multiple of --grad-accum " +
         std::to_string(o.grad_accum) + " (each step runs grad-accum micro-batches of equal size)");
  }
  if (!(o.lr > 0)) fail("--lr must be positive");
  if (o.momentum < 0 || o.momentum >= 1) fail("--momentum must be in [0, 1)");
  if (o.weight_decay < 0) fail("--weight-decay must not be negative");
  if (o.warmup_steps < 0) fail("--warmup-steps must not be negative");
  if (o.samples < 1) fail("--samples must be at least 1");
  if (o.context < 1) fail("--context must be at least 1");
  if (o.checkpoint_every < 0) fail("--checkpoint-every must not be negative");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) fail("--checkpoint-every needs --checkpoint-dir");
  if (o.keep < 1) fail("--keep must be at least 1");
  if (o.log_every < 0) fail("--log-every must not be negative");
  if (!(o.bucket_cap_mb > 0) || !(o.first_bucket_mb > 0)) fail("--bucket-cap-mb and --first-bucket-mb must be positive");
  if (!o.text_file.empty() && o.model != "lm") fail("--text trains the language model: add --model lm");
  if (o.model == "lm" && !o.data_file.empty()) fail("--data-file holds classification data; --model lm reads --text");
  if (!o.text_file.empty() && !o.data_file.empty()) fail("give either --data-file or --text, not both");
  for (const std::string& f : o.inject_faults) {
    try {
      parse_fault(f);
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::string item;
  std::istringstream in(text);
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(what + ": " + why + " in '" + text + "' (expected positive integers like 32,64,10)");
  };
  if (text.find_first_not_of(" \t") == std::string::npos) throw bad("empty list");
  while (std::getline(in, item, ',')) {
    const auto first = item.find_first_not_of(" \t");
    const auto last = item.find_last_not_of(" \t");
    if (first == std::string::npos) throw bad("empty item");
    item = item.substr(first, last - first + 1);
    if (item.find_first_not_of("0123456789") != std::string::npos) throw bad("'" + item + "' is not a positive integer");
    int64_t value = 0;
    try {
      value = std::stoll(item);
    } catch (const std::exception&) {
      throw bad("'" + item + "' is out of range");
    }
    if (value <= 0) throw bad("'" + item + "' is not a positive integer");
    out.push_back(value);
  }
  if (!text.empty() && text.back() == ',') throw bad("empty item");
  return out;
}

std::optional<TrainOptions> parse_train_options(int argc, char** argv) {
  TrainOptions o;
  CLI::App app{"ddptrain: data-parallel training on the ddplaunch runtime (run it under ddplaunch)", "ddptrain"};
  app.option_defaults()->always_capture_default();
  std::string mlp_sizes = "32,64,64,10";

  app.add_option("--model", o.model, "mlp, cnn or lm (byte-level transformer)")
      ->check(CLI::IsMember({"mlp", "cnn", "lm"}));
  app.add_option("--mlp-sizes", mlp_sizes, "MLP layer sizes: input,hidden...,classes");
  app.add_option("--context", o.context, "lm: bytes per sample");

  app.add_option("--data-file", o.data_file, "classification data: a torch.save'd dict {'x': float [N,...], 'y': int64 [N]}");
  app.add_option("--text", o.text_file, "a text file for --model lm");
  app.add_option("--samples", o.samples, "size of the synthetic data set");
  app.add_option("--seed", o.seed, "seed of the parameters and the synthetic data");
  app.add_flag("--shuffle", o.shuffle, "shuffle each epoch (deterministic from the seed)");

  app.add_option("--steps", o.steps, "optimizer steps");
  auto* per_rank = app.add_option("--batch-size", o.batch_size, "samples per rank and step");
  app.add_option("--global-batch-size", o.global_batch_size,
                 "samples per step over all ranks, each rank taking an equal share (instead of --batch-size): "
                 "the same training on any world size that divides it, so a job can resume on fewer or more ranks")
      ->excludes(per_rank);
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per step (reduced once per step)");
  app.add_option("--optimizer", o.optimizer)->check(CLI::IsMember({"sgd", "adamw"}));
  app.add_option("--lr", o.lr, "learning rate");
  app.add_option("--momentum", o.momentum, "SGD momentum");
  app.add_option("--weight-decay", o.weight_decay);
  app.add_option("--lr-schedule", o.lr_schedule)->check(CLI::IsMember({"constant", "cosine"}));
  app.add_option("--warmup-steps", o.warmup_steps, "linear warm-up steps");
  app.add_option("--precision", o.precision, "fp32, fp64, or mixed bf16 / fp16 (fp16 with dynamic loss scaling)")
      ->check(CLI::IsMember({"fp32", "fp64", "bf16", "fp16"}));
  app.add_option("--device", o.device, "auto (cuda:LOCAL_RANK when a GPU is visible), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--backend", o.backend, "auto (NCCL on CUDA, Gloo on CPU), gloo or nccl")
      ->check(CLI::IsMember({"auto", "gloo", "nccl"}));

  app.add_option("--bucket-cap-mb", o.bucket_cap_mb, "gradient bucket size (MiB)");
  app.add_option("--first-bucket-mb", o.first_bucket_mb, "first bucket size (MiB)");
  app.add_flag("--grad-as-bucket-view,!--no-grad-as-bucket-view", o.grad_as_bucket_view,
               "gradients are views into the buckets, so none is copied back out of them (default: on)");
  app.add_flag("--find-unused-parameters", o.find_unused_parameters);
  app.add_option("--comm-hook", o.comm_hook, "allreduce, fp16 or bf16 (compressed gradients)")
      ->check(CLI::IsMember({"allreduce", "fp16", "bf16"}));

  app.add_option("--init", o.init_file, "initial parameters: a torch.save'd state_dict");
  app.add_option("--save-final", o.save_final, "write the final parameters as a state_dict (torch.load reads it)");
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "resumable checkpoints (resumes from the newest valid one)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints");
  app.add_option("--keep", o.keep, "checkpoints kept");
  app.add_option("--trace", o.trace_file, "Chrome/Perfetto trace: F.json (rank r > 0 writes F.rank<r>.json)");

  app.add_option("--inject-fault", o.inject_faults,
                 "test/demo aid: KIND[=SECONDS]@STEP:RANK, KIND crash|exit|hang|silent|slow, RANK or '*' "
                 "(first attempt only)");
  app.add_option("--log-every", o.log_every, "steps between progress lines (0: none)");
  app.add_flag("--quiet", o.quiet, "only the summary line");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw TrainUsageError(e.what());
  }
  try {
    o.mlp_sizes = parse_int_list(mlp_sizes, "--mlp-sizes");
  } catch (const std::invalid_argument& e) {
    throw TrainUsageError(e.what());
  }
  if (o.mlp_sizes.size() < 2) throw TrainUsageError("--mlp-sizes needs at least two sizes: input,...,classes");
  check(o);
  return o;
}

int64_t per_rank_batch(const TrainOptions& o, int world_size) {
  if (o.global_batch_size <= 0) return o.batch_size;
  if (world_size < 1 || o.global_batch_size % world_size != 0) {
    throw TrainUsageError("--global-batch-size " + std::to_string(o.global_batch_size) + " is not divisible by the " +
                          std::to_string(world_size) + " ranks of this run: each rank takes an equal share, so " +
                          "give a multiple of the world size");
  }
  const int64_t batch = o.global_batch_size / world_size;
  if (batch % o.grad_accum != 0) {
    throw TrainUsageError("--global-batch-size " + std::to_string(o.global_batch_size) + " gives each of the " +
                          std::to_string(world_size) + " ranks " + std::to_string(batch) +
                          " samples, not a multiple of --grad-accum " + std::to_string(o.grad_accum));
  }
  return batch;
}

}  // namespace ddp::train
