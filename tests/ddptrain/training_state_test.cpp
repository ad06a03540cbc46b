// Training state: encode_training_state / decode_training_state round trips a
// small MLP with SGD-with-momentum and with AdamW after real optimizer steps
// (parameters, momentum buffers / Adam moments and step counts, the position,
// the default CPU generator), so that the next step of the restored pair is
// bitwise the original's; and truncated payloads, garbage, a damaged archive
// header or directory, and payloads for a model of another depth, other
// widths or another optimizer are refused with std::runtime_error (damaged
// tensor bytes are CheckpointStore's checksum's to catch, not the decoder's).
#include "training_state.h"

#include <gtest/gtest.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models.h"

namespace ddp::train {
namespace {

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

std::unique_ptr<torch::optim::Optimizer> sgd_momentum(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::SGD>(std::move(params),
                                             torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
}

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<torch::Tensor> params) {
  return std::make_unique<torch::optim::AdamW>(std::move(params),
                                               torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
}

ModelConfig mlp(std::vector<int64_t> sizes) {
  ModelConfig c;
  c.kind = "mlp";
  c.mlp_sizes = std::move(sizes);
  return c;
}

const std::vector<int64_t> kSizes{6, 8, 3};

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

std::vector<Batch> batches(int n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back({torch::randn({5, 6}), torch::randint(0, 3, {5}, torch::kLong)});
  return out;
}

void train_step(TrainModelImpl& model, torch::optim::Optimizer& optimizer, const Batch& b) {
  optimizer.zero_grad();
  model.loss(model.forward(b.input), b.target).backward();
  optimizer.step();
}

/// A model and its optimizer, built from `seed`.
struct Pair {
  std::shared_ptr<TrainModelImpl> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Pair build_pair(const OptimizerFactory& factory, uint64_t seed, const std::vector<int64_t>& sizes = kSizes) {
  torch::manual_seed(seed);
  Pair p;
  p.model = make_model(mlp(sizes));
  p.optimizer = factory(p.model->parameters());
  return p;
}

std::vector<torch::Tensor> params_of(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().at(0).params();
}

const torch::optim::OptimizerParamState& state_of(const torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  const auto& state = optimizer.state();
  auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
  if (it == state.end()) throw std::logic_error("no optimizer state for a parameter");
  return *it->second;
}

void expect_bitwise_equal(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  EXPECT_EQ(got.scalar_type(), want.scalar_type()) << what;
  EXPECT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(torch::equal(got, want)) << what;
}

void expect_same_parameters(const TrainModelImpl& got, const TrainModelImpl& want) {
  const auto g = got.named_parameters();
  const auto w = want.named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(g[i].key(), w[i].key());
    expect_bitwise_equal(g[i].value(), w[i].value(), w[i].key());
  }
}

bool any_parameter_differs(const TrainModelImpl& a, const TrainModelImpl& b) {
  const auto pa = a.parameters();
  const auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!torch::equal(pa[i], pb[i])) return true;
  }
  return false;
}

void expect_same_sgd_state(const torch::optim::Optimizer& got, const torch::optim::Optimizer& want) {
  const auto g = params_of(got);
  const auto w = params_of(want);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const auto& gs = static_cast<const torch::optim::SGDParamState&>(state_of(got, g[i]));
    const auto& ws = static_cast<const torch::optim::SGDParamState&>(state_of(want, w[i]));
    expect_bitwise_equal(gs.momentum_buffer(), ws.momentum_buffer(), "momentum_buffer " + std::to_string(i));
  }
}

void expect_same_adamw_state(const torch::optim::Optimizer& got, const torch::optim::Optimizer& want,
                             int64_t steps) {
  const auto g = params_of(got);
  const auto w = params_of(want);
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const auto& gs = static_cast<const torch::optim::AdamWParamState&>(state_of(got, g[i]));
    const auto& ws = static_cast<const torch::optim::AdamWParamState&>(state_of(want, w[i]));
    EXPECT_EQ(ws.step(), steps) << i;
    EXPECT_EQ(gs.step(), ws.step()) << i;
    expect_bitwise_equal(gs.exp_avg(), ws.exp_avg(), "exp_avg " + std::to_string(i));
    expect_bitwise_equal(gs.exp_avg_sq(), ws.exp_avg_sq(), "exp_avg_sq " + std::to_string(i));
  }
}

