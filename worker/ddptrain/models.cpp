#include "models.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

namespace ddp::train {
namespace {

std::string join(const std::vector<int64_t>& values) {
  std::ostringstream out;
  for (size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target) {
  if (target.scalar_type() != torch::kLong) {
    throw std::invalid_argument("loss: targets must be int64 class indices, got " +
                                std::string(c10::toString(target.scalar_type())));
  }
  return torch::nn::functional::cross_entropy(logits, target);
}

// ---------------------------------------------------------------- MLP
class MlpImpl : public TrainModelImpl {
 public:
  explicit MlpImpl(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {
    for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
      layers_.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(sizes_[i], sizes_[i + 1])));
    }
  }
  torch::Tensor forward(torch::Tensor x) override {
    for (size_t i = 0; i < layers_.size(); ++i) {
      x = layers_[i]->forward(x);
      if (i + 1 < layers_.size()) x = torch::relu(x);
    }
    return x;
  }
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return cross_entropy(output, target);
  }
  std::vector<int64_t> input_shape() const override { return {sizes_.front()}; }
  int64_t classes() const override { return sizes_.back(); }

 private:
  std::vector<int64_t> sizes_;
  std::vector<torch::nn::Linear> layers_;
};

// ---------------------------------------------------------------- CNN
class CnnImpl : public TrainModelImpl {
 public:
  explicit CnnImpl(const ModelConfig& c)
      : input_(c.cnn_input),
        classes_(c.cnn_classes),
        conv0_(register_module(
            "conv0", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.cnn_input[0], c.cnn_channels0, 3).padding(1)))),
        conv1_(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.cnn_channels0, c.cnn_channels1, 3).padding(1)))),
        fc_(register_module("fc", torch::nn::Linear(c.cnn_channels1 * (c.cnn_input[1] / 4) * (c.cnn_input[2] / 4),
                                                    c.cnn_classes))) {}
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv0_->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv1_->forward(x)), 2);
    return fc_->forward(x.flatten(1));
  }
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return cross_entropy(output, target);
  }
  std::vector<int64_t> input_shape() const override { return input_; }
  int64_t classes() const override { return classes_; }

 private:
  std::vector<int64_t> input_;
  int64_t classes_;
  torch::nn::Conv2d conv0_;
  torch::nn::Conv2d conv1_;
  torch::nn::Linear fc_;
};

// ---------------------------------------------------------------- LM
// Pre-norm block: x + attn(ln1(x)); x + mlp(ln2(x)). Attention written with
// matmuls (works in any floating dtype; every parameter is used every step).
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t d_model, int64_t heads)
      : heads_(heads),
        ln1_(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        qkv_(register_module("qkv", torch::nn::Linear(d_model, 3 * d_model))),
        proj_(register_module("proj", torch::nn::Linear(d_model, d_model))),
        ln2_(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})))),
        fc_(register_module("fc", torch::nn::Linear(d_model, 4 * d_model))),
        fc_out_(register_module("fc_out", torch::nn::Linear(4 * d_model, d_model))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0), time = x.size(1), d_model = x.size(2);
    const int64_t head_dim = d_model / heads_;
    auto qkv = qkv_->forward(ln1_->forward(x)).view({batch, time, 3, heads_, head_dim});
    auto q = qkv.select(2, 0).transpose(1, 2);  // [B, h, T, hd]
    auto k = qkv.select(2, 1).transpose(1, 2);
    auto v = qkv.select(2, 2).transpose(1, 2);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
    auto future = torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
    auto attn = torch::matmul(torch::softmax(scores, -1), v);  // [B, h, T, hd]
    auto h = x + proj_->forward(attn.transpose(1, 2).reshape({batch, time, d_model}));
    return h + fc_out_->forward(torch::gelu(fc_->forward(ln2_->forward(h))));
  }

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1_;
  torch::nn::Linear qkv_;
  torch::nn::Linear proj_;
  torch::nn::LayerNorm ln2_;
  torch::nn::Linear fc_;
  torch::nn::Linear fc_out_;
};
TORCH_MODULE(Block);

