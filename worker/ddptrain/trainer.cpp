#include "trainer.h"

#include <torch/cuda.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "datasets.h"
#include "fault_injection.h"
#include "ddp/common/checkpoint_store.h"
#include "ddp/common/clock.h"
#include "ddp/runtime/distributed_data_parallel.h"
#include "ddp/runtime/init.h"
#include "lr_schedule.h"
#include "mixed_precision.h"
#include "models.h"
#include "state_dict.h"
#include "step_stats.h"
#include "trace_writer.h"
#include "training_state.h"

namespace ddp::train {
namespace {

using Seconds = std::chrono::duration<double>;
using Ddp = DistributedDataParallel<TrainModelImpl>;

SteadyTime now() { return SystemClock::instance().now(); }

ModelConfig model_config(const TrainOptions& o) {
  ModelConfig c;
  c.kind = o.model;
  c.mlp_sizes = o.mlp_sizes;
  c.lm_context = o.context;
  return c;
}

CommHook comm_hook(const std::string& name) {
  if (name == "fp16") return CommHook::kFp16;
  if (name == "bf16") return CommHook::kBf16;
  return CommHook::kAllReduce;
}

/// Rank root's bytes on every rank (the checkpoint rank 0 found).
std::string broadcast_bytes(Collective& comm, std::string bytes, int root, const torch::Device& device) {
  at::Tensor length = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong).to(device);
  comm.broadcast(length, root)->wait();
  const int64_t n = length.cpu().item<int64_t>();
  if (n == 0) return {};
  at::Tensor data = comm.rank() == root
                        ? torch::from_blob(bytes.data(), {n}, torch::kUInt8).to(device, /*non_blocking=*/false, true)
                        : torch::empty({n}, torch::TensorOptions(torch::kUInt8).device(device));
  comm.broadcast(data, root)->wait();
  const at::Tensor host = data.cpu().contiguous();
  return std::string(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(n));
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& o) : o_(o), trace_(0) {}

  int run() {
    join();
    build();
    resume();
    ddp_ = std::make_unique<Ddp>(model_, group_->shared_collective(), ddp_options());
    announce();
    const SteadyTime started = now();
    for (int64_t s = start_step_; s < o_.steps; ++s) {
      train_step(s);
      // Every --checkpoint-every steps, at the end, and when ddplaunch asks
      // the job to stop (a preemption): every rank stops after the same step.
      const bool stop = group_->progress().stop_requested() && s + 1 < o_.steps;
      const bool due = o_.checkpoint_every > 0 && (s + 1) % o_.checkpoint_every == 0;
      if (checkpoints_ && (due || stop || s + 1 == o_.steps)) save_checkpoint(s + 1);
      if (stop) {
        if (group_->rank == 0) {
          std::printf("ddptrain: stopping after step %lld of %lld as ddplaunch asked (%s); start the job again "
                      "to continue\n",
                      static_cast<long long>(s + 1), static_cast<long long>(o_.steps),
                      checkpoints_ ? "checkpoint written" : "no --checkpoint-dir: nothing saved");
          std::fflush(stdout);
        }
        return 0;
      }
    }
    finish(Seconds(now() - started).count());
    return 0;
  }

 private:
  // --- set-up ---------------------------------------------------------------

