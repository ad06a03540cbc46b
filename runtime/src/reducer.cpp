#include "ddp/runtime/reducer.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>

namespace ddp {

namespace {

// Runs after the parameter's AccumulateGrad node: .grad holds the new sum.
class ReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    on_ready_();
    return outputs;
  }

 private:
  std::function<void()> on_ready_;
};

std::string device_string(const at::Tensor& t) { return t.device().str(); }

bool aliases(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

}  // namespace

struct Reducer::Bucket {
  at::Tensor flat;                // all members' gradients, back to back
  std::vector<at::Tensor> views;  // one per member, shaped like its parameter
  size_t pending = 0;             // members not ready yet in this backward
  at::Tensor wire;                // the compressed copy sent by a comm hook
  std::shared_ptr<Work> work;
};

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<Collective> collective, ReducerOptions options)
    : params_(std::move(params)), names_(std::move(names)), collective_(std::move(collective)), options_(options) {
  if (!collective_) throw std::invalid_argument("Reducer: no collective");
  if (names_.empty()) {
    for (size_t i = 0; i < params_.size(); ++i) names_.push_back("param #" + std::to_string(i));
  }
  if (names_.size() != params_.size()) {
    throw std::invalid_argument("Reducer: " + std::to_string(names_.size()) + " names for " +
                                std::to_string(params_.size()) + " parameters");
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (!p.defined() || !p.requires_grad() || !p.is_leaf()) {
      throw std::invalid_argument("Reducer: parameter '" + names_[i] + "' is not a leaf tensor that requires grad");
    }
    if (p.is_sparse()) throw std::invalid_argument("Reducer: parameter '" + names_[i] + "' is sparse");
    for (size_t j = 0; j < i; ++j) {
      if (params_[j].is_same(p)) {
        throw std::invalid_argument("Reducer: parameter '" + names_[i] + "' is the same tensor as '" + names_[j] +
                                    "'");
      }
    }
  }
  scale_ = 1.0 / static_cast<double>(collective_->size());
  ready_.assign(params_.size(), false);
  used_since_sync_.assign(params_.size(), false);
  slots_.resize(params_.size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    build_buckets({});
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>([this, i] { autograd_hook(i); })));
    grad_accumulators_.push_back(std::move(acc));
  }
}

Reducer::~Reducer() {
  for (size_t i = 0; i < grad_accumulators_.size(); ++i) grad_accumulators_[i]->del_post_hook(hook_keys_[i]);
  std::lock_guard<std::mutex> lock(mutex_);
  wait_launched_quietly_locked();
}

void Reducer::prepare_for_forward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (in_backward_) {
    fail_locked("the previous backward was interrupted before its gradient reduction ended");
  }
  if (!failure_.empty()) {
    throw ReducerError("DDP reducer: a new iteration started before the previous gradient reduction finished (" +
                       failure_ + ")");
  }
}

void Reducer::set_require_sync(bool require_sync) {
  std::lock_guard<std::mutex> lock(mutex_);
  require_sync_ = require_sync;
}

bool Reducer::require_sync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return require_sync_;
}

std::vector<PlannedBucket> Reducer::buckets() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return plan_;
}

at::Tensor Reducer::bucket_tensor(size_t i) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return buckets_.at(i)->flat;
}

int64_t Reducer::iterations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return iterations_;
}

std::vector<int64_t> Reducer::last_ready_order() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_ready_order_;
}

BackwardTiming Reducer::last_backward_timing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_timing_;
}

bool Reducer::buckets_rebuilt() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rebuilt_;
}

void Reducer::build_buckets(const std::vector<int64_t>& order) {
  std::vector<BucketParam> desc;
  desc.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    desc.push_back(BucketParam{static_cast<int64_t>(i), p.numel(), static_cast<int64_t>(p.element_size()),
                               std::string(c10::toString(p.scalar_type())), device_string(p)});
  }
  plan_ = plan_buckets(desc, BucketCaps{options_.first_bucket_cap_bytes, options_.bucket_cap_bytes}, order);

  at::NoGradGuard no_grad;
  std::vector<std::unique_ptr<Bucket>> fresh;
  for (size_t b = 0; b < plan_.size(); ++b) {
    const PlannedBucket& pb = plan_[b];
    auto bucket = std::make_unique<Bucket>();
    const at::Tensor& first = params_[static_cast<size_t>(pb.params.front())];
    // Collective: the plan, and so this sequence of calls, is the same on every rank.
    bucket->flat = collective_->new_reduction_buffer(pb.numel, first.options().requires_grad(false));
    for (size_t pos = 0; pos < pb.params.size(); ++pos) {
      const size_t index = static_cast<size_t>(pb.params[pos]);
      const at::Tensor& p = params_[index];
      at::Tensor view;
      {
        // Plain aliases, not autograd views: an optimizer may detach_() them.
        at::AutoDispatchBelowADInplaceOrView below;
        view = bucket->flat.narrow(0, pb.offsets[pos], p.numel()).view(p.sizes());
      }
      bucket->views.push_back(view);
      slots_[index] = Slot{b, pos};
      if (options_.gradient_as_bucket_view) {
        at::Tensor& grad = params_[index].mutable_grad();
        if (grad.defined()) {
          view.copy_(grad);
          grad = view;
        }
      }
    }
    bucket->pending = pb.params.size();
    fresh.push_back(std::move(bucket));
  }
  buckets_ = std::move(fresh);
}

