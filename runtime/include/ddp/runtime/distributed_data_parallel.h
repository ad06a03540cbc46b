#pragma once
// DistributedDataParallel: data-parallel training of a torch::nn module, as
// PyTorch's DDP. Usage:
//
//   Net net(...);                                   // a TORCH_MODULE holder
//   ddp::DistributedDataParallel ddp(net, collective, ddp::DdpOptions{});
//   torch::optim::SGD opt(net->parameters(), 0.1);
//   for (...) {
//     opt.zero_grad();
//     auto loss = loss_fn(ddp.forward(x), y);        // = prepare_forward() + net->forward(x)
//     loss.backward();                                // gradients averaged over ranks on return
//     opt.step();
//   }
//   { auto guard = ddp.no_sync(); loss_fn(ddp(x1), y1).backward(); }  // accumulate locally
//   loss_fn(ddp(x2), y2).backward();                                   // reduce the sum
//
// Construction checks that every rank has the same parameters (names,
// shapes, dtypes; all_gather of a signature, the error names the first
// mismatch), broadcasts parameters and buffers from rank 0, and installs the
// Reducer (reducer.h) on the parameters that require grad. forward() (or
// operator()) broadcasts buffers from rank 0 first when broadcast_buffers is
// on, then calls the module's forward. Code that calls the module directly
// calls prepare_forward() itself.
//
// Threading: as the module: one training thread per instance.

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddp/runtime/collective.h"
#include "ddp/runtime/reducer.h"

namespace ddp {

struct DdpOptions {
  double bucket_cap_mb = 25;
  double first_bucket_cap_mb = 1;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  CommHook comm_hook = CommHook::kAllReduce;
};

/// The module-type independent part (parameters, buffers, reducer).
class DistributedDataParallelBase {
 public:
  /// Throws ReducerError (mismatched parameters) or CollectiveError.
  DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Collective> collective,
                              DdpOptions options);
  virtual ~DistributedDataParallelBase() = default;
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  /// Before a forward: checks that the previous reduction finished (else
  /// ReducerError), then broadcasts buffers from rank 0 (when broadcast_buffers).
  void prepare_forward();

  /// RAII: while alive, backward only accumulates into .grad locally.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& reducer) : reducer_(&reducer), previous_(reducer.require_sync()) {
      reducer.set_require_sync(false);
    }
    ~NoSyncGuard() {
      if (reducer_) reducer_->set_require_sync(previous_);
    }
    NoSyncGuard(NoSyncGuard&& other) noexcept : reducer_(other.reducer_), previous_(other.previous_) {
      other.reducer_ = nullptr;
    }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*reducer_); }

  Reducer& reducer() { return *reducer_; }
  const DdpOptions& options() const { return options_; }
  torch::nn::Module& base_module() { return *module_; }
  const std::shared_ptr<Collective>& collective() const { return collective_; }

 private:
  void check_same_parameters(const std::vector<std::string>& names, const std::vector<at::Tensor>& params);
  void broadcast_from_rank0(const std::vector<at::Tensor>& tensors);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Collective> collective_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

template <typename ModuleImpl>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  DistributedDataParallel(std::shared_ptr<ModuleImpl> module, std::shared_ptr<Collective> collective,
                          DdpOptions options = {})
      : DistributedDataParallelBase(module, std::move(collective), options), impl_(std::move(module)) {}
  DistributedDataParallel(const torch::nn::ModuleHolder<ModuleImpl>& module, std::shared_ptr<Collective> collective,
                          DdpOptions options = {})
      : DistributedDataParallel(module.ptr(), std::move(collective), options) {}

  /// prepare_forward(), then the module's forward.
  template <typename... Args>
  auto forward(Args&&... args) {
    prepare_forward();
    return impl_->forward(std::forward<Args>(args)...);
  }
  template <typename... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

  ModuleImpl& module() { return *impl_; }
  const std::shared_ptr<ModuleImpl>& module_ptr() const { return impl_; }
  ModuleImpl* operator->() { return impl_.get(); }

 private:
  std::shared_ptr<ModuleImpl> impl_;
};

template <typename ModuleImpl, typename C>
DistributedDataParallel(const torch::nn::ModuleHolder<ModuleImpl>&, C&&, DdpOptions = {})
    -> DistributedDataParallel<ModuleImpl>;
template <typename ModuleImpl, typename C>
DistributedDataParallel(std::shared_ptr<ModuleImpl>, C&&, DdpOptions = {}) -> DistributedDataParallel<ModuleImpl>;

}  // namespace ddp
