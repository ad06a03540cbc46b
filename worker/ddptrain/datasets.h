// ddptrain datasets and sharding.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/types.h>

namespace ddp::train {

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  /// `indices`: int64 [n] in [0, size()). Returns input [n, ...] and target
  /// ([n] int64 for classification, [n, context] int64 for text).
  virtual Batch gather(const torch::Tensor& indices) const = 0;
};

/// Deterministic from `seed` on any machine (never touches the global RNG):
/// x ~ N(0, 1) of shape [samples, input_shape...] from a CPU generator seeded
/// with `seed`; label = argmax of a fixed random teacher (2-layer tanh MLP,
/// weights from the same generator) over the flattened x. Float32 inputs.
std::unique_ptr<Dataset> make_synthetic_classification(uint64_t seed, int64_t samples, std::vector<int64_t> input_shape,
                                                       int64_t classes);

/// Python's torch.save({"x": float tensor [N, ...], "y": int64 tensor [N]}).
/// std::runtime_error naming the file: unreadable, not a dict, missing key,
/// wrong dtype, N mismatch, empty.
std::unique_ptr<Dataset> load_classification_file(const std::string& path);

/// Byte-level LM data: sample i is bytes [i, i+context) as input and
/// [i+1, i+context] as target (both int64 [context]); size = bytes - context.
/// std::runtime_error if unreadable or shorter than context + 1 bytes.
std::unique_ptr<Dataset> load_text_file(const std::string& path, int64_t context);
/// The same over bytes in memory (`what` names the source in errors).
std::unique_ptr<Dataset> make_text_dataset(std::string bytes, int64_t context, const std::string& what = "text");
/// Deterministic learnable byte text from `seed` (words drawn from a small
/// seeded vocabulary, separated by spaces): the LM default with no --text.
std::string make_synthetic_text(uint64_t seed, int64_t bytes);

/// Sharding: global batch G = world*batch; step s uses global positions
/// s*G ... s*G+G-1 (wrapping modulo `samples`); rank r takes the contiguous
/// slice starting at s*G + r*batch. With `shuffle_seed`, position p maps to
/// perm_e[p % N] with e = p / N and perm_e = shuffle_permutation(seed, e, N).
/// Returns int64 [batch]. std::invalid_argument on bad arguments.
torch::Tensor shard_indices(int64_t step, int rank, int world, int64_t batch, int64_t samples,
                            std::optional<uint64_t> shuffle_seed);

/// The epoch permutation used by shard_indices: int64 [samples], identical on
/// every machine for the same (seed, epoch).
torch::Tensor shuffle_permutation(uint64_t seed, int64_t epoch, int64_t samples);

}  // namespace ddp::train
