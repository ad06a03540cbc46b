#pragma once
// Mixed precision for the trainer: an autocast scope for the forward pass
// (bf16 on CPU or CUDA, fp16 on CUDA; parameters and gradients stay float32)
// and DynamicLossScaler, which keeps fp16 gradients from underflowing: the
// loss is multiplied by the scale before backward; after the gradients are
// reduced they are unscaled and checked, a step with an inf/NaN gradient is
// skipped and the scale halved, and after `growth_interval` good steps in a
// row the scale doubles (as torch.cuda.amp.GradScaler). The gradients are
// identical on every rank after the all-reduce, so every rank decides alike.
//
// Threading: the training thread (autocast state is thread-local).

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddp::train {

/// While alive, eligible ops on `device` run in `dtype` (kFloat: no-op).
class AutocastScope {
 public:
  AutocastScope(at::DeviceType device, at::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  at::DeviceType device_;
  bool active_;
  bool was_enabled_ = false;
  at::ScalarType previous_dtype_ = at::kFloat;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(double initial_scale = 65536.0, int64_t growth_interval = 2000)
      : scale_(initial_scale), growth_interval_(growth_interval) {}

  double scale() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  void restore(double scale, int64_t good_steps) {
    scale_ = scale;
    good_steps_ = good_steps;
  }

  /// Divides every gradient by the scale; returns false (skip this step)
  /// when one is not finite, and adjusts the scale either way.
  bool unscale_and_update(const std::vector<torch::Tensor>& parameters);

 private:
  double scale_;
  int64_t growth_interval_;
  int64_t good_steps_ = 0;
};

}  // namespace ddp::train
