#include "mixed_precision.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace ddp::train {
namespace {

// LibTorch 2.4 replaced the per-device autocast setters by ones taking the device.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool autocast_enabled(at::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_autocast(at::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
at::ScalarType autocast_dtype(at::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_autocast_dtype(at::DeviceType d, at::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool autocast_enabled(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_autocast(at::DeviceType d, bool on) {
  if (d == at::kCUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
at::ScalarType autocast_dtype(at::DeviceType d) {
  return d == at::kCUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_autocast_dtype(at::DeviceType d, at::ScalarType t) {
  if (d == at::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(t);
  } else {
    at::autocast::set_autocast_cpu_dtype(t);
  }
}
#endif

}  // namespace

AutocastScope::AutocastScope(at::DeviceType device, at::ScalarType dtype)
    : device_(device), active_(dtype == at::kHalf || dtype == at::kBFloat16) {
  if (!active_) return;
  was_enabled_ = autocast_enabled(device_);
  previous_dtype_ = autocast_dtype(device_);
  set_autocast_dtype(device_, dtype);
  set_autocast(device_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // Leaving the outermost scope frees the casts it cached.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast(device_, was_enabled_);
  set_autocast_dtype(device_, previous_dtype_);
}

bool DynamicLossScaler::unscale_and_update(const std::vector<torch::Tensor>& parameters) {
  torch::NoGradGuard no_grad;
  bool finite = true;
  for (const torch::Tensor& p : parameters) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    g.mul_(1.0 / scale_);
    if (finite && !torch::isfinite(g).all().item<bool>()) finite = false;
  }
  if (!finite) {
    scale_ = std::max(1.0, scale_ / 2);
    good_steps_ = 0;
    return false;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace ddp::train
