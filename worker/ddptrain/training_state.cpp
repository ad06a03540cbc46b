#include "training_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <mutex>
#include <stdexcept>

namespace ddp::train {

std::string encode_training_state(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer,
                                  const TrainingPosition& position) {
  torch::serialize::OutputArchive root;
  torch::serialize::OutputArchive model_archive;
  model.save(model_archive);
  root.write("model", model_archive);
  torch::serialize::OutputArchive optimizer_archive;
  optimizer.save(optimizer_archive);
  root.write("optimizer", optimizer_archive);
  root.write("next_step", torch::tensor(position.next_step, torch::kLong));
  root.write("loss_scale", torch::tensor(position.loss_scale, torch::kDouble));
  root.write("good_steps", torch::tensor(position.good_steps, torch::kLong));
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    root.write("cpu_generator", generator.get_state());
  }
  std::string bytes;
  root.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  return bytes;
}

namespace {

const std::string kDoesNotFit = "the checkpoint does not fit this model and optimizer: ";

std::string shape_of(const torch::Tensor& t) {
  std::string out = std::string(c10::toString(t.scalar_type())) + " [";
  for (size_t i = 0; i < t.sizes().size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(t.sizes()[i]);
  return out + "]";
}

// Module::load adopts whatever shape the archive holds (Tensor::set_), so a
// checkpoint of a model with other widths would load silently: every stored
// parameter and buffer is checked against the model's before anything changes.
void check_fits(torch::serialize::InputArchive& archive, const torch::nn::Module& module, const std::string& prefix) {
  auto check = [&](const std::string& name, const torch::Tensor& mine, bool is_buffer) {
    torch::Tensor stored;
    if (!archive.try_read(name, stored, is_buffer)) {
      throw std::runtime_error(prefix + name + " is not in the checkpoint");
    }
    if (stored.sizes() != mine.sizes() || stored.scalar_type() != mine.scalar_type()) {
      throw std::runtime_error(prefix + name + " is " + shape_of(stored) + " in the checkpoint, " + shape_of(mine) +
                               " here");
    }
  };
  for (const auto& p : module.named_parameters(/*recurse=*/false)) check(p.key(), p.value(), false);
  for (const auto& b : module.named_buffers(/*recurse=*/false)) check(b.key(), b.value(), true);
  for (const auto& child : module.named_children()) {
    torch::serialize::InputArchive child_archive;
    if (!archive.try_read(child.key(), child_archive)) {
      throw std::runtime_error(prefix + child.key() + " is not in the checkpoint");
    }
    check_fits(child_archive, *child.value(), prefix + child.key() + ".");
  }
}

}  // namespace

TrainingPosition decode_training_state(const std::string& payload, torch::nn::Module& model,
                                       torch::optim::Optimizer& optimizer) {
  try {
    torch::serialize::InputArchive root;
    root.load_from(payload.data(), payload.size());
    torch::serialize::InputArchive model_archive;
    root.read("model", model_archive);
    check_fits(model_archive, model, "");
    model.load(model_archive);
    torch::serialize::InputArchive optimizer_archive;
    root.read("optimizer", optimizer_archive);
    optimizer.load(optimizer_archive);
    // A fresh tensor per entry: read() into a defined tensor copies in place.
    auto entry = [&root](const char* key) {
      torch::Tensor t;
      root.read(key, t);
      return t;
    };
    TrainingPosition position;
    position.next_step = entry("next_step").item<int64_t>();
    position.loss_scale = entry("loss_scale").item<double>();
    position.good_steps = entry("good_steps").item<int64_t>();
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(entry("cpu_generator"));
    return position;
  } catch (const c10::Error& e) {
    throw std::runtime_error(kDoesNotFit + e.what_without_backtrace());
  } catch (const std::exception& e) {  // LibTorch's archive reader throws several kinds
    throw std::runtime_error(kDoesNotFit + e.what());
  }
}

}  // namespace ddp::train
