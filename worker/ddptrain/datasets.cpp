#include "datasets.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include "tensor_file.h"

namespace ddp::train {
namespace {

class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor x, torch::Tensor y) : x_(std::move(x)), y_(std::move(y)) {}
  int64_t size() const override { return x_.size(0); }
  Batch gather(const torch::Tensor& indices) const override { return {x_.index_select(0, indices), y_.index_select(0, indices)}; }

 private:
  torch::Tensor x_;
  torch::Tensor y_;
};

class TextDataset : public Dataset {
 public:
  TextDataset(torch::Tensor bytes, int64_t context) : bytes_(std::move(bytes)), context_(context) {}
  int64_t size() const override { return bytes_.numel() - context_; }
  Batch gather(const torch::Tensor& indices) const override {
    // positions[b, t] = indices[b] + t, t in [0, context]
    auto positions = indices.to(torch::kLong).unsqueeze(1) + torch::arange(context_ + 1, torch::kLong).unsqueeze(0);
    auto window = bytes_.index_select(0, positions.reshape({-1})).view({positions.size(0), context_ + 1});
    return {window.slice(1, 0, context_).contiguous(), window.slice(1, 1, context_ + 1).contiguous()};
  }

 private:
  torch::Tensor bytes_;  // int64 [n]
  int64_t context_;
};

// splitmix64: a tiny, fully specified generator, so epoch permutations are
// the same on every machine and every LibTorch version.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias.
uint64_t below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = ~uint64_t{0} - (~uint64_t{0} % bound);
  uint64_t r;
  do {
    r = splitmix64(state);
  } while (r >= limit);
  return r % bound;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

std::unique_ptr<Dataset> make_synthetic_classification(uint64_t seed, int64_t samples, std::vector<int64_t> input_shape,
                                                       int64_t classes) {
  if (samples <= 0) throw std::invalid_argument("synthetic data: samples must be positive");
  if (classes < 2) throw std::invalid_argument("synthetic data: classes must be at least 2");
  if (input_shape.empty()) throw std::invalid_argument("synthetic data: empty input shape");
  int64_t features = 1;
  for (auto d : input_shape) {
    if (d <= 0) throw std::invalid_argument("synthetic data: input shape dimensions must be positive");
    features *= d;
  }
  constexpr int64_t kHidden = 64;
  auto gen = at::detail::createCPUGenerator(seed);
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  // Teacher first (fixed for the seed, independent of `samples`), then x.
  auto w1 = torch::randn({features, kHidden}, gen, f32) * (2.0 / std::sqrt(static_cast<double>(features)));
  auto b1 = torch::randn({kHidden}, gen, f32) * 0.5;
  auto w2 = torch::randn({kHidden, classes}, gen, f32) / std::sqrt(static_cast<double>(kHidden));
  std::vector<int64_t> shape{samples};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  auto x = torch::randn(shape, gen, f32);
  auto logits = torch::matmul(torch::tanh(torch::matmul(x.reshape({samples, features}), w1) + b1), w2);
  auto y = logits.argmax(1).to(torch::kLong);
  return std::make_unique<TensorDataset>(std::move(x), std::move(y));
}

std::unique_ptr<Dataset> load_classification_file(const std::string& path) {
  TensorDict entries = load_tensor_dict(path);  // names the file in its errors
  torch::Tensor x, y;
  for (auto& [name, tensor] : entries) {
    if (name == "x") x = tensor;
    if (name == "y") y = tensor;
  }
  auto fail = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };
  if (!x.defined()) throw fail("missing key \"x\" (expected {\"x\": float tensor [N, ...], \"y\": int64 tensor [N]})");
  if (!y.defined()) throw fail("missing key \"y\" (expected {\"x\": float tensor [N, ...], \"y\": int64 tensor [N]})");
  if (!x.is_floating_point()) throw fail(std::string("\"x\" must be a floating-point tensor, got ") + c10::toString(x.scalar_type()));
  if (y.scalar_type() != torch::kLong) throw fail(std::string("\"y\" must be an int64 tensor, got ") + c10::toString(y.scalar_type()));
  if (x.dim() < 2) throw fail("\"x\" must have shape [N, features...], got " + std::to_string(x.dim()) + " dimension(s)");
  if (y.dim() != 1) throw fail("\"y\" must have shape [N], got " + std::to_string(y.dim()) + " dimensions");
  if (x.size(0) != y.size(0)) {
    throw fail("\"x\" has " + std::to_string(x.size(0)) + " samples but \"y\" has " + std::to_string(y.size(0)));
  }
  if (x.size(0) == 0) throw fail("no samples");
  if (y.min().item<int64_t>() < 0) throw fail("\"y\" has negative labels");
  return std::make_unique<TensorDataset>(x.contiguous(), y.contiguous());
}