void Reducer::autograd_hook(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_since_sync_[index] = true;
  if (!require_sync_) return;  // no_sync: .grad accumulates locally
  if (!in_backward_) start_iteration_locked();
  mark_ready_locked(index);
}

void Reducer::start_iteration_locked() {
  if (!failure_.empty()) {
    throw ReducerError(
        "DDP reducer: a new backward started before the previous gradient reduction finished (it stopped with: " +
        failure_ + ")");
  }
  in_backward_ = true;
  timing_ = BackwardTiming{};
  timing_.first_gradient = SystemClock::instance().now();
  timing_.bucket_sequences.assign(buckets_.size(), 0);
  std::fill(ready_.begin(), ready_.end(), false);
  ready_order_.clear();
  next_launch_ = 0;
  for (auto& b : buckets_) {
    b->pending = b->views.size();
    b->work.reset();
    b->wire = at::Tensor();
  }
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
}

void Reducer::mark_ready_locked(size_t index) {
  if (ready_[index]) {
    const std::string msg = "DDP reducer: parameter '" + names_[index] +
                            "' was marked ready twice in one backward (is it used in a reentrant backward, e.g. "
                            "checkpointing, or outside the model's forward?)";
    fail_locked(msg);
    throw ReducerError(msg);
  }
  ready_[index] = true;
  ready_order_.push_back(static_cast<int64_t>(index));

  const Slot s = slots_[index];
  Bucket& bucket = *buckets_[s.bucket];
  at::Tensor view = bucket.views[s.pos];
  at::Tensor& grad = params_[index].mutable_grad();
  at::NoGradGuard no_grad;
  if (!grad.defined()) {
    view.zero_();  // unused here: contributes nothing (.grad is set at the end if used elsewhere)
  } else if (options_.gradient_as_bucket_view && aliases(grad, view)) {
    view.mul_(scale_);
  } else {
    // The one division by the world size, fused into the copy into the bucket.
    at::mul_out(view, grad, at::scalar_tensor(scale_, grad.options()));
    if (options_.gradient_as_bucket_view) grad = view;
  }
  if (--bucket.pending == 0) launch_ready_buckets_locked();
}

void Reducer::launch_ready_buckets_locked() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    at::Tensor wire = b.flat;
    if (options_.comm_hook == CommHook::kFp16) {
      b.wire = b.flat.to(at::kHalf);
      wire = b.wire;
    } else if (options_.comm_hook == CommHook::kBf16) {
      b.wire = b.flat.to(at::kBFloat16);
      wire = b.wire;
    }
    b.work = collective_->all_reduce(wire, ReduceOp::kSum, CollectiveTag{static_cast<int>(next_launch_)});
    timing_.bucket_sequences[next_launch_] = b.work->sequence();
    ++next_launch_;
  }
}