/// Trains `steps` steps, encodes, decodes into a pair built from another seed,
/// checks parameters, optimizer state and position, then runs one more step on
/// both and checks the parameters are still bitwise equal.
void round_trip(const OptimizerFactory& factory, bool adam) {
  const int steps = 3;
  const auto data = batches(steps + 1, 42);
  Pair original = build_pair(factory, 1);
  for (int s = 0; s < steps; ++s) train_step(*original.model, *original.optimizer, data[s]);
  ASSERT_EQ(original.optimizer->state().size(), original.model->parameters().size());

  TrainingPosition position;
  position.next_step = 3;
  position.loss_scale = 32768.0 * 0.5;
  position.good_steps = 1234567890123;
  const std::string payload = encode_training_state(*original.model, *original.optimizer, position);
  ASSERT_FALSE(payload.empty());

  Pair restored = build_pair(factory, 2);
  ASSERT_TRUE(any_parameter_differs(*restored.model, *original.model));  // else the check below proves nothing
  ASSERT_TRUE(restored.optimizer->state().empty());
  const std::vector<torch::Tensor> before = restored.model->parameters();

  const TrainingPosition got = decode_training_state(payload, *restored.model, *restored.optimizer);
  EXPECT_EQ(got.next_step, position.next_step);
  EXPECT_EQ(got.loss_scale, position.loss_scale);
  EXPECT_EQ(got.good_steps, position.good_steps);

  // Restored in place: the optimizer still holds the model's own parameter tensors.
  const std::vector<torch::Tensor> after = restored.model->parameters();
  const std::vector<torch::Tensor> held = params_of(*restored.optimizer);
  ASSERT_EQ(after.size(), before.size());
  ASSERT_EQ(held.size(), after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_TRUE(after[i].is_same(before[i])) << i;
    EXPECT_TRUE(held[i].is_same(after[i])) << i;
    EXPECT_TRUE(after[i].requires_grad()) << i;
  }

  expect_same_parameters(*restored.model, *original.model);
  EXPECT_EQ(restored.optimizer->state().size(), original.optimizer->state().size());
  if (adam) {
    expect_same_adamw_state(*restored.optimizer, *original.optimizer, steps);
  } else {
    expect_same_sgd_state(*restored.optimizer, *original.optimizer);
  }

  // The strongest check: the next step agrees bit for bit.
  train_step(*original.model, *original.optimizer, data[steps]);
  train_step(*restored.model, *restored.optimizer, data[steps]);
  expect_same_parameters(*restored.model, *original.model);
  if (adam) {
    expect_same_adamw_state(*restored.optimizer, *original.optimizer, steps + 1);
  } else {
    expect_same_sgd_state(*restored.optimizer, *original.optimizer);
  }
}

/// Runs fn, expects std::runtime_error carrying decode's explanation.
template <typename Fn>
void expect_refused(Fn fn, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": decoded without an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit this model and optimizer"), std::string::npos)
        << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw something other than std::runtime_error: " << e.what();
  }
}

/// A pair trained for two steps with the given optimizer.
Pair trained_pair(const OptimizerFactory& factory, const std::vector<int64_t>& sizes = kSizes) {
  Pair p = build_pair(factory, 3, sizes);
  torch::manual_seed(4);
  const Batch b{torch::randn({5, sizes.front()}), torch::randint(0, sizes.back(), {5}, torch::kLong)};
  train_step(*p.model, *p.optimizer, b);
  train_step(*p.model, *p.optimizer, b);
  return p;
}

const TrainingPosition kTrainedPosition{2, 1.0, 2};

std::string trained_payload(const OptimizerFactory& factory, const std::vector<int64_t>& sizes = kSizes) {
  Pair p = trained_pair(factory, sizes);
  return encode_training_state(*p.model, *p.optimizer, kTrainedPosition);
}

std::string flip_byte(std::string payload, size_t offset) {
  payload.at(offset) = static_cast<char>(payload[offset] ^ 0xff);
  return payload;
}