std::unique_ptr<Dataset> make_text_dataset(std::string bytes, int64_t context, const std::string& what) {
  if (context <= 0) throw std::invalid_argument(what + ": context must be positive");
  if (static_cast<int64_t>(bytes.size()) < context + 1) {
    throw std::runtime_error(what + ": " + std::to_string(bytes.size()) + " bytes is shorter than context + 1 = " +
                             std::to_string(context + 1));
  }
  auto raw = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
  std::memcpy(raw.data_ptr(), bytes.data(), bytes.size());
  return std::make_unique<TextDataset>(raw.to(torch::kLong), context);
}

std::unique_ptr<Dataset> load_text_file(const std::string& path, int64_t context) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return make_text_dataset(std::move(bytes), context, path);
}

std::string make_synthetic_text(uint64_t seed, int64_t bytes) {
  if (bytes < 0) throw std::invalid_argument("synthetic text: negative size");
  uint64_t state = seed ^ 0x5445585444415441ull;  // "TEXTDATA"
  std::vector<std::string> words;
  for (int w = 0; w < 32; ++w) {
    std::string word;
    const auto len = 2 + below(state, 6);
    for (uint64_t k = 0; k < len; ++k) word.push_back(static_cast<char>('a' + below(state, 26)));
    words.push_back(word);
  }
  std::string out;
  out.reserve(static_cast<size_t>(bytes) + 16);
  while (static_cast<int64_t>(out.size()) < bytes) {
    // Skewed word choice: a few words dominate, so there is much to learn.
    const auto a = below(state, words.size()), b = below(state, words.size());
    out += words[std::min(a, b)];
    out += below(state, 8) == 0 ? ".\n" : " ";
  }
  out.resize(static_cast<size_t>(bytes));
  return out;
}

torch::Tensor shuffle_permutation(uint64_t seed, int64_t epoch, int64_t samples) {
  if (samples <= 0) throw std::invalid_argument("shuffle: samples must be positive");
  // Consecutive steps of one epoch ask for the same permutation: keep the last.
  struct Cached {
    uint64_t seed = 0;
    int64_t epoch = -1, samples = 0;
    torch::Tensor perm;
  };
  thread_local Cached cached;
  if (cached.perm.defined() && cached.seed == seed && cached.epoch == epoch && cached.samples == samples) {
    return cached.perm.clone();
  }
  uint64_t state = seed;
  splitmix64(state);
  state ^= static_cast<uint64_t>(epoch) * 0xD1B54A32D192ED03ull;
  splitmix64(state);
  auto perm = torch::arange(samples, torch::kLong);
  auto* p = perm.data_ptr<int64_t>();
  for (int64_t i = samples - 1; i > 0; --i) {  // Fisher-Yates
    const auto j = static_cast<int64_t>(below(state, static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  cached = Cached{seed, epoch, samples, perm};
  return perm.clone();
}

torch::Tensor shard_indices(int64_t step, int rank, int world, int64_t batch, int64_t samples,
                            std::optional<uint64_t> shuffle_seed) {
  if (world <= 0 || rank < 0 || rank >= world) {
    throw std::invalid_argument("shard_indices: rank " + std::to_string(rank) + " outside world " + std::to_string(world));
  }
  if (batch <= 0) throw std::invalid_argument("shard_indices: batch must be positive");
  if (samples <= 0) throw std::invalid_argument("shard_indices: no samples");
  if (step < 0) throw std::invalid_argument("shard_indices: negative step");
  const int64_t global = static_cast<int64_t>(world) * batch;
  const int64_t start = step * global + static_cast<int64_t>(rank) * batch;
  auto positions = torch::arange(start, start + batch, torch::kLong);
  if (!shuffle_seed) return positions.remainder(samples);
  auto out = torch::empty({batch}, torch::kLong);
  auto* o = out.data_ptr<int64_t>();
  int64_t cached_epoch = -1;
  torch::Tensor perm;
  for (int64_t k = 0; k < batch; ++k) {
    const int64_t p = start + k;
    const int64_t epoch = floor_div(p, samples);
    if (epoch != cached_epoch) {
      perm = shuffle_permutation(*shuffle_seed, epoch, samples);
      cached_epoch = epoch;
    }
    o[k] = perm.data_ptr<int64_t>()[p - epoch * samples];
  }
  return out;
}

}  // namespace ddp::train
