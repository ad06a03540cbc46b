#pragma once
// A module's parameters and buffers by name, as PyTorch's state_dict: what
// --save-final writes and --init reads (tensor_file.h does the file format).

#include <torch/nn/module.h>

#include <string>

#include "tensor_file.h"

namespace ddp::train {

/// Parameters then buffers, with their dotted names, as CPU copies.
TensorDict state_dict(const torch::nn::Module& module);

/// Copies every entry into the module's tensor of that name (converting dtype
/// and device). std::runtime_error naming `source` and the first problem: a
/// tensor of the module missing from the dict, an entry the module lacks, or
/// a shape that differs.
void load_state_dict(torch::nn::Module& module, const TensorDict& dict, const std::string& source);

}  // namespace ddp::train