class LmImpl : public TrainModelImpl {
 public:
  explicit LmImpl(const ModelConfig& c)
      : context_(c.lm_context),
        tok_emb_(register_module("tok_emb", torch::nn::Embedding(kLmVocab, c.lm_d_model))),
        pos_emb_(register_parameter("pos_emb", torch::randn({c.lm_context, c.lm_d_model}) * 0.02)),
        blocks_(register_module("blocks", torch::nn::ModuleList())),
        ln_f_(register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.lm_d_model})))),
        head_(register_module("head", torch::nn::Linear(c.lm_d_model, kLmVocab))) {
    // GPT-style small init for the token table (the default N(0,1) makes
    // the first steps needlessly noisy).
    {
      torch::NoGradGuard no_grad;
      tok_emb_->weight.normal_(0.0, 0.02);
    }
    for (int64_t i = 0; i < c.lm_layers; ++i) blocks_->push_back(Block(c.lm_d_model, c.lm_heads));
  }

  torch::Tensor forward(torch::Tensor tokens) override {
    if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong) {
      throw std::invalid_argument("lm: input must be int64 [batch, time]");
    }
    const int64_t time = tokens.size(1);
    if (time < 1 || time > context_) {
      throw std::invalid_argument("lm: sequence length " + std::to_string(time) + " outside [1, context " +
                                  std::to_string(context_) + "]");
    }
    auto x = tok_emb_->forward(tokens) + pos_emb_.slice(0, 0, time).unsqueeze(0);
    for (const auto& block : *blocks_) x = block->as<BlockImpl>()->forward(x);
    return head_->forward(ln_f_->forward(x));
  }
  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) override {
    return cross_entropy(output.reshape({-1, output.size(-1)}), target.reshape({-1}));
  }
  std::vector<int64_t> input_shape() const override { return {context_}; }
  int64_t classes() const override { return kLmVocab; }
  bool token_input() const override { return true; }

 private:
  int64_t context_;
  torch::nn::Embedding tok_emb_;
  torch::Tensor pos_emb_;
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_f_;
  torch::nn::Linear head_;
};

void require_positive(int64_t value, const char* name) {
  if (value <= 0) {
    throw std::invalid_argument(std::string("model: ") + name + " must be positive, got " + std::to_string(value));
  }
}

}  // namespace

void validate_model_config(const ModelConfig& c) {
  if (c.kind == "mlp") {
    if (c.mlp_sizes.size() < 2) {
      throw std::invalid_argument("model mlp: sizes need at least input and classes (e.g. 32,64,10), got '" +
                                  join(c.mlp_sizes) + "'");
    }
    for (auto size : c.mlp_sizes) {
      if (size <= 0) throw std::invalid_argument("model mlp: sizes must be positive, got '" + join(c.mlp_sizes) + "'");
    }
  } else if (c.kind == "cnn") {
    if (c.cnn_input.size() != 3) {
      throw std::invalid_argument("model cnn: input shape must be C,H,W, got '" + join(c.cnn_input) + "'");
    }
    require_positive(c.cnn_input[0], "cnn input channels");
    if (c.cnn_input[1] < 4 || c.cnn_input[2] < 4) {
      throw std::invalid_argument("model cnn: input height and width must be at least 4, got '" + join(c.cnn_input) +
                                  "'");
    }
    require_positive(c.cnn_channels0, "cnn channels0");
    require_positive(c.cnn_channels1, "cnn channels1");
    require_positive(c.cnn_classes, "cnn classes");
  } else if (c.kind == "lm") {
    require_positive(c.lm_context, "lm context");
    require_positive(c.lm_d_model, "lm d_model");
    require_positive(c.lm_heads, "lm heads");
    require_positive(c.lm_layers, "lm layers");
    if (c.lm_d_model % c.lm_heads != 0) {
      throw std::invalid_argument("model lm: d_model " + std::to_string(c.lm_d_model) + " is not divisible by heads " +
                                  std::to_string(c.lm_heads));
    }
  } else {
    throw std::invalid_argument("model: unknown kind '" + c.kind + "' (expected mlp, cnn or lm)");
  }
}

std::shared_ptr<TrainModelImpl> make_model(const ModelConfig& config) {
  validate_model_config(config);
  if (config.kind == "mlp") return std::make_shared<MlpImpl>(config.mlp_sizes);
  if (config.kind == "cnn") return std::make_shared<CnnImpl>(config);
  return std::make_shared<LmImpl>(config);
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const auto& p : module.parameters()) total += p.numel();
  return total;
}

}  // namespace ddp::train
