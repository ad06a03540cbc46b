#include "ddp/runtime/distributed_data_parallel.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <sstream>

namespace ddp {

namespace {

constexpr int64_t kMaxDims = 6;
constexpr int64_t kSlots = 2 + kMaxDims;  // dtype, ndim, sizes (hashed beyond kMaxDims)

std::vector<int64_t> signature(const at::Tensor& p) {
  std::vector<int64_t> sig(kSlots, -1);
  sig[0] = static_cast<int64_t>(p.scalar_type());
  sig[1] = p.dim();
  for (int64_t d = 0; d < p.dim(); ++d) {
    if (d < kMaxDims - 1 || p.dim() == kMaxDims) {
      sig[static_cast<size_t>(2 + d)] = p.size(d);
    } else {
      sig[static_cast<size_t>(1 + kMaxDims)] = sig[static_cast<size_t>(1 + kMaxDims)] * 31 + p.size(d);
    }
  }
  return sig;
}

std::string describe(const int64_t* sig) {
  std::ostringstream out;
  out << "[";
  const int64_t dims = std::min(sig[1], kMaxDims);
  for (int64_t d = 0; d < dims; ++d) out << (d ? ", " : "") << sig[2 + d];
  if (sig[1] > kMaxDims) out << ", ...";
  out << "] " << c10::toString(static_cast<c10::ScalarType>(sig[0]));
  return out.str();
}

void wait_or_throw(const std::shared_ptr<Work>& work, const char* what) {
  if (!work->wait(std::chrono::minutes(30))) {
    throw CollectiveError(std::string("DistributedDataParallel: ") + what + " timed out");
  }
}

}  // namespace

DistributedDataParallelBase::DistributedDataParallelBase(std::shared_ptr<torch::nn::Module> module,
                                                         std::shared_ptr<Collective> collective, DdpOptions options)
    : module_(std::move(module)), collective_(std::move(collective)), options_(options) {
  if (!module_) throw std::invalid_argument("DistributedDataParallel: no module");
  if (!collective_) throw std::invalid_argument("DistributedDataParallel: no collective");
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    names.push_back(item.key());
    params.push_back(item.value());
  }
  check_same_parameters(names, params);
  broadcast_from_rank0(module_->parameters(true));
  broadcast_from_rank0(module_->buffers(true));

  ReducerOptions ro;
  ro.first_bucket_cap_bytes = static_cast<int64_t>(options_.first_bucket_cap_mb * 1024 * 1024);
  ro.bucket_cap_bytes = static_cast<int64_t>(options_.bucket_cap_mb * 1024 * 1024);
  ro.first_bucket_cap_bytes = std::max<int64_t>(ro.first_bucket_cap_bytes, 1);
  ro.bucket_cap_bytes = std::max<int64_t>(ro.bucket_cap_bytes, 1);
  ro.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  ro.find_unused_parameters = options_.find_unused_parameters;
  ro.comm_hook = options_.comm_hook;
  reducer_ = std::make_unique<Reducer>(params, names, collective_, ro);
}

void DistributedDataParallelBase::check_same_parameters(const std::vector<std::string>& names,
                                                        const std::vector<at::Tensor>& params) {
  const int world = collective_->size();
  if (world == 1) return;
  const int64_t n = static_cast<int64_t>(params.size());
  // Control tensors live where the backend wants them (NCCL: the device).
  const at::Device device = params.empty() ? at::Device(at::kCPU) : params.front().device();
  const auto on_device = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor count = at::full({1}, n, on_device);
  at::Tensor counts = at::empty({world}, on_device);
  wait_or_throw(collective_->all_gather(count, counts), "parameter count all_gather");
  counts = counts.to(at::kCPU);
  for (int r = 0; r < world; ++r) {
    const int64_t c = counts[r].item<int64_t>();
    if (c != counts[0].item<int64_t>()) {
      throw ReducerError("DistributedDataParallel: rank " + std::to_string(r) + " has " + std::to_string(c) +
                         " parameters that require grad but rank 0 has " +
                         std::to_string(counts[0].item<int64_t>()) + "; every rank must build the same model");
    }
  }
  if (n == 0) return;
  at::Tensor mine = at::empty({n, kSlots}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const auto sig = signature(params[static_cast<size_t>(i)]);
    for (int64_t k = 0; k < kSlots; ++k) mine[i][k] = sig[static_cast<size_t>(k)];
  }
  mine = mine.to(device);
  at::Tensor all = at::empty({world, n, kSlots}, on_device);
  wait_or_throw(collective_->all_gather(mine, all), "parameter shape all_gather");
  all = all.to(at::kCPU).contiguous();
  const int64_t* data = all.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t* ref = data + i * kSlots;  // rank 0
    for (int r = 1; r < world; ++r) {
      const int64_t* other = data + (r * n + i) * kSlots;
      if (!std::equal(ref, ref + kSlots, other)) {
        throw ReducerError("DistributedDataParallel: parameter '" + names[static_cast<size_t>(i)] + "' (index " +
                           std::to_string(i) + ") is " + describe(ref) + " on rank 0 but " + describe(other) +
                           " on rank " + std::to_string(r) + "; every rank must build the same model");
      }
    }
  }
}

void DistributedDataParallelBase::broadcast_from_rank0(const std::vector<at::Tensor>& tensors) {
  if (collective_->size() == 1) return;
  at::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    works.push_back(collective_->broadcast(t.detach(), 0));
  }
  for (const auto& w : works) wait_or_throw(w, "broadcast from rank 0");
}

void DistributedDataParallelBase::prepare_forward() {
  reducer_->prepare_for_forward();
  if (options_.broadcast_buffers) broadcast_from_rank0(module_->buffers(true));
}

}  // namespace ddp