TEST(TrainingState, SgdWithMomentumRoundTripsAndTheNextStepIsBitwiseEqual) {
  round_trip(sgd_momentum, /*adam=*/false);
}

TEST(TrainingState, AdamWRoundTripsAndTheNextStepIsBitwiseEqual) { round_trip(adamw, /*adam=*/true); }

TEST(TrainingState, DefaultPositionRoundTrips) {
  Pair p = build_pair(sgd_momentum, 5);
  const std::string payload = encode_training_state(*p.model, *p.optimizer, TrainingPosition{});
  Pair q = build_pair(sgd_momentum, 6);
  const TrainingPosition got = decode_training_state(payload, *q.model, *q.optimizer);
  EXPECT_EQ(got.next_step, 0);
  EXPECT_EQ(got.loss_scale, 1.0);
  EXPECT_EQ(got.good_steps, 0);
  expect_same_parameters(*q.model, *p.model);  // no optimizer state yet: still decodes
  EXPECT_TRUE(q.optimizer->state().empty());
}

TEST(TrainingState, RestoresTheDefaultCpuGenerator) {
  Pair p = build_pair(sgd_momentum, 7);
  torch::manual_seed(123);
  (void)torch::rand({3});  // move the generator off its seeded start
  const std::string payload = encode_training_state(*p.model, *p.optimizer, TrainingPosition{});
  const torch::Tensor expected = torch::rand({16});

  torch::manual_seed(999);
  Pair q = build_pair(sgd_momentum, 8);
  decode_training_state(payload, *q.model, *q.optimizer);
  EXPECT_TRUE(torch::equal(torch::rand({16}), expected));
}

TEST(TrainingState, EncodingIsDeterministic) {
  Pair p = build_pair(adamw, 9);
  const auto data = batches(2, 10);
  for (const auto& b : data) train_step(*p.model, *p.optimizer, b);
  torch::manual_seed(11);
  const std::string a = encode_training_state(*p.model, *p.optimizer, TrainingPosition{2, 8.0, 1});
  torch::manual_seed(11);
  const std::string b = encode_training_state(*p.model, *p.optimizer, TrainingPosition{2, 8.0, 1});
  EXPECT_EQ(a, b);
  torch::manual_seed(11);
  const std::string c = encode_training_state(*p.model, *p.optimizer, TrainingPosition{3, 8.0, 1});
  EXPECT_NE(a, c);
}

TEST(TrainingState, TruncatedPayloadsAreRefused) {
  const std::string payload = trained_payload(sgd_momentum);
  for (size_t size : {size_t{0}, size_t{1}, size_t{64}, payload.size() / 2, payload.size() - 22, payload.size() - 1}) {
    Pair q = build_pair(sgd_momentum, 12);
    expect_refused([&] { decode_training_state(payload.substr(0, size), *q.model, *q.optimizer); },
                   "truncated to " + std::to_string(size) + " of " + std::to_string(payload.size()) + " bytes");
  }
}

TEST(TrainingState, GarbageIsRefused) {
  Pair q = build_pair(sgd_momentum, 13);
  expect_refused([&] { decode_training_state(std::string(4096, '\x5a'), *q.model, *q.optimizer); }, "garbage");
  expect_refused([&] { decode_training_state("not a checkpoint", *q.model, *q.optimizer); }, "text");
}

TEST(TrainingState, ADamagedArchiveHeaderOrDirectoryIsRefused) {
  const std::string payload = trained_payload(adamw);
  ASSERT_GT(payload.size(), 22u);
  // The first local file header, and the central directory that the end
  // record (the last 22 bytes, no comment) points at.
  ASSERT_EQ(payload.compare(0, 4, "PK\x03\x04"), 0);
  const size_t end_record = payload.size() - 22;
  ASSERT_EQ(payload.compare(end_record, 4, "PK\x05\x06"), 0);
  uint32_t directory = 0;
  for (int i = 3; i >= 0; --i) directory = (directory << 8) | static_cast<unsigned char>(payload[end_record + 16 + i]);
  ASSERT_LT(directory, end_record);
  ASSERT_EQ(payload.compare(directory, 4, "PK\x01\x02"), 0);
  for (size_t offset : {size_t{0}, size_t{directory}, end_record}) {
    Pair q = build_pair(adamw, 14);
    expect_refused([&] { decode_training_state(flip_byte(payload, offset), *q.model, *q.optimizer); },
                   "byte " + std::to_string(offset) + " of " + std::to_string(payload.size()) + " flipped");
  }
}