void Reducer::finalize_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_) return;
  timing_.backward_end = SystemClock::instance().now();
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (options_.find_unused_parameters) {
      mark_ready_locked(i);
    } else {
      missing.push_back(i);
    }
  }
  if (!missing.empty()) {
    std::ostringstream msg;
    msg << "DDP reducer: parameter '" << names_[missing.front()] << "' (index " << missing.front()
        << ") got no gradient in this backward";
    if (missing.size() > 1) {
      msg << "; nor did";
      for (size_t k = 1; k < missing.size() && k < 8; ++k) msg << " '" << names_[missing[k]] << "'";
      if (missing.size() > 8) msg << " and " << missing.size() - 8 << " more";
    }
    msg << ". Make every parameter take part in computing the loss, or construct DDP with "
           "find_unused_parameters=true";
    fail_locked(msg.str());
    throw ReducerError(msg.str());
  }
  // Which parameters some rank used since the last reduction: those nobody
  // used keep an undefined .grad, as in PyTorch (optimizers then skip them).
  at::Tensor used;
  std::shared_ptr<Work> used_work;
  if (options_.find_unused_parameters) {
    used = at::zeros({static_cast<int64_t>(params_.size())}, at::kInt);
    auto* flags = used.data_ptr<int32_t>();
    for (size_t i = 0; i < params_.size(); ++i) flags[i] = used_since_sync_[i] ? 1 : 0;
    used = used.to(comm_device());  // NCCL needs device tensors
    used_work = collective_->all_reduce(used, ReduceOp::kSum);
  }
  finish_reduction_locked(used_work, used);
  timing_.reduced = SystemClock::instance().now();
  last_timing_ = timing_;
  std::fill(used_since_sync_.begin(), used_since_sync_.end(), false);
  ++iterations_;
  last_ready_order_ = ready_order_;
  in_backward_ = false;
  if (options_.rebuild_buckets && !rebuilt_) rebuild_locked();
}

void Reducer::finish_reduction_locked(const std::shared_ptr<Work>& used_work, const at::Tensor& used) {
  at::NoGradGuard no_grad;
  if (used_work) {
    std::string error;
    try {
      if (!used_work->wait(options_.timeout)) error = "the all_reduce of used parameters did not finish in time";
    } catch (const std::exception& e) {
      error = std::string("the all_reduce of used parameters failed: ") + e.what();
    }
    if (!error.empty()) {
      fail_locked("DDP reducer: " + error);
      throw ReducerError("DDP reducer: " + error);
    }
  }
  const at::Tensor used_cpu = used.defined() ? used.to(at::kCPU) : at::Tensor();
  const int32_t* used_anywhere = used_cpu.defined() ? used_cpu.data_ptr<int32_t>() : nullptr;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = *buckets_[b];
    std::string error;
    try {
      if (!bucket.work) {
        error = "bucket " + std::to_string(b) + " was never launched";
      } else if (!bucket.work->wait(options_.timeout)) {
        error = "bucket " + std::to_string(b) + "'s all_reduce did not finish in time";
      }
    } catch (const std::exception& e) {
      error = "bucket " + std::to_string(b) + "'s all_reduce failed: " + e.what();
    }
    if (!error.empty()) {
      const std::string msg = "DDP reducer: " + error;
      fail_locked(msg);
      throw ReducerError(msg);
    }
    if (bucket.wire.defined()) {
      bucket.flat.copy_(bucket.wire);
      bucket.wire = at::Tensor();
    }
    bucket.work.reset();
    const PlannedBucket& pb = plan_[b];
    for (size_t pos = 0; pos < pb.params.size(); ++pos) {
      const auto index = static_cast<size_t>(pb.params[pos]);
      at::Tensor& grad = params_[index].mutable_grad();
      const at::Tensor& view = bucket.views[pos];
      if (aliases(grad, view)) continue;  // gradient_as_bucket_view: already there
      if (grad.defined()) {
        grad.copy_(view);
      } else if (used_anywhere == nullptr || used_anywhere[index] > 0) {
        grad = options_.gradient_as_bucket_view ? view : view.clone();
      }
    }
  }
}

void Reducer::rebuild_locked() {
  rebuilt_ = true;
  if (last_ready_order_.size() != params_.size()) return;
  at::Tensor order = at::tensor(last_ready_order_, at::kLong).to(comm_device());
  try {
    auto work = collective_->broadcast(order, 0);
    if (!work->wait(options_.timeout)) throw CollectiveError("timed out");
  } catch (const std::exception& e) {
    const std::string msg = std::string("DDP reducer: broadcasting the bucket order failed: ") + e.what();
    fail_locked(msg);
    throw ReducerError(msg);
  }
  order = order.to(at::kCPU);
  std::vector<int64_t> agreed(static_cast<size_t>(order.numel()));
  std::copy_n(order.data_ptr<int64_t>(), agreed.size(), agreed.begin());
  build_buckets(agreed);
}

at::Device Reducer::comm_device() const {
  return params_.empty() ? at::Device(at::kCPU) : params_.front().device();
}

void Reducer::wait_launched_quietly_locked() {
  for (auto& b : buckets_) {
    if (!b->work) continue;
    try {
      b->work->wait(options_.timeout);
    } catch (...) {
    }
    b->work.reset();
    b->wire = at::Tensor();
  }
}

void Reducer::fail_locked(const std::string& message) {
  wait_launched_quietly_locked();
  failure_ = message;
  in_backward_ = false;
}

}  // namespace ddp