  void join() {
    InitOptions init;
    init.allow_single_process = true;
    const bool cuda_wanted = o_.device == "cuda" || (o_.device == "auto" && o_.backend != "gloo" && torch::cuda::is_available());
    if (o_.device == "cuda" && !torch::cuda::is_available()) {
      throw std::runtime_error("--device cuda: no CUDA device is visible (or LibTorch was built without CUDA)");
    }
    init.backend = o_.backend != "auto" ? o_.backend : (cuda_wanted ? "auto" : "gloo");
    group_ = ddp::init(init);
    batch_ = per_rank_batch(o_, group_->world_size);
    if (cuda_wanted) {
      device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(group_->local_rank % torch::cuda::device_count()));
    }
    if (group_->collective().backend() == "nccl" && !device_.is_cuda()) {
      throw std::runtime_error("--backend nccl reduces CUDA tensors: use --device cuda (or auto on a GPU machine)");
    }
    if (o_.precision == "fp16" && !device_.is_cuda()) {
      throw std::runtime_error("--precision fp16 needs a CUDA device; on the CPU use --precision bf16");
    }
    trace_ = TraceWriter(group_->rank);
    std::vector<FaultSpec> faults;
    for (const std::string& f : o_.inject_faults) faults.push_back(parse_fault(f));
    const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
    faults_.emplace(std::move(faults), group_->rank, restarts ? std::atoi(restarts) : 0,
                    [this] { group_->stop_heartbeats(); });
  }

  void build() {
    torch::manual_seed(o_.seed);  // identical parameters on every rank
    model_ = make_model(model_config(o_));
    if (!o_.init_file.empty()) load_state_dict(*model_, load_tensor_dict(o_.init_file), o_.init_file);
    if (o_.precision == "fp64") model_->to(torch::kDouble);
    model_->to(device_);
    input_dtype_ = o_.precision == "fp64" ? torch::kDouble : torch::kFloat;
    autocast_dtype_ = o_.precision == "bf16" ? torch::kBFloat16 : o_.precision == "fp16" ? torch::kHalf : torch::kFloat;
    data_ = make_dataset();
    params_ = model_->parameters();
    if (o_.optimizer == "adamw") {
      optimizer_ = std::make_unique<torch::optim::AdamW>(
          params_, torch::optim::AdamWOptions(o_.lr).weight_decay(o_.weight_decay));
    } else {
      optimizer_ = std::make_unique<torch::optim::SGD>(
          params_, torch::optim::SGDOptions(o_.lr).momentum(o_.momentum).weight_decay(o_.weight_decay));
    }
    schedule_ = LrSchedule{o_.lr, o_.lr_schedule, o_.warmup_steps, o_.steps};
    if (!o_.checkpoint_dir.empty()) checkpoints_.emplace(o_.checkpoint_dir, o_.keep);
  }

  std::unique_ptr<Dataset> make_dataset() const {
    if (!o_.text_file.empty()) return load_text_file(o_.text_file, o_.context);
    if (o_.model == "lm") return make_text_dataset(make_synthetic_text(o_.seed, o_.samples + o_.context), o_.context);
    if (!o_.data_file.empty()) {
      auto data = load_classification_file(o_.data_file);
      const torch::Tensor probe = data->gather(torch::zeros({1}, torch::kLong)).input;
      const auto want = model_->input_shape();
      if (probe.sizes().slice(1) != at::IntArrayRef(want)) {
        throw std::runtime_error(o_.data_file + ": samples have shape " + c10::str(probe.sizes().slice(1)) +
                                 ", the model takes " + c10::str(at::IntArrayRef(want)));
      }
      return data;
    }
    return make_synthetic_classification(o_.seed, o_.samples, model_->input_shape(), model_->classes());
  }

  DdpOptions ddp_options() const {
    DdpOptions d;
    d.bucket_cap_mb = o_.bucket_cap_mb;
    d.first_bucket_cap_mb = o_.first_bucket_mb;
    d.gradient_as_bucket_view = o_.grad_as_bucket_view;
    d.find_unused_parameters = o_.find_unused_parameters;
    d.comm_hook = comm_hook(o_.comm_hook);
    return d;
  }

  nlohmann::json checkpoint_metadata(int64_t next_step) const {
    return {{"next_step", next_step}, {"model", o_.model},       {"mlp_sizes", o_.mlp_sizes},
            {"seed", o_.seed},        {"world_size", group_->world_size}, {"batch_size", batch_},
            {"optimizer", o_.optimizer}, {"precision", o_.precision}};
  }

  // Rank 0 finds the newest valid checkpoint and sends it to every rank, so
  // nodes without a shared file system resume from the same one.
  void resume() {
    if (!checkpoints_) return;
    std::string payload;
    if (group_->rank == 0) {
      std::vector<SkippedCheckpoint> skipped;
      auto found = checkpoints_->load_latest(&skipped);
      for (const auto& s : skipped) std::fprintf(stderr, "ddptrain: skipping damaged checkpoint %s: %s\n", s.path.c_str(), s.reason.c_str());
      if (found) {
        const auto& m = found->metadata;
        // The checksum says the file is whole, not that ddptrain wrote it.
        const auto not_ours = [&found, &m](const std::string& why) {
          return std::runtime_error("checkpoint " + found->path + " " + why + " (metadata " +
                                    m.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 200) +
                                    ")");
        };
        if (!m.is_object()) throw not_ours("was not written by ddptrain: its metadata is not a JSON object");
        int world = 0;
        int64_t batch = 0;
        try {
          if (m.value("model", o_.model) != o_.model || m.value("mlp_sizes", o_.mlp_sizes) != o_.mlp_sizes) {
            throw not_ours("was written for another model");
          }
          world = m.value("world_size", group_->world_size);
          batch = m.value("batch_size", batch_);
        } catch (const nlohmann::json::exception& e) {
          throw not_ours(std::string("has metadata ddptrain cannot read: ") + e.what());
        }
        std::printf("ddptrain: resuming from %s (step %lld)\n", found->path.c_str(), static_cast<long long>(found->step));
        // Step s reads global positions [s*G, (s+1)*G) whatever the world
        // size: only a different global batch changes the training.
        if (world * batch != batch_ * group_->world_size) {
          std::printf("ddptrain: warning: the checkpoint was written with %d rank(s) x batch %lld; the data order "
                      "from here on follows this run's %d x %lld\n",
                      world, static_cast<long long>(batch), group_->world_size, static_cast<long long>(batch_));
        } else if (world != group_->world_size) {
          std::printf("ddptrain: the checkpoint was written by %d rank(s); continuing on %d with the same global "
                      "batch %lld\n", world, group_->world_size, static_cast<long long>(batch_ * group_->world_size));
        }
        std::fflush(stdout);
        payload = std::move(found->payload);
      }
    }
    payload = broadcast_bytes(group_->collective(), std::move(payload), 0, device_);
    if (payload.empty()) return;
    const TrainingPosition p = decode_training_state(payload, *model_, *optimizer_);
    start_step_ = p.next_step;
    scaler_.restore(p.loss_scale, p.good_steps);
  }

  void announce() const {
    if (group_->rank != 0 || o_.quiet) return;
    std::printf("ddptrain: %s, %lld parameters, %d rank(s) (%s, %s on %s), %lld samples, batch %lld x %d = %lld, "
                "%lld steps from step %lld\n",
                o_.model.c_str(), static_cast<long long>(parameter_count(*model_)), group_->world_size,
                group_->source.c_str(), group_->collective().backend().c_str(), device_.str().c_str(),
                static_cast<long long>(data_->size()), static_cast<long long>(batch_), group_->world_size,
                static_cast<long long>(batch_ * group_->world_size), static_cast<long long>(o_.steps),
                static_cast<long long>(start_step_));
    std::fflush(stdout);
  }

  // --- one step ---------------------------------------------------------------

  // As PyTorch 2's zero_grad(set_to_none=True): autograd then hands each new
  // gradient over instead of adding it to zeros (saves a memset and an add
  // over every gradient per step). With --grad-as-bucket-view the reducer
  // copies each new gradient into its bucket and makes .grad the bucket's
  // view again.
  void clear_gradients() {
    for (auto& p : params_) p.mutable_grad().reset();
  }

  void train_step(int64_t s) {
    TrainingProgress& progress = group_->progress();
    progress.begin_step(s);
    progress.set_phase(Phase::kOther);
    faults_->before_step(s);
    const SteadyTime step_start = now();
    progress.set_phase(Phase::kData);
    const double lr = schedule_.at(s);
    for (auto& g : optimizer_->param_groups()) g.options().set_lr(lr);
    clear_gradients();

    const torch::Tensor indices = shard_indices(s, group_->rank, group_->world_size, batch_, data_->size(),
                                                o_.shuffle ? std::optional<uint64_t>(o_.seed) : std::nullopt);
    Batch batch = data_->gather(indices);
    batch.input = batch.input.to(device_, model_->token_input() ? torch::kLong : input_dtype_);
    batch.target = batch.target.to(device_);
    const SteadyTime data_end = now();
    trace_.span("data", TraceLane::kCompute, step_start, data_end, s);

    const int64_t micro = batch_ / o_.grad_accum;
    double loss_sum = 0;
    for (int64_t k = 0; k < o_.grad_accum; ++k) {
      const bool last = k + 1 == o_.grad_accum;
      std::optional<DistributedDataParallelBase::NoSyncGuard> no_sync;
      if (!last) no_sync.emplace(ddp_->no_sync());
      const SteadyTime f0 = now();
      progress.set_phase(Phase::kForward);
      torch::Tensor loss;
      {
        AutocastScope autocast(device_.type(), autocast_dtype_);
        const torch::Tensor out = ddp_->forward(batch.input.narrow(0, k * micro, micro));
        loss = model_->loss(out, batch.target.narrow(0, k * micro, micro)).to(torch::kFloat) / static_cast<double>(o_.grad_accum);
      }
      const SteadyTime f1 = now();
      trace_.span("forward", TraceLane::kCompute, f0, f1, s);
      loss_sum += loss.item<double>();
      progress.set_phase(Phase::kBackward);
      (autocast_dtype_ == torch::kHalf ? loss * scaler_.scale() : loss).backward();
      trace_.span(last ? "backward" : "backward (no_sync)", TraceLane::kCompute, f1, now(), s);
    }
    const auto [communication, exposed] = trace_reduction(s);
    progress.add_wait(exposed.count());

    const SteadyTime o0 = now();
    progress.set_phase(Phase::kOptimizer);
    const bool apply = autocast_dtype_ != torch::kHalf || scaler_.unscale_and_update(params_);
    if (apply) optimizer_->step();
    const SteadyTime o1 = now();
    trace_.span(apply ? "optimizer" : "optimizer (skipped: inf/nan gradients)", TraceLane::kCompute, o0, o1, s);

    progress.set_phase(Phase::kOther);
    progress.end_step();
    const Seconds took = o1 - step_start;
    const int64_t samples = batch_ * group_->world_size;
    window_.add(took, samples, communication, exposed);
    total_.add(took, samples, communication, exposed);
    last_local_loss_ = loss_sum;
    const bool first = s == start_step_;
    const bool log_now = o_.log_every > 0 && ((s + 1) % o_.log_every == 0 || first);
    if (log_now || first || s + 1 == o_.steps) report(s, lr, log_now && !o_.quiet);
  }

  // The reduction of the last backward: bucket all-reduces onto the trace, and
  // (time they ran, time backward's end waited for them).
  std::pair<Seconds, Seconds> trace_reduction(int64_t s) {
    const BackwardTiming t = ddp_->reducer().last_backward_timing();
    if (t.bucket_sequences.empty()) return {Seconds(0), Seconds(0)};
    Seconds busy(0);
    const auto records = group_->collective().flight_record().tail(t.bucket_sequences.size() + 8);
    for (const CollectiveRecord& r : records) {
      for (size_t b = 0; b < t.bucket_sequences.size(); ++b) {
        if (r.sequence != t.bucket_sequences[b] || r.ended < r.started) continue;
        busy += r.ended - r.started;
        trace_.span("all_reduce bucket " + std::to_string(b), TraceLane::kCommunication, r.started, r.ended, s, r.bytes);
      }
    }
    trace_.span("wait for gradients", TraceLane::kCompute, t.backward_end, t.reduced, s);
    return {busy, t.reduced - t.backward_end};
  }

  // Every rank takes part (the mean loss over ranks is a collective); rank 0 prints.
  void report(int64_t s, double lr, bool print) {
    at::Tensor loss = torch::tensor({last_local_loss_}, torch::kDouble).to(device_);
    group_->collective().all_reduce(loss, ReduceOp::kAvg)->wait();
    last_loss_ = loss.cpu().item<double>();
    if (std::isnan(first_loss_)) first_loss_ = last_loss_;
    if (print && group_->rank == 0) {
      std::printf("step %6lld/%lld  loss %.4f  lr %.4g  %9.0f samples/s  step %7.2f ms  comm hidden %3.0f%%\n",
                  static_cast<long long>(s + 1), static_cast<long long>(o_.steps), last_loss_, lr,
                  window_.samples_per_second(), window_.mean_step_seconds() * 1e3, window_.hidden_share() * 100);
      std::fflush(stdout);
    }
    window_.reset();
  }

  void save_checkpoint(int64_t next_step) {
    if (group_->rank != 0) return;
    group_->progress().set_phase(Phase::kCheckpoint);
    const SteadyTime t0 = now();
    TrainingPosition p;
    p.next_step = next_step;
    p.loss_scale = scaler_.scale();
    p.good_steps = scaler_.good_steps();
    const std::string path = checkpoints_->save(next_step, checkpoint_metadata(next_step),
                                                encode_training_state(*model_, *optimizer_, p));
    trace_.span("checkpoint", TraceLane::kCompute, t0, now(), next_step - 1);
    if (!o_.quiet) {
      std::printf("ddptrain: checkpoint %s\n", path.c_str());
      std::fflush(stdout);  // under a launcher stdout is a pipe: this line must survive a crash
    }
  }

  void finish(double elapsed_s) {
    if (group_->rank == 0) {
      if (!o_.save_final.empty()) save_tensor_dict(o_.save_final, state_dict(*model_));
      if (start_step_ >= o_.steps) {
        std::printf("ddptrain: nothing to do: the checkpoint is already at step %lld of %lld\n",
                    static_cast<long long>(start_step_), static_cast<long long>(o_.steps));
      } else {
        std::printf("ddptrain: done: %lld steps on %d rank(s) in %.2f s, loss %.4f -> %.4f, %.0f samples/s, "
                    "step %.2f ms, comm hidden %.0f%%\n",
                    static_cast<long long>(total_.steps()), group_->world_size, elapsed_s, first_loss_, last_loss_,
                    total_.samples_per_second(), total_.mean_step_seconds() * 1e3, total_.hidden_share() * 100);
      }
      std::fflush(stdout);
    }
    if (!o_.trace_file.empty()) trace_.write(trace_path_for_rank(o_.trace_file, group_->rank));
  }

  const TrainOptions& o_;
  int64_t batch_ = 0;  // samples per rank and step (per_rank_batch)
  std::unique_ptr<ProcessGroup> group_;
  torch::Device device_{torch::kCPU};
  torch::ScalarType input_dtype_ = torch::kFloat;
  torch::ScalarType autocast_dtype_ = torch::kFloat;
  std::shared_ptr<TrainModelImpl> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<Ddp> ddp_;
  std::optional<CheckpointStore> checkpoints_;
  DynamicLossScaler scaler_;
  std::optional<FaultInjector> faults_;
  LrSchedule schedule_;
  TraceWriter trace_;
  StepStats window_;
  StepStats total_;
  int64_t start_step_ = 0;
  double last_local_loss_ = 0;
  double first_loss_ = std::numeric_limits<double>::quiet_NaN();
  double last_loss_ = std::numeric_limits<double>::quiet_NaN();
};

}  // namespace

int run_training(const TrainOptions& options) {
  try {
    return Trainer(options).run();
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ddptrain: error: %s\n", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddptrain: error: %s\n", e.what());
  }
  return 1;
}

}  // namespace ddp::train