TEST(TrainingState, APayloadForADeeperOrShallowerModelIsRefused) {
  const std::string payload = trained_payload(sgd_momentum);  // 6-8-3: fc0, fc1
  {
    Pair deeper = build_pair(sgd_momentum, 15, {6, 8, 8, 3});  // fc2 missing from the payload
    expect_refused([&] { decode_training_state(payload, *deeper.model, *deeper.optimizer); }, "deeper model");
  }
  {
    Pair shallower = build_pair(sgd_momentum, 16, {6, 3});  // payload has parameters it lacks
    expect_refused([&] { decode_training_state(payload, *shallower.model, *shallower.optimizer); },
                   "shallower model");
  }
}

TEST(TrainingState, APayloadForAnotherOptimizerIsRefused) {
  const std::string sgd_payload = trained_payload(sgd_momentum);
  Pair q = build_pair(adamw, 17);
  expect_refused([&] { decode_training_state(sgd_payload, *q.model, *q.optimizer); }, "SGD payload into AdamW");
  const std::string adam_payload = trained_payload(adamw);
  Pair r = build_pair(sgd_momentum, 18);
  expect_refused([&] { decode_training_state(adam_payload, *r.model, *r.optimizer); }, "AdamW payload into SGD");
}

// Module::load alone would adopt the stored shapes (Tensor::set_).
TEST(TrainingState, APayloadForAModelOfTheSameDepthButOtherWidthsIsRefused) {
  const std::string payload = trained_payload(sgd_momentum);  // 6-8-3
  for (const std::vector<int64_t>& sizes : {std::vector<int64_t>{6, 5, 3}, std::vector<int64_t>{6, 8, 4},
                                            std::vector<int64_t>{7, 8, 3}}) {
    const std::string what = "model " + std::to_string(sizes[0]) + "-" + std::to_string(sizes[1]) + "-" +
                             std::to_string(sizes[2]);
    Pair q = build_pair(sgd_momentum, 19, sizes);
    expect_refused([&] { decode_training_state(payload, *q.model, *q.optimizer); }, what);
    // Whatever happened, the model must keep its own shapes.
    const auto params = q.model->named_parameters();
    EXPECT_EQ(params["fc0.weight"].sizes().vec(), (std::vector<int64_t>{sizes[1], sizes[0]})) << what;
    EXPECT_EQ(params["fc1.weight"].sizes().vec(), (std::vector<int64_t>{sizes[2], sizes[1]})) << what;
  }
}

TEST(TrainingState, ACorruptedPayloadFailsOnlyWithTheDocumentedError) {
  // One byte flipped at a spread of offsets (records, padding, the pickle, the
  // code, the directory): decoding either refuses it with the documented
  // std::runtime_error, or succeeds (a flipped byte of tensor data goes
  // unnoticed here: CheckpointStore's checksum is what guards the bytes);
  // never another exception type.
  const Pair source = trained_pair(adamw);
  const std::string payload = encode_training_state(*source.model, *source.optimizer, kTrainedPosition);
  int refused = 0;
  for (int i = 0; i < 32; ++i) {
    const size_t offset = payload.size() * static_cast<size_t>(i) / 32;
    SCOPED_TRACE("byte " + std::to_string(offset) + " of " + std::to_string(payload.size()) + " flipped");
    Pair q = build_pair(adamw, 14);
    try {
      decode_training_state(flip_byte(payload, offset), *q.model, *q.optimizer);
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit this model and optimizer"), std::string::npos) << e.what();
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a std::runtime_error: " << e.what();
    }
  }
  EXPECT_GT(refused, 0) << "no flipped byte was noticed at all";
}

}  // namespace
}  // namespace ddp::train
