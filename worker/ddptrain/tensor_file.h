// ddptrain tensor files: dicts of name -> tensor interoperable with
// Python's torch.save(model.state_dict()) / torch.load (zip pickle format).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/types.h>

namespace ddp::train {

using TensorDict = std::vector<std::pair<std::string, torch::Tensor>>;

/// Reads a dict of str -> tensor written by Python's torch.save (dict or
/// OrderedDict, e.g. a state_dict) or by save_tensor_dict, with a small
/// pickle reader of its own. Order is the file's; tensors load on the CPU
/// whatever device they were saved from. std::runtime_error naming the
/// file: unreadable, not a torch.save file, not a dict, a key that is not a string, a value that is not a tensor.
TensorDict load_tensor_dict(const std::string& path);

/// Writes `tensors` (CPU copies, contiguous) as a str -> tensor dict in the
/// same zip + pickle form Python's torch.save writes for a dict, so Python's
/// torch.load reads it (also with weights_only=True). Atomic: temp file in
/// the same folder, fsync, rename, fsync of the folder. std::runtime_error naming the file on failure;
/// std::invalid_argument on a duplicate name.
void save_tensor_dict(const std::string& path, const TensorDict& tensors);

/// LibTorch's own reader (torch::pickle_load) for files written by
/// save_pickled_file / torch::pickle_save, e.g. C++ checkpoints of nested
/// dicts and lists. It cannot read Python state_dicts (their OrderedDict
/// becomes None): use load_tensor_dict for those. std::runtime_error naming
/// the file.
c10::IValue load_pickled_file(const std::string& path);

/// Writes `value` with torch::pickle_save atomically (as save_tensor_dict).
void save_pickled_file(const std::string& path, const c10::IValue& value);

}  // namespace ddp::train
