// ddptrain models: an MLP, a small CNN and a small byte-level causal
// transformer LM behind one interface the trainer and DDP wrap.
//
// Parameters are created with the global LibTorch RNG: the trainer calls
// torch::manual_seed(seed) before make_model() so every rank builds identical
// parameters. Nothing here reseeds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace ddp::train {

struct ModelConfig {
  std::string kind = "mlp";  // mlp | cnn | lm

  // mlp: input features, hidden widths..., classes. Linear layers fc0, fc1, ...
  std::vector<int64_t> mlp_sizes{32, 64, 64, 10};

  // cnn: per-sample input [C, H, W] (H, W >= 4), conv widths, classes.
  // conv0 (3x3, pad 1) - relu - maxpool2 - conv1 (3x3, pad 1) - relu - maxpool2 - fc.
  std::vector<int64_t> cnn_input{1, 16, 16};
  int64_t cnn_channels0 = 8;
  int64_t cnn_channels1 = 16;
  int64_t cnn_classes = 10;

  // lm: byte vocabulary (256), context length T, width, heads (must divide
  // d_model), pre-norm blocks.
  int64_t lm_context = 64;
  int64_t lm_d_model = 64;
  int64_t lm_heads = 4;
  int64_t lm_layers = 2;
};

inline constexpr int64_t kLmVocab = 256;

/// What the trainer and DDP wrap.
class TrainModelImpl : public torch::nn::Module {
 public:
  /// mlp: float [B, in] -> logits [B, classes]; cnn: float [B, C, H, W] ->
  /// [B, classes]; lm: int64 [B, T] (T <= context) -> logits [B, T, 256].
  virtual torch::Tensor forward(torch::Tensor input) = 0;
  /// Mean cross-entropy; targets are int64 ([B] for mlp/cnn, [B, T] for lm).
  virtual torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) = 0;
  /// Per-sample input shape, for the synthetic data ({in}, {C,H,W}, {T}).
  virtual std::vector<int64_t> input_shape() const = 0;
  virtual int64_t classes() const = 0;
  /// True when the input is int64 token ids (lm), false for float features.
  virtual bool token_input() const { return false; }
};

/// Builds the model. std::invalid_argument (one line) on a bad config.
std::shared_ptr<TrainModelImpl> make_model(const ModelConfig& config);

/// Throws std::invalid_argument (one line) when the config cannot build a model.
void validate_model_config(const ModelConfig& config);


/// Total number of scalar parameters.
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace ddp::train
