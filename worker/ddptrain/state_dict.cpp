#include "state_dict.h"

#include <map>
#include <stdexcept>

namespace ddp::train {
namespace {

std::map<std::string, torch::Tensor> module_tensors(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) tensors.emplace(item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true)) tensors.emplace(item.key(), item.value());
  return tensors;
}

std::string shape(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

TensorDict state_dict(const torch::nn::Module& module) {
  TensorDict dict;
  for (const auto& item : module.named_parameters(true)) dict.emplace_back(item.key(), item.value().detach().cpu());
  for (const auto& item : module.named_buffers(true)) dict.emplace_back(item.key(), item.value().detach().cpu());
  return dict;
}

void load_state_dict(torch::nn::Module& module, const TensorDict& dict, const std::string& source) {
  auto tensors = module_tensors(module);
  std::map<std::string, const torch::Tensor*> given;
  for (const auto& [name, t] : dict) given.emplace(name, &t);
  for (const auto& [name, t] : given) {
    if (!tensors.count(name)) throw std::runtime_error(source + ": the model has no tensor named '" + name + "'");
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, mine] : tensors) {
    auto it = given.find(name);
    if (it == given.end()) throw std::runtime_error(source + ": no entry for the model's '" + name + "'");
    const torch::Tensor& value = *it->second;
    if (value.sizes() != mine.sizes()) {
      throw std::runtime_error(source + ": '" + name + "' has shape " + shape(value) + ", the model's is " +
                               shape(mine));
    }
    mine.copy_(value);
  }
}

}  // namespace ddp::train
